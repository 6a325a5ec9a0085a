"""Alert signals between real runscheduler processes: one run_lost for the whole fleet."""

from __future__ import annotations

from pathlib import Path

import pytest

from django_posixcron.models import Run, RunStatus, Task
from tests.harness.processes import Schedulers, task
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


@pytest.mark.slow
@pytest.mark.long
def test_a_scheduler_killed_mid_run_gives_one_run_lost_across_the_survivors(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    # Waits out the stale-heartbeat threshold (30 s). Two survivors both look for lost runs;
    # the conditional outcome write lets exactly one of them record it and send run_lost.
    release = tmp_path / "release"
    schedulers.configure(
        {
            "blocker": task(
                "tests.testapp.jobs.wait_then_signal",
                kwargs={"path": str(release), "task_name": "blocker", "record_signals": True},
                retry_delay=3600,
            )
        }
    )
    (first,) = schedulers.start_live(1)
    Task.objects.get(name="blocker").request_run()
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="blocker", label="started").exists(),
        what="the blocking run to start",
    )
    run = Run.objects.get()

    schedulers.expect_exit(first)
    first.kill()
    schedulers.start_live(2)

    schedulers.wait_for(
        lambda: Hit.objects.filter(label=f"run_lost:{run.pk}").exists(),
        timeout=60,
        what="run_lost for the killed process's run",
    )
    run.refresh_from_db()
    assert run.status == RunStatus.LOST
    # One recorded outcome, so one run_finished and one run_lost, whichever survivor won.
    schedulers.wait_for(
        lambda: Hit.objects.filter(label="signal:lost").count() == 1,
        what="run_finished for the lost run",
    )
    assert Hit.objects.filter(label__startswith="run_lost:").count() == 1
    release.touch()
