"""Runs handed to Django Tasks, in one process: settings in, ticks and worker calls, rows out.

The backend is django-tasks-db's DatabaseBackend on the test database ("default" in
tests.settings), so the enqueue is a real job row written in the claim's transaction; the
worker side is the real ``execute_run`` Task, called as a worker calls it. Real worker
processes are in test_workers.py.
"""

from __future__ import annotations

import datetime as dt
import logging
import os
import signal
import sys
import time
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import OperationalError, connection, connections
from django.test.utils import CaptureQueriesContext
from django_tasks_db.models import DBTaskResult

from django_posixcron.handoff.enqueue import Enqueuer
from django_posixcron.models import Run, RunStatus, Task
from django_posixcron.scheduling import liveness
from django_posixcron.scheduling.outcomes import Notifier, Outcome, write_outcomes
from django_posixcron.signals import run_lost, task_failing
from django_posixcron.tasks import execute_run
from tests.harness.waiting import wait_until
from tests.harness.world import MINUTE, T0, hits, record
from tests.testapp.models import Hit

pytestmark = pytest.mark.django_db(transaction=True)


def handed_off(name: str, schedule: str = "0 * * * *", **extra: object) -> dict[str, object]:
    extra.setdefault("enqueue", True)
    return record(name, schedule, **extra)


def deliver(run: Run) -> None:
    """Do what a worker does with the job the scheduler enqueued for `run`."""
    job = DBTaskResult.objects.get(pk=run.result_id)
    assert job.task_path == "django_posixcron.tasks.execute_run"
    execute_run.call(*job.args_kwargs["args"], **job.args_kwargs["kwargs"])


def only_run(name: str) -> Run:
    return Run.objects.select_related("task").get(task__name=name)


def test_a_handed_off_occurrence_is_queued_with_its_job_then_run_once_by_the_worker(world):
    world.settings({"export": handed_off("export")})
    world.start(T0 - MINUTE)

    result = world.tick(T0)

    assert [r.status for r in result.queued] == [RunStatus.QUEUED]
    run = only_run("export")
    assert (run.status, run.trigger, run.scheduled_for) == ("queued", "cron", T0)
    assert run.backend == "default"
    assert run.started_at is None
    assert run.start_deadline_at == T0 + dt.timedelta(seconds=300)
    # Enqueued in the claim's transaction: the job row names the run and nothing else.
    job = DBTaskResult.objects.get(pk=run.result_id)
    assert job.args_kwargs == {"args": [run.pk], "kwargs": {}}
    assert (job.queue_name, job.priority, job.backend_name) == ("default", 0, "default")
    assert hits("export") == 0  # nothing ran inside the scheduler

    deliver(run)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.started_at is not None
    assert run.finished_at is not None
    assert run.worker
    assert run.heartbeat_at is not None
    assert hits("export") == 1
    task = Task.objects.get(name="export")
    assert (task.last_run_status, task.retry_at) == ("succeeded", None)


def test_a_duplicate_delivery_runs_nothing_and_changes_nothing(world, caplog):
    world.settings({"export": handed_off("export")})
    world.start(T0 - MINUTE)
    world.tick(T0)
    run = only_run("export")
    deliver(run)
    before = Run.objects.filter(pk=run.pk).values().get()

    deliver(run)
    deliver(run)

    assert hits("export") == 1
    assert Run.objects.filter(pk=run.pk).values().get() == before
    assert "a duplicate delivery" in caplog.text


@pytest.mark.parametrize("run_id", ["1", 1.5, None, True, [1]])
def test_a_run_id_enqueued_by_hand_that_is_not_a_primary_key_is_refused(world, run_id):
    world.settings({"export": handed_off("export")})
    world.start(T0 - MINUTE)
    world.tick(T0)
    run = only_run("export")
    before = Run.objects.filter(pk=run.pk).values().get()

    with pytest.raises(TypeError, match="execute_run takes a run's primary key"):
        execute_run.call(run_id)

    assert hits("export") == 0
    assert Run.objects.filter(pk=run.pk).values().get() == before


def test_queue_priority_and_backend_come_from_enqueue_or_the_top_level_default(world):
    world.settings(
        {
            "own": record("own", "0 * * * *", enqueue={"queue_name": "cron", "priority": 5}),
            "inherits": record("inherits", "0 * * * *"),
            "local": record("local", "0 * * * *", enqueue=False),
        },
        ENQUEUE={"queue_name": "cron"},
    )
    world.start(T0 - MINUTE)

    world.tick(T0)

    jobs = {
        r.task.name: DBTaskResult.objects.get(pk=r.result_id)
        for r in Run.objects.select_related("task").exclude(result_id="")
    }
    assert {n: (j.queue_name, j.priority) for n, j in jobs.items()} == {
        "own": ("cron", 5),
        "inherits": ("cron", 0),
    }
    assert only_run("local").status == RunStatus.SUCCEEDED  # ran inside the scheduler
    assert hits("local") == 1


