"""The process executor: task code in a child process that a timeout really stops."""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from django_posixcron.executors import ProcessExecutor
from django_posixcron.models import Run, RunStatus
from tests.scheduler.conftest import T0

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("path", "status", "error"),
    [
        ("tests.testapp.jobs.noop", RunStatus.SUCCEEDED, ""),
        ("tests.testapp.jobs.fail", RunStatus.FAILED, "RuntimeError: boom"),
        ("tests.testapp.jobs.exit_now", RunStatus.FAILED, "SystemExit: 3"),
    ],
)
def test_outcomes_come_back_from_the_child(tasks, make_scheduler, path, status, error):
    tasks(callable_path=path)
    scheduler = make_scheduler(executor=ProcessExecutor(2))
    scheduler.tick(T0)
    assert scheduler.wait_idle(timeout=60)

    run = Run.objects.get()
    assert (run.status, run.error) == (status, error)
    if status == RunStatus.FAILED:
        assert "Traceback" in run.traceback


def test_a_timeout_stops_the_child_process(tasks, make_scheduler):
    tasks(callable_path="tests.testapp.jobs.sleep_for", kwargs={"seconds": 120}, timeout=1)
    executor = ProcessExecutor(1, kill_after=2)
    scheduler = make_scheduler(executor=executor)
    run = scheduler.tick(T0).started[0]
    # Wait for the child to exist, then let the timeout pass.
    for _ in range(600):
        with executor._cond:
            process = executor._processes.get(run.pk)
        if process is not None and process.pid is not None:
            break
        executor._cond.acquire()
        executor._cond.wait(0.05)
        executor._cond.release()
    assert process is not None

    result = scheduler.tick(T0 + dt.timedelta(seconds=2))

    assert [r.pk for r in result.timed_out] == [run.pk]
    # The run's thread returns once it has stopped and reaped the child.
    assert executor.wait_idle(10)
    for _ in range(200):
        if not executor._processes:
            break
        threading.Event().wait(0.05)
    assert process.exitcode is not None
    assert process.exitcode != 0
    run.refresh_from_db()
    assert run.status == RunStatus.TIMED_OUT
    assert "cannot stop" not in run.error
