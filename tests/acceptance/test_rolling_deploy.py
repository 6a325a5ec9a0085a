"""A rolling deploy: old and new processes side by side; old code never runs a new definition."""

from __future__ import annotations

import datetime as dt
import functools

import pytest

from django_posixcron.models import Run, RunStatus, Task
from tests.harness.processes import Schedulers, record_task, utcnow
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def labelled(label: str) -> dict[str, object]:
    entry = record_task("job")
    entry["kwargs"] = {"label": label, "task_name": "job"}
    return entry


def succeeded_runs_reach(count: int) -> bool:
    return Run.objects.filter(status=RunStatus.SUCCEEDED).count() >= count


def test_only_processes_with_the_new_definition_claim_it(schedulers: Schedulers) -> None:
    schedulers.configure({"job": labelled("old"), "steady": record_task("steady")})
    (old,) = schedulers.start_live(1)
    old_hash = Task.objects.get(name="job").definition_hash

    # The deploy: same name and schedule, different kwargs. The new process reconciles it.
    schedulers.configure({"job": labelled("new"), "steady": record_task("steady")})
    (new,) = schedulers.start_live(1)
    assert Task.objects.get(name="job").definition_hash != old_hash

    # Both processes wake for each instant; only the new one may fire "job", either may
    # fire "steady", whose definition did not change.
    for expected in (2, 4, 6):
        instant = (utcnow() + dt.timedelta(seconds=1)).replace(microsecond=0)
        Task.objects.filter(name__in=["job", "steady"]).update(
            run_requested_at=instant, due_at=instant
        )
        schedulers.wait_for(
            functools.partial(succeeded_runs_reach, expected), what=f"{expected} runs"
        )

    job_runs = Run.objects.filter(task__name="job")
    assert set(job_runs.values_list("process__pid", flat=True)) == {new.pid}
    assert set(Hit.objects.filter(task_name="job").values_list("label", flat=True)) == {"new"}
    assert Hit.objects.filter(task_name="steady").count() == 3
    assert "job" in old.output()
    assert "differs from this process's settings" in old.output(), schedulers.outputs()