def test_a_failure_on_the_worker_sets_up_our_retry_which_is_handed_off_again(world):
    world.settings(
        {
            "flaky": {
                "schedule": "0 * * * *",
                "callable": "tests.testapp.jobs.fail",
                "retry_delay": 60,
                "enqueue": True,
            }
        }
    )
    world.start(T0 - MINUTE)
    world.tick(T0)
    first = only_run("flaky")

    deliver(first)

    first.refresh_from_db()
    assert first.status == RunStatus.FAILED
    assert "Traceback" in first.traceback
    task = Task.objects.get(name="flaky")
    assert task.retry_at is not None
    assert task.retry_attempt == 1
    world.tick(task.retry_at)
    retry = Run.objects.get(task__name="flaky", trigger="retry")
    assert (retry.status, retry.attempt, retry.occurrence) == ("queued", 2, T0)
    # The job ran once, to its end: the backend records no failure of its own to retry.
    assert DBTaskResult.objects.filter(pk=first.result_id).exists()


def test_a_run_no_worker_starts_within_start_deadline_is_lost_then_retried(world):
    world.settings({"export": handed_off("export", start_deadline=30, retry_delay=60)})
    world.start(T0 - MINUTE)
    world.tick(T0)

    world.tick(T0 + dt.timedelta(seconds=30))  # at the deadline: still waiting
    assert only_run("export").status == RunStatus.QUEUED
    result = world.tick(T0 + dt.timedelta(seconds=31))

    run = only_run("export")
    assert [r.pk for r in result.lost] == [run.pk]
    assert run.status == RunStatus.LOST
    assert "start_deadline" in run.error
    assert "'default'" in run.error
    task = Task.objects.get(name="export")
    assert run.finished_at is not None
    assert task.retry_at == run.finished_at + dt.timedelta(seconds=60)
    # The late delivery of the lost run's message runs nothing: its retry will.
    deliver(run)
    assert hits("export") == 0
    run.refresh_from_db()
    assert run.status == RunStatus.LOST


def test_a_run_whose_worker_went_silent_is_lost_and_its_late_outcome_still_recorded(world):
    world.settings({"export": handed_off("export", retry_delay=60)})
    world.start(T0 - MINUTE)
    world.tick(T0)
    run = only_run("export")
    # A worker took the run at T0 + 1 s and has not beaten since (killed, or cut off).
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING,
        started_at=T0 + dt.timedelta(seconds=1),
        heartbeat_at=T0 + dt.timedelta(seconds=1),
        worker="worker-host:4242",
    )

    world.tick(T0 + dt.timedelta(seconds=20))
    assert only_run("export").status == RunStatus.RUNNING  # silent, not yet stale
    result = world.tick(T0 + dt.timedelta(seconds=32))

    run = only_run("export")
    assert [r.pk for r in result.lost] == [run.pk]
    assert run.status == RunStatus.LOST
    assert "worker-host:4242" in run.error


def test_a_worker_that_starts_the_run_as_it_is_judged_lost_keeps_it(world, monkeypatch):
    # The verdict reads the queued runs past their deadline, then locks them to write it:
    # a worker that flips the run to running in between (its message came late) keeps it.
    world.settings({"export": handed_off("export", start_deadline=30, retry_delay=60)})
    world.start(T0 - MINUTE)
    world.tick(T0)
    run = only_run("export")
    judged_at = T0 + dt.timedelta(seconds=31)
    write = write_outcomes  # what liveness.mark_lost calls to write its verdict

    def worker_starts_first(*args: Any, **kwargs: Any) -> Any:
        Run.objects.filter(pk=run.pk, status=RunStatus.QUEUED).update(
            status=RunStatus.RUNNING,
            started_at=judged_at,
            heartbeat_at=judged_at,
            worker="worker-host:4242",
        )
        return write(*args, **kwargs)

    monkeypatch.setattr(liveness, "write_outcomes", worker_starts_first)
    result = world.tick(judged_at)

    assert result.lost == []
    run.refresh_from_db()
    assert (run.status, run.error, run.finished_at) == (RunStatus.RUNNING, "", None)
    assert Task.objects.get(name="export").retry_at is None


