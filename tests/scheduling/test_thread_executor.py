"""The thread executor stays bounded however many timed-out calls hang (DESIGN 6: "a bounded
thread executor")."""

from __future__ import annotations

import datetime as dt
import logging
import threading

import pytest

from django_posixcron.executors import ThreadExecutor
from django_posixcron.models import Run, RunStatus
from tests.harness.tasks import T0
from tests.harness.waiting import wait_until
from tests.testapp import jobs
from tests.testapp.models import Hit


def workers() -> set[threading.Thread]:
    return {t for t in threading.enumerate() if t.name.startswith("posixcron-worker-")}


def started_since(before: set[threading.Thread]) -> int:
    """Count the worker threads alive now that were not alive at `before`: an earlier test's
    idle threads, still winding down, come and go meanwhile."""
    return len(workers() - before)


def saturation_records(caplog: pytest.LogCaptureFixture) -> list[str]:
    actions = [getattr(record, "action", "") for record in caplog.records]
    return [action for action in actions if action.startswith("executor_")]


def test_hung_timed_out_calls_hold_at_most_twice_concurrency_threads(caplog):
    executor = ThreadExecutor(2)
    hang = threading.Event()
    before = workers()
    try:
        with caplog.at_level(logging.INFO, logger="django_posixcron.executors.thread"):
            # As the scheduler does: submit while a slot is free, release on timeout.
            for key in range(20):
                if executor.free_slots() == 0:
                    break
                executor.submit(key, lambda: hang.wait(30))
                executor.release(key)
            assert key == 4
            assert executor.stuck == 4
            assert started_since(before) == 4
            with pytest.raises(RuntimeError, match="no free slot for run 99"):
                executor.submit(99, lambda: None)
            assert saturation_records(caplog) == ["executor_saturated"]

            hang.set()
            wait_until(lambda: executor.stuck == 0, what="the stuck calls to return")
            assert executor.free_slots() == 2
            wait_until(lambda: started_since(before) <= 2, what="the pool to shrink back")
            done = threading.Event()
            executor.submit(100, done.set)
            assert done.wait(5)
        assert saturation_records(caplog) == ["executor_saturated", "executor_recovered"]
    finally:
        hang.set()
        executor.close()


def test_a_stuck_call_beyond_the_stand_ins_keeps_its_slot():
    executor = ThreadExecutor(2)
    hang = threading.Event()
    try:
        for key in range(3):
            executor.submit(key, lambda: hang.wait(30))
            executor.release(key)
        # Two stand-ins are used up; the third stuck call takes one of the two slots.
        assert (executor.stuck, executor.free_slots()) == (3, 1)
    finally:
        hang.set()
        executor.close()


@pytest.mark.django_db(transaction=True)
def test_the_scheduler_keeps_working_with_many_hung_runs(tasks, make_scheduler):
    tasks(
        "hangs",
        schedule="* * * * *",
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": "hangs", "task_name": "hangs"},
        timeout=1,
        overlap="allow",
    )
    tasks("later", schedule="30 10 * * *", kwargs={"label": "later", "task_name": "later"})
    scheduler = make_scheduler(concurrency=2)
    before = workers()

    # One occurrence a minute, each hanging past its timeout: with unbounded stand-ins this
    # would start one more thread per minute.
    def every_claimed_call_started() -> bool:
        started = Hit.objects.filter(task_name="hangs", label="started").count()
        return started == Run.objects.filter(task__name="hangs").count()

    for minute in range(12):
        scheduler.tick(T0 + dt.timedelta(minutes=minute, seconds=1))
        assert started_since(before) <= 4
        # Each claimed call reaches its code before the next tick times it out: a call timed
        # out before its thread picks it up never starts, and frees its thread at once.
        wait_until(every_claimed_call_started, what="the claimed call to start")
    # Claimed in the ticks; started in the pool's threads, each of which is still hanging.
    assert Run.objects.filter(task__name="hangs").count() == 4
    assert scheduler.executor.free_slots() == 0
    assert Run.objects.filter(status=RunStatus.TIMED_OUT).count() == 4

    jobs.gate("hangs").set()
    wait_until(lambda: scheduler.executor.free_slots() == 2, what="the hung calls to return")
    scheduler.tick(T0 + dt.timedelta(minutes=30, seconds=2))
    assert scheduler.wait_idle(timeout=10)
    assert Hit.objects.filter(task_name="later").count() == 1
    assert Run.objects.get(task__name="later").status == RunStatus.SUCCEEDED


