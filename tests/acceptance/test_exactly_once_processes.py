"""Several real schedulers on one database: every occurrence runs exactly once."""

from __future__ import annotations

import datetime as dt
import signal

import pytest
from django.db.models import Count, Max

from django_posixcron.models import Run, RunStatus, Task, Trigger
from tests.harness.processes import SLOW_CASE, Schedulers, only_on, record_task, utcnow, vendor
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

TASKS = 50


def how_many_schedulers() -> int:
    # SQLite serialises writers on one file lock: two processes are what one host runs.
    return 2 if vendor() == "sqlite" else 3


def stop_all(schedulers: Schedulers) -> None:
    for child in schedulers.children:
        schedulers.expect_exit(child)
        child.signal(signal.SIGTERM)
    for child in schedulers.children:
        assert child.wait() == 0, schedulers.outputs()


def hits_by_task() -> dict[str, int]:
    return dict(Hit.objects.values_list("task_name").annotate(n=Count("id")))


def assert_each_run_executed_once(schedulers: Schedulers, names: list[str]) -> None:
    """Rows written by the task code match the Run rows one for one, and nothing failed."""
    failed = list(
        Run.objects.exclude(status=RunStatus.SUCCEEDED).values_list("task__name", "status")
    )
    assert failed == [], schedulers.outputs()
    runs = dict(Run.objects.values_list("task__name").annotate(n=Count("id")))
    assert hits_by_task() == runs, schedulers.outputs()
    assert set(runs) == set(names)


def test_many_tasks_due_at_one_instant_fire_exactly_once(schedulers: Schedulers) -> None:
    names = [f"task-{i:02d}" for i in range(TASKS)]
    schedulers.configure({name: record_task(name) for name in names}, CONCURRENCY=8)
    schedulers.start_live(how_many_schedulers())

    # A manual request at an instant slightly in the future: every scheduler sleeps until
    # exactly that due_at, so they all wake together and race for the same 50 rows.
    instant = (utcnow() + dt.timedelta(seconds=2)).replace(microsecond=0)
    assert (
        Task.objects.filter(name__in=names).update(run_requested_at=instant, due_at=instant)
        == TASKS
    )

    schedulers.wait_for(
        lambda: (
            Run.objects.filter(status=RunStatus.SUCCEEDED).count() >= TASKS
            and Hit.objects.count() >= TASKS
        ),
        what=f"{TASKS} manual runs to succeed",
    )
    stop_all(schedulers)

    assert_each_run_executed_once(schedulers, names)
    assert set(Run.objects.values_list("trigger", "scheduled_for")) == {(Trigger.MANUAL, instant)}
    assert hits_by_task() == dict.fromkeys(names, 1)


def test_cron_occurrences_at_a_minute_boundary_fire_exactly_once(schedulers: Schedulers) -> None:
    # Waits up to a minute. The same race at an instant chosen by the test runs everywhere
    # (above); this one, with cron triggers, on the database recommended for several schedulers.
    only_on("postgresql", why=SLOW_CASE)
    names = [f"minutely-{i:02d}" for i in range(TASKS)]
    schedulers.configure({name: record_task(name, "* * * * *") for name in names}, CONCURRENCY=8)
    schedulers.start_live(how_many_schedulers())

    # The first minute that every task is due at once after every scheduler is up: all of them
    # sleep until it and claim together. The start-up minute fired at once, under the
    # first-start rule, while the processes were still starting one after the other; when its
    # runs are claimed after the next minute began, that minute is missed (no make-up), so the
    # boundary is the latest cursor once none is due, not the next minute on the clock.
    schedulers.wait_for(
        lambda: not Task.objects.filter(due_at__lte=utcnow()).exists(),
        what="the start-up minute's runs to be claimed",
    )
    now = utcnow()
    boundary = Task.objects.aggregate(latest=Max("next_run_at"))["latest"]
    assert boundary is not None
    schedulers.wait_for(
        lambda: (
            Run.objects.filter(
                scheduled_for=boundary, trigger=Trigger.CRON, status=RunStatus.SUCCEEDED
            ).count()
            >= TASKS
        ),
        timeout=(boundary - now).total_seconds() + 30,
        what=f"{TASKS} cron runs at {boundary.isoformat()}",
    )
    stop_all(schedulers)

    assert_each_run_executed_once(schedulers, names)
    at_boundary = Run.objects.filter(scheduled_for=boundary)
    assert sorted(at_boundary.values_list("task__name", flat=True)) == names
    assert set(Run.objects.values_list("trigger", flat=True)) == {Trigger.CRON}
