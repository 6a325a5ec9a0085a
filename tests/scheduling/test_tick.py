"""Scheduler.tick(now) driven with explicit times against the real test database."""

from __future__ import annotations

import datetime as dt
import logging
import threading
import time
from typing import Any

import pytest

from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task, Trigger
from django_posixcron.scheduler import Scheduler
from django_posixcron.signals import run_finished, run_started, task_failing
from tests.harness.tasks import T0, running_on_a_dead_process
from tests.harness.waiting import wait_until
from tests.testapp.models import Hit

pytestmark = pytest.mark.django_db(transaction=True)

MINUTE = dt.timedelta(minutes=1)
HOUR = dt.timedelta(hours=1)


def finished(scheduler: Scheduler) -> None:
    assert scheduler.wait_idle(timeout=10)


def runs(task: Task) -> list[tuple[str, str, dt.datetime]]:
    return [
        (r.trigger, r.status, r.scheduled_for)
        for r in Run.objects.filter(task=task).order_by("started_at", "pk")
    ]


def test_first_start_fires_only_when_the_current_minute_matches(tasks, make_scheduler):
    now = T0 + dt.timedelta(seconds=20)  # 10:00:20, inside a matching minute
    matching = tasks("matching", schedule="0 10 * * *", now=now)
    other = tasks("other", schedule="1 10 * * *", now=now)
    scheduler = make_scheduler()

    result = scheduler.tick(now)
    finished(scheduler)

    assert [r.task.name for r in result.started] == ["matching"]
    assert runs(matching) == [(Trigger.CRON, RunStatus.SUCCEEDED, T0)]
    assert runs(other) == []
    other.refresh_from_db()
    assert other.next_run_at == T0 + MINUTE


def test_no_make_up_after_a_long_gap(tasks, make_scheduler):
    task = tasks(schedule="0 * * * *", next_run_at=T0)
    scheduler = make_scheduler()
    later = T0 + dt.timedelta(days=2, hours=5, minutes=30)

    scheduler.tick(later)
    finished(scheduler)
    scheduler.tick(later + MINUTE)
    finished(scheduler)

    # Fired once for the whole gap, then resumed its schedule from now.
    assert runs(task) == [(Trigger.CRON, RunStatus.SUCCEEDED, T0)]
    assert Hit.objects.count() == 1
    task.refresh_from_db()
    assert task.next_run_at == later.replace(minute=0) + HOUR
    assert task.due_at == task.next_run_at


def test_a_failure_schedules_a_retry_that_fires_before_the_next_occurrence(tasks, make_scheduler):
    task = tasks("failing", callable_path="tests.testapp.jobs.fail", retry_delay=300)
    scheduler = make_scheduler()

    scheduler.tick(T0)
    finished(scheduler)
    task.refresh_from_db()
    assert task.last_run_status == RunStatus.FAILED
    assert T0 + dt.timedelta(seconds=300) <= task.retry_at < T0 + dt.timedelta(seconds=310)
    assert task.due_at == task.retry_at
    assert task.next_run_at == T0 + HOUR

    assert scheduler.tick(T0 + dt.timedelta(seconds=299)).claimed == []
    result = scheduler.tick(T0 + dt.timedelta(seconds=311))
    finished(scheduler)
    assert [(r.trigger, r.scheduled_for) for r in result.started] == [
        (Trigger.RETRY, task.retry_at)
    ]
    failed = Run.objects.get(task=task, trigger=Trigger.RETRY)
    assert failed.status == RunStatus.FAILED
    assert failed.error == "RuntimeError: boom"
    assert "RuntimeError: boom" in failed.traceback


def test_a_cron_occurrence_before_the_retry_fires_first_and_consumes_it(tasks, make_scheduler):
    task = tasks(
        "failing",
        callable_path="tests.testapp.jobs.fail_then_succeed",
        kwargs={"task_name": "failing"},
        retry_delay=90 * 60,
    )
    scheduler = make_scheduler()
    scheduler.tick(T0)
    finished(scheduler)
    task.refresh_from_db()
    assert task.retry_at > T0 + HOUR

    # The second call succeeds: the 11:00 occurrence consumes the pending retry.
    result = scheduler.tick(T0 + HOUR)
    assert [(r.trigger, r.scheduled_for) for r in result.started] == [(Trigger.CRON, T0 + HOUR)]
    task.refresh_from_db()
    assert task.retry_at is None
    finished(scheduler)
    task.refresh_from_db()
    assert task.retry_at is None
    assert task.last_run_status == RunStatus.SUCCEEDED
    # The retry (due 11:30) was consumed: nothing fires at 11:45.
    assert scheduler.tick(T0 + HOUR + 45 * MINUTE).claimed == []