def lost_while_running(world: Any) -> Run:
    """Hand off one run of `export`, let a worker take it and fall silent, and the scheduler
    mark the run lost at T0 + 32 s (its retry 60 s later)."""
    world.settings({"export": handed_off("export", retry_delay=60)})
    world.start(T0 - MINUTE)
    world.tick(T0)
    run = only_run("export")
    Run.objects.filter(pk=run.pk).update(
        status=RunStatus.RUNNING,
        started_at=T0 + dt.timedelta(seconds=1),
        heartbeat_at=T0 + dt.timedelta(seconds=1),
        worker="worker-host:4242",
    )
    world.tick(T0 + dt.timedelta(seconds=32))
    return run


def late(run: Run, status: str, seconds: int) -> None:
    """The silent worker comes back and records the run's real outcome."""
    run = Run.objects.select_related("task").get(pk=run.pk)
    finished = T0 + dt.timedelta(seconds=seconds)
    assert write_outcomes([Outcome(run, status, finished, "late")], "default", Notifier())


def test_a_lost_runs_late_failure_is_recorded_but_arms_no_second_retry(world):
    run = lost_while_running(world)
    lost = Task.objects.get(name="export")
    assert (lost.retry_at, lost.consecutive_failures) == (
        T0 + dt.timedelta(seconds=92),
        1,
    )

    late(run, RunStatus.FAILED, 40)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED  # "the status becomes the real outcome"
    task = Task.objects.get(name="export")
    assert (task.retry_at, task.retry_attempt, task.consecutive_failures) == (
        lost.retry_at,
        1,
        1,
    )


def test_a_lost_runs_late_success_cancels_the_retry_it_has_not_used_yet(world):
    run = lost_while_running(world)

    late(run, RunStatus.SUCCEEDED, 40)

    task = Task.objects.get(name="export")
    assert (task.retry_at, task.consecutive_failures, task.last_run_status) == (
        None,
        0,
        "succeeded",
    )
    assert task.due_at == task.next_run_at == T0 + dt.timedelta(hours=1)
    world.tick(T0 + dt.timedelta(seconds=95))
    assert Run.objects.count() == 1  # the occurrence is not run again


def test_a_lost_runs_late_success_after_its_retry_fired_leaves_the_task_to_that_retry(world):
    run = lost_while_running(world)
    world.tick(T0 + dt.timedelta(seconds=93))  # the retry is queued
    retry = Run.objects.get(trigger="retry")
    assert (retry.status, retry.attempt) == (RunStatus.QUEUED, 2)

    late(run, RunStatus.SUCCEEDED, 100)

    task = Task.objects.get(name="export")
    assert task.last_run_status == RunStatus.LOST
    assert task.consecutive_failures == 1
    assert task.last_success_at == T0 + dt.timedelta(seconds=100)


def test_overlap_skip_counts_a_queued_run_as_running(world):
    world.settings({"minutely": handed_off("minutely", "* * * * *")})
    world.start(T0 - MINUTE)
    world.tick(T0)

    world.tick(T0 + MINUTE)

    statuses = [r.status for r in Run.objects.order_by("scheduled_for")]
    assert statuses == ["queued", "skipped"]


def test_the_tasks_last_run_starts_when_its_worker_starts_it(world, monkeypatch):
    # The admin's "last run" showed the claim's instant and a duration that counted the wait
    # in the queue (31 s for a run of 0.04 s), where the run's own page said otherwise.
    from django_posixcron.handoff import worker

    clock = [T0]
    monkeypatch.setattr(worker, "database_now", lambda using: clock[0])
    world.settings({"minutely": handed_off("minutely", "* * * * *", overlap="allow")})
    world.start(T0 - MINUTE)
    world.tick(T0)
    first = only_run("minutely")
    assert Task.objects.get(name="minutely").last_run_started_at == T0

    clock[0] = T0 + dt.timedelta(seconds=31)
    deliver(first)

    first.refresh_from_db()
    task = Task.objects.get(name="minutely")
    assert first.started_at == T0 + dt.timedelta(seconds=31)
    assert task.last_run_started_at == first.started_at
    assert task.last_run_finished_at == first.finished_at

    # A run claimed after it is the task's last run, whichever worker starts first.
    world.tick(T0 + MINUTE)
    world.tick(T0 + 2 * MINUTE)
    second, third = Run.objects.filter(status=RunStatus.QUEUED).order_by("pk")
    clock[0] = T0 + 2 * MINUTE + dt.timedelta(seconds=5)
    deliver(second)
    assert Task.objects.get(name="minutely").last_run_started_at == T0 + 2 * MINUTE
    clock[0] = T0 + 2 * MINUTE + dt.timedelta(seconds=9)
    deliver(third)
    assert Task.objects.get(name="minutely").last_run_started_at == clock[0]


