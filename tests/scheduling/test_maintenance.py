"""What keeps a long-lived deployment healthy: pruning, process rows, outages, shutdown."""

from __future__ import annotations

import datetime as dt
import itertools
import threading
import time
from typing import Any
from unittest import mock

import pytest
from django.db import DataError, OperationalError, connection, connections, transaction
from django.db.models import QuerySet

from django_posixcron.models import DeclarationSet, Run, RunStatus, SchedulerProcess, Task, Trigger
from django_posixcron.scheduler import Scheduler
from django_posixcron.scheduling import maintenance
from tests.harness.processes import only_on
from tests.harness.tasks import T0
from tests.harness.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

DAY = dt.timedelta(days=1)


def finished(scheduler: Scheduler) -> None:
    assert scheduler.wait_idle(timeout=10), "a run did not finish"


def test_a_run_for_an_old_occurrence_is_kept_for_history_days_after_it_ran(tasks, make_scheduler):
    # Paused for 40 days, then resumed: the run fires once, for the oldest missed occurrence.
    task = tasks("daily", schedule="0 10 * * *", next_run_at=T0 - 40 * DAY)
    scheduler = make_scheduler()
    scheduler.history_days = 30
    scheduler.tick(T0)
    finished(scheduler)
    run = Run.objects.get(task=task)
    assert run.scheduled_for == T0 - 40 * DAY

    # The next prune (an hour later) keeps it: it finished an hour ago, not 40 days ago.
    assert scheduler.pruner.prune(T0 + dt.timedelta(hours=1)) == 0
    assert Run.objects.filter(pk=run.pk).exists()
    # Thirty days after it finished, it goes.
    assert scheduler.pruner.prune(T0 + 31 * DAY) == 1
    assert not Run.objects.filter(pk=run.pk).exists()


def old_history(task: Task, count: int, finished_at: dt.datetime) -> None:
    Run.objects.bulk_create(
        Run(
            task=task,
            trigger=Trigger.CRON,
            status=RunStatus.SUCCEEDED,
            scheduled_for=finished_at - dt.timedelta(minutes=i),
            started_at=finished_at,
            finished_at=finished_at,
        )
        for i in range(count)
    )


def test_pruning_waits_while_a_task_falls_due_and_stays_within_its_budget(
    tasks, make_scheduler, monkeypatch
):
    # On the loop's thread: a tick about to claim must not spend a second deleting history.
    task = tasks("daily", schedule="0 10 * * *", next_run_at=T0 + DAY)
    old_history(task, 5, T0 - 40 * DAY)
    pruner = make_scheduler().pruner
    pruner.history_days = 30

    assert pruner.prune(T0, next_due=T0 + maintenance.PRUNE_DUE_MARGIN / 2) == 0
    assert Run.objects.count() == 5
    # A budget spent by the first batch: the rest is left for the next tick.
    monkeypatch.setattr(maintenance, "PRUNE_BATCH", 2)
    monkeypatch.setattr(maintenance, "PRUNE_TICK_BUDGET", 0.0)
    assert pruner.prune(T0, next_due=T0 + DAY) == 2
    assert pruner.prune(T0, next_due=None) == 2
    assert Run.objects.count() == 1