def test_success_clears_a_pending_retry(tasks, make_scheduler):
    retry_at = T0 + dt.timedelta(minutes=5)
    task = tasks(next_run_at=T0 + HOUR, retry_at=retry_at, last_run_status=RunStatus.FAILED)
    scheduler = make_scheduler()
    assert scheduler.tick(retry_at - MINUTE).claimed == []
    result = scheduler.tick(retry_at)
    finished(scheduler)

    assert [(r.trigger, r.scheduled_for) for r in result.started] == [(Trigger.RETRY, retry_at)]
    task.refresh_from_db()
    assert task.retry_at is None
    assert task.last_run_status == RunStatus.SUCCEEDED
    assert task.due_at == task.next_run_at == T0 + HOUR


def test_the_claim_reads_unfinished_runs_through_the_status_index_on_mysql(
    tasks, make_scheduler, gate
):
    # MariaDB, with three unfinished runs or more in the table, answered "has this task an
    # unfinished run?" through a task index: each claimed task's whole history read under the
    # claim's row locks. There the claim asks once per status, naming the index whose prefix
    # is (status, task) (migration 0011).
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    name, event = gate
    for task_name in ("a", "b", "c", "d"):
        tasks(
            task_name,
            schedule="* * * * *",
            callable_path="tests.testapp.jobs.blocked",
            kwargs={"gate_name": name, "task_name": task_name},
        )
    scheduler = make_scheduler()
    scheduler.tick(T0)
    with CaptureQueriesContext(connection) as queries:
        result = scheduler.tick(T0 + MINUTE)
    assert sorted(r.task.name for r in result.skipped) == ["a", "b", "c", "d"]
    [claim] = [q["sql"] for q in queries if "busy" in q["sql"]]
    hints = claim.count("FORCE INDEX (`posixcron_run_status_proc`)")
    assert hints == (2 if connection.vendor == "mysql" else 0)
    event.set()
    finished(scheduler)


def test_overlap_skip_records_a_skipped_run_and_allow_runs_both(tasks, make_scheduler, gate):
    name, event = gate
    skip = tasks(
        "skip",
        schedule="* * * * *",
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": name, "task_name": "skip"},
    )
    allow = tasks(
        "allow",
        schedule="* * * * *",
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": name, "task_name": "allow"},
        overlap="allow",
    )
    scheduler = make_scheduler()

    scheduler.tick(T0)
    result = scheduler.tick(T0 + MINUTE)
    assert sorted(r.task.name for r in result.skipped) == ["skip"]
    assert sorted(r.task.name for r in result.started) == ["allow"]
    event.set()
    finished(scheduler)

    assert runs(skip) == [
        (Trigger.CRON, RunStatus.SUCCEEDED, T0),
        (Trigger.CRON, RunStatus.SKIPPED, T0 + MINUTE),
    ]
    assert [status for _, status, _ in runs(allow)] == [RunStatus.SUCCEEDED] * 2
    skip.refresh_from_db()
    assert skip.next_run_at == T0 + 2 * MINUTE
    assert skip.last_run_status == RunStatus.SUCCEEDED


def test_two_overlapping_runs_failing_at_one_instant_leave_the_newer_ones_retry(
    tasks, make_scheduler, gate
):
    # The 10:00 and 11:00 runs (overlap "allow") both timed out at one tick: the two
    # failures set up a retry at the same instant, and the older, written first, kept it:
    # the retry ran as attempt 2 of 10:00, and the 11:00 failure was never retried.
    name, event = gate
    task = tasks(
        schedule="0 10,11 * * *",
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": name},
        overlap="allow",
        timeout=5400,
        next_run_at=T0,
    )
    scheduler = make_scheduler()
    scheduler.tick(T0)
    scheduler.tick(T0 + HOUR)
    judged = T0 + dt.timedelta(hours=2, minutes=35)

    result = scheduler.tick(judged)
    event.set()
    finished(scheduler)

    assert sorted(run.scheduled_for for run in result.timed_out) == [T0, T0 + HOUR]
    task.refresh_from_db()
    assert (task.retry_at, task.retry_occurrence, task.retry_attempt) == (
        judged + dt.timedelta(seconds=300),
        T0 + HOUR,
        1,
    )