def test_a_worker_records_the_timeout_it_cannot_stop(world):
    world.settings(
        {
            "slow": {
                "schedule": "0 * * * *",
                # Returns once the worker has recorded the timeout, however late it checks.
                "callable": "tests.testapp.jobs.until_own_run",
                "kwargs": {"status": "timed_out"},
                "takes_context": True,
                "timeout": 1,
                "enqueue": True,
            }
        }
    )
    world.start(T0 - MINUTE)
    world.tick(T0)

    deliver(only_run("slow"))

    run = only_run("slow")
    assert run.status == RunStatus.TIMED_OUT
    assert "cannot stop Python code" in run.error
    assert Task.objects.get(name="slow").retry_at is not None


def test_the_worker_passes_the_run_context(world):
    world.settings(
        {
            "ctx": {
                "schedule": "0 * * * *",
                "callable": "tests.testapp.jobs.record_context",
                "takes_context": True,
                "enqueue": True,
            }
        }
    )
    world.start(T0 - MINUTE)
    world.tick(T0)
    run = only_run("ctx")

    deliver(run)

    hit = Hit.objects.get()
    assert hit.task_name == f"context:ctx:{run.pk}"
    assert hit.label == f"cron|1|{T0.isoformat()}|{T0.isoformat()}"


def test_a_worker_whose_settings_differ_records_the_run_failed_and_runs_nothing(world, posixcron):
    world.settings({"export": handed_off("export")})
    world.start(T0 - MINUTE)
    world.tick(T0)
    run = only_run("export")

    # The worker was deployed with other settings: another schedule, then no such task.
    posixcron({"export": handed_off("export", schedule="30 * * * *")})
    deliver(run)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "declared differently in this worker's settings" in run.error
    assert hits("export") == 0


def test_a_task_not_declared_on_the_worker_is_a_failure_naming_it(world, posixcron):
    world.settings({"export": handed_off("export")})
    world.start(T0 - MINUTE)
    world.tick(T0)
    run = only_run("export")

    posixcron({})
    deliver(run)

    run.refresh_from_db()
    assert run.status == RunStatus.FAILED
    assert "Task export is not declared in this worker's settings" in run.error


def test_handed_off_tasks_are_claimed_while_every_local_slot_is_busy(world, gate):
    name, _ = gate
    world.settings(
        {
            "busy": {
                "schedule": "0 * * * *",
                "callable": "tests.testapp.jobs.blocked",
                "kwargs": {"gate_name": name},
            },
            "export": handed_off("export"),
        },
        CONCURRENCY=1,
    )
    world.start(T0 - MINUTE, concurrency=1)
    first = world.tick(T0 - dt.timedelta(seconds=1), wait=False)
    assert first.claimed == []
    Task.objects.filter(name="busy").update(
        next_run_at=T0 - dt.timedelta(seconds=30), due_at=T0 - dt.timedelta(seconds=30)
    )
    world.tick(T0 - dt.timedelta(seconds=30), wait=False)  # "busy" takes the only slot

    result = world.tick(T0, wait=False)

    assert [r.task.name for r in result.queued] == ["export"]


def test_an_enqueue_the_backend_refuses_is_a_failed_run_with_its_reason(world, settings):
    # The RQ backend, with its Redis unreachable: the enqueue after commit fails.
    settings.RQ_QUEUES = {"default": {"HOST": "127.0.0.1", "PORT": 9, "DB": 0}}
    world.settings({"export": handed_off("export", enqueue={"backend": "rq"}, retry_delay=60)})
    world.start(T0 - MINUTE)

    world.tick(T0)

    run = only_run("export")
    assert run.status == RunStatus.FAILED
    assert "Could not enqueue the run on backend 'rq'" in run.error
    assert Task.objects.get(name="export").retry_at is not None


def test_a_refused_enqueue_is_failed_when_the_backend_refused_it_not_when_it_was_queued(
    world, monkeypatch
):
    # A broker that took its time to refuse: the failure was dated at the moment the run was
    # queued, so its retry (retry_delay after the failure) was already due when it was written.
    world.settings({"export": handed_off("export", enqueue={"backend": "rq"}, retry_delay=60)})
    world.start(T0 - MINUTE)

    class Refusing:
        def enqueue(self, run_id: int) -> None:
            time.sleep(1.5)  # the broker's own slowness, not a wait for something
            raise ConnectionError("the broker refused the connection")

    monkeypatch.setattr(Enqueuer, "_task", lambda self, declaration: Refusing())
    world.tick(T0)

    run = only_run("export")
    assert run.status == RunStatus.FAILED
    assert run.start_deadline_at is not None
    assert run.finished_at is not None
    queued_at = run.start_deadline_at - dt.timedelta(seconds=300)
    assert run.finished_at - queued_at >= dt.timedelta(seconds=1.5)
    assert Task.objects.get(name="export").retry_at == run.finished_at + dt.timedelta(seconds=60)


