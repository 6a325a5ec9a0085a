"""Processes that die: kill -9 mid-run, kill -9 between claim and commit, SIGTERM."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections, transaction

from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task, Trigger
from tests.harness.processes import Schedulers, only_on, record_task, task, utcnow
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def blocker(release: Path, **extra: Any) -> dict[str, Any]:
    return task(
        "tests.testapp.jobs.wait_for_file",
        kwargs={"path": str(release), "task_name": "blocker"},
        **extra,
    )


def hits(label: str) -> int:
    return Hit.objects.filter(task_name="blocker", label=label).count()


@pytest.mark.slow
@pytest.mark.long
def test_kill_9_mid_run_is_marked_lost_and_retried(schedulers: Schedulers, tmp_path: Path) -> None:
    # Waits out the scheduler's stale-heartbeat threshold (30 s), on every database: the
    # judgement is by the database clock, which each server keeps its own way.
    release = tmp_path / "release"
    schedulers.configure({"blocker": blocker(release, retry_delay=1)})
    (first,) = schedulers.start_live(1)
    Task.objects.get(name="blocker").request_run()
    schedulers.wait_for(lambda: hits("started") == 1, what="the blocking run to start")
    lost_run = Run.objects.get()
    assert lost_run.status == RunStatus.RUNNING
    assert lost_run.process is not None
    assert lost_run.process.pid == first.pid

    schedulers.expect_exit(first)
    first.kill()
    (second,) = schedulers.start_live(1)

    # The scheduler's stale-heartbeat threshold (at least STALE_AFTER_MIN), then retry_delay.
    schedulers.wait_for(
        lambda: Run.objects.filter(pk=lost_run.pk, status=RunStatus.LOST).exists(),
        timeout=60,
        what="the killed process's run to be marked lost",
    )
    schedulers.wait_for(lambda: hits("started") == 2, what="the retry to start")
    release.touch()
    schedulers.wait_for(
        lambda: Run.objects.filter(trigger=Trigger.RETRY, status=RunStatus.SUCCEEDED).exists(),
        what="the retry to succeed",
    )

    lost_run.refresh_from_db()
    retry = Run.objects.get(trigger=Trigger.RETRY)
    assert "Lost" in lost_run.error
    assert lost_run.finished_at is not None
    assert retry.process is not None
    assert retry.process.pid == second.pid
    assert retry.scheduled_for >= lost_run.finished_at
    assert Run.objects.count() == 2
    assert (hits("started"), hits("finished")) == (2, 1)


def test_sigterm_during_a_long_run_marks_it_interrupted_and_exits_0(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    schedulers.configure({"blocker": blocker(tmp_path / "never")})
    (child,) = schedulers.start_live(1, "--grace", "2")
    Task.objects.get(name="blocker").request_run()
    schedulers.wait_for(lambda: hits("started") == 1, what="the blocking run to start")

    schedulers.expect_exit(child)
    child.signal(signal.SIGTERM)
    # Bounded, not timed: a process ignoring --grace would hang here until the run's own
    # two-minute limit.
    assert child.wait(timeout=20) == 0, schedulers.outputs()

    run = Run.objects.get()
    assert run.status == RunStatus.INTERRUPTED, schedulers.outputs()
    assert "grace" in run.error
    blocked = Task.objects.get(name="blocker")
    assert blocked.last_run_status == RunStatus.INTERRUPTED
    assert blocked.retry_at is not None  # an interrupted run counts as a failure
    assert SchedulerProcess.objects.get(pid=child.pid).stopped_at is not None
    # The run's code still runs in its worker thread: the exit says so and does not wait for
    # it, nor finalise the interpreter under it (its open connection was collected with a
    # ResourceWarning, an "Exception ignored" traceback after "scheduler stopped").
    assert "exiting without waiting for 1 thread(s) task code left running" in child.output()
    assert "Exception ignored" not in child.output()


# -- kill -9 between claim and commit ------------------------------------------------------

BLOCKED_INSERT = {
    # The backend id and statement of a session waiting on a lock while inserting a Run
    # (on PostgreSQL the claim's INSERT carries the cursors' UPDATE in a WITH before it).
    "postgresql": """
        SELECT pid FROM pg_stat_activity
        WHERE wait_event_type = 'Lock' AND query LIKE '%%INSERT INTO "django_posixcron_run"%%'
          AND pid <> pg_backend_pid()
    """,
    "mysql": """
        SELECT id FROM information_schema.processlist
        WHERE info LIKE 'INSERT INTO `django_posixcron_run`%%'
    """,
}
SESSION_ALIVE = {
    "postgresql": "SELECT count(*) FROM pg_stat_activity WHERE pid = %s",
    "mysql": "SELECT count(*) FROM information_schema.processlist WHERE id = %s",
}


def query(sql: str, *params: int) -> list[tuple[Any, ...]]:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return list(cursor.fetchall())


def test_kill_9_between_claim_and_commit_leaves_the_occurrence_to_another_process(
    schedulers: Schedulers,
) -> None:
    """A claim whose process dies before COMMIT rolls back whole; the next process fires it.

    To stop a real process between its claim and its commit, the test holds an uncommitted
    Run row with the very (task, trigger, scheduled_for) the scheduler will insert: the
    scheduler has locked the task row and moved its cursor, and its INSERT now waits on the
    unique index for the test's transaction. The process is killed in that state; the test
    then rolls back, the orphaned server session finishes its statement, finds its client
    gone and rolls back too.
    """
    only_on(
        "postgresql",
        "mysql",
        why="SQLite has one writer and no row locks to hold a process between claim and "
        "commit; a killed writer's journal is rolled back by the next one",
    )
    schedulers.configure({"target": record_task("target")})
    (doomed,) = schedulers.start_live(1)
    target = Task.objects.get(name="target")
    instant = utcnow().replace(microsecond=0)

    holding = threading.Event()
    release = threading.Event()
    errors: list[BaseException] = []

    def hold_conflicting_row() -> None:
        try:
            with transaction.atomic():
                if connection.vendor == "mysql":
                    # InnoDB would S-lock the task row for the foreign key check, and the
                    # scheduler's SKIP LOCKED would then skip the task instead of claiming it.
                    with connection.cursor() as cursor:
                        cursor.execute("SET SESSION foreign_key_checks = 0")
                Run.objects.create(
                    task=target,
                    trigger=Trigger.MANUAL,
                    status=RunStatus.RUNNING,
                    scheduled_for=instant,
                )
                holding.set()
                release.wait(60)
                transaction.set_rollback(True)
        except BaseException as exc:  # pragma: no cover - reported below
            errors.append(exc)
            holding.set()
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_conflicting_row)
    holder.start()
    try:
        assert holding.wait(30)
        assert not errors, errors
        Task.objects.filter(pk=target.pk).update(run_requested_at=instant, due_at=instant)
        (session,) = schedulers.wait_for(
            lambda: query(BLOCKED_INSERT[connection.vendor]),
            what="the scheduler's INSERT to wait on the held row",
        )[0]
        schedulers.expect_exit(doomed)
        doomed.kill()
    finally:
        release.set()
        holder.join(30)
    assert not errors, errors

    # The orphaned session notices its client is gone at its next read, then rolls back.
    schedulers.wait_for(
        lambda: query(SESSION_ALIVE[connection.vendor], session)[0][0] == 0,
        what="the killed process's database session to end",
    )
    assert not Run.objects.exists()
    target.refresh_from_db()
    assert (target.run_requested_at, target.due_at) == (instant, instant), "claim not rolled back"

    (survivor,) = schedulers.start_live(1)
    schedulers.wait_for(
        lambda: Run.objects.filter(status=RunStatus.SUCCEEDED).exists(),
        what="another process to fire the occurrence",
    )
    run = Run.objects.get()
    assert (run.trigger, run.scheduled_for) == (Trigger.MANUAL, instant)
    assert run.process is not None
    assert run.process.pid == survivor.pid
    assert Hit.objects.filter(task_name="target").count() == 1


def test_a_second_signal_exits_at_once_and_still_records_the_interruption(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    schedulers.configure({"blocker": blocker(tmp_path / "never")})
    (child,) = schedulers.start_live(1, "--grace", "60")
    Task.objects.get(name="blocker").request_run()
    schedulers.wait_for(lambda: hits("started") == 1, what="the blocking run to start")

    schedulers.expect_exit(child)
    child.signal(signal.SIGINT)
    schedulers.wait_for(
        lambda: "no new claims" in child.output(), what="the first signal to be handled"
    )
    child.signal(signal.SIGINT)
    # Far less than the 60 s grace: the second signal does not wait for the run.
    assert child.wait(timeout=15) != 0, schedulers.outputs()

    run = Run.objects.get()
    assert run.status == RunStatus.INTERRUPTED, schedulers.outputs()