def test_a_manual_request_fires_as_manual(tasks, make_scheduler):
    task = tasks(next_run_at=T0 + HOUR)
    requested = T0 + dt.timedelta(minutes=7)
    task.request_run(now=requested)
    scheduler = make_scheduler()

    result = scheduler.tick(requested + dt.timedelta(seconds=1))
    finished(scheduler)

    assert [(r.trigger, r.scheduled_for) for r in result.started] == [(Trigger.MANUAL, requested)]
    task.refresh_from_db()
    assert task.run_requested_at is None
    assert task.due_at == task.next_run_at == T0 + HOUR


def test_paused_and_retired_tasks_never_fire(tasks, make_scheduler):
    paused = tasks("paused", next_run_at=T0, paused=True)
    retired = tasks("retired", next_run_at=T0, declared=False)
    paused.request_run(now=T0)
    scheduler = make_scheduler()

    result = scheduler.tick(T0 + dt.timedelta(days=1))

    assert result.claimed == []
    assert not Run.objects.exists()
    paused.refresh_from_db()
    retired.refresh_from_db()
    assert paused.next_run_at == retired.next_run_at == T0


def test_a_task_whose_definition_differs_is_not_claimed(tasks, make_scheduler, caplog):
    task = tasks("changed", next_run_at=T0)
    Task.objects.filter(pk=task.pk).update(definition_hash="deployed-by-a-newer-release")
    scheduler = make_scheduler()

    with caplog.at_level(logging.WARNING, logger="django_posixcron.scheduler"):
        scheduler.tick(T0)
        scheduler.tick(T0 + dt.timedelta(seconds=1))
        scheduler.tick(T0 + 2 * MINUTE)  # past the recheck interval

    assert not Run.objects.exists()
    actions = [r.action for r in caplog.records if hasattr(r, "action")]
    assert actions.count("definition_differs") == 1


def test_runs_of_a_process_that_stopped_heartbeating_become_lost_and_retry(tasks, make_scheduler):
    task = tasks(retry_delay=60, next_run_at=T0 + HOUR)
    dead = SchedulerProcess.objects.create(
        hostname="gone", pid=1, last_heartbeat_at=T0 - dt.timedelta(minutes=10)
    )
    alive = SchedulerProcess.objects.create(hostname="alive", pid=2, last_heartbeat_at=T0)
    orphan = Run.objects.create(
        task=task,
        trigger=Trigger.CRON,
        status=RunStatus.RUNNING,
        scheduled_for=T0 - HOUR,
        started_at=T0 - HOUR,
        process=dead,
        process_label="gone:1",
    )
    healthy = Run.objects.create(
        task=tasks("other", next_run_at=T0 + HOUR),
        trigger=Trigger.CRON,
        status=RunStatus.RUNNING,
        scheduled_for=T0 - 2 * HOUR,
        started_at=T0,
        process=alive,
        process_label="alive:2",
    )
    scheduler = make_scheduler()

    result = scheduler.tick(T0 + dt.timedelta(seconds=5))

    assert [r.pk for r in result.lost] == [orphan.pk]
    orphan.refresh_from_db()
    healthy.refresh_from_db()
    assert orphan.status == RunStatus.LOST
    assert orphan.error == (
        "Lost: scheduler process gone:1 stopped heartbeating (nothing heard for more than 30 "
        "s) while this run was running; its outcome is unknown."
    )
    assert healthy.status == RunStatus.RUNNING
    task.refresh_from_db()
    assert task.last_run_status == RunStatus.LOST
    assert task.retry_at == T0 + dt.timedelta(seconds=65)

    SchedulerProcess.objects.filter(pk=alive.pk).update(last_heartbeat_at=T0 + MINUTE)
    result = scheduler.tick(T0 + dt.timedelta(seconds=65))
    finished(scheduler)
    assert [(r.trigger, r.status) for r in result.started] == [(Trigger.RETRY, RunStatus.SUCCEEDED)]
    assert Hit.objects.count() == 1