def test_the_job_commits_with_the_claim_on_the_same_database(world):
    world.settings({"export": handed_off("export")})
    world.start(T0 - MINUTE)

    seen = _JobInserts()
    with connection.execute_wrapper(seen):
        world.tick(T0)

    assert seen.in_claim == 1, "the job row was not written inside the claim's transaction"


class _JobInserts:
    """Count INSERTs of job rows made inside a transaction (the claim's)."""

    def __init__(self) -> None:
        self.in_claim = 0

    def __call__(self, execute, sql, params, many, context):
        table = DBTaskResult._meta.db_table
        inserts = table in sql and sql.lstrip().upper().startswith("INSERT")
        if inserts and not context["connection"].get_autocommit():
            self.in_claim += 1
        return execute(sql, params, many, context)


def test_with_every_slot_busy_and_only_local_tasks_due_the_loop_sleeps(world, gate):
    name, _ = gate
    blocked = {"callable": "tests.testapp.jobs.blocked", "kwargs": {"gate_name": name}}
    world.settings(
        {
            "busy": {"schedule": "0 * * * *", **blocked},
            "waiting": {"schedule": "0 * * * *", **blocked},
            "export": handed_off("export", schedule="30 * * * *"),
        },
        CONCURRENCY=1,
    )
    world.start(T0 - MINUTE, concurrency=1)
    first = world.tick(T0, wait=False)  # one of the local tasks takes the only slot
    assert len(first.started) == 1

    result = world.tick(T0 + dt.timedelta(seconds=1), wait=False)

    assert result.claimed == []
    # Not the 50 ms retry of rows locked elsewhere: a finishing run wakes the loop.
    assert result.wake_in == pytest.approx(1.0)


@pytest.fixture
def stopping_worker():
    """A SIGTERM handler like db_worker's: it raises SystemExit in the job's thread."""

    def shutdown(signum: int, frame: object) -> None:
        signal.signal(signal.SIGTERM, previous)  # db_worker resets its handlers first
        sys.exit(1)

    previous = signal.signal(signal.SIGTERM, shutdown)
    yield
    signal.signal(signal.SIGTERM, previous)


@pytest.fixture
def lost_runs() -> Iterator[list[int]]:
    """The runs run_lost is sent for, by primary key."""
    lost: list[int] = []

    def on_lost(sender: object, run: Run, **kwargs: object) -> None:
        lost.append(run.pk)

    run_lost.connect(on_lost)
    yield lost
    run_lost.disconnect(on_lost)


def queue_a_run(world: Any, name: str, job: str) -> Run:
    """Declare `name`, handed off, running tests.testapp.jobs.`job`; queue its run."""
    world.settings(
        {
            name: {
                "schedule": "0 * * * *",
                "callable": f"tests.testapp.jobs.{job}",
                "kwargs": {"task_name": name},
                "retry_delay": 60,
                "enqueue": True,
            }
        }
    )
    world.start(T0 - MINUTE)
    world.tick(T0)
    return only_run(name)


@pytest.mark.parametrize(
    ("handler", "code"),
    # db_worker's own; and a project's hook that is also a scheduled task (below), which
    # run by the signal in the middle of another task stops the worker all the same.
    [("stopping_worker", 1), ("hook_on_sigterm", 3)],
)
def test_a_worker_being_stopped_mid_run_records_it_lost_and_goes_on_stopping(
    world, lost_runs, request, handler, code
):
    request.getfixturevalue(handler)
    with pytest.raises(SystemExit):
        deliver(queue_a_run(world, "stopped", "signal_own_process"))

    # "A run cut off by it ends lost and is retried."
    run = only_run("stopped")
    assert run.status == RunStatus.LOST
    assert f"was stopped while this run was running (SystemExit: {code})" in run.error
    assert lost_runs == [run.pk]
    assert Task.objects.get(name="stopped").retry_at is not None


def stop_signal_now(*args: object, **kwargs: object) -> None:
    os.kill(os.getpid(), signal.SIGTERM)
    time.sleep(1)  # the handler runs here
    raise AssertionError("no SIGTERM handler stopped the worker")


