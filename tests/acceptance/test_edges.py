"""Sharper edges: stable definitions across restarts, concurrent ticks, retention, status."""

from __future__ import annotations

import datetime as dt
import io
import threading
import time
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection

from django_posixcron.models import Run, SchedulerProcess, Task
from django_posixcron.scheduler import Scheduler
from tests.harness.world import HOUR, MINUTE, T0, hits, record, runs, task
from tests.testapp.jobs import GATES

pytestmark = pytest.mark.django_db(transaction=True)


def check() -> int:
    try:
        call_command("runscheduler", "--check", stdout=io.StringIO(), stderr=io.StringIO())
    except CommandError as error:
        return error.returncode
    return 0


def test_a_rich_definition_is_unchanged_after_a_restart_on_every_backend(world):
    world.settings(
        {
            "rich": record(
                "rich",
                "0 3 1,15 * 1",
                kwargs={
                    "label": "Grüße ✓",
                    "task_name": "rich",
                },
                timezone="America/Sao_Paulo",
                retry_delay=dt.timedelta(minutes=7, microseconds=5),
                timeout=2.5,
                overlap="allow",
                description="Ünïcode — and 'quotes' \"too\"",
            ),
            "nested": {
                "schedule": "0 4 * * *",
                "callable": "tests.testapp.jobs.takes_anything",
                "kwargs": {
                    "z": [1, 2.5, None, True, {"b": 2**60, "a": -0.1}],
                    "a": (1, 2),
                    "empty": {},
                },
            },
        }
    )
    world.start(T0)
    before = {t.name: (t.definition_hash, t.next_run_at) for t in Task.objects.all()}
    assert check() == 0
    world.start(T0 + 2 * HOUR)
    after = {t.name: (t.definition_hash, t.next_run_at) for t in Task.objects.all()}
    assert after == before


def test_pause_and_retirement_are_not_drift_for_check(world):
    world.settings({"a": record("a", "0 * * * *"), "b": record("b", "0 * * * *")})
    world.start(T0)
    task("a").pause()
    world.settings({"a": record("a", "0 * * * *")})
    world.start(T0 + MINUTE)
    assert check() == 0


def tick_concurrently(world: Any, count: int = 3) -> list[BaseException]:
    """Tick `count` schedulers at once in threads (own connections); return tick errors.

    A tick that fails with OperationalError is retried, as the loop's back-off does.
    """
    schedulers = [Scheduler(grace=5, batch_size=7) for _ in range(count)]
    world.schedulers.extend(schedulers)
    for scheduler in schedulers:
        scheduler.start()
    barrier = threading.Barrier(count)
    errors: list[BaseException] = []

    def work(scheduler: Scheduler) -> None:
        try:
            barrier.wait(timeout=10)
            instant = T0 + 5 * dt.timedelta(seconds=1)
            # Until nothing is due at the instant: a tick claims nothing while its slots are
            # busy with the runs it started, however many ticks that takes on a slow machine.
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline:
                try:
                    result = scheduler.tick(instant)
                except OperationalError as error:
                    errors.append(error)
                    continue
                if result.next_due_at is None or result.next_due_at > instant:
                    break
                if not result.claimed:
                    scheduler.wait_idle(timeout=1)  # a slot frees when a run returns
            for _ in range(3):
                try:
                    assert scheduler.wait_idle(timeout=15)
                    break
                except OperationalError as error:
                    errors.append(error)
        finally:
            connection.close()

    threads = [threading.Thread(target=work, args=(s,)) for s in schedulers]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    return errors


def test_concurrent_schedulers_fire_each_occurrence_once(world):
    names = [f"job-{i:02d}" for i in range(25)]
    world.settings({name: record(name, "0 * * * *") for name in names})
    world.start(T0 - MINUTE)
    tick_concurrently(world)
    assert Run.objects.count() == len(names)
    assert sorted(set(Run.objects.values_list("task__name", flat=True))) == names
    assert all(hits(name) == 1 for name in names)
    assert all(task(name).next_run_at == T0 + HOUR for name in names)
    assert set(Run.objects.values_list("status", flat=True)) == {"succeeded"}


def test_concurrent_schedulers_do_not_deadlock(world):
    names = [f"job-{i:02d}" for i in range(25)]
    world.settings({name: record(name, "0 * * * *") for name in names})
    world.start(T0 - MINUTE)
    assert tick_concurrently(world) == []


def test_old_history_is_pruned_and_the_task_stays(world):
    world.settings({"daily": record("daily", "0 10 * * *")}, HISTORY_DAYS=30)
    world.start(T0)
    world.tick(T0)
    assert len(runs("daily")) == 1
    later = T0 + dt.timedelta(days=31)
    world.start(later)
    world.tick(later)
    # Pruning waits for a tick with nothing due within moments: claims come first.
    assert len(runs("daily")) == 2
    world.tick(later + dt.timedelta(seconds=1))
    # The 31-day-old run is gone; the run for the gap (recorded under the first missed
    # occurrence, 2086-01-08) is kept.
    assert runs("daily") == [("cron", "succeeded", T0 + dt.timedelta(days=1))]
    assert task("daily").declared is True