def test_on_sqlite_pruning_lets_other_writers_in_between_its_batches(
    tasks, make_scheduler, monkeypatch
):
    """Each DELETE holds SQLite's write lock on the whole file: batches back to back left
    other writers (the admin, with a 1 s busy timeout) failing with "database is locked"."""
    only_on("sqlite", why="the write lock of the whole file")
    task = tasks("daily", schedule="0 10 * * *", next_run_at=T0 + DAY)
    old_history(task, 6, T0 - 40 * DAY)
    pruner = make_scheduler().pruner
    pruner.history_days = 30
    monkeypatch.setattr(maintenance, "PRUNE_BATCH", 2)
    monkeypatch.setattr(maintenance, "PRUNE_TICK_BUDGET", 10.0)
    ended: list[float] = []

    def timed(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        try:
            return execute(sql, params, many, context)
        finally:
            if sql.lstrip().upper().startswith("DELETE"):
                ended.append(time.monotonic())

    # Between one batch's DELETE and the next, the write lock is free for the others.
    with connection.execute_wrapper(timed):
        assert pruner.prune(T0, next_due=None) == 6
    assert len(ended) >= 3
    gaps = [later - earlier for earlier, later in itertools.pairwise(ended)]
    assert min(gaps) >= 0.1, gaps  # a busy handler polls every 100 ms at most


def test_pruning_waits_for_tasks_falling_due_ten_minutes_at_most(tasks, make_scheduler):
    # A scheduler that always has a task falling due (a stream of requests) pruned nothing,
    # ever: its history, the rows of dead processes and the overdue marks grew unbounded.
    task = tasks("daily", schedule="0 10 * * *", next_run_at=T0 + DAY)
    old_history(task, 3, T0 - 40 * DAY)
    pruner = make_scheduler().pruner
    pruner.history_days = 30
    soon = maintenance.PRUNE_DUE_MARGIN / 2
    limit = maintenance.PRUNE_DEFER_LIMIT

    assert pruner.prune(T0, next_due=T0 + soon) == 0
    later = T0 + limit - dt.timedelta(seconds=1)
    assert pruner.prune(later, next_due=later + soon) == 0
    assert Run.objects.count() == 3
    assert pruner.prune(T0 + limit, next_due=T0 + limit + soon) == 3
    # The wait counts again from the next time pruning is due.
    Run.objects.all().delete()
    old_history(task, 2, T0 - 40 * DAY)
    again = pruner.next_at
    assert again is not None
    assert again > T0 + limit
    assert pruner.prune(again, next_due=again + soon) == 0
    assert pruner.prune(again + limit, next_due=again + limit + soon) == 2


def test_a_scheduler_whose_slots_are_all_busy_still_prunes(tasks, make_scheduler, gate):
    # Every slot busy and tasks waiting for one: always a task "falling due", and nothing
    # can start while the tick prunes.
    name, event = gate
    tasks(
        "long",
        schedule="0 10 * * *",
        next_run_at=T0,
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": name, "task_name": "long"},
    )
    waiting = tasks("waiting", schedule="* * * * *", next_run_at=T0 + dt.timedelta(minutes=1))
    old_history(waiting, 3, T0 - 40 * DAY)
    scheduler = make_scheduler(concurrency=1)
    scheduler.pruner.history_days = 30
    scheduler.pruner.next_at = T0 + DAY  # not before the slot is taken

    result = scheduler.tick(T0)
    assert [run.task.name for run in result.started] == ["long"]
    scheduler.pruner.next_at = None
    result = scheduler.tick(T0 + dt.timedelta(minutes=2))
    assert result.started == []
    assert result.left_due
    assert not Run.objects.filter(finished_at__lt=T0 - 30 * DAY).exists()
    event.set()
    finished(scheduler)


def test_the_pruned_count_is_what_was_deleted_not_what_was_selected(tasks, make_scheduler):
    # Two schedulers pruning at once select the same keys; the second finds them gone.
    task = tasks("daily", schedule="0 10 * * *", next_run_at=T0 + DAY)
    old_history(task, 3, T0 - 40 * DAY)
    pruner = make_scheduler().pruner
    pruner.history_days = 30
    real_delete = QuerySet.delete
    first = Run.objects.order_by("pk").values_list("pk", flat=True)[0]

    def a_peer_got_there_first(queryset: QuerySet[Any]) -> tuple[int, dict[str, int]]:
        # Between this pruner's SELECT of the keys and its DELETE.
        real_delete(Run.objects.filter(pk=first))
        return real_delete(queryset)

    with mock.patch.object(QuerySet, "delete", a_peer_got_there_first):
        assert pruner.prune(T0) == 2
    assert not Run.objects.exists()


def test_rows_of_processes_gone_for_a_day_are_pruned_once_no_run_names_them(tasks, make_scheduler):
    task = tasks("t")
    scheduler = make_scheduler()
    scheduler.start()
    now = scheduler.now()
    old = now - 2 * DAY
    stopped = SchedulerProcess.objects.create(
        hostname="cron-once", pid=1, started_at=old, last_heartbeat_at=old, stopped_at=old
    )
    dead = SchedulerProcess.objects.create(
        hostname="killed", pid=2, started_at=old, last_heartbeat_at=old
    )
    named = SchedulerProcess.objects.create(
        hostname="with-history", pid=3, started_at=old, last_heartbeat_at=old, stopped_at=old
    )
    recent = SchedulerProcess.objects.create(
        hostname="last-hour",
        pid=4,
        started_at=now - DAY / 24,
        last_heartbeat_at=now - DAY / 24,
        stopped_at=now - DAY / 24,
    )
    Run.objects.create(
        task=task,
        trigger=Trigger.CRON,
        status=RunStatus.SUCCEEDED,
        scheduled_for=now - DAY,
        started_at=now - DAY,
        finished_at=now - DAY,
        process=named,
    )
    scheduler.pruner.prune(now)
    left = set(SchedulerProcess.objects.values_list("pk", flat=True))
    assert stopped.pk not in left
    assert dead.pk not in left
    assert {named.pk, recent.pk, scheduler.process.pk} <= left


def test_declaration_sets_no_process_names_are_pruned_with_the_process_rows(tasks, make_scheduler):
    tasks("t")
    scheduler = make_scheduler()
    scheduler.start()
    now = scheduler.now()
    old = now - 2 * DAY
    DeclarationSet.objects.filter(digest=scheduler.process.declaration_set).update(created_at=old)
    gone = DeclarationSet.objects.create(digest="gone", hashes={"t": "x"}, created_at=old)
    fresh = DeclarationSet.objects.create(digest="fresh", hashes={"t": "y"}, created_at=now)
    SchedulerProcess.objects.create(
        hostname="killed", pid=2, started_at=old, last_heartbeat_at=old, declaration_set="gone"
    )
    scheduler.pruner.prune(now)
    left = set(DeclarationSet.objects.values_list("digest", flat=True))
    # Ours is named by a live row, however old; the fresh one may be a process registering.
    assert left == {scheduler.process.declaration_set, fresh.digest}
    assert gone.digest not in left


def test_after_an_outage_no_runs_are_presumed_lost_until_others_could_heartbeat(
    tasks, make_scheduler, gate, monkeypatch
):
    name, event = gate
    task = tasks("held", callable_path="tests.testapp.jobs.blocked", kwargs={"gate_name": name})
    owner = make_scheduler()
    owner.tick(T0)
    assert Run.objects.get(task=task).status == RunStatus.RUNNING

    other = make_scheduler()
    other.start()
    real_tick = other.tick
    calls = {"n": 0}

    def tick_after_an_outage(now: Any = None) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise OperationalError("server closed the connection unexpectedly")
        return real_tick(now)

    monkeypatch.setattr(other, "tick", tick_after_an_outage)
    other._safe_tick()  # the outage
    # Everyone's heartbeat went stale meanwhile, the owner's included.
    SchedulerProcess.objects.update(last_heartbeat_at=other.now() - dt.timedelta(minutes=5))
    other._safe_tick()  # recovered: the owner gets time to heartbeat before being judged
    assert Run.objects.get(task=task).status == RunStatus.RUNNING

    # Past the grace, a process that really is silent has its runs marked lost.
    other.outage.judge_from = 0.0
    SchedulerProcess.objects.filter(pk=owner.process.pk).update(
        last_heartbeat_at=other.now() - dt.timedelta(minutes=5)
    )
    other._safe_tick()
    assert Run.objects.get(task=task).status == RunStatus.LOST
    event.set()


def test_shutdown_with_the_database_away_keeps_going_and_says_what_was_not_recorded(
    tasks, make_scheduler, monkeypatch, caplog
):
    tasks("t")
    scheduler = make_scheduler()
    scheduler.tick(T0)
    assert scheduler.executor.wait_idle(10)

    def away(*args: Any, **kwargs: Any) -> Any:
        raise OperationalError("the database system is shutting down")

    monkeypatch.setattr("django_posixcron.scheduling.execution.write_outcomes", away)
    monkeypatch.setattr(SchedulerProcess.objects, "using", away)
    scheduler.shutdown()  # no exception
    assert scheduler.unrecorded == 1
    assert "could not record the shutdown" in caplog.text
    assert "scheduler stopped" in caplog.text
    run = Run.objects.get()
    assert run.status == RunStatus.RUNNING  # not written: the database was away
    # The history will say lost, and the run is retried: the log keeps how it really ended.
    (said,) = [r for r in caplog.records if getattr(r, "action", "") == "outcome_unrecorded"]
    assert said.levelname == "ERROR"
    assert said.getMessage().startswith(f"run {run.pk} of task t ended succeeded at ")
    assert (said.run_id, said.status) == (run.pk, RunStatus.SUCCEEDED)


def test_a_read_only_moment_on_sqlite_keeps_the_outcome_for_later(tasks, make_scheduler, caplog):
    # A file replaced or a filesystem remounted read-only for a moment: the outcome is kept
    # and written once the file can be written again, as through any outage, not dropped
    # (its run left `running` on a live process for good).
    only_on("sqlite", why="SQLite's read-only refusal")
    tasks("t")
    scheduler = make_scheduler()
    assert len(scheduler.tick(T0).started) == 1
    wait_until(lambda: scheduler.runs.unrecorded == 1, 10, "the outcome to be queued")
    with connection.cursor() as cursor:
        cursor.execute("PRAGMA query_only = 1")  # every write refused: SQLITE_READONLY
    try:
        with pytest.raises(OperationalError):
            scheduler.runs.flush()
    finally:
        with connection.cursor() as cursor:
            cursor.execute("PRAGMA query_only = 0")
    assert scheduler.runs.unrecorded == 1
    assert not [r for r in caplog.records if getattr(r, "action", "") == "outcome_dropped"]
    scheduler.runs.flush()
    assert Run.objects.get().status == RunStatus.SUCCEEDED


def test_a_restored_task_forgets_a_run_requested_before_it_was_retired(posixcron):
    from django_posixcron.reconcile import reconcile

    declared = {
        "yearly": {
            "schedule": "0 0 1 1 *",
            "callable": "tests.testapp.jobs.noop",
            "retry_delay": 60,
        }
    }
    posixcron(declared)
    reconcile(now=T0)
    Task.objects.get(name="yearly").request_run(T0)
    posixcron({})
    reconcile(now=T0 + dt.timedelta(minutes=1))
    posixcron(declared)
    reconcile(now=T0 + dt.timedelta(minutes=2))
    task = Task.objects.get(name="yearly")
    assert task.declared
    assert task.run_requested_at is None
    assert task.due_at == dt.datetime(2087, 1, 1, tzinfo=dt.UTC)


def test_the_database_going_away_while_outcomes_are_written_one_by_one_keeps_the_rest(
    tasks, make_scheduler, monkeypatch
):
    # A batch the database refused is written one outcome at a time. An outage in the middle
    # kept the outcome being written and dropped the ones after it: their runs stayed
    # `running` on a live process until it stopped, then were marked lost and run again.
    for name in ("a", "b", "c"):
        tasks(name)
    scheduler = make_scheduler()
    scheduler.tick(T0)
    assert scheduler.executor.wait_idle(10)
    queued = [o.run.task.name for o in scheduler.runs.outcomes]
    assert sorted(queued) == ["a", "b", "c"]

    from django_posixcron.scheduling import execution, outcomes

    real = outcomes.write_outcomes
    faults = iter(
        [
            DataError("value too long for the column"),  # the batch: refused
            None,  # the first alone: written
            OperationalError("server closed the connection unexpectedly"),  # the second
        ]
    )

    def faulty(*args: Any, **kwargs: Any) -> Any:
        fault = next(faults, None)
        if fault is not None:
            raise fault
        return real(*args, **kwargs)

    monkeypatch.setattr(execution, "write_outcomes", faulty)
    with pytest.raises(OperationalError):
        scheduler.runs.flush()
    assert [o.run.task.name for o in scheduler.runs.outcomes] == queued[1:]

    scheduler.runs.flush()  # the database is back
    assert scheduler.runs.outcomes == []
    assert sorted(Run.objects.values_list("status", flat=True)) == [RunStatus.SUCCEEDED] * 3


def test_a_held_row_in_a_refused_batch_is_not_waited_for_nor_queued_twice(
    tasks, make_scheduler, monkeypatch
):
    # A batch the database refused is written one outcome at a time. Those writes waited
    # for rows another transaction held (a frozen peer stalled the loop; MariaDB gave up
    # after 50 s, every tick), and an outcome the batch had found held was queued again
    # even once written.
    from django_posixcron.scheduling import bulk

    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip("rows are held only where SKIP LOCKED can pass them")
    tasks("a")
    tasks("b")
    scheduler = make_scheduler()
    scheduler.tick(T0)
    assert scheduler.executor.wait_idle(10)
    a = Task.objects.get(name="a")
    locked, release = threading.Event(), threading.Event()

    def hold_row() -> None:
        try:
            with transaction.atomic():
                Task.objects.select_for_update().get(pk=a.pk)
                locked.set()
                release.wait(30)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_row)
    holder.start()
    assert locked.wait(10)
    real = bulk.update_many
    calls = {"n": 0}

    def refuse_first(*args: Any, **kwargs: Any) -> Any:
        calls["n"] += 1
        if calls["n"] == 1:
            raise DataError("refused (an emoji on a utf8mb3 column, say)")
        return real(*args, **kwargs)

    monkeypatch.setattr("django_posixcron.scheduling.outcomes.update_many", refuse_first)
    try:
        scheduler.runs.flush()  # returns: the held row is not waited for
        assert [o.run.task.name for o in scheduler.runs.outcomes] == ["a"]
        assert Run.objects.get(task__name="b").status == RunStatus.SUCCEEDED
        assert Run.objects.get(task__name="a").status == RunStatus.RUNNING
    finally:
        release.set()
        holder.join(10)

    scheduler.runs.flush()
    assert scheduler.runs.outcomes == []
    assert Run.objects.get(task__name="a").status == RunStatus.SUCCEEDED