def test_a_stop_signal_while_the_worker_reads_its_settings_leaves_the_run_queued(
    world, stopping_worker, monkeypatch
):
    # A worker's first job reads its settings (collect() imports every callable), which takes
    # a while; that happened after the run was taken `running`, so db_worker's second SIGTERM
    # landing there left it running on a worker that was gone, until its heartbeat went stale.
    from django_posixcron.handoff import worker

    queued = queue_a_run(world, "early", "raise_value_error")
    monkeypatch.setattr(worker, "_declaration_for", stop_signal_now)
    with pytest.raises(SystemExit):
        deliver(queued)

    run = only_run("early")
    assert (run.status, run.worker) == (RunStatus.QUEUED, "")


def test_a_stop_signal_before_the_call_ends_the_run_lost(
    world, stopping_worker, lost_runs, monkeypatch
):
    # Taken `running`, then stopped while the heartbeat's thread started: not in the try that
    # records a stop, so the run was left running on a worker that was gone.
    from django_posixcron.handoff import worker

    queued = queue_a_run(world, "starting", "raise_value_error")
    monkeypatch.setattr(worker.RunHeartbeat, "start", stop_signal_now)
    with pytest.raises(SystemExit):
        deliver(queued)

    run = only_run("starting")
    assert run.status == RunStatus.LOST
    assert lost_runs == [run.pk]
    assert not Hit.objects.filter(task_name="starting").exists()  # the call never started


def test_a_stop_signal_as_the_worker_takes_the_run_ends_it_lost(
    world, stopping_worker, lost_runs, monkeypatch
):
    # db_worker's second SIGTERM landing in the statements that take the run `running`
    # (its handler runs as the driver returns, after the run's own update committed) left
    # the run running on a worker that was gone until its heartbeat went stale (CI, MariaDB).
    from django_posixcron.handoff import worker

    queued = queue_a_run(world, "taking", "raise_value_error")
    monkeypatch.setattr(worker, "_date_last_run", stop_signal_now)
    with pytest.raises(SystemExit):
        deliver(queued)

    run = only_run("taking")
    assert run.status == RunStatus.LOST
    assert run.error.startswith(f"Lost: worker {worker.worker_label()} was stopped while this")
    assert "run was starting (SystemExit: 1); it did not run." in run.error
    assert lost_runs == [run.pk]
    assert Task.objects.get(name="taking").retry_at is not None
    assert not Hit.objects.filter(task_name="taking").exists()  # the call never started


def test_a_stop_signal_as_another_worker_took_the_run_leaves_it_to_that_worker(
    world, stopping_worker, lost_runs, monkeypatch
):
    # The flip found the run taken by another worker (a duplicate delivery) and the stop
    # landed in the read that says so: this worker records nothing on another's run.
    from django_posixcron.handoff import worker

    queued = queue_a_run(world, "taken", "raise_value_error")
    Run.objects.filter(pk=queued.pk).update(status=RunStatus.RUNNING, worker="elsewhere:1")
    monkeypatch.setattr(worker.logger, "warning", stop_signal_now)
    with pytest.raises(SystemExit):
        deliver(queued)

    run = only_run("taken")
    assert (run.status, run.worker, run.error) == (RunStatus.RUNNING, "elsewhere:1", "")
    assert lost_runs == []


@pytest.mark.parametrize("callable_name", ["raise_system_exit", "raise_keyboard_interrupt"])
def test_a_task_that_exits_by_itself_fails_and_the_worker_goes_on(
    world, stopping_worker, lost_runs, callable_name
):
    """A script-like job's sys.exit() is its own failure, as on the scheduler's executors;
    the worker is not being stopped, so it takes its next job. (KeyboardInterrupt is what
    Python's own SIGINT handler raises, from no frame of the worker's: it reads as a stop.)"""
    queued = queue_a_run(world, "exits", callable_name)
    if callable_name == "raise_keyboard_interrupt":
        with pytest.raises(KeyboardInterrupt):
            deliver(queued)
    else:
        deliver(queued)  # returns: the worker goes on

    run = only_run("exits")
    if callable_name == "raise_keyboard_interrupt":
        assert run.status == RunStatus.LOST
        assert lost_runs == [run.pk]
    else:
        assert run.status == RunStatus.FAILED
        assert run.error == "SystemExit: 2"
        assert "raise SystemExit(2)" in run.traceback
        assert lost_runs == []
    assert Task.objects.get(name="exits").retry_at is not None


@pytest.fixture
def hook_on_sigterm():
    """A project that installed one of its scheduled callables as its SIGTERM handler."""
    from tests.testapp.jobs import reload_or_exit

    previous = signal.signal(signal.SIGTERM, reload_or_exit)
    yield
    signal.signal(signal.SIGTERM, previous)


