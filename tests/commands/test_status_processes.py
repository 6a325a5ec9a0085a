"""`schedulerstatus` as a liveness probe runs it: a separate process, judged by exit code."""

from __future__ import annotations

import signal

import pytest

from django_posixcron.models import Task
from tests.harness.processes import Schedulers, record_task, task

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_status_follows_a_real_scheduler_from_start_to_stop(schedulers: Schedulers) -> None:
    schedulers.configure(
        {"yearly": record_task("yearly"), "broken": task("tests.testapp.jobs.fail")}
    )
    down = schedulers.manage("schedulerstatus")
    assert down.returncode == 1
    assert "no live scheduler" in down.stderr
    assert "Traceback" not in down.stderr

    (child,) = schedulers.start_live(1)
    up = schedulers.manage("schedulerstatus", "--this-host")
    assert up.returncode == 0, up.stdout + up.stderr
    assert f":{child.pid}" in up.stdout

    Task.objects.get(name="broken").request_run()
    schedulers.wait_for(
        lambda: Task.objects.filter(name="broken", last_run_status="failed").exists(),
        what="the failing task to fail",
    )
    failing = schedulers.manage("schedulerstatus")
    assert failing.returncode == 1
    assert "failing  broken" in failing.stdout
    assert schedulers.manage("schedulerstatus", "--ignore-failing").returncode == 0

    schedulers.expect_exit(child)
    child.signal(signal.SIGTERM)
    assert child.wait() == 0
    stopped = schedulers.manage("schedulerstatus", "--ignore-failing")
    assert stopped.returncode == 1
    assert "no live scheduler" in stopped.stderr
