"""Exactly-once inside one process: locks, the compare-and-set and the unique constraint."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from typing import Any

import pytest
from django.db import OperationalError, connection, connections, transaction

from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task, Trigger
from django_posixcron.reconcile import reconcile
from django_posixcron.scheduler import Scheduler
from tests.harness.locks import task_row_held
from tests.harness.tasks import T0
from tests.testapp.models import Hit

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = dt.timedelta(hours=1)
MINUTE = dt.timedelta(minutes=1)


def test_two_schedulers_ticking_at_the_same_instant_fire_once(tasks, make_scheduler):
    task = tasks(next_run_at=T0)
    first, second = make_scheduler(), make_scheduler()

    claimed = first.tick(T0).claimed + second.tick(T0).claimed
    assert first.wait_idle(10)
    assert second.wait_idle(10)

    assert len(claimed) == 1
    assert Run.objects.filter(task=task).count() == 1
    assert Hit.objects.count() == 1


def test_an_occurrence_already_recorded_is_not_fired_again(tasks, make_scheduler, caplog):
    task = tasks(next_run_at=T0)
    # As if another process fired it and this row's cursor had not moved (a stale read).
    Run.objects.create(
        task=task, trigger=Trigger.CRON, status=RunStatus.SUCCEEDED, scheduled_for=T0
    )
    scheduler = make_scheduler()

    with caplog.at_level(logging.INFO, logger="django_posixcron.scheduler"):
        result = scheduler.tick(T0)

    assert result.claimed == []
    assert Run.objects.count() == 1
    assert "already_fired" in [getattr(r, "action", "") for r in caplog.records]
    task.refresh_from_db()
    assert task.next_run_at == T0 + HOUR  # the cursor still moved on


def test_an_occurrence_already_recorded_leaves_the_retry_and_the_request_it_did_not_serve(
    tasks, make_scheduler
):
    # The 10:00 run failed (its retry at 10:05), a run was requested at 10:00:35, and a deploy
    # set the cursor back to 10:00: the current minute matches its changed schedule. The
    # claim's run conflicts with the 10:00 run: nothing ran, so nothing was served.
    failed_at = T0 + dt.timedelta(seconds=2)
    task = tasks(
        next_run_at=T0,
        retry_at=T0 + 5 * MINUTE,
        retry_occurrence=T0,
        retry_attempt=1,
        run_requested_at=T0 + dt.timedelta(seconds=35),
        last_run_started_at=T0,
        last_run_finished_at=failed_at,
        last_run_status=RunStatus.FAILED,
    )
    Run.objects.create(task=task, trigger=Trigger.CRON, status=RunStatus.FAILED, scheduled_for=T0)
    scheduler = make_scheduler()

    assert scheduler.tick(T0 + dt.timedelta(seconds=40)).claimed == []

    task.refresh_from_db()
    assert task.next_run_at == T0 + HOUR
    assert task.retry_at == T0 + 5 * MINUTE
    assert task.run_requested_at == T0 + dt.timedelta(seconds=35)
    assert task.due_at == T0 + dt.timedelta(seconds=35)
    # No run started: the task does not read as running.
    assert task.last_run_started_at == T0
    assert not task.is_running
    # The request fires at the next tick, and the run answers the retry too (one run).
    manual = scheduler.tick(T0 + dt.timedelta(seconds=41)).claimed
    assert scheduler.wait_idle(10)
    assert [(run.trigger, run.attempt) for run in manual] == [(Trigger.MANUAL, 1)]


def test_an_occurrence_missed_after_a_rearmed_minute_that_had_fired_still_fires_once(
    tasks, make_scheduler, caplog
):
    # A daily 09:00 fired at 09:00; at 09:00:30 a deploy changed its zone (UTC to London, the
    # same offset in January), and the cursor went back to 09:00, the current minute. The
    # scheduler stopped, and the first tick after it came the next day at 09:10: its run
    # conflicted with the 09:00 run and the cursor moved past 09:10, so the next day's
    # 09:00 never fired (no run, no skip), where "after downtime a task fires once".
    daily = T0.replace(hour=9)
    task = tasks(schedule="0 9 * * *", timezone="Europe/London", next_run_at=daily)
    Run.objects.create(
        task=task, trigger=Trigger.CRON, status=RunStatus.SUCCEEDED, scheduled_for=daily
    )
    scheduler = make_scheduler()
    later = daily + dt.timedelta(days=1, minutes=10)

    with caplog.at_level(logging.INFO, logger="django_posixcron.scheduler"):
        first = scheduler.tick(later)
        second = scheduler.tick(later + dt.timedelta(seconds=1))
    assert scheduler.wait_idle(10)

    fired = first.claimed + second.claimed
    assert [(run.trigger, run.scheduled_for) for run in fired] == [
        (Trigger.CRON, daily + dt.timedelta(days=1))
    ]
    assert "already_fired" in [getattr(r, "action", "") for r in caplog.records]
    task.refresh_from_db()
    assert task.next_run_at == daily + dt.timedelta(days=2)  # then its schedule, once
    assert Hit.objects.count() == 1


def test_an_occurrence_already_recorded_leaves_the_retry_of_its_failure(tasks, make_scheduler):
    task = tasks(next_run_at=T0, retry_at=T0 + 5 * MINUTE, retry_occurrence=T0, retry_attempt=1)
    Run.objects.create(task=task, trigger=Trigger.CRON, status=RunStatus.FAILED, scheduled_for=T0)
    scheduler = make_scheduler()

    assert scheduler.tick(T0 + dt.timedelta(seconds=40)).claimed == []
    retry = scheduler.tick(T0 + 6 * MINUTE).claimed
    assert scheduler.wait_idle(10)

    assert [(run.trigger, run.scheduled_for, run.occurrence, run.attempt) for run in retry] == [
        (Trigger.RETRY, T0 + 5 * MINUTE, T0, 2)
    ]


@pytest.mark.parametrize("trigger", [Trigger.RETRY, Trigger.MANUAL])
def test_a_retry_or_request_already_recorded_stays_consumed(tasks, make_scheduler, trigger):
    # The refused run stood for that retry or request: given back, the task would be claimed
    # and refused again at every tick.
    at = T0 + 5 * MINUTE
    if trigger == Trigger.RETRY:
        pending = {"retry_at": at, "retry_occurrence": T0, "retry_attempt": 1}
    else:
        pending = {"run_requested_at": at}
    task = tasks(next_run_at=T0 + HOUR, **pending)
    Run.objects.create(task=task, trigger=trigger, status=RunStatus.FAILED, scheduled_for=at)
    scheduler = make_scheduler()

    assert scheduler.tick(at + MINUTE).claimed == []

    task.refresh_from_db()
    assert (task.retry_at, task.run_requested_at, task.due_at) == (None, None, T0 + HOUR)
    assert scheduler.tick(at + 2 * MINUTE).claimed == []


def test_a_deploy_in_the_minute_its_task_failed_keeps_the_retry(posixcron, make_scheduler):
    """A changed zone sets the cursor back to the current minute, which already fired."""
    posixcron({"z": {"schedule": "0 * * * *", "callable": "tests.testapp.jobs.fail"}})
    first = make_scheduler(declarations=reconcile(now=T0 - MINUTE).declarations)
    assert len(first.tick(T0).claimed) == 1
    assert first.wait_idle(10)
    failed = Task.objects.get(name="z")
    assert failed.retry_at is not None

    zone = {"timezone": "Europe/London"}
    posixcron({"z": {"schedule": "0 * * * *", "callable": "tests.testapp.jobs.fail", **zone}})
    plan = reconcile(now=T0 + dt.timedelta(seconds=30))
    assert Task.objects.get(name="z").next_run_at == T0  # the current minute matches
    second = make_scheduler(declarations=plan.declarations)
    assert second.tick(T0 + dt.timedelta(seconds=40)).claimed == []
    retried = second.tick(failed.retry_at + dt.timedelta(seconds=1)).claimed
    assert second.wait_idle(10)

    assert [(run.trigger, run.attempt) for run in retried] == [(Trigger.RETRY, 2)]


def test_in_a_batch_only_the_occurrence_already_recorded_is_left_out(tasks, make_scheduler):
    first, fired, last = (tasks(name, next_run_at=T0) for name in ("first", "fired", "last"))
    Run.objects.create(
        task=fired, trigger=Trigger.CRON, status=RunStatus.SUCCEEDED, scheduled_for=T0
    )
    scheduler = make_scheduler()

    result = scheduler.tick(T0)
    assert scheduler.wait_idle(10)

    assert sorted(run.task_id for run in result.claimed) == sorted([first.pk, last.pk])
    assert all(run.pk is not None for run in result.claimed)
    assert Run.objects.filter(task=fired).count() == 1
    assert set(
        Run.objects.filter(pk__in=[r.pk for r in result.claimed]).values_list("status", flat=True)
    ) == {RunStatus.SUCCEEDED}
    assert Hit.objects.count() == 2


def test_the_compare_and_set_refuses_a_stale_claim(tasks, make_scheduler):
    task = tasks(next_run_at=T0)
    scheduler = make_scheduler()
    scheduler.start()
    stale = Task.objects.get(pk=task.pk)
    # Another scheduler moved the cursor after this one read the row (SQLite has no row locks).
    Task.objects.filter(pk=task.pk).update(next_run_at=T0 + HOUR, due_at=T0 + HOUR)

    declaration = scheduler.declarations[task.name]
    changes, run = scheduler.claimer.plan(
        stale, declaration, T0, scheduler.process, overlapping=False
    )
    with transaction.atomic():
        written = scheduler.claimer.write_compare_and_set([(stale, declaration, changes, run)])

    assert written == []
    assert not Run.objects.exists()


def test_a_row_locked_by_another_scheduler_is_skipped_not_waited_for(tasks, make_scheduler):
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip("SQLite has no row locks; the compare-and-set covers it")
    task = tasks(next_run_at=T0)
    scheduler = make_scheduler()
    scheduler.start()
    with task_row_held(pk=task.pk):
        assert scheduler.tick(T0).claimed == []
    assert len(scheduler.tick(T0).claimed) == 1


def test_first_start_after_reconcile(posixcron, make_scheduler):
    now = dt.datetime(2086, 1, 7, 3, 15, 40, tzinfo=dt.UTC)
    posixcron(
        {
            "now": {"schedule": "15 3 * * *", "callable": "tests.testapp.jobs.record"},
            "later": {"schedule": "16 3 * * *", "callable": "tests.testapp.jobs.record"},
        }
    )
    plan = reconcile(now=now)
    scheduler = make_scheduler(declarations=plan.declarations)

    result = scheduler.tick(now)

    assert [(r.task.name, r.scheduled_for) for r in result.started] == [
        ("now", now.replace(second=0))
    ]
    assert Task.objects.get(name="later").next_run_at == now.replace(minute=16, second=0)


@pytest.mark.slow
def test_schedulers_racing_on_their_own_connections_fire_each_occurrence_once(
    tasks, make_scheduler
):
    """Several schedulers claim the same due tasks at the same instant, for real.

    Each scheduler ticks on a thread (and so a connection) of its own, released together by
    a barrier, for several occurrences in a row. Whatever interleaving the database allows
    (SKIP LOCKED, a blocked FOR UPDATE, the compare-and-set, a unique-constraint conflict
    read as "already fired"), each occurrence runs its callable once and no tick fails.
    """
    racers, rounds, count = 4, 5, 20
    for index in range(count):
        tasks(f"t{index}", schedule="* * * * *", kwargs={"label": f"t{index}"}, next_run_at=T0)
    schedulers = [make_scheduler(batch_size=count, concurrency=count) for _ in range(racers)]
    barrier = threading.Barrier(racers, timeout=30)
    errors: list[BaseException] = []
    claimed: list[int] = []
    lock = threading.Lock()

    def race(scheduler: Scheduler) -> None:
        try:
            scheduler.start()
            for minute in range(rounds):
                barrier.wait()
                result = scheduler.tick(T0 + minute * MINUTE)
                assert scheduler.wait_idle(30)
                with lock:
                    claimed.extend(run.pk for run in result.claimed)
                barrier.wait()  # every racer done with this occurrence before the next
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            connections.close_all()

    threads = [threading.Thread(target=race, args=(s,)) for s in schedulers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    assert not errors, errors

    assert len(claimed) == len(set(claimed)) == count * rounds
    runs = Run.objects.values_list("task__name", "scheduled_for")
    assert sorted(runs) == sorted(
        (f"t{index}", T0 + minute * MINUTE) for index in range(count) for minute in range(rounds)
    )
    assert Run.objects.exclude(status=RunStatus.SUCCEEDED).count() == 0
    hits = list(Hit.objects.values_list("label", flat=True))
    assert sorted(hits) == sorted(f"t{index}" for index in range(count) for _ in range(rounds))


def test_a_row_edited_by_hand_does_not_stop_the_batch(tasks, make_scheduler):
    # The schedule rewritten in a database shell, the hash left as it was, while schedulers
    # run: the claim moves the cursor by the declaration the hash stands for.
    edited, other = (
        tasks(name, schedule="* * * * *", next_run_at=T0) for name in ("edited", "other")
    )
    Task.objects.filter(pk=edited.pk).update(schedule="*/5 * * * *", timezone="Mars/Olympus")
    scheduler = make_scheduler()

    claimed = scheduler.tick(T0).claimed
    assert scheduler.wait_idle(10)

    assert sorted(run.task.name for run in claimed) == ["edited", "other"]
    for task in (edited, other):
        task.refresh_from_db()
        assert task.next_run_at == T0 + MINUTE, task.name


def _committed_without_a_reply(
    tasks: Any, make_scheduler: Any, lose_the_commits_reply: Any
) -> tuple[Task, Any]:
    """A minutely task claimed at T0 by a started scheduler whose claim committed and lost
    its reply: the tick raised, its run is committed `running`."""
    task = tasks(next_run_at=T0, schedule="* * * * *")
    scheduler = make_scheduler()
    scheduler.start()
    lose_the_commits_reply(committed=True)
    with pytest.raises(OperationalError):
        scheduler.tick(T0)
    return task, scheduler


def test_a_claim_that_committed_before_its_reply_was_lost_starts_its_runs(
    tasks, make_scheduler, lose_the_commits_reply, caplog
):
    # The runs were committed `running` on this live process: nobody marks them lost, and
    # with overlap "skip" every later occurrence was skipped for them.
    task, scheduler = _committed_without_a_reply(tasks, make_scheduler, lose_the_commits_reply)
    assert list(Run.objects.values_list("status", flat=True)) == [RunStatus.RUNNING]

    with caplog.at_level(logging.WARNING, logger="django_posixcron.scheduler"):
        late = scheduler.tick(T0 + dt.timedelta(seconds=5))
    assert scheduler.wait_idle(10)

    assert [(run.task_id, run.scheduled_for) for run in late.started] == [(task.pk, T0)]
    assert list(Run.objects.values_list("status", flat=True)) == [RunStatus.SUCCEEDED]
    # Its history says when it really started: fire lag and retry count from then.
    assert Run.objects.get().started_at == T0 + dt.timedelta(seconds=5)
    # And this process beat as it started it: no peer takes it for gone meanwhile.
    beat = SchedulerProcess.objects.get(pk=scheduler.process.pk).last_heartbeat_at
    assert beat >= T0 + dt.timedelta(seconds=5)
    assert Hit.objects.count() == 1
    assert [r.getMessage() for r in caplog.records if r.action == "claim_commit_lost"] == [
        "the connection was lost while a claim of 1 run(s) was committing; it had committed: "
        "1 run(s) start now, late"
    ]
    # The next occurrence runs, not skipped for a run that never started.
    assert len(scheduler.tick(T0 + MINUTE).started) == 1
    assert scheduler.wait_idle(10)
    assert Hit.objects.count() == 2


def test_a_stop_before_the_database_answers_again_records_the_committed_runs_interrupted(
    tasks, make_scheduler, lose_the_commits_reply, caplog
):
    # The process stopped (SIGTERM, or the end of --once) right after the lost reply: its
    # committed runs stayed `running` until the others marked them lost ("its outcome is
    # unknown") although their code never started, and the next occurrence took the retry.
    task, scheduler = _committed_without_a_reply(tasks, make_scheduler, lose_the_commits_reply)

    with caplog.at_level(logging.WARNING, logger="django_posixcron.scheduler"):
        scheduler.shutdown()

    run = Run.objects.get()
    assert run.status == RunStatus.INTERRUPTED
    assert run.error.startswith("never started: the connection was lost while its claim")
    assert Hit.objects.count() == 0  # and it did not start at the stop
    task.refresh_from_db()
    assert task.retry_at is not None  # its retry rule applies, as for any interrupted run
    assert task.retry_occurrence == T0
    assert scheduler.claimer.unsure == []
    assert SchedulerProcess.objects.get(pk=scheduler.process.pk).stopped_at is not None
    # Its code never ran: no duration, and no fire lag or duration for the metrics.
    assert run.duration is None
    assert (task.last_duration, task.last_fire_lag) == (None, None)
    assert task.last_run_status == RunStatus.INTERRUPTED
    assert "1 run(s) are settled (this process is stopping" in " ".join(
        r.getMessage() for r in caplog.records if r.action == "claim_commit_lost"
    )


def test_a_refused_look_up_of_the_lost_claim_does_not_hold_the_rest_of_the_stop(
    tasks, make_scheduler, lose_the_commits_reply, monkeypatch, caplog
):
    # The stop's other records (the outcomes, the process stopped) went with it: the others
    # then waited for a stale heartbeat although the database answered.
    from django.db import ProgrammingError

    from django_posixcron.scheduling.claim import Claimer

    _task, scheduler = _committed_without_a_reply(tasks, make_scheduler, lose_the_commits_reply)

    def refused(self, *args, **kwargs):
        raise ProgrammingError("permission denied for table django_posixcron_run")

    monkeypatch.setattr(Claimer, "committed_runs", refused)
    with caplog.at_level(logging.ERROR, logger="django_posixcron.scheduler"):
        scheduler.shutdown()

    assert SchedulerProcess.objects.get(pk=scheduler.process.pk).stopped_at is not None
    lines = [r.getMessage() for r in caplog.records if r.action == "claim_commit_lost"]
    assert len(lines) == 1
    assert "a claim of 1 run(s) lost its commit's reply and could not be looked up" in lines[0]


def test_a_claim_that_did_not_commit_before_its_reply_was_lost_claims_again(
    tasks, make_scheduler, lose_the_commits_reply
):
    tasks(next_run_at=T0)
    scheduler = make_scheduler()
    scheduler.start()
    lose_the_commits_reply(committed=False)
    with pytest.raises(OperationalError):
        scheduler.tick(T0)
    assert not Run.objects.exists()

    again = scheduler.tick(T0 + dt.timedelta(seconds=5))
    assert scheduler.wait_idle(10)

    assert [run.scheduled_for for run in again.started] == [T0]
    assert Run.objects.get().status == RunStatus.SUCCEEDED
    assert Hit.objects.count() == 1


def test_a_claim_turned_away_for_a_lock_is_not_taken_for_a_lost_commit(
    tasks, make_scheduler, lose_the_commits_reply, caplog
):
    # The database answered (a lock not granted in time, a deadlock) and rolled back: no
    # look-up at the next tick, no "connection lost while a claim committed" warning.
    from django_posixcron.db import LockNotGranted

    tasks(next_run_at=T0)
    scheduler = make_scheduler()
    scheduler.start()
    lose_the_commits_reply(committed=False, error=LockNotGranted("lock timeout"))
    with pytest.raises(OperationalError):
        scheduler.tick(T0)
    assert scheduler.claimer.unsure == []

    with caplog.at_level(logging.WARNING, logger="django_posixcron.scheduler"):
        again = scheduler.tick(T0 + dt.timedelta(seconds=5))
    assert scheduler.wait_idle(10)
    assert [run.scheduled_for for run in again.started] == [T0]
    assert not [r for r in caplog.records if getattr(r, "action", "") == "claim_commit_lost"]


def test_a_skip_of_a_claim_whose_commit_lost_its_reply_is_logged_and_signalled(
    tasks, make_scheduler, lose_the_commits_reply, caplog
):
    # The occurrence skipped for a run still going (overlap "skip") was committed, and never
    # said: no "run finished ... skipped" line, no run_finished.
    task = tasks(next_run_at=T0, overlap="skip")
    scheduler = make_scheduler()
    scheduler.start()
    Run.objects.create(
        task=task,
        trigger=Trigger.MANUAL,
        status=RunStatus.RUNNING,
        scheduled_for=T0 - MINUTE,
        started_at=T0 - MINUTE,
        process=scheduler.process,
    )
    lose_the_commits_reply(committed=True)
    with pytest.raises(OperationalError):
        scheduler.tick(T0)

    with caplog.at_level(logging.INFO, logger="django_posixcron.scheduler"):
        result = scheduler.tick(T0 + dt.timedelta(seconds=5))

    assert [(run.trigger, run.status) for run in result.skipped] == [
        (Trigger.CRON, RunStatus.SKIPPED)
    ]
    assert result.started == []
    finished = [r.getMessage() for r in caplog.records if "status=skipped" in r.getMessage()]
    assert len(finished) == 1
