"""A database that stops answering is logged while it lasts, not waited on in silence."""

from __future__ import annotations

import logging
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from django.db import connection, transaction

from django_posixcron.models import SchedulerProcess, Task
from django_posixcron.scheduler import Scheduler
from django_posixcron.scheduling.watchdog import Watchdog
from tests.harness.locks import held_elsewhere
from tests.harness.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def records(caplog: pytest.LogCaptureFixture, action: str) -> list[logging.LogRecord]:
    return [r for r in caplog.records if getattr(r, "action", "") == action]


def parts(caplog: pytest.LogCaptureFixture, action: str) -> list[str]:
    """The parts ("loop", "heartbeat") the records of `action` name."""
    return [getattr(r, "part", "") for r in records(caplog, action)]


def test_a_wait_past_the_limit_is_logged_once_and_so_is_its_end(caplog):
    caplog.set_level(logging.INFO, logger="django_posixcron")
    watchdog = Watchdog(limit=0.0)
    with watchdog.watching("heartbeat"):
        assert watchdog.check() == ["heartbeat"]
        assert watchdog.check() == []  # once per wait
    assert parts(caplog, "db_stalled") == ["heartbeat"]
    assert (
        records(caplog, "db_stalled")[0]
        .getMessage()
        .startswith("the heartbeat has waited 0 s on the database and is still waiting: ")
    )
    [ended] = records(caplog, "db_stall_ended")
    assert ended.getMessage().startswith("the heartbeat's wait on the database ended after ")
    # A wait within the limit says nothing.
    caplog.clear()
    patient = Watchdog(limit=60.0)
    with patient.watching("loop"):
        assert patient.check() == []
    assert caplog.records == []


def test_a_process_that_did_not_run_is_not_blamed_on_the_database(caplog):
    # Task code holding the interpreter lock for a minute (a regular expression in C) woke
    # every thread at once: the heartbeat, caught inside its statement, was reported as a
    # database that stopped answering.
    caplog.set_level(logging.INFO, logger="django_posixcron")
    watchdog = Watchdog(limit=30.0)
    with watchdog.watching("heartbeat"):
        assert watchdog.overslept(4.0) is False  # a busy host, not yet a stopped process
        assert watchdog.overslept(40.0) is True
        # The wait is timed again from the moment the process runs again.
        assert watchdog.waited("heartbeat") < 1.0
        assert watchdog.check() == []
    [starved] = records(caplog, "process_starved")
    assert starved.levelno == logging.WARNING
    assert starved.getMessage().startswith(
        "this process did not run for 40 s: task code holding the interpreter lock"
    )
    assert "--executor process" in starved.getMessage()
    assert records(caplog, "db_stalled") == []
    assert records(caplog, "db_stall_ended") == []


def test_a_statement_that_waited_on_a_stopped_process_is_not_blamed_on_the_database(caplog):
    # After a SIGSTOP the heartbeat's statement had "waited 21 s on the database", beside
    # the watchdog's own line saying that the process did not run.
    import datetime as dt
    import time

    from django_posixcron.scheduling.loop import Outage

    caplog.set_level(logging.INFO, logger="django_posixcron")
    watchdog = Watchdog(limit=30.0)
    assert watchdog.starved_within(60.0) is False  # not started: nothing seen
    watchdog.woke_at = time.monotonic()
    assert watchdog.starved_within(60.0) is False
    watchdog.woke_at = time.monotonic() - 20.0  # the thread has not run since
    assert watchdog.starved_within(60.0) is True
    watchdog.woke_at = time.monotonic()
    watchdog.starved_at = time.monotonic() - 10.0  # found on waking, 10 s ago
    assert watchdog.starved_within(21.0) is True
    assert watchdog.starved_within(2.0) is False

    for starved, wording in ((False, "on the database"), (True, "did not run for part of it")):
        caplog.clear()
        outage = Outage(dt.timedelta(seconds=30), stall=5.0)
        outage.starved = (lambda seconds: True) if starved else (lambda seconds: False)
        assert outage.stalled(21.0, "the heartbeat") is True
        [held] = records(caplog, "judging_held")
        assert held.getMessage().startswith("the heartbeat waited 21.0 s ")
        assert wording in held.getMessage()