def test_a_run_its_stopped_process_could_not_record_is_lost_as_stopped_not_silent(
    tasks, make_scheduler
):
    # A shutdown that recorded its stop but not an outcome (its row held past the grace, or
    # the outcome refused) leaves its run `running` under a process that says it stopped:
    # not "nothing heard for 30 s".
    stopped_at = T0 - dt.timedelta(seconds=3)
    gone = SchedulerProcess.objects.create(
        hostname="gone", pid=1, last_heartbeat_at=stopped_at, stopped_at=stopped_at
    )
    run = Run.objects.create(
        task=tasks(next_run_at=T0 + HOUR),
        trigger=Trigger.CRON,
        status=RunStatus.RUNNING,
        scheduled_for=T0 - MINUTE,
        started_at=T0 - MINUTE,
        process=gone,
        process_label="gone:1",
    )

    assert [r.pk for r in make_scheduler().tick(T0).lost] == [run.pk]
    run.refresh_from_db()
    assert run.error == (
        "Lost: scheduler process gone:1 stopped at 2086-01-07 09:59:57 UTC without recording "
        "this run's outcome; its outcome is unknown."
    )


def test_the_loop_wakes_for_the_retry_of_a_run_it_marked_lost(tasks, make_scheduler):
    # A retry sooner than the next poll is claimed on time, not when the loop next wakes.
    running_on_a_dead_process(tasks(retry_delay=2, next_run_at=T0 + HOUR), T0 - HOUR)
    scheduler = make_scheduler(poll_interval=60)

    result = scheduler.tick(T0)

    assert len(result.lost) == 1
    assert result.next_due_at == T0 + dt.timedelta(seconds=2)
    assert result.wake_in == pytest.approx(2.0)
    retry = scheduler.tick(T0 + dt.timedelta(seconds=2)).started
    finished(scheduler)
    assert [r.trigger for r in retry] == [Trigger.RETRY]


def test_the_loop_wakes_for_the_retry_of_a_run_it_timed_out(tasks, make_scheduler, gate):
    name, event = gate
    tasks(
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": name},
        timeout=30,
        retry_delay=3,
        next_run_at=T0,
    )
    scheduler = make_scheduler(concurrency=1, poll_interval=60)
    scheduler.tick(T0)

    result = scheduler.tick(T0 + dt.timedelta(seconds=31))

    assert len(result.timed_out) == 1
    assert result.wake_in == pytest.approx(3.0)
    event.set()
    finished(scheduler)


@pytest.mark.parametrize("deleted", ["run", "task"])
def test_a_run_whose_row_is_deleted_while_it_runs_says_so_once(
    tasks, make_scheduler, gate, caplog, deleted
):
    # Deleted through the ORM (a cleanup script, a data migration): its outcome has no row
    # left. Said in the log, not kept and tried at every tick as if another transaction held
    # the row.
    name, event = gate
    task = tasks(callable_path="tests.testapp.jobs.blocked", kwargs={"gate_name": name})
    scheduler = make_scheduler()
    run = scheduler.tick(T0).started[0]
    (
        Run.objects.filter(pk=run.pk) if deleted == "run" else Task.objects.filter(pk=task.pk)
    ).delete()

    with caplog.at_level(logging.WARNING, logger="django_posixcron"):
        event.set()
        finished(scheduler)
        for second in (1, 2, 3):
            scheduler.tick(T0 + dt.timedelta(seconds=second))

    assert scheduler.unrecorded == 0
    dropped = [r for r in caplog.records if getattr(r, "action", "") == "run_deleted"]
    assert len(dropped) == 1
    assert f"run {run.pk} of task {task.name} ended succeeded" in dropped[0].getMessage()
    assert not [r for r in caplog.records if getattr(r, "action", "") == "outcome_held"]


def test_a_run_past_its_timeout_is_recorded_timed_out_and_retried(tasks, make_scheduler, gate):
    name, event = gate
    task = tasks(
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": name},
        timeout=30,
        retry_delay=60,
    )
    scheduler = make_scheduler(concurrency=1)
    first = scheduler.tick(T0).started[0]

    assert scheduler.tick(T0 + dt.timedelta(seconds=29)).timed_out == []
    result = scheduler.tick(T0 + dt.timedelta(seconds=31))

    assert [r.pk for r in result.timed_out] == [first.pk]
    first.refresh_from_db()
    assert first.status == RunStatus.TIMED_OUT
    assert "cannot stop Python code" in first.error
    task.refresh_from_db()
    assert task.last_run_status == RunStatus.TIMED_OUT
    assert task.retry_at == T0 + dt.timedelta(seconds=91)
    # The slot is free again although the thread still runs.
    assert scheduler.executor.free_slots() == 1

    event.set()
    finished(scheduler)
    first.refresh_from_db()
    assert first.status == RunStatus.TIMED_OUT  # the late return does not overwrite it


