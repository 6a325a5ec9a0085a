"""Queries compiled once and run again: each run answers for its own instants, as the ORM would."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection, transaction
from django.db.models import Value
from django.test.utils import CaptureQueriesContext

from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task
from django_posixcron.scheduling import compiled
from django_posixcron.scheduling.claim import peek
from django_posixcron.scheduling.compiled import CompiledQuery, QueryCache, locked_rows
from django_posixcron.scheduling.liveness import Heartbeat, mark_lost
from django_posixcron.scheduling.outcomes import Notifier
from tests.factories import NOW, RunFactory, SchedulerProcessFactory, TaskFactory
from tests.harness.locks import task_row_held

pytestmark = pytest.mark.django_db(transaction=True)

MINUTE = dt.timedelta(minutes=1)


def due_before(**at: dt.datetime):  # type: ignore[no-untyped-def]
    return Task.objects.filter(due_at__lt=at["before"]).order_by("due_at").values("name", "due_at")


def test_each_run_binds_its_own_instants_and_converts_like_the_orm() -> None:
    for minutes in (10, 20, 30):
        TaskFactory.create(name=f"t{minutes}", next_run_at=NOW + minutes * MINUTE)
    compiled = CompiledQuery("default", due_before, ["before"])

    for cutoff in (NOW, NOW + 15 * MINUTE, NOW + 31 * MINUTE, NOW + 25 * MINUTE):
        expected = list(due_before(before=cutoff))
        assert compiled.rows(before=cutoff) == expected
    # The converted values are aware datetimes, as the ORM returns them.
    assert compiled.rows(before=NOW + 11 * MINUTE) == [{"name": "t10", "due_at": NOW + 10 * MINUTE}]


def test_an_instant_the_query_does_not_bind_as_a_parameter_is_refused() -> None:
    # A __date lookup turns the instant into a date: compiling once would freeze it.
    def by_day(**at: dt.datetime):  # type: ignore[no-untyped-def]
        return Task.objects.filter(due_at__date=at["day"]).values("name")

    with pytest.raises(ValueError, match="instants not bound as parameters: day"):
        CompiledQuery("default", by_day, ["day"])


def test_a_compiled_update_writes_the_instant_of_each_run() -> None:
    process = SchedulerProcessFactory.create()

    def row(**at: dt.datetime):  # type: ignore[no-untyped-def]
        return SchedulerProcess.objects.filter(pk=process.pk)

    compiled = CompiledQuery(
        "default", row, ["now"], update=lambda **at: {"last_heartbeat_at": at["now"]}
    )
    for minutes in (1, 5, 2):
        assert compiled.update(now=NOW + minutes * MINUTE) == 1
        process.refresh_from_db()
        assert process.last_heartbeat_at == NOW + minutes * MINUTE
    SchedulerProcess.objects.filter(pk=process.pk).delete()
    assert compiled.update(now=NOW) == 0


def test_the_cache_compiles_a_shape_once_and_forgets_the_least_recently_used() -> None:
    cache = QueryCache("default", size=2)
    first = cache.get("a", due_before, ["before"])
    assert cache.get("a", due_before, ["before"]) is first
    cache.get("b", due_before, ["before"])
    cache.get("a", due_before, ["before"])  # "a" is now the most recent
    cache.get("c", due_before, ["before"])  # so "b" goes
    assert cache.get("a", due_before, ["before"]) is first
    assert cache.get("b", due_before, ["before"]) is not first


def test_peek_with_a_cache_sees_who_went_stale_at_each_tick() -> None:
    me = SchedulerProcessFactory.create(declaration_set="mine", last_heartbeat_at=NOW)
    other = SchedulerProcessFactory.create(declaration_set="theirs", last_heartbeat_at=NOW)
    TaskFactory.create(next_run_at=NOW + MINUTE)
    cache = QueryCache("default")

    def look(live_since: dt.datetime, overdue_before: dt.datetime | None = None):  # type: ignore[no-untyped-def]
        return peek(
            "default",
            me,
            {},
            with_clock=False,
            live_since=live_since,
            overdue_before=overdue_before,
            cache=cache,
        )

    fresh = look(NOW - MINUTE)
    assert (fresh.next_due, fresh.others) == (NOW + MINUTE, (1, other.pk, other.pk))
    # The same compiled statement, a later instant: the other process no longer counts.
    assert look(NOW + MINUTE).others == (0, 0, other.pk)
    assert look(NOW - MINUTE).others == (1, other.pk, other.pk)
    # The overdue look is its own shape, bound to its own instant.
    assert look(NOW - MINUTE, overdue_before=NOW).overdue is False
    assert look(NOW - MINUTE, overdue_before=NOW + 2 * MINUTE).overdue is True


def test_peeks_lost_probe_judges_each_tick_by_its_own_instant() -> None:
    me = SchedulerProcessFactory.create(last_heartbeat_at=NOW)
    gone = SchedulerProcessFactory.create(last_heartbeat_at=NOW)
    run = RunFactory.create(status=RunStatus.RUNNING, process=gone, scheduled_for=NOW)
    cache = QueryCache("default")
    stale_after = dt.timedelta(seconds=30)

    def lost_at(now: dt.datetime) -> bool:
        return peek(
            "default",
            me,
            {},
            with_clock=False,
            live_since=now - stale_after,
            lost_at=(now - stale_after, now),
            cache=cache,
        ).lost

    assert lost_at(NOW + 10 * dt.timedelta(seconds=1)) is False
    assert lost_at(NOW + 2 * MINUTE) is True
    assert lost_at(NOW) is False
    lost = mark_lost("default", me, NOW + 2 * MINUTE, stale_after, Notifier())
    assert [r.pk for r in lost] == [run.pk]
    assert Run.objects.get(pk=run.pk).status == RunStatus.LOST
    assert lost_at(NOW + 2 * MINUTE) is False


def test_the_heartbeat_stamps_each_beat_and_registers_again_when_its_row_is_gone() -> None:
    process = SchedulerProcessFactory.create(last_heartbeat_at=NOW)
    first_pk = process.pk
    heartbeat = Heartbeat("default", process, every=5, running=list)

    heartbeat.beat(NOW + MINUTE)
    heartbeat.beat(NOW + 2 * MINUTE)
    assert SchedulerProcess.objects.get(pk=first_pk).last_heartbeat_at == NOW + 2 * MINUTE

    SchedulerProcess.objects.filter(pk=first_pk).delete()
    heartbeat.beat(NOW + 3 * MINUTE)
    (again,) = SchedulerProcess.objects.all()
    assert again.pk != first_pk
    assert again.last_heartbeat_at == NOW + 3 * MINUTE
    heartbeat.beat(NOW + 4 * MINUTE)  # the new row's own statement
    assert SchedulerProcess.objects.get(pk=again.pk).last_heartbeat_at == NOW + 4 * MINUTE


def test_instances_are_whole_models_with_their_annotations() -> None:
    from django.db.models import Exists, OuterRef

    task = TaskFactory.create(kwargs={"region": "eu", "ids": [1, 2]}, next_run_at=NOW)
    idle = TaskFactory.create(next_run_at=NOW + MINUTE)
    RunFactory.create(task=task, status=RunStatus.RUNNING)

    def due(**at: dt.datetime):  # type: ignore[no-untyped-def]
        running = Run.objects.filter(task=OuterRef("pk"), status=RunStatus.RUNNING)
        return (
            Task.objects.filter(due_at__lte=at["now"])
            .annotate(busy=Exists(running))
            .order_by("due_at")
        )

    compiled = CompiledQuery("default", due, ["now"])
    got = compiled.instances(Task, now=NOW + MINUTE)
    assert [(t.pk, t.busy) for t in got] == [(task.pk, True), (idle.pk, False)]  # type: ignore[attr-defined]
    assert got[0].kwargs == {"region": "eu", "ids": [1, 2]}
    assert got[0].next_run_at == NOW
    assert not got[0]._state.adding
    assert [t.pk for t in compiled.instances(Task, now=NOW)] == [task.pk]

    values = CompiledQuery("default", lambda **at: Task.objects.values("name"), [])
    with pytest.raises(ValueError, match="not a query of Task rows"):
        values.instances(Task)


def test_instances_of_some_columns_defer_the_others() -> None:
    task = TaskFactory.create(kwargs={"region": "eu"}, next_run_at=NOW, description="nightly")

    partial = CompiledQuery(
        "default", lambda **at: Task.objects.only("name", "next_run_at").annotate(one=Value(1)), []
    )
    (got,) = partial.instances(Task)
    assert (got.pk, got.name, got.next_run_at, got.one) == (task.pk, task.name, NOW, 1)  # type: ignore[attr-defined]
    assert got.get_deferred_fields() == {f.attname for f in Task._meta.concrete_fields} - {
        "id",
        "name",
        "next_run_at",
    }
    with CaptureQueriesContext(connection) as captured:
        assert got.description == "nightly"  # loaded on access, as the ORM does
    assert len(captured.captured_queries) == 1


def test_locked_rows_answers_as_the_orm_whatever_the_number_of_keys() -> None:
    """The outcome's locking reads: the values of the rows asked for, in key order, as
    ``select_for_update().filter(pk__in=...).values(...)`` gives them; on PostgreSQL one
    statement whose text does not change with the number of keys."""
    tasks = [
        TaskFactory.create(name=f"t{i}", next_run_at=NOW + i * MINUTE, paused=i % 2 == 0)
        for i in range(5)
    ]
    fields = ["pk", "name", "next_run_at", "paused", "retry_at", "consecutive_failures"]
    statements: set[str] = set()
    for chosen in ([tasks[3]], tasks[::-1], tasks[1:4], []):
        pks = {t.pk for t in chosen}
        with transaction.atomic(), CaptureQueriesContext(connection) as captured:
            got = locked_rows(Task, pks, fields, "default")
        expected = list(Task.objects.filter(pk__in=pks).order_by("pk").values(*fields))
        assert got == expected
        statements.update(q["sql"] for q in captured.captured_queries if "SELECT" in q["sql"])
        assert all("FOR UPDATE" in sql for sql in statements) or connection.vendor == "sqlite"
    if connection.vendor == "postgresql":
        # Compiled once for the four sizes, the keys one array parameter.
        assert all("= ANY(" in sql for sql in statements)
        cache = compiled._locking_reads.queries
        assert [key for key in cache if key[1] is Task and key[2] == tuple(fields)] == [
            ("default", Task, tuple(fields), False)
        ]


def test_locked_rows_skips_a_row_another_transaction_holds() -> None:
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip("SQLite locks no rows")
    held, free = (TaskFactory.create(name=name) for name in ("held", "free"))
    with task_row_held(name="held"), transaction.atomic():
        got = locked_rows(Task, [held.pk, free.pk], ["pk"], "default", skip_locked=True)
    assert got == [{"pk": free.pk}]


def beat_through(failures: list[Exception], caplog: pytest.LogCaptureFixture) -> None:
    """Run a real heartbeat whose beats raise `failures` (last first), until it says it
    beats again."""
    import logging

    from tests.harness.waiting import wait_until

    process = SchedulerProcessFactory.create(last_heartbeat_at=NOW)
    heartbeat = Heartbeat("default", process, every=0.02, running=list)
    real_beat = heartbeat.beat

    def beat(now: dt.datetime | None = None) -> None:
        if failures:
            raise failures.pop()
        real_beat(now)

    heartbeat.beat = beat  # type: ignore[method-assign]
    caplog.set_level(logging.INFO, logger="django_posixcron")
    heartbeat.start()
    try:
        wait_until(
            lambda: any(getattr(r, "action", "") == "heartbeat_recovered" for r in caplog.records),
            10,
            "the heartbeat to say it beats again",
        )
    finally:
        heartbeat.stop()


def test_the_heartbeat_says_when_it_beats_again_after_failing(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # It logged each failure and never its recovery: a log of "heartbeat failed" lines left
    # the reader guessing whether the process was alive.
    from django.db import OperationalError

    beat_through([OperationalError("server closed the connection")] * 2, caplog)
    actions = [getattr(r, "action", "") for r in caplog.records]
    assert actions.count("heartbeat_error") == 1
    assert actions.count("heartbeat_recovered") == 1
    assert actions.index("heartbeat_error") < actions.index("heartbeat_recovered")


def test_the_heartbeat_says_each_cause_of_its_failures_once(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # A connection terminated, then a database that answers read-only (a failover's demoted
    # primary): only the first was said, and the read-only cause never reached the log.
    from django.db import InternalError, OperationalError

    class ReadOnlySqlTransaction(Exception):
        sqlstate = "25006"

    read_only = InternalError("cannot execute UPDATE in a read-only transaction")
    read_only.__cause__ = ReadOnlySqlTransaction()
    terminated = OperationalError("terminating connection due to administrator command")
    beat_through([read_only, read_only, terminated, terminated], caplog)
    said = [r.getMessage() for r in caplog.records if getattr(r, "action", "") == "heartbeat_error"]
    assert len(said) == 2, said
    assert "terminating connection" in said[0]
    assert "read-only transaction" in said[1]


@pytest.mark.django_db(transaction=True)
def test_a_beat_refused_at_once_holds_judging_the_others_for_nothing() -> None:
    # Counted from the last beat, a beat refused at once (a server shutting down) "waited"
    # the interval slept before it: 10 s, and every such failure held judging the others.
    import time

    from django.db import OperationalError

    process = SchedulerProcessFactory.create(last_heartbeat_at=NOW)
    waits: list[float] = []
    heartbeat = Heartbeat(
        "default",
        process,
        every=10,
        running=list,
        stalled=lambda waited, what: waits.append(waited),
    )
    heartbeat._last_attempt = time.monotonic() - 10.0  # the last beat, an interval ago
    heartbeat._failed(OperationalError("the database system is shutting down"))
    heartbeat._last_attempt = time.monotonic() - 40.0  # one that hung for 30 s, then failed
    heartbeat._failed(OperationalError("server closed the connection unexpectedly"))

    assert waits[0] == pytest.approx(0.0, abs=0.5)
    assert waits[1] == pytest.approx(30.0, abs=0.5)


@pytest.mark.django_db(transaction=True)
def test_the_beat_after_a_failed_one_is_not_taken_for_held_up() -> None:
    # Counted from the last beat written, the beat after one refused at once "waited" the
    # retry interval slept after the failure: "the heartbeat waited 1.0 s on the database",
    # and judging the others held for the stale limit, for nothing.
    import threading

    from django.db import OperationalError

    process = SchedulerProcessFactory.create(last_heartbeat_at=NOW)
    waits: list[float] = []
    beaten = threading.Event()
    heartbeat = Heartbeat(
        "default", process, every=1.0, running=list, stalled=lambda w, what: waits.append(w)
    )
    real_beat, calls = heartbeat.beat, []

    def beat(now: dt.datetime | None = None) -> None:
        calls.append(now)
        if len(calls) == 1:
            raise OperationalError("terminating connection due to administrator command")
        real_beat(now)
        beaten.set()

    heartbeat.beat = beat  # type: ignore[method-assign]
    heartbeat.start()
    try:
        assert beaten.wait(20), "no beat was written after the failed one"
    finally:
        heartbeat.stop()
    # The failed beat and the next, written one: each waited about nothing.
    assert len(waits) >= 2, waits
    assert all(wait < 0.5 for wait in waits), waits