def test_a_wait_on_a_tasks_backend_is_named_as_such(caplog):
    # A broker that accepts the connection and never answers stalls the loop in the enqueue
    # after commit: the line names it, not the database, and the heartbeat goes on.
    caplog.set_level(logging.INFO, logger="django_posixcron")
    watchdog = Watchdog(limit=0.0)
    with watchdog.watching("loop"), watchdog.waiting_on("loop", "a Tasks backend's enqueue"):
        assert watchdog.check() == ["loop"]
    [stalled] = records(caplog, "db_stalled")
    assert stalled.getMessage() == (
        "the scheduler loop has waited 0 s on a Tasks backend's enqueue and is still waiting: "
        "a server that accepts connections but does not answer (set its client's timeouts); "
        "this process claims nothing meanwhile"
    )
    [ended] = records(caplog, "db_stall_ended")
    assert ended.getMessage().startswith(
        "the scheduler loop's wait on a Tasks backend's enqueue ended after "
    )
    # Back on the database once the enqueue returned.
    caplog.clear()
    with watchdog.watching("loop"):
        with watchdog.waiting_on("loop", "a Tasks backend's enqueue"):
            pass
        watchdog.check()
    assert "waited 0 s on the database" in records(caplog, "db_stalled")[0].getMessage()


@contextmanager
def row_locked(pk: int) -> Iterator[None]:
    with transaction.atomic():
        list(SchedulerProcess.objects.select_for_update().filter(pk=pk))
        yield


@contextmanager
def task_table_locked() -> Iterator[None]:
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(f"LOCK TABLE {Task._meta.db_table} IN ACCESS EXCLUSIVE MODE")
        yield


@contextmanager
def serving(scheduler: Scheduler) -> Iterator[None]:
    thread = threading.Thread(target=scheduler.run)
    thread.start()
    try:
        yield
    finally:
        scheduler.request_stop()
        thread.join(30)
    assert not thread.is_alive()


def watched_scheduler(tasks: Any, make_scheduler: Any, caplog: Any) -> Scheduler:
    """A started scheduler with a task not due, its watchdog's limit and period a test's
    (not the 30 s stale limit), the app's log captured."""
    caplog.set_level(logging.INFO, logger="django_posixcron")
    tasks("later", schedule="0 3 * * *")
    scheduler: Scheduler = make_scheduler(poll_interval=1)
    scheduler.start()
    scheduler.watchdog.limit = 0.5
    scheduler.watchdog.every = 0.1
    return scheduler


def test_a_heartbeat_the_database_does_not_answer_is_logged_while_it_waits(
    tasks, make_scheduler, caplog
):
    """The process row locked elsewhere: the heartbeat's update waits, as it would on a
    frozen server; the watchdog says so, then says when the wait ended."""
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no row locks")
    scheduler = watched_scheduler(tasks, make_scheduler, caplog)
    assert scheduler.process is not None
    pk = scheduler.process.pk
    with serving(scheduler):
        with held_elsewhere(lambda: row_locked(pk)):
            wait_until(
                lambda: records(caplog, "db_stalled"), what="the heartbeat's wait to be logged"
            )
            assert parts(caplog, "db_stalled") == ["heartbeat"]
        wait_until(lambda: records(caplog, "db_stall_ended"), what="its end to be logged")
    assert parts(caplog, "db_stall_ended") == ["heartbeat"]
    assert not records(caplog, "db_error")


def test_a_tick_the_database_does_not_answer_is_logged_while_it_waits(
    tasks, make_scheduler, caplog
):
    """The task table locked elsewhere: the loop's read of it waits; the watchdog says so."""
    if connection.vendor != "postgresql":
        pytest.skip("LOCK TABLE ... IN ACCESS EXCLUSIVE MODE is PostgreSQL's")
    scheduler = watched_scheduler(tasks, make_scheduler, caplog)
    with serving(scheduler):
        with held_elsewhere(task_table_locked):
            wait_until(
                lambda: "loop" in parts(caplog, "db_stalled"),
                what="the loop's wait to be logged",
            )
        wait_until(
            lambda: "loop" in parts(caplog, "db_stall_ended"),
            what="its end to be logged",
        )
    [stalled] = [r for r in records(caplog, "db_stalled") if getattr(r, "part", "") == "loop"]
    assert stalled.getMessage().startswith("the scheduler loop has waited ")