def test_a_run_that_returns_past_its_timeout_before_it_was_judged_is_timed_out(
    tasks, make_scheduler, gate
):
    # The process frozen (SIGSTOP) or starved past a run's timeout: the loop never got to
    # judge it, and the run, back after 54 s with a 15 s timeout, was recorded succeeded.
    name, event = gate
    tasks(
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": name},
        timeout=1,
        retry_delay=60,
    )
    scheduler = make_scheduler(concurrency=1)
    [run] = scheduler.tick(T0).started
    # No tick and no wait_idle meanwhile: nothing judges the timeout.
    wait_until(lambda: scheduler.runs.timeouts_in() == [0.0], 10, "the timeout to pass")
    event.set()
    wait_until(lambda: not scheduler.runs.pks(), 10, "the run to return")
    finished(scheduler)
    run.refresh_from_db()
    assert run.status == RunStatus.TIMED_OUT
    assert run.error.startswith("Timed out after 0:00:01: it returned ")
    assert run.task.retry_at is not None


@pytest.mark.parametrize(
    ("path", "error"),
    [
        ("tests.testapp.jobs.exit_now", "SystemExit: 3"),
        ("tests.testapp.jobs.interrupt", "KeyboardInterrupt"),
    ],
)
def test_system_exit_and_keyboard_interrupt_in_task_code_are_failures(
    tasks, make_scheduler, path, error
):
    task = tasks(callable_path=path)
    scheduler = make_scheduler()
    scheduler.tick(T0)
    finished(scheduler)

    run = Run.objects.get(task=task)
    assert run.status == RunStatus.FAILED
    assert run.error == error
    assert run.traceback.startswith("Traceback")
    # The scheduler carries on.
    assert scheduler.tick(T0 + HOUR).started


def test_errors_and_tracebacks_are_capped(tasks, make_scheduler, caplog):
    task = tasks(callable_path="tests.testapp.jobs.huge_failure")
    scheduler = make_scheduler()
    with caplog.at_level(logging.INFO, logger="django_posixcron"):
        scheduler.tick(T0)
        finished(scheduler)

    run = Run.objects.get(task=task)
    assert len(run.error) <= 64 * 1024
    assert len(run.traceback) <= 64 * 1024
    # A message of 200,000 characters ends the traceback: its frames are kept before it.
    assert run.traceback.startswith("Traceback (most recent call last):")
    assert "in huge_failure" in run.traceback
    assert "\n[... truncated ...]\n" in run.traceback
    assert run.traceback.rstrip().endswith("x")  # and its tail
    [line] = [r.getMessage() for r in caplog.records if getattr(r, "action", "") == "run_finished"]
    assert len(line) < 1000  # the log line quotes the error's start; the run keeps the rest


def test_the_outcome_write_does_not_lose_a_concurrent_pause(tasks, make_scheduler, gate):
    name, event = gate
    task = tasks(callable_path="tests.testapp.jobs.blocked", kwargs={"gate_name": name})
    scheduler = make_scheduler()
    scheduler.tick(T0)

    Task.objects.get(pk=task.pk).pause()  # the admin, while the run is running
    event.set()
    finished(scheduler)

    task.refresh_from_db()
    assert task.paused is True
    assert task.last_run_status == RunStatus.SUCCEEDED


def test_signals_and_log_lines_for_each_run(tasks, make_scheduler, caplog):
    tasks()
    seen = []

    def started(sender, run, **kwargs):
        seen.append(("started", run.status))

    def ended(sender, run, **kwargs):
        seen.append(("finished", run.status))

    run_started.connect(started)
    run_finished.connect(ended)
    try:
        scheduler = make_scheduler()
        with caplog.at_level(logging.INFO, logger="django_posixcron.scheduler"):
            scheduler.tick(T0)
            finished(scheduler)
    finally:
        run_started.disconnect(started)
        run_finished.disconnect(ended)

    assert seen == [("started", RunStatus.RUNNING), ("finished", RunStatus.SUCCEEDED)]
    lines = [r for r in caplog.records if getattr(r, "action", "").startswith("run_")]
    assert [r.action for r in lines] == ["run_started", "run_finished"]
    assert "task=record trigger=cron status=succeeded duration=" in lines[1].getMessage()


