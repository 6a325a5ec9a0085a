"""Reconciling as a registered scheduler, beside live peers that declare other sets."""

from __future__ import annotations

import datetime as dt
import logging
import threading

import pytest
from django.core.management import call_command
from django.db import connections
from django.utils import timezone

from django_posixcron.models import DeclarationSet, SchedulerProcess, Task
from django_posixcron.scheduling.liveness import mark_stopped, release_declarations
from tests.harness.declaring import declare, task
from tests.harness.locks import held_elsewhere
from tests.harness.waiting import wait_until
from tests.reconcile.test_deferral import V1, V2, declared

V3 = declared({"a": "v3", "c": "v1"})

pytestmark = pytest.mark.django_db(transaction=True)


def hashes() -> dict[str, tuple[str, bool]]:
    return {t.name: (t.definition_hash, t.declared) for t in Task.objects.all()}


def test_deferred_until_the_holder_stops_then_applied_by_the_loop(make_scheduler, caplog, capsys):
    caplog.set_level(logging.INFO, logger="django_posixcron")
    old = make_scheduler(declarations=V1)
    old.reconcile()
    new = make_scheduler(declarations=V2)
    result = new.reconcile()

    # Both sets are recorded once, and named by the process rows.
    assert DeclarationSet.objects.count() == 2
    assert {p.declaration_set for p in SchedulerProcess.objects.all()} == {
        old.process.declaration_set,
        new.process.declaration_set,
    }
    assert [c.task.name for c in result.create] == ["b"]
    assert [d.name for d in result.deferred] == ["a"]
    assert hashes()["a"] == (V1["a"].definition_hash, True)

    # An old process re-planning while the new one is live reverts and retires nothing.
    assert old.reconcile().is_empty
    assert hashes()["b"] == (V2["b"].definition_hash, True)

    # Logged once, however often the process plans again.
    new.reconcile()
    deferred = [r for r in caplog.records if getattr(r, "action", None) == "task_deferred"]
    assert sorted(r.task for r in deferred) == ["a", "b"]

    call_command("schedulerstatus", "--ignore-overdue", "--ignore-failing")
    out = capsys.readouterr().out
    assert "Deferred definition changes: 2" in out
    assert f"deferred  a: stored {V1['a'].definition_hash[:12]} held by" in out

    new.tick()  # notes who is live
    mark_stopped(old.using, old.process)
    new.tick()
    assert hashes()["a"] == (V2["a"].definition_hash, True)
    assert any(getattr(r, "action", None) == "declarations_gone" for r in caplog.records)
    # The stored definition is ours now: the claimer no longer leaves it out.
    assert new.claimer.mismatched == {}


def test_a_process_that_has_seen_many_sets_still_defers_to_every_live_holder(
    make_scheduler, monkeypatch
):
    # The sets read are cached, sixteen at most; a new one emptied the cache and was read
    # back alone, so the live processes whose sets had been cached dropped out of the
    # answer, and the next reconciliation rewrote what one of them still declared.
    from django_posixcron import deployments

    monkeypatch.setattr(deployments, "_cache", {})
    monkeypatch.setattr(deployments, "_SETS_CACHED", 2)
    holder = make_scheduler(declarations=V1)
    holder.reconcile()
    # This process has seen the holder's set and another one: its cache is full.
    deployments._hashes(holder.using, [holder.process.declaration_set])
    deployments._hashes(holder.using, [deployments.record(holder.using, {"gone": "x"})])
    second = make_scheduler(declarations=V2)
    assert [d.name for d in second.reconcile().deferred] == ["a"]

    # Live: the holder (its set cached) and the second deploy (its set not yet).
    third = make_scheduler(declarations=V3)
    result = third.reconcile()

    assert "a" in [d.name for d in result.deferred]
    assert hashes()["a"] == (V1["a"].definition_hash, True)


@pytest.mark.parametrize("seen_live", [True, False])
def test_a_canary_taken_away_has_its_extra_task_retired(make_scheduler, seen_live):
    # Unseen: a `runscheduler --once` with new settings, or a new version's process that
    # stopped right after reconciling, came and went between two of the fleet's looks; its
    # extra task stayed declared and overdue until every old scheduler restarted.
    main = make_scheduler(declarations=V1)
    main.reconcile()
    if not seen_live:
        main.tick()
    canary = make_scheduler(declarations=V2)
    canary.reconcile()
    if seen_live:
        main.tick()
    assert hashes()["b"][1]

    mark_stopped(canary.using, canary.process)
    main.tick()
    assert hashes() == {
        "a": (V1["a"].definition_hash, True),
        "b": (V2["b"].definition_hash, False),
        "c": (V1["c"].definition_hash, True),
    }
    # Looked at once: the next tick does not reconcile again.
    main.tick()
    assert main.rollout.others is not None