def test_a_task_that_is_also_a_stop_signals_handler_fails_by_itself(
    world, hook_on_sigterm, lost_runs
):
    # Called by the worker as the task, its frame is the one right under the worker's: its
    # exit is its own failure. It read as the worker being stopped (lost, and raised again).
    deliver(queue_a_run(world, "hook", "reload_or_exit"))

    run = only_run("hook")
    assert run.status == RunStatus.FAILED
    assert run.error == "SystemExit: 3"
    assert lost_runs == []


def test_a_task_that_leaves_its_connection_out_of_sync_still_has_its_outcome_recorded(world):
    # db_worker's second SIGTERM can land in the middle of one of the task's queries; on
    # MySQL the outcome's write on that connection then failed with "commands out of sync"
    # (not an outage: not tried again), and the run stayed `running` on a worker gone.
    if connection.vendor != "mysql":
        pytest.skip("MySQL's protocol state")
    from tests.testapp import jobs

    try:
        deliver(queue_a_run(world, "sync", "leave_mysql_out_of_sync"))
    finally:
        jobs._UNREAD.clear()

    run = only_run("sync")
    assert run.status == RunStatus.FAILED
    assert run.error == "ValueError: stopped in the middle of a query"


def test_the_worker_heartbeats_the_run_while_it_executes(world):
    world.settings(
        {
            "slow": {
                "schedule": "0 * * * *",
                # Returns once the run's heartbeat is 1.5 s past its start; fails if none is.
                "callable": "tests.testapp.jobs.until_own_run",
                "kwargs": {"beaten_for": 1.5},
                "takes_context": True,
                "enqueue": True,
            }
        }
    )
    world.start(T0 - MINUTE)
    world.tick(T0)

    deliver(only_run("slow"))

    run = only_run("slow")
    assert run.status == RunStatus.SUCCEEDED, run.error
    assert run.started_at is not None
    assert run.heartbeat_at is not None
    # POLL_INTERVAL is 1 s: the worker beat at least twice while the call ran.
    assert run.heartbeat_at - run.started_at >= dt.timedelta(seconds=1.5)