def test_a_broken_signal_receiver_does_not_stop_the_run(tasks, make_scheduler):
    tasks()

    def broken(sender, run, **kwargs):
        raise RuntimeError("receiver bug")

    run_started.connect(broken)
    try:
        scheduler = make_scheduler()
        scheduler.tick(T0)
        finished(scheduler)
    finally:
        run_started.disconnect(broken)
    assert Run.objects.get().status == RunStatus.SUCCEEDED


def test_a_slow_run_started_receiver_does_not_delay_the_run(tasks, make_scheduler):
    # "Receivers run off the loop thread": run_started too, so that a receiver that blocks
    # (a notify() over the network) neither holds the run back nor eats its timeout.
    tasks(timeout=30)
    release = threading.Event()
    seen = []

    def slow(sender, run, **kwargs):
        seen.append(run.status)
        release.wait(20)

    run_started.connect(slow)
    scheduler = make_scheduler()
    scheduler.notifier.start()
    try:
        scheduler.tick(T0)
        assert scheduler.wait_idle(timeout=10)
        assert Run.objects.get().status == RunStatus.SUCCEEDED
    finally:
        release.set()
        scheduler.notifier.stop(10)
        run_started.disconnect(slow)
    assert seen == [RunStatus.RUNNING]  # as the run was when it started


def test_old_history_is_pruned_in_batches(tasks, make_scheduler, settings):
    settings.POSIXCRON = {**settings.POSIXCRON, "HISTORY_DAYS": 30}
    task = tasks(next_run_at=T0 + HOUR)
    old = T0 - dt.timedelta(days=31)
    Run.objects.bulk_create(
        Run(
            task=task,
            trigger=Trigger.CRON,
            status=RunStatus.SUCCEEDED,
            scheduled_for=old - dt.timedelta(minutes=i),
            finished_at=old - dt.timedelta(minutes=i),
        )
        for i in range(2500)
    )
    recent = Run.objects.create(
        task=task,
        trigger=Trigger.CRON,
        status=RunStatus.SUCCEEDED,
        scheduled_for=T0 - dt.timedelta(days=29),
        finished_at=T0 - dt.timedelta(days=29),
    )
    alive = SchedulerProcess.objects.create(hostname="alive", pid=2, last_heartbeat_at=T0)
    stuck = Run.objects.create(
        task=task, trigger=Trigger.RETRY, status=RunStatus.RUNNING, scheduled_for=old, process=alive
    )
    scheduler = make_scheduler()

    scheduler.tick(T0)

    assert set(Run.objects.values_list("pk", flat=True)) == {recent.pk, stuck.pk}


def test_a_task_whose_definition_comes_to_match_is_claimed_again(tasks, make_scheduler):
    task = tasks("changed", schedule="* * * * *", next_run_at=T0)
    mine = task.definition_hash
    Task.objects.filter(pk=task.pk).update(definition_hash="another-release")
    scheduler = make_scheduler()
    assert scheduler.tick(T0).claimed == []

    # The other release rolled back and reconciled this release's definition again.
    Task.objects.filter(pk=task.pk).update(definition_hash=mine)
    assert scheduler.tick(T0 + dt.timedelta(seconds=1)).claimed == []  # still remembered
    result = scheduler.tick(T0 + 2 * MINUTE)
    finished(scheduler)
    assert [r.scheduled_for for r in result.started] == [T0]