def test_a_run_of_the_fleets_own_settings_that_came_and_went_changes_nothing(
    make_scheduler, caplog
):
    # `runscheduler --once` from system cron beside a fleet of the same release: each one
    # made every fleet process reconcile again, every minute.
    caplog.set_level(logging.INFO, logger="django_posixcron")
    main = make_scheduler(declarations=V1)
    main.reconcile()
    main.tick()
    twin = make_scheduler(declarations=V1)
    twin.start()
    twin.reconcile()
    twin.shutdown()  # nothing running: its stopped row keeps naming what it declared
    assert SchedulerProcess.objects.get(pk=twin.process.pk).declaration_set == (
        main.process.declaration_set
    )
    main.tick()
    assert not [r for r in caplog.records if getattr(r, "action", None) == "declarations_gone"]
    assert main.rollout.others is not None


def test_a_canary_already_stopping_at_the_first_look_has_its_extra_task_retired(make_scheduler):
    # SIGTERM'd right after it reconciled: still live (its grace period), but it let go of
    # what it declares before the fleet first looked, so its set was never seen live.
    main = make_scheduler(declarations=V1)
    main.reconcile()
    main.tick()
    canary = make_scheduler(declarations=V2)
    canary.reconcile()
    release_declarations(canary.using, canary.process)
    main.tick()
    assert hashes()["b"] == (V2["b"].definition_hash, False)


def test_a_holder_in_its_grace_period_releases_its_declarations_at_once(make_scheduler, gate):
    """A SIGTERM'd process claims nothing new: the fleet applies what it deferred for it
    while its last runs finish, not when its grace period ends (up to 25 s late)."""
    gate_name, opened = gate
    slow = task("* * * * *", callable="tests.testapp.jobs.blocked", kwargs={"gate_name": gate_name})
    old_declarations = {**V1, **declare(slow=slow)}
    old = make_scheduler(declarations=old_declarations, grace=30)
    old.start()
    old.reconcile()
    new = make_scheduler(declarations={**V2, **declare(slow=slow)})
    new.start()
    new.reconcile()
    assert hashes()["a"] == (V1["a"].definition_hash, True)  # deferred: old holds it
    at = timezone.now()  # the every-minute tasks are due at the next minute
    Task.objects.filter(name="slow").update(run_requested_at=at, due_at=at)
    assert "slow" in [r.task.name for r in old.tick(at).claimed]
    new.tick(at)  # notes who is live

    def stop() -> None:
        try:
            old.shutdown()
        finally:
            connections.close_all()  # this thread's own

    stopping = threading.Thread(target=stop)
    stopping.start()
    try:
        wait_until(
            lambda: not SchedulerProcess.objects.get(pk=old.process.pk).declaration_set,
            what="the stopping process to release its declarations",
        )
        assert stopping.is_alive()  # still in its grace period, its run going
        new.tick(at + dt.timedelta(seconds=1))
        assert hashes()["a"] == (V2["a"].definition_hash, True)
        row = SchedulerProcess.objects.get(pk=old.process.pk)
        assert row.stopped_at is None  # its run is still its own
    finally:
        opened.set()
        stopping.join(30)
    assert not stopping.is_alive()


def test_a_reconciliation_does_not_wait_forever_for_a_frozen_holder_of_the_lock(
    make_scheduler, monkeypatch, caplog
):
    """A scheduler frozen in the middle of its reconciliation holds the lock until it wakes;
    when its heartbeat goes stale every other scheduler reconciles: they give up after a
    bound and try again at a later tick, instead of all waiting for it. The database
    answered, so the back-off says a lock was not granted (``db_lock_timeout``), not
    "database unavailable", and the scheduler goes on judging its peers (an outage makes it
    wait a stale limit)."""
    from django.db import OperationalError, connection

    from django_posixcron import reconcile as reconciling
    from django_posixcron.db import lock_not_granted

    if connection.vendor not in ("postgresql", "mysql"):
        pytest.skip("SQLite serialises writers with its own write lock and busy timeout")
    monkeypatch.setattr(reconciling, "MYSQL_LOCK_TIMEOUT", 1)
    scheduler = make_scheduler(declarations=V1)
    with (
        held_elsewhere(lambda: reconciling._serialised("default")),
        pytest.raises(OperationalError) as caught,
    ):
        scheduler.reconcile()
    assert lock_not_granted(caught.value)
    caplog.set_level(logging.INFO, logger="django_posixcron")
    caplog.clear()

    delay = scheduler.outage.failed(caught.value)
    scheduler.outage.recovered()

    assert delay == 0.5
    assert [r.action for r in caplog.records] == ["db_lock_timeout"]
    assert (
        caplog.records[0]
        .getMessage()
        .startswith("a database lock was not granted in time (attempt 1), retrying in 0.5 s: ")
    )
    assert scheduler.outage.may_judge_others()
    scheduler.reconcile()  # the lock let go: done at the next try
    assert sorted(Task.objects.values_list("name", flat=True)) == ["a", "c"]