@pytest.mark.django_db(transaction=True)
def test_a_timeout_being_recorded_counts_as_an_outcome_being_written(
    tasks, make_scheduler, monkeypatch
):
    # Out of the runs in flight and in no queue while its write goes on: the stop deadline
    # took the process for idle then, and could force it out with the timeout unrecorded.
    from django_posixcron.scheduling import execution, outcomes

    tasks(
        "hangs",
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": "counted", "task_name": "hangs"},
        timeout=1,
    )
    scheduler = make_scheduler()
    scheduler.tick(T0 + dt.timedelta(seconds=1))
    wait_until(
        lambda: Hit.objects.filter(task_name="hangs", label="started").exists(),
        what="the call to start",
    )
    real_write, real_outcome = outcomes.write_outcomes, outcomes.Outcome
    seen: list[tuple[str, int, int, int, bool]] = []

    def look(moment: str) -> None:
        runs = scheduler.runs
        seen.append((moment, runs.writing, runs.unrecorded, len(runs.pks()), runs.busy()))

    def watched_write(*args, **kwargs):
        look("written")
        return real_write(*args, **kwargs)

    def watched_outcome(*args, **kwargs):
        look("built")
        return real_outcome(*args, **kwargs)

    monkeypatch.setattr(execution, "write_outcomes", watched_write)
    monkeypatch.setattr(execution, "Outcome", watched_outcome)
    try:
        scheduler.runs.check_timeouts(
            T0 + dt.timedelta(minutes=1), stops_on_timeout=False, explicit=True
        )
    finally:
        jobs.gate("counted").set()
        monkeypatch.undo()

    # In flight while its outcome is built, then counted as being written: never nowhere.
    assert seen == [("built", 0, 0, 1, True), ("written", 1, 0, 0, True)]
    assert scheduler.runs.writing == 0
    assert Run.objects.get().status == RunStatus.TIMED_OUT
    assert scheduler.wait_idle(10)


class RaisingHandler(logging.Handler):
    """A handler whose emit() raises (a full disk, a collector gone), where logging's own
    handlers would call handleError()."""

    def emit(self, record: logging.LogRecord) -> None:
        raise OSError(28, "No space left on device")


@pytest.mark.django_db(transaction=True)
def test_a_log_handler_that_raises_in_a_run_thread_loses_the_line_not_the_run(
    tasks, make_scheduler, capsys
):
    # The "run started" line raised before the run's code and its outcome: the worker thread
    # died, the run stayed `running` under a live heartbeat (never lost, never retried, every
    # later occurrence skipped) and the pool's one slot never ran anything again. Then the run
    # was recorded failed with the handler's error: the line is lost, and the run runs.
    tasks(kwargs={"label": "ran", "task_name": "record"})
    scheduler = make_scheduler(concurrency=1)
    handler = RaisingHandler()
    execution_logger = logging.getLogger("django_posixcron.scheduler.execution")
    execution_logger.addHandler(handler)
    try:
        scheduler.tick(T0)
        assert scheduler.wait_idle(timeout=10)
    finally:
        execution_logger.removeHandler(handler)
    run = Run.objects.get()
    assert (run.status, run.error) == (RunStatus.SUCCEEDED, "")
    assert Hit.objects.filter(task_name="record", label="ran").count() == 1
    assert "OSError: [Errno 28] No space left on device" in capsys.readouterr().err

    # The pool's one slot runs the next occurrence.
    scheduler.tick(T0 + dt.timedelta(hours=1))
    assert scheduler.wait_idle(timeout=10)
    assert Hit.objects.filter(task_name="record", label="ran").count() == 2


def test_a_log_handler_that_raises_does_not_end_a_worker_thread():
    # The job's crash is logged; a handler that raised there too ended the thread, and with
    # one slot nothing ran again.
    executor = ThreadExecutor(1)
    handler = RaisingHandler()
    thread_logger = logging.getLogger("django_posixcron.executors.thread")
    thread_logger.addHandler(handler)
    try:
        executor.submit(1, jobs.fail)
        assert executor.wait_idle(10)
    finally:
        thread_logger.removeHandler(handler)
    ran = threading.Event()
    try:
        executor.submit(2, ran.set)
        assert ran.wait(10)
    finally:
        executor.close()


def test_a_log_handler_that_raises_as_stuck_calls_return_keeps_their_slots():
    # The "slots usable again" line is logged by the thread of a stuck call as it returns:
    # a handler that raised there ended that thread before it gave its slot back.
    executor = ThreadExecutor(1)
    hang = threading.Event()
    handler = RaisingHandler()
    thread_logger = logging.getLogger("django_posixcron.executors.thread")
    try:
        for key in range(2):  # more stuck calls than the one stand-in: saturated
            executor.submit(key, lambda: hang.wait(30))
            executor.release(key)
        assert (executor.stuck, executor.free_slots()) == (2, 0)
        thread_logger.addHandler(handler)
        try:
            hang.set()
            wait_until(lambda: executor.stuck == 0, timeout=10, what="the stuck calls to return")
        finally:
            thread_logger.removeHandler(handler)
        ran = threading.Event()
        executor.submit(2, ran.set)
        assert ran.wait(10)
    finally:
        hang.set()
        executor.close()