def test_the_claimed_rows_carry_every_field_their_runs_read(
    tasks, make_scheduler, settings, gate, monkeypatch
):
    # The claim leaves a few columns of a task unread (claim.UNREAD_IN_CLAIM); reading one on
    # a run's path would cost a query per run. Record every deferred load: the test app's
    # run_finished receiver reads run.task.kwargs, which the claim does read.
    loads: list[tuple[str, list[str] | None]] = []
    original = Task.refresh_from_db

    def recording(self: Task, *args: Any, **kwargs: Any) -> None:
        loads.append((self.name, kwargs.get("fields")))
        original(self, *args, **kwargs)

    name, event = gate
    settings.POSIXCRON = {
        "TASKS": {"flaky": {"schedule": "* * * * *", "callable": "x.y", "pause_after_failures": 1}},
        "FAILING_AFTER": 1,
    }
    tasks("ok", schedule="* * * * *")
    tasks("flaky", schedule="* * * * *", callable_path="tests.testapp.jobs.fail", retry_delay=60)
    tasks(
        "held",
        schedule="* * * * *",
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": name, "task_name": "held"},
    )
    manual = tasks("manual", schedule="0 0 1 1 *")
    Task.objects.filter(pk=manual.pk).update(run_requested_at=T0, due_at=T0)
    failing: list[str] = []

    def on_failing(sender: object, task: Task, **kwargs: object) -> None:
        failing.append(task.name)

    task_failing.connect(on_failing)
    scheduler = make_scheduler(concurrency=8)  # a slot for each run, finished or not
    monkeypatch.setattr(Task, "refresh_from_db", recording)
    try:
        scheduler.tick(T0)
        scheduler.tick(T0 + MINUTE)  # "held" still runs: skipped
        event.set()
        finished(scheduler)
        scheduler.tick(T0 + 2 * MINUTE)
        finished(scheduler)
    finally:
        task_failing.disconnect(on_failing)

    statuses = set(Run.objects.values_list("task__name", "status"))
    assert {
        ("ok", RunStatus.SUCCEEDED),
        ("flaky", RunStatus.FAILED),
        ("held", RunStatus.SKIPPED),
        ("held", RunStatus.SUCCEEDED),
        ("manual", RunStatus.SUCCEEDED),
    } <= statuses
    assert Task.objects.get(name="flaky").paused
    assert failing == ["flaky"]
    assert loads == []


def test_a_runs_duration_counts_from_its_claim_not_from_its_hand_off(
    tasks, make_scheduler, monkeypatch
):
    # started_at is the claim's instant; the commit and the hand-off to a thread come after
    # it. Counted from the hand-off, a quick run's recorded finish fell before its callable
    # had even started.
    tasks("quick", callable_path="tests.testapp.jobs.noop", next_run_at=T0)
    scheduler = make_scheduler()
    claim = scheduler.claimer.claim

    def slow_commit(*args: Any, **kwargs: Any) -> Any:
        claimed = claim(*args, **kwargs)
        time.sleep(0.3)  # a commit that takes its time (a synchronous replica, say)
        return claimed

    monkeypatch.setattr(scheduler.claimer, "claim", slow_commit)
    scheduler.tick(T0)
    assert scheduler.wait_idle(10)

    run = Run.objects.get()
    assert run.status == RunStatus.SUCCEEDED
    assert run.started_at == T0
    assert run.duration is not None
    assert run.duration >= dt.timedelta(seconds=0.3)
    assert run.finished_at == run.started_at + run.duration


@pytest.mark.parametrize("now", [dt.datetime(2026, 11, 27, 6, 0), dt.date(2026, 11, 27), "now"])
def test_a_tick_at_an_instant_that_is_not_aware_is_refused_and_harms_nothing(
    tasks, make_scheduler, now
):
    # A naive instant was taken in and compared later: the tick raised from deep inside, and
    # every later tick of the same scheduler, aware ones included, raised the same error.
    tasks(name="a")
    scheduler = make_scheduler()
    with pytest.raises(TypeError, match="now must be an aware datetime"):
        scheduler.tick(now)
    with pytest.raises(TypeError, match="due_by must be an aware datetime"):
        scheduler.tick(T0, due_by=now)
    assert len(scheduler.tick(T0).started) == 1


@pytest.mark.parametrize(
    ("value", "fault"), [(0, "not positive"), (-5, "not positive"), (1e-9, "too small")]
)
def test_a_scheduler_refuses_a_poll_interval_the_setting_refuses(value, fault):
    # Taken as given: -5 made the heartbeat interval negative and logged that the heartbeat
    # "waited 5.0 s on the database".
    with pytest.raises(ValueError, match=f"poll_interval must be .*got {value!r}: {fault}"):
        Scheduler(declarations={}, poll_interval=value)


@pytest.mark.django_db  # inside a transaction, as a project's TestCase runs its tests
def test_a_scheduler_refuses_to_start_inside_a_callers_transaction():
    # As runscheduler does: task code on the executor's connections cannot see or join the
    # test's transaction (SQLite: "database is locked"; elsewhere its writes outlived the test).
    scheduler = Scheduler(declarations={})
    with pytest.raises(RuntimeError, match="a Scheduler was started inside a transaction"):
        scheduler.tick(T0)
    assert not SchedulerProcess.objects.exists()