def test_a_row_lock_not_granted_in_time_is_recognised(tasks):
    """The drivers' own lock timeouts: PostgreSQL's lock_not_available, MySQL's 1205."""
    from django.db import OperationalError, connection, transaction

    from django_posixcron.db import lock_not_granted
    from tests.harness.locks import task_row_held

    if connection.vendor not in ("postgresql", "mysql"):
        pytest.skip("SQLite has no row locks")
    tasks("held")
    try:
        with task_row_held(name="held"), transaction.atomic(), connection.cursor() as cursor:
            if connection.vendor == "postgresql":
                cursor.execute("SET LOCAL lock_timeout = '100ms'")
            else:
                cursor.execute("SET SESSION innodb_lock_wait_timeout = 1")
            with pytest.raises(OperationalError) as caught:
                list(Task.objects.select_for_update().filter(name="held"))
    finally:
        connection.close()  # MySQL's setting was for this session: the next test's is new
    assert lock_not_granted(caught.value)
    assert not lock_not_granted(OperationalError("server closed the connection unexpectedly"))
    assert not lock_not_granted(ValueError("1205"))


def test_sqlites_busy_file_is_a_lock_not_granted_and_a_read_only_one_a_refusal(tmp_path):
    """SQLite's "database is locked" (another connection held the write lock past the busy
    timeout) was logged as "database unavailable", an outage; "attempt to write a readonly
    database" was waited out at start-up, forever, as one."""
    import sqlite3

    from django.db import OperationalError

    from django_posixcron.db import conflict, lock_not_granted, outage, read_only

    def as_django(error: sqlite3.Error) -> OperationalError:
        wrapped = OperationalError(*error.args)  # as Django's DatabaseErrorWrapper raises it
        wrapped.__cause__ = error
        return wrapped

    path = tmp_path / "busy.sqlite3"
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("CREATE TABLE t (x)")
    holder.execute("BEGIN IMMEDIATE")
    writer = sqlite3.connect(path, timeout=0)
    with pytest.raises(sqlite3.OperationalError) as busy:
        writer.execute("INSERT INTO t VALUES (1)")
    holder.execute("ROLLBACK")
    reader = sqlite3.connect(f"file:{path}?mode=ro", uri=True)
    with pytest.raises(sqlite3.OperationalError) as refused:
        reader.execute("INSERT INTO t VALUES (1)")
    for connection in (holder, writer, reader):
        connection.close()

    assert lock_not_granted(as_django(busy.value))
    assert conflict(as_django(busy.value))
    assert not lock_not_granted(as_django(refused.value))
    # Refused at start-up; while running, a moment of it is waited out as an outage.
    assert read_only(as_django(refused.value))
    assert outage(as_django(refused.value))
    assert not read_only(as_django(busy.value))
    assert outage(OperationalError("server closed the connection unexpectedly"))


def test_a_deadlock_is_a_conflict_retried_at_once_not_an_outage(tasks, make_scheduler, caplog):
    """A deadlock (a serialization failure under SERIALIZABLE alike) was logged as "database
    unavailable" and put off judging other processes' runs lost for a stale limit and more,
    each time: under steady contention, for as long as it lasted."""
    import threading

    from django.db import DatabaseError, connection, connections, transaction

    from django_posixcron.db import conflict, outage

    if connection.vendor not in ("postgresql", "mysql"):
        pytest.skip("SQLite has no row locks")
    tasks("one")
    tasks("two")
    both_locked = threading.Barrier(2, timeout=30)
    caught: list[BaseException] = []

    def lock_in_order(first: str, second: str) -> None:
        try:
            with transaction.atomic():
                list(Task.objects.select_for_update().filter(name=first))
                both_locked.wait()
                list(Task.objects.select_for_update().filter(name=second))
        except DatabaseError as exc:
            caught.append(exc)
        finally:
            if threading.current_thread() is not threading.main_thread():
                connections.close_all()

    other = threading.Thread(target=lock_in_order, args=("two", "one"))
    other.start()
    lock_in_order("one", "two")
    other.join(30)
    assert len(caught) == 1, caught  # the database picked one victim
    assert conflict(caught[0])
    assert outage(caught[0])  # the work is worth trying again, as after an outage

    scheduler = make_scheduler()
    caplog.set_level(logging.INFO, logger="django_posixcron")
    caplog.clear()
    scheduler.outage.failed(caught[0])
    assert [r.action for r in caplog.records] == ["db_conflict"]
    assert (
        caplog.records[0]
        .getMessage()
        .startswith("the database turned a transaction away for a concurrent one (attempt 1)")
    )
    assert scheduler.outage.may_judge_others()