def test_a_database_error_after_the_claim_commits_still_starts_its_local_runs(world, monkeypatch):
    """The claim committed a local run `running` and a handed-off one `queued`; then writing
    what the enqueue after the commit returned fails (the database restarted). The local run
    must still execute: its process is alive, so nobody would ever mark it lost, and with
    overlap "skip" every later occurrence would be skipped."""
    world.settings({"local": record("local", "0 * * * *"), "export": handed_off("export")})
    scheduler = world.start(T0 - MINUTE)

    def after_commit(self, runs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(Enqueuer, "after_commit", after_commit)
    with pytest.raises(OperationalError):
        scheduler.tick(T0)
    assert scheduler.wait_idle(timeout=15)
    monkeypatch.undo()
    world.tick(T0 + MINUTE)  # the loop's next tick writes the outcome

    assert hits("local") == 1
    (run,) = Run.objects.filter(task__name="local")
    assert run.status == RunStatus.SUCCEEDED


def test_a_handed_off_run_of_a_claim_whose_commit_lost_its_reply_is_enqueued_after_all(
    world, lose_the_commits_reply, caplog
):
    """Committed `queued` while the scheduler saw a connection error: on a backend that keeps
    its jobs elsewhere (RQ) the enqueue comes after the commit, so no job existed, and the run
    waited for its start deadline to be marked lost and retried."""
    world.settings({"export": handed_off("export", enqueue={"backend": "rq"})})
    scheduler = world.start(T0 - MINUTE)
    lose_the_commits_reply(committed=True)
    with pytest.raises(OperationalError):
        scheduler.tick(T0)
    assert only_run("export").result_id == ""

    with caplog.at_level(logging.WARNING, logger="django_posixcron.scheduler"):
        result = world.tick(T0 + dt.timedelta(seconds=5))

    assert [r.task.name for r in result.queued] == ["export"]
    run = only_run("export")
    assert (run.status, run.scheduled_for) == (RunStatus.QUEUED, T0)
    assert run.result_id
    assert [r.action for r in caplog.records if getattr(r, "action", "") == "claim_commit_lost"]


def test_a_handed_off_run_of_a_claim_whose_commit_lost_its_reply_is_enqueued_at_the_stop(
    world, lose_the_commits_reply
):
    """The scheduler stopping before its next tick (SIGTERM, the end of --once) still hands
    the committed run to its workers: a worker runs it, not this process."""
    world.settings({"export": handed_off("export", enqueue={"backend": "rq"})})
    scheduler = world.start(T0 - MINUTE)
    lose_the_commits_reply(committed=True)
    with pytest.raises(OperationalError):
        scheduler.tick(T0)

    scheduler.shutdown()

    run = only_run("export")
    assert (run.status, run.scheduled_for) == (RunStatus.QUEUED, T0)
    assert run.result_id


def test_a_slow_enqueue_after_the_commit_does_not_hold_back_the_local_runs(world, monkeypatch):
    """A Tasks broker slow to answer holds the loop, not the local runs of the same claim:
    they start first ("a run starts within milliseconds of its occurrence")."""
    world.settings({"local": record("local", "0 * * * *"), "export": handed_off("export")})
    world.start(T0 - MINUTE)
    original = Enqueuer.after_commit
    seen_started = []

    def slow_after_commit(self, runs):
        # Waits, as on a broker that does not answer, until the local run has started.
        seen_started.append(
            wait_until(lambda: hits("local") == 1, what="the local run to start first")
        )
        return original(self, runs)

    monkeypatch.setattr(Enqueuer, "after_commit", slow_after_commit)
    world.tick(T0)

    assert seen_started == [True]


def test_the_worker_sends_task_failing_once_with_the_outcome_that_starts_the_episode(world):
    """docs/running.rst: the worker sends the task_failing its outcome starts, once for the
    fleet (the episode is marked with the outcome); the schedulers do not send it again."""
    sent: list[tuple[str, int, bool]] = []

    def on_failing(sender: object, task: Task, failures: int, paused: bool, **kwargs: Any) -> None:
        sent.append((task.name, failures, paused))

    world.settings(
        {
            "flaky": {
                "schedule": "0 * * * *",
                "callable": "tests.testapp.jobs.fail",
                "retry_delay": 60,
                "enqueue": True,
                "pause_after_failures": 2,
            }
        }
    )
    world.start(T0 - MINUTE)
    world.tick(T0)
    task_failing.connect(on_failing)
    try:
        deliver(only_run("flaky"))
        assert sent == []
        retry_at = Task.objects.get(name="flaky").retry_at
        assert retry_at is not None
        world.tick(retry_at)
        deliver(Run.objects.select_related("task").get(task__name="flaky", trigger="retry"))
        assert sent == [("flaky", 2, True)]

        task = Task.objects.get(name="flaky")
        assert (task.paused, task.failing_signalled) == (True, True)
        # A new scheduler's first tick looks for failing episodes nobody sent: none is owed.
        world.start(retry_at + MINUTE)
        world.tick(retry_at + MINUTE)
        assert sent == [("flaky", 2, True)]
    finally:
        task_failing.disconnect(on_failing)


SECOND_ALIAS = "posixcron"


@pytest.fixture
def second_alias() -> Iterator[str]:
    """A second alias of the test database, no router: `runscheduler --database` on it."""
    connections.settings[SECOND_ALIAS] = dict(connections["default"].settings_dict)
    # Opened here: once a test has started, Django's test case refuses to open connections
    # to aliases it was not told about.
    connections[SECOND_ALIAS].connect()
    try:
        yield SECOND_ALIAS
    finally:
        connections[SECOND_ALIAS].close()
        del connections[SECOND_ALIAS]
        del connections.settings[SECOND_ALIAS]


def test_a_run_queued_by_a_scheduler_on_another_alias_is_found_there_by_the_worker(
    second_alias, world
):
    # runscheduler --database ALIAS, no router: the worker looked the run up on the routers'
    # alias ("does not exist, deleted since it was queued"); it was then marked lost after
    # its start_deadline and retried, the same way, forever.
    world.settings({"export": handed_off("export")})
    world.start(T0 - MINUTE, database=second_alias)
    world.tick(T0)
    run = Run.objects.using(second_alias).get(task__name="export")
    job = DBTaskResult.objects.get(pk=run.result_id)
    assert job.args_kwargs == {"args": [run.pk], "kwargs": {"database": second_alias}}

    with CaptureQueriesContext(connections["default"]) as on_default:
        deliver(run)
    assert not [q for q in on_default.captured_queries if "django_posixcron_" in q["sql"]]
    run.refresh_from_db(using=second_alias)
    assert run.status == RunStatus.SUCCEEDED
    assert hits("export") == 1


def test_a_run_queued_on_an_alias_the_worker_does_not_have_says_so(world):
    with pytest.raises(ValueError, match="queued on the database 'elsewhere', which is not in"):
        execute_run.call(1, database="elsewhere")