@pytest.mark.parametrize("status", [RunStatus.LOST, None, RunStatus.RUNNING])
def test_a_run_starting_late_reads_its_row_and_does_not_start_one_ended_elsewhere(
    tasks, make_scheduler, monkeypatch, caplog, status
):
    # A scheduler frozen (SIGSTOP, a suspended VM) between its claim and the start of the
    # run's code: a peer judged it gone, marked the run lost and ran its retry; woken, it
    # started the run all the same, beside that retry (an `overlap: skip` task too), and
    # recorded it succeeded. The freeze is stood in for by holding the run's job, then
    # dating its claim a minute back.
    tasks(name="a", schedule="* * * * *")
    scheduler = make_scheduler()
    held, release = [], threading.Event()
    submit = scheduler.executor.submit

    def hold(key: int, job: Any) -> None:
        def later() -> None:
            release.wait(10)
            job()

        held.append(key)
        submit(key, later)

    monkeypatch.setattr(scheduler.executor, "submit", hold)
    (run,) = scheduler.tick(T0).started
    if status is None:
        Run.objects.filter(pk=run.pk).delete()
    else:
        Run.objects.filter(pk=run.pk).update(status=status)
    scheduler.runs.inflight[run.pk].started_monotonic -= 60
    release.set()
    assert scheduler.wait_idle(timeout=10)

    started = Hit.objects.filter(task_name="record").exists()
    assert started == (status == RunStatus.RUNNING)
    if status == RunStatus.RUNNING:  # late, but still this process's: it runs as ever
        assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
        return
    assert list(Run.objects.values_list("status", flat=True)) == ([status] if status else [])
    assert f"run {run.pk} of task a was not started: it was claimed 60 s ago" in caplog.text


def _lost_then_succeeded(
    tasks: Any, make_scheduler: Any, gate: Any, settings: Any, meanwhile: Any = None
) -> Task:
    """Run "held" (pause_after_failures = 1), have a peer mark it lost while it runs (its
    process looks dead), which pauses it, then let it return: its real outcome, a success,
    arrives late. `meanwhile(task)` acts between the verdict and the outcome."""
    name, event = gate
    settings.POSIXCRON = {
        "TASKS": {"held": {"schedule": "0 * * * *", "callable": "x.y", "pause_after_failures": 1}},
    }
    task: Task = tasks(
        "held",
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": name, "task_name": "held"},
        retry_delay=600,
        next_run_at=T0,
    )
    owner = make_scheduler()
    assert len(owner.tick(T0).started) == 1
    SchedulerProcess.objects.filter(pk=owner.process.pk).update(last_heartbeat_at=T0 - HOUR)
    assert len(make_scheduler().tick(T0 + 2 * MINUTE).lost) == 1
    task.refresh_from_db()
    assert task.paused
    assert task.paused_reason
    if meanwhile is not None:
        meanwhile(task)
    event.set()
    finished(owner)
    assert Run.objects.get(task=task).status == RunStatus.SUCCEEDED
    task.refresh_from_db()
    return task


def test_a_lost_runs_late_success_lifts_the_pause_its_verdict_made(
    tasks, make_scheduler, gate, settings, caplog
):
    # The task was paused for a failure that turned out not to be one: the run "lost" while
    # its process was frozen succeeded. Left paused, the task would never fire again.
    with caplog.at_level(logging.INFO, logger="django_posixcron.scheduler"):
        task = _lost_then_succeeded(tasks, make_scheduler, gate, settings)

    assert not task.paused
    assert task.paused_reason == ""
    assert task.retry_at is None
    assert task.consecutive_failures == 0
    assert task.due_at == T0 + HOUR
    lifted = [r for r in caplog.records if getattr(r, "action", "") == "auto_pause_lifted"]
    assert [r.levelno for r in lifted] == [logging.WARNING]
    assert "held" in lifted[0].getMessage()


@pytest.mark.parametrize("resumed_first", [True, False])
def test_a_lost_runs_late_success_leaves_a_pause_an_operator_made(
    tasks, make_scheduler, gate, settings, resumed_first
):
    def paused_again(task: Task) -> None:
        # The operator paused the task (resumed first, or over the automatic pause, which
        # becomes theirs): a pause of theirs stands.
        if resumed_first:
            assert task.resume(T0 + 3 * MINUTE)
        assert Task.objects.filter(pk=task.pk).pause(T0 + 3 * MINUTE) == 1
        assert Task.objects.get(pk=task.pk).paused_reason == ""

    task = _lost_then_succeeded(tasks, make_scheduler, gate, settings, paused_again)

    assert task.paused
    assert task.consecutive_failures == 0