def test_a_retired_task_ignores_a_manual_request(world):
    world.settings({"a": record("a", "0 0 1 1 *")})
    world.start(T0)
    world.settings({})
    world.start(T0 + MINUTE)
    task("a").request_run(T0 + MINUTE)
    world.tick(T0 + 2 * MINUTE)
    assert hits("a") == 0


def status(*args: str) -> int:
    try:
        call_command("schedulerstatus", *args, stdout=io.StringIO(), stderr=io.StringIO())
    except CommandError as error:
        return error.returncode
    return 0


def test_status_reports_overdue_tasks_but_not_paused_ones(world):
    world.settings({"late": record("late", "0 0 1 1 *")}, POLL_INTERVAL=10)
    world.start(T0)
    live = Scheduler(grace=1)
    world.schedulers.append(live)
    live.start()
    assert status() == 0
    # Due an hour ago and not fired: overdue.
    hour_ago = live.now() - HOUR
    Task.objects.filter(name="late").update(
        next_run_at=hour_ago, due_at=hour_ago, updated_at=hour_ago
    )
    assert status() == 1
    assert status("--ignore-overdue") == 0
    task("late").pause()
    assert status() == 0


def test_a_deleted_process_row_does_not_turn_its_running_runs_lost(world):
    # Someone deletes the live scheduler's row (a cleanup script; the admin refuses it):
    # its running run loses its owner. The scheduler registers again and takes the run back,
    # so neither it nor another scheduler marks it lost and retries it while it runs.
    GATES["held"] = threading.Event()
    world.settings(
        {
            "held": {
                **record("held", "0 * * * *"),
                "callable": "tests.testapp.jobs.wait_for_gate",
            }
        }
    )
    world.start(T0)
    world.tick(T0, wait=False)
    assert runs("held") == [("cron", "running", T0)]
    SchedulerProcess.objects.all().delete()
    assert Run.objects.get().process_id is None

    later = T0 + 10 * MINUTE
    world.tick(later, wait=False)
    other = Scheduler(grace=1)
    world.schedulers.append(other)
    other.start()
    assert other.tick(later).lost == []

    GATES["held"].set()
    assert world.scheduler is not None
    assert world.scheduler.wait_idle(timeout=15)
    assert runs("held") == [("cron", "succeeded", T0)]
    assert world.scheduler.process is not None
    assert Run.objects.get().process_id == world.scheduler.process.pk
    assert task("held").retry_at is None


def live_with_a_task_a_peer_retired(world: Any) -> Scheduler:
    """A registered, reconciled scheduler declaring "old" and "new", and "new" retired by a
    peer of another deploy that judged this process gone."""
    world.settings({"old": record("old", "0 * * * *"), "new": record("new", "0 * * * *")})
    live = Scheduler(grace=1)
    world.schedulers.append(live)
    live.start()
    live.reconcile()  # as runscheduler does once registered
    Task.objects.filter(name="new").update(declared=False)  # the peer's doing
    return live


def silence_reconciles(caplog: pytest.LogCaptureFixture) -> int:
    return sum(getattr(r, "action", "") == "silence_reconcile" for r in caplog.records)


def test_a_process_back_from_a_silence_past_the_stale_limit_reconciles_again(world, caplog):
    # While this process was stopped (SIGSTOP, a frozen VM, cut off from the database),
    # a peer of another deploy judged it gone and retired the task only it declares. Back,
    # it must restore it: "a task that any live scheduler declares never stops firing".
    live = live_with_a_task_a_peer_retired(world)
    live.tick()
    assert not task("new").declared  # nothing says it happened: not reconciled again

    assert live.heartbeat is not None
    live.heartbeat._last_beat = time.monotonic() - 2 * live.stale_after.total_seconds()
    live.tick()

    assert task("new").declared
    assert silence_reconciles(caplog) == 1
    live.tick()
    assert silence_reconciles(caplog) == 1


def test_a_process_silent_since_it_registered_reconciles_again_when_back(
    world, caplog, monkeypatch
):
    # The database stopped answering within the first poll interval, before the heartbeat's
    # first beat: the silence was not counted (registering was not a beat), so the task a
    # peer of another deploy retired meanwhile stayed retired while this process declared it.
    live = live_with_a_task_a_peer_retired(world)

    real = time.monotonic
    silent = 2 * live.stale_after.total_seconds()
    monkeypatch.setattr(time, "monotonic", lambda: real() + silent)
    live.tick()  # its first beat, a long silence after registering

    assert task("new").declared
    assert silence_reconciles(caplog) == 1
