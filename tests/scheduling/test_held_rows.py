"""Rows another transaction holds: a scheduler frozen in the middle of a write (SIGSTOP, a
paused VM) keeps its row locks until it wakes up.

DESIGN 5: a stalled database is "never a crash or a silent stall". Waiting on those rows, the
lost-run check and the outcome writes of every live scheduler blocked, without a log line,
for as long as the frozen process slept.
"""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.db import connection, connections

from django_posixcron.models import Run, RunStatus
from django_posixcron.scheduler import Scheduler
from django_posixcron.scheduling import execution, shutdown
from tests.harness.locks import task_row_held
from tests.harness.tasks import T0, Tasks, running_on_a_dead_process
from tests.harness.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

HOUR = dt.timedelta(hours=1)


@pytest.fixture(autouse=True)
def _rows_can_be_skipped() -> None:
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip("SQLite locks the whole database, not rows: a write waits its turn")


def returns(call: Callable[[], Any], within: float = 20) -> Any:
    """Run `call` on a thread; fail if it has not returned `within` seconds (it waited on a
    row lock that is only let go after this)."""
    result: list[Any] = []

    def target() -> None:
        try:
            result.append(call())
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    thread.join(within)
    assert not thread.is_alive(), "it waited for the row another transaction holds"
    return result[0] if result else None


def test_the_lost_run_check_does_not_wait_for_a_frozen_processes_rows(
    tasks: Tasks, make_scheduler: Callable[..., Scheduler]
) -> None:
    task = tasks("orphan", next_run_at=T0 + HOUR)
    run = running_on_a_dead_process(task, T0 - HOUR)
    scheduler = make_scheduler()

    with task_row_held(name="orphan"):
        result = returns(lambda: scheduler.tick(T0))
        assert result.lost == []
        assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING

    # Let go: the next look marks it lost.
    assert [r.pk for r in scheduler.tick(T0 + dt.timedelta(seconds=1)).lost] == [run.pk]
    assert Run.objects.get(pk=run.pk).status == RunStatus.LOST


def test_an_outcome_whose_task_row_is_held_waits_for_the_next_flush(
    tasks: Tasks,
    make_scheduler: Callable[..., Scheduler],
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    tasks("frozen-peer-holds", next_run_at=T0)
    tasks("free", next_run_at=T0)
    scheduler = make_scheduler()
    assert len(scheduler.tick(T0).claimed) == 2
    runs = scheduler.runs
    wait_until(lambda: len(runs.outcomes) == 2 and not runs.pks(), what="both runs to return")

    with (
        caplog.at_level(logging.WARNING, logger="django_posixcron"),
        task_row_held(name="frozen-peer-holds"),
    ):
        # Held for a moment (an admin's pause, peers claiming at a minute's boundary while a
        # burst flushes every few milliseconds): kept, not said. "A moment" is shorter than
        # HELD_WARN_AFTER; pinned far above it here, since on a loaded host the thread and
        # connection between the two flushes can take longer than the real second.
        monkeypatch.setattr(execution, "HELD_WARN_AFTER", 3600.0)
        returns(runs.flush)
        returns(runs.flush)
        assert not [r for r in caplog.records if getattr(r, "action", "") == "outcome_held"]
        monkeypatch.setattr(execution, "HELD_WARN_AFTER", 0.0)  # as if held that long
        returns(runs.flush)  # still held: kept, and said
        returns(runs.flush)  # still held: kept, and said once
        statuses = dict(Run.objects.values_list("task__name", "status"))
        assert statuses == {"frozen-peer-holds": RunStatus.RUNNING, "free": RunStatus.SUCCEEDED}
        assert [o.run.task.name for o in runs.outcomes] == ["frozen-peer-holds"]

    [line] = [r for r in caplog.records if getattr(r, "action", "") == "outcome_held"]
    assert "of frozen-peer-holds" in line.getMessage()
    runs.flush()
    assert set(Run.objects.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}
    assert runs.outcomes == []


def shutting_down(scheduler: Scheduler) -> threading.Thread:
    """Start the scheduler's graceful shutdown on a thread of its own."""

    def target() -> None:
        try:
            scheduler.shutdown()
        finally:
            connections.close_all()

    thread = threading.Thread(target=target)
    thread.start()
    return thread


def test_a_shutdown_records_an_outcome_whose_row_was_held_a_moment(
    tasks: Tasks, make_scheduler: Callable[..., Scheduler], gate: Any
) -> None:
    # DESIGN 6: "a run whose callable returned is never marked lost". A peer's claim or an
    # admin's pause holding the task's row as the run returns during the grace period: the
    # shutdown waited for neither and stopped, leaving the run `running`, for the other
    # schedulers to mark lost and run again.
    name, event = gate
    tasks("held-a-moment", callable_path="tests.testapp.jobs.blocked", kwargs={"gate_name": name})
    scheduler = make_scheduler(grace=20)
    run = scheduler.tick(T0).started[0]

    with task_row_held(name="held-a-moment"):
        stopping = shutting_down(scheduler)
        event.set()
        wait_until(lambda: scheduler.runs._held_since, what="the outcome to find its row held")
    stopping.join(30)

    assert not stopping.is_alive()
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
    assert scheduler.unrecorded == 0


def test_a_shutdown_gives_up_on_a_row_held_past_the_grace_and_says_so(
    tasks: Tasks,
    make_scheduler: Callable[..., Scheduler],
    gate: Any,
    caplog: pytest.LogCaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A frozen peer may hold the row for as long as it sleeps: the exit stays bounded.
    monkeypatch.setattr(shutdown, "HELD_PAST_GRACE", 0.5)
    name, event = gate
    tasks("held-for-good", callable_path="tests.testapp.jobs.blocked", kwargs={"gate_name": name})
    scheduler = make_scheduler(grace=0.5)
    run = scheduler.tick(T0).started[0]
    event.set()
    wait_until(lambda: scheduler.unrecorded == 1, what="the run to return")

    with (
        caplog.at_level(logging.ERROR, logger="django_posixcron"),
        task_row_held(name="held-for-good"),
    ):
        stopping = shutting_down(scheduler)
        stopping.join(20)
        assert not stopping.is_alive()
        assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING

    [line] = [r for r in caplog.records if getattr(r, "action", "") == "shutdown_db_error"]
    assert "another transaction still holds their rows" in line.getMessage()
