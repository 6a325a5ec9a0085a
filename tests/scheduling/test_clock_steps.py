"""A step of the clock due-ness is judged by, while the loop runs (an NTP correction, a virtual
machine resumed): timeouts count the time a run took, and nobody is presumed dead for a step.

On SQLite that clock is this host's: the steps below move it for the whole process (the
scheduler's readings, the heartbeat's stamps), as a real step of the host's clock does. On
PostgreSQL and MariaDB the database's clock judges and the host's step changes nothing: the
same expectations hold there.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import connection
from django.dispatch import Signal
from django.utils import timezone as dj_timezone

from django_posixcron.models import Run, RunStatus, Task
from django_posixcron.scheduler import Scheduler
from django_posixcron.signals import task_overdue
from tests.factories import SchedulerProcessFactory
from tests.harness.tasks import Tasks
from tests.harness.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

REAL_NOW = dj_timezone.now


@pytest.fixture
def step_clock(monkeypatch: pytest.MonkeyPatch) -> Callable[[dt.timedelta], None]:
    """Step this host's wall clock by an offset (its monotonic clock does not move)."""
    offset = [dt.timedelta(0)]
    monkeypatch.setattr(dj_timezone, "now", lambda: REAL_NOW() + offset[0])

    def step(by: dt.timedelta) -> None:
        offset[0] += by

    return step


@pytest.fixture
def overdue() -> Iterator[list[dict[str, Any]]]:
    sent: list[dict[str, Any]] = []

    def receiver(sender: object, **kwargs: Any) -> None:
        sent.append(kwargs)

    task_overdue.connect(receiver, weak=False)
    yield sent
    Signal.disconnect(task_overdue, receiver)


def due_now(tasks: Tasks, name: str, **fields: Any) -> Task:
    """A task due a second ago by the clock in use."""
    now = dj_timezone.now()
    return tasks(name, now=now, next_run_at=now - dt.timedelta(seconds=1), **fields)


def started_behind_a_gate(
    tasks: Tasks, make_scheduler: Callable[..., Scheduler], gate_name: str, timeout: float
) -> tuple[Scheduler, Run]:
    """Return a scheduler and the run it started, blocked until the gate opens."""
    due_now(
        tasks,
        "blocked",
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": gate_name},
        timeout=timeout,
    )
    scheduler = make_scheduler()
    [run] = scheduler.tick().started
    return scheduler, run


def test_a_step_forward_does_not_time_a_run_out(tasks, make_scheduler, gate, step_clock):
    name, event = gate
    scheduler, run = started_behind_a_gate(tasks, make_scheduler, name, timeout=30)

    step_clock(dt.timedelta(hours=2))
    result = scheduler.tick()

    assert result.timed_out == []
    event.set()
    assert scheduler.wait_idle(timeout=10)
    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert run.duration is not None
    assert run.duration < dt.timedelta(seconds=30)


def test_a_step_back_does_not_put_a_timeout_off(tasks, make_scheduler, gate, step_clock):
    name, event = gate
    scheduler, run = started_behind_a_gate(tasks, make_scheduler, name, timeout=0.5)
    step_clock(-dt.timedelta(hours=1))

    # Half a second of the run's own time later, whatever the wall clock says.
    wait_until(lambda: scheduler.tick().timed_out, timeout=10, what="the run to time out")

    run.refresh_from_db()
    assert run.status == RunStatus.TIMED_OUT
    assert run.duration is not None
    assert run.duration < dt.timedelta(minutes=1)
    event.set()


def test_a_step_forward_presumes_no_live_process_dead(
    tasks, make_scheduler, step_clock, overdue, caplog
):
    now = dj_timezone.now()
    task = tasks("elsewhere", now=now, next_run_at=now + dt.timedelta(hours=1))
    # Another scheduler, alive: it beat a moment ago and runs a task.
    peer = SchedulerProcessFactory.create(started_at=now, last_heartbeat_at=now)
    elsewhere = Run.objects.create(
        task=task,
        trigger="cron",
        status=RunStatus.RUNNING,
        scheduled_for=dj_timezone.now(),
        started_at=dj_timezone.now(),
        process=peer,
    )
    # A task due in a second: due before the step, claimed at the tick after it, not
    # reported overdue by two hours.
    tasks("hourly", now=now, next_run_at=now + dt.timedelta(seconds=1))
    scheduler = make_scheduler()
    assert scheduler.tick().started == []

    step_clock(dt.timedelta(hours=2))
    with caplog.at_level(logging.WARNING, logger="django_posixcron.scheduler"):
        result = scheduler.tick()

    assert result.lost == []
    elsewhere.refresh_from_db()
    assert elsewhere.status == RunStatus.RUNNING
    assert overdue == []
    steps = [r for r in caplog.records if getattr(r, "action", None) == "clock_step"]
    if connection.vendor == "sqlite":  # the clock judged by is this host's: it stepped
        assert [r.task.name for r in result.started] == ["hourly"]
        [step] = steps
        assert step.getMessage().startswith(
            "the clock due times are judged by stepped forward by 7200.0 s"
        )
    else:  # the database's clock judges, and it did not step: nothing fires early
        assert result.started == []
        assert steps == []


def test_readings_a_moment_apart_are_no_step_and_a_jump_is_one(caplog):
    from django_posixcron.scheduling.loop import ClockSteps

    steps = ClockSteps(dt.timedelta(seconds=30))
    at = REAL_NOW()
    steps.read(at)
    steps.read(at + dt.timedelta(milliseconds=500))  # latency, not a step
    assert not steps.holding()
    with caplog.at_level(logging.WARNING, logger="django_posixcron.scheduler"):
        steps.read(at - dt.timedelta(minutes=10))  # back: nobody looks older than they are
    assert not steps.holding()
    assert "stepped back by 600" in caplog.text
    steps.read(at + dt.timedelta(minutes=50))
    assert steps.holding()


def test_a_reading_that_waited_is_no_step():
    from django_posixcron.scheduling.loop import ClockSteps

    steps = ClockSteps(dt.timedelta(seconds=30))
    at = REAL_NOW()
    steps.read(at, took=0.001)
    # Read by a statement that waited 5 s on a lock: its reading is 5 s older than its
    # arrival, and the next one, quick, looks 5 s ahead of it. Neither is a step.
    steps.read(at - dt.timedelta(seconds=5), took=5.0)
    steps.read(at, took=0.001)
    assert not steps.holding()


def test_a_clock_stepped_back_does_not_put_the_overdue_look_off():
    from django_posixcron.scheduling.alerts import OverdueWatch

    watch = OverdueWatch(poll_interval=10)
    at = REAL_NOW()
    assert watch.threshold(at) is not None
    assert watch.threshold(at + dt.timedelta(seconds=5)) is None  # within the poll interval
    back = at - dt.timedelta(hours=1)
    assert watch.threshold(back) == back - dt.timedelta(seconds=10)
