"""A project's logging that fails: the scheduler goes on, and says so on stderr."""

from __future__ import annotations

import signal
import time

import pytest

from django_posixcron.models import Run, RunStatus, Task, Trigger
from tests.harness.processes import Schedulers, record_task, task
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

REPORT = "--- Logging error in django-posixcron ---"


def test_a_handler_that_raises_on_every_record_loses_records_not_runs(
    schedulers: Schedulers,
) -> None:
    # A log collector's handler whose emit() raises while the collector is down (where
    # logging's own handlers call handleError()): runscheduler exited with its traceback at
    # the start-up line, and in a live process at the first line a tick logged.
    schedulers.configure(
        {
            "ok": record_task("ok"),
            "bad": task("tests.testapp.jobs.fail", retry_delay=1),
        },
        extra={"RAISING_HANDLER": True},
    )
    began = time.monotonic()
    (child,) = schedulers.start_live(1)
    Task.objects.get(name="ok").request_run()
    Task.objects.get(name="bad").request_run()

    schedulers.wait_for(
        lambda: Run.objects.filter(task__name="ok", status=RunStatus.SUCCEEDED).exists(),
        what="the requested run to succeed",
    )
    # The failure is recorded and retried as with any logging.
    schedulers.wait_for(
        lambda: Run.objects.filter(
            task__name="bad", trigger=Trigger.RETRY, status=RunStatus.FAILED
        ).exists(),
        what="the failing task's retry to fail too",
    )
    assert Hit.objects.filter(task_name="ok").count() == 1

    child.signal(signal.SIGTERM)
    assert child.wait() == 0
    output = child.output()
    # The error is reported once a minute, with what it cost, not once per record (nor never).
    minutes = int((time.monotonic() - began) // 60)
    assert 1 <= output.count(REPORT) <= 1 + minutes, output
    assert "ConnectionRefusedError: [Errno 111] the log collector refused" in output
    assert "Logger 'django_posixcron.scheduler', level INFO, action 'scheduler_started'" in output
    assert "should call handleError() rather than raise" in output
    # No record reached the console handler after the one that raised.
    assert "run started task=ok" not in output
    assert "scheduler stopped" not in output


def test_once_exits_0_with_a_handler_that_raises(schedulers: Schedulers) -> None:
    # cron's `* * * * * manage.py runscheduler --once`: a traceback a minute, and no run.
    schedulers.configure({"ok": record_task("ok")}, extra={"RAISING_HANDLER": True})
    first = schedulers.run("--once")
    assert first.returncode == 0, first.stderr
    Task.objects.get(name="ok").request_run()

    second = schedulers.run("--once")
    assert second.returncode == 0, second.stderr
    assert "Ran 1 task(s)" in second.stdout
    assert second.stderr.count(REPORT) == 1, second.stderr
    assert Run.objects.get().status == RunStatus.SUCCEEDED
