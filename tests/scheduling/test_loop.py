"""The loop around tick(): query budget, database outages, shutdown, --once."""

from __future__ import annotations

import dataclasses
import datetime as dt
import logging
import threading
import time
from collections.abc import Callable
from typing import Any

import pytest
from django.db import OperationalError, connection, transaction
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from django_posixcron.db import database_now, has_clock
from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task
from django_posixcron.scheduling.loop import RECEIVERS_DRAIN
from django_posixcron.scheduling.rules import BACKOFF_MAX
from django_posixcron.scheduling.shutdown import receivers_time
from django_posixcron.signals import run_finished
from tests.harness.signals import blocking_receiver
from tests.harness.tasks import T0
from tests.testapp.models import Hit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize("count", [1, 1000])
def test_an_idle_tick_costs_at_most_two_queries(tasks, make_scheduler, count):
    task = tasks("idle-0", next_run_at=T0 + dt.timedelta(hours=1))
    Task.objects.bulk_create(
        Task(
            name=f"idle-{i}",
            schedule=task.schedule,
            callable_path=task.callable_path,
            timezone="UTC",
            retry_delay=task.retry_delay,
            definition_hash="whatever",
            next_run_at=T0 + dt.timedelta(minutes=i),
            due_at=T0 + dt.timedelta(minutes=i),
        )
        for i in range(1, count)
    )
    scheduler = make_scheduler()
    scheduler.start()
    scheduler.tick(T0 - dt.timedelta(minutes=1))  # the first tick also prunes

    for now in (T0 - dt.timedelta(seconds=30), None):  # explicit time, then the database clock
        with CaptureQueriesContext(connection) as queries:
            result = scheduler.tick(now)
        assert result.claimed == []
        # The heartbeat (inline when tick() drives the scheduler) and peek().
        assert len(queries) <= 2, [q["sql"] for q in queries]
    explicit = scheduler.tick(T0 - dt.timedelta(seconds=30))
    expected = T0 + dt.timedelta(minutes=1) if count > 1 else T0 + dt.timedelta(hours=1)
    assert explicit.next_due_at == expected
    assert explicit.wake_in == 1.0  # capped at the poll interval


def test_the_loop_sleeps_until_the_earliest_due_time(tasks, make_scheduler):
    tasks(next_run_at=T0 + dt.timedelta(seconds=0.25))
    scheduler = make_scheduler(poll_interval=10)

    result = scheduler.tick(T0)

    assert result.wake_in == pytest.approx(0.25)


def break_connection() -> None:
    """Break the default connection underneath Django, the way a database restart does."""
    connection.ensure_connection()
    if connection.vendor == "postgresql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_backend_pid()")
            pid = cursor.fetchone()[0]
        other = connection.copy()
        try:
            with other.cursor() as cursor:
                cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
        finally:
            other.close()
    elif connection.vendor == "mysql":
        with connection.cursor() as cursor:
            cursor.execute("SELECT CONNECTION_ID()")
            pid = cursor.fetchone()[0]
        other = connection.copy()
        try:
            with other.cursor() as cursor:
                cursor.execute(f"KILL {int(pid)}")
        finally:
            other.close()
    else:
        connection.connection.close()


@pytest.fixture
def persistent_connection():
    """Keep the connection across ticks (CONN_MAX_AGE=None), as production setups often do."""
    connection.close()
    saved = connection.settings_dict["CONN_MAX_AGE"]
    connection.settings_dict["CONN_MAX_AGE"] = None
    yield
    connection.close()
    connection.settings_dict["CONN_MAX_AGE"] = saved


def test_a_dropped_connection_is_logged_backed_off_and_recovered(
    tasks, make_scheduler, caplog, persistent_connection
):
    tasks(next_run_at=T0 + dt.timedelta(hours=1))
    scheduler = make_scheduler()
    scheduler.start()

    break_connection()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="django_posixcron.scheduler"):
        first = scheduler._safe_tick()
        second = scheduler._safe_tick()

    assert first == 0.5  # backed off
    assert second <= 1.0  # a normal tick again
    actions = [getattr(r, "action", "") for r in caplog.records]
    assert actions[0] == "db_error"
    assert actions[-1] == "db_recovered"


@pytest.fixture
def unreachable_database():
    """Point the connection at a server that is not there; restore it afterwards."""
    connection.close()
    saved = dict(connection.settings_dict)

    def go_away() -> None:
        connection.close()
        if connection.vendor == "sqlite":
            connection.settings_dict["NAME"] = "/nonexistent/dir/db.sqlite3"
        else:
            connection.settings_dict["HOST"] = "127.0.0.1"
            connection.settings_dict["PORT"] = "9"  # discard: nothing listens

    def come_back() -> None:
        connection.close()
        connection.settings_dict.update(saved)

    yield go_away, come_back
    come_back()


def test_an_unreachable_database_backs_off_then_resumes(
    tasks, make_scheduler, caplog, unreachable_database
):
    go_away, come_back = unreachable_database
    task = tasks(next_run_at=T0 + dt.timedelta(hours=1))
    scheduler = make_scheduler()
    scheduler.start()

    go_away()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="django_posixcron.scheduler"):
        delays = [scheduler._safe_tick() for _ in range(3)]
        come_back()
        past = timezone.now() - dt.timedelta(minutes=1)
        Task.objects.filter(pk=task.pk).update(due_at=past, next_run_at=past)
        scheduler._safe_tick()
    assert scheduler.wait_idle(timeout=10)

    assert delays == [0.5, 1.0, 2.0]
    actions = [getattr(r, "action", "") for r in caplog.records]
    assert actions[:3] == ["db_error"] * 3
    assert "db_recovered" in actions
    assert Run.objects.get().status == RunStatus.SUCCEEDED


def test_a_database_error_over_several_lines_is_logged_on_one(make_scheduler, caplog):
    # psycopg's "Connection refused" comes with its hint on a line of its own: a log
    # collector that reads a record a line took the hint for a record of its own, with no
    # level, no logger and no action.
    scheduler = make_scheduler()
    refused = OperationalError(
        'connection to server at "127.0.0.1", port 9 failed: Connection refused\n'
        "\tIs the server running on that host and accepting TCP/IP connections?\n"
    )
    with caplog.at_level(logging.ERROR, logger="django_posixcron.scheduler"):
        scheduler._back_off(refused)

    (record,) = [r for r in caplog.records if getattr(r, "action", "") == "db_error"]
    assert record.getMessage() == (
        "database unavailable (attempt 1), retrying in 0.5 s: connection to server at "
        '"127.0.0.1", port 9 failed: Connection refused; Is the server running on that host '
        "and accepting TCP/IP connections?"
    )


def test_a_run_ending_cuts_the_sleep_short_but_not_a_back_off(make_scheduler):
    # Through an outage every run that ended woke the loop for another attempt: ten in three
    # seconds, each saying "retrying in 10.0 s".
    scheduler = make_scheduler()
    stop = threading.Event()

    def runs_ending() -> None:
        while not stop.wait(0.02):
            scheduler._wake.set()

    waker = threading.Thread(target=runs_ending)
    waker.start()
    try:
        scheduler.outage.failures = 1  # backing off
        began = time.monotonic()
        scheduler._sleep(0.5)
        assert time.monotonic() - began >= 0.5
        scheduler.outage.failures = 0  # healthy: a run that ended is worth a tick at once
        began = time.monotonic()
        scheduler._sleep(30)
        assert time.monotonic() - began < 10
    finally:
        stop.set()
        waker.join()


def test_back_off_is_capped(make_scheduler):
    scheduler = make_scheduler()
    delays = [scheduler._back_off(RuntimeError("down"), log=False) for _ in range(10)]
    assert delays[:4] == [0.5, 1.0, 2.0, 4.0]
    assert max(delays) == BACKOFF_MAX


def test_shutdown_marks_runs_still_running_interrupted(tasks, make_scheduler, gate):
    name, event = gate
    task = tasks(callable_path="tests.testapp.jobs.blocked", kwargs={"gate_name": name})
    scheduler = make_scheduler(grace=0.2)
    run = scheduler.tick(T0).started[0]

    scheduler.shutdown()

    run.refresh_from_db()
    assert run.status == RunStatus.INTERRUPTED
    task.refresh_from_db()
    assert task.last_run_status == RunStatus.INTERRUPTED
    assert task.retry_at is not None
    assert SchedulerProcess.objects.get().stopped_at is not None
    event.set()


def test_a_run_that_used_the_grace_leaves_receivers_seconds_not_ten(
    tasks, make_scheduler, gate, caplog
):
    """A run held the whole grace period and a run_finished receiver is slow: the exit still
    ends about two seconds past the grace (the default 25 s fits Kubernetes' 30 s), and the
    signal not sent is logged. Receivers used to get 10 s more, whatever the grace had used."""
    name, event = gate
    tasks(callable_path="tests.testapp.jobs.blocked", kwargs={"gate_name": name})
    scheduler = make_scheduler(grace=0.5)
    scheduler.notifier.start()
    with blocking_receiver(run_finished) as entered:
        try:
            scheduler.tick(T0)
            started = time.monotonic()
            with caplog.at_level(logging.WARNING, logger="django_posixcron"):
                scheduler.shutdown()
            took = time.monotonic() - started
        finally:
            event.set()
    assert entered.is_set()
    assert Run.objects.get().status == RunStatus.INTERRUPTED
    assert took < RECEIVERS_DRAIN, took
    [warning] = [r for r in caplog.records if getattr(r, "action", "") == "signals_abandoned"]
    assert "signal receivers still busy after 2 s" in warning.getMessage()


@pytest.mark.parametrize(
    ("left_of_grace", "expected"),
    [(20.0, 10.0), (1.0, 3.0), (0.0, 2.0), (-1.5, 0.5), (-60.0, 0.5)],
)
def test_receivers_get_at_most_two_seconds_past_the_grace(left_of_grace, expected):
    assert receivers_time(100.0 + left_of_grace, 10.0, 100.0) == pytest.approx(expected)


def test_run_returns_after_request_stop(tasks, make_scheduler):
    tasks(next_run_at=T0 + dt.timedelta(hours=1))
    scheduler = make_scheduler(poll_interval=30)
    thread = threading.Thread(target=scheduler.run)
    thread.start()
    try:
        # The loop is asleep for the poll interval; a stop request wakes it at once.
        for _ in range(200):
            if SchedulerProcess.objects.exists():
                break
            threading.Event().wait(0.05)
        scheduler.request_stop()
        thread.join(timeout=10)
        assert not thread.is_alive()
    finally:
        scheduler.request_stop()
        thread.join(timeout=10)
    assert SchedulerProcess.objects.get().stopped_at is not None
    assert not Run.objects.exists()


def finished_while_away(
    tasks: Any, make_scheduler: Any, gate: tuple[str, threading.Event], go_away: Any, **options: Any
) -> tuple[Any, Run]:
    """Start a run that waits on `gate`, take the database away, let the run return."""
    name, event = gate
    now = timezone.now()
    tasks(
        callable_path="tests.testapp.jobs.blocked",
        kwargs={"gate_name": name},
        next_run_at=now - dt.timedelta(minutes=1),
    )
    scheduler = make_scheduler(**options)
    run = scheduler.tick(now).started[0]
    for _ in range(200):
        if Hit.objects.exists():  # the task has its connection and is waiting on the gate
            break
        threading.Event().wait(0.05)
    go_away()
    event.set()
    assert scheduler.executor.wait_idle(10)
    return scheduler, run


def test_an_outcome_that_cannot_be_written_is_kept_until_the_database_is_back(
    tasks, make_scheduler, gate, unreachable_database
):
    go_away, come_back = unreachable_database
    scheduler, run = finished_while_away(tasks, make_scheduler, gate, go_away)
    assert scheduler._safe_tick() == 0.5  # the outcome could not be written
    come_back()
    scheduler._safe_tick()

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED


def test_a_shutdown_spends_its_grace_retrying_an_outcome_the_database_refused(
    tasks, make_scheduler, gate, unreachable_database
):
    # A run whose callable returned is never marked lost: the database away for a moment as
    # the scheduler stops, it tries again within what is left of the grace period.
    go_away, come_back = unreachable_database
    scheduler, run = finished_while_away(tasks, make_scheduler, gate, go_away, grace=30)

    class BackWhenRetried(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if getattr(record, "action", "") == "shutdown_db_error":
                come_back()

    handler = BackWhenRetried()
    shutdown_logger = logging.getLogger("django_posixcron.scheduler.shutdown")
    shutdown_logger.addHandler(handler)
    try:
        scheduler.shutdown()
    finally:
        shutdown_logger.removeHandler(handler)

    run.refresh_from_db()
    assert run.status == RunStatus.SUCCEEDED
    assert SchedulerProcess.objects.get().stopped_at is not None


def test_start_warns_when_host_and_database_clocks_differ(make_scheduler, caplog, monkeypatch):
    scheduler = make_scheduler()
    monkeypatch.setattr(
        "django_posixcron.scheduling.loop.database_now",
        lambda using: timezone.now() + dt.timedelta(seconds=5),
    )
    with caplog.at_level(logging.WARNING, logger="django_posixcron.scheduler"):
        scheduler.start()
    assert [r.action for r in caplog.records if hasattr(r, "action")] == ["clock_skew"]
    if has_clock(scheduler.using):  # SQLite's clock is this host's: it has no estimate
        assert scheduler.now() - timezone.now() > dt.timedelta(seconds=4)


def test_the_thread_pool_reuses_threads_and_stands_in_for_stuck_ones():
    from django_posixcron.executors import ThreadExecutor

    executor = ThreadExecutor(2)
    stuck = threading.Event()
    names: list[str] = []
    try:
        for key in range(6):
            executor.submit(key, lambda: names.append(threading.current_thread().name))
            assert executor.wait_idle(5)
        assert len(set(names)) == 1  # one thread served them all, one after the other

        executor.submit(10, lambda: stuck.wait(10))
        executor.release(10)  # as a timeout does: the slot is free, the thread is not
        assert executor.free_slots() == 2
        done = [threading.Event(), threading.Event()]
        executor.submit(11, done[0].set)
        executor.submit(12, done[1].set)
        assert all(event.wait(5) for event in done)  # served although one thread is stuck
    finally:
        stuck.set()
        executor.close()


def test_a_slow_poller_still_heartbeats_often_enough_not_to_look_dead(tasks, make_scheduler):
    from django_posixcron.scheduler import stale_after

    tasks(next_run_at=T0 + dt.timedelta(hours=1))
    scheduler = make_scheduler(poll_interval=60)

    assert scheduler.tick(T0).wake_in == 10.0
    assert stale_after(60) == stale_after(1) == dt.timedelta(seconds=30)


def test_a_tick_writes_the_outcomes_queued_when_it_began_and_leaves_later_ones_to_the_next(
    tasks, make_scheduler
):
    """A run finishing while a tick writes outcomes wakes the loop again: its outcome goes in
    the next tick's batch, not in a transaction of its own; flush() (shutdown, wait_idle)
    still writes everything."""
    from django_posixcron.scheduling.outcomes import Outcome
    from django_posixcron.signals import run_finished

    task = tasks("short", next_run_at=T0 + dt.timedelta(hours=1))
    scheduler = make_scheduler()
    scheduler.start()

    def running(minute: int) -> Run:
        return Run.objects.create(
            task=task,
            trigger="manual",
            status=RunStatus.RUNNING,
            scheduled_for=T0 + dt.timedelta(minutes=minute),
            started_at=T0 + dt.timedelta(minutes=minute),
            process=scheduler.process,
        )

    first, second, late = running(1), running(2), running(3)
    finished = T0 + dt.timedelta(minutes=10)
    for run in (first, second):
        scheduler.runs.queue(Outcome(run, RunStatus.SUCCEEDED, finished))

    def finish_late(sender, run, **kwargs):
        if run.pk == first.pk:  # while the tick is recording the first batch
            scheduler.runs.queue(Outcome(late, RunStatus.SUCCEEDED, finished))

    run_finished.connect(finish_late)
    try:
        scheduler.tick(T0)
        statuses = dict(Run.objects.values_list("pk", "status"))
        assert statuses == {
            first.pk: RunStatus.SUCCEEDED,
            second.pk: RunStatus.SUCCEEDED,
            late.pk: RunStatus.RUNNING,
        }
        assert scheduler.unrecorded == 1

        scheduler.tick(T0)
        assert Run.objects.get(pk=late.pk).status == RunStatus.SUCCEEDED
        assert scheduler.unrecorded == 0

        # flush() itself keeps going until nothing is left.
        again = running(4)
        scheduler.runs.queue(Outcome(again, RunStatus.FAILED, finished, "boom"))
        scheduler.runs.flush()
        assert Run.objects.get(pk=again.pk).status == RunStatus.FAILED
    finally:
        run_finished.disconnect(finish_late)


def test_a_burst_claims_again_without_peeking_until_a_batch_comes_back_short(tasks, make_scheduler):
    """After a full batch the loop claims again at once, without the peek's query; the first
    tick that claims less than a batch has ended the burst, and the next one peeks."""
    requested = timezone.now() - dt.timedelta(seconds=1)
    for i in range(3):
        tasks(
            f"burst-{i}", next_run_at=requested + dt.timedelta(days=1), run_requested_at=requested
        )
    scheduler = make_scheduler(batch_size=2, concurrency=4)
    scheduler.start()

    def peeks(queries: CaptureQueriesContext) -> list[str]:
        return [q["sql"] for q in queries if "next_due" in q["sql"]]  # peek's alias

    with CaptureQueriesContext(connection) as full:
        assert len(scheduler.tick().claimed) == 2
    with CaptureQueriesContext(connection) as again:
        assert len(scheduler.tick().claimed) == 1
    with CaptureQueriesContext(connection) as after:
        assert scheduler.tick().claimed == []
    assert len(peeks(full)) == 1
    assert peeks(again) == []
    assert len(peeks(after)) == 1
    assert scheduler.wait_idle(10)
    assert set(Run.objects.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}


def test_a_step_of_the_host_clock_during_a_burst_fires_nothing_early(
    tasks, make_scheduler, monkeypatch
):
    """A burst judges due-ness by its estimate of the database clock: the clock's last reading
    plus monotonic time since, so the host's wall clock jumping an hour ahead (an NTP step)
    is not an hour passing."""
    if not has_clock("default"):
        pytest.skip("SQLite's clock is this host's: a step of it is time passing")
    now = database_now("default")
    for i in range(2):
        tasks(
            f"due-{i}",
            next_run_at=now + dt.timedelta(days=1),
            run_requested_at=now - dt.timedelta(seconds=1),
        )
    tasks(
        "in-half-an-hour",
        next_run_at=now + dt.timedelta(days=1),
        run_requested_at=now + dt.timedelta(minutes=30),
    )
    scheduler = make_scheduler(batch_size=2, concurrency=4)
    scheduler.start()
    assert len(scheduler.tick().claimed) == 2  # a full batch: the next tick does not peek
    host_now = timezone.now
    monkeypatch.setattr("django.utils.timezone.now", lambda: host_now() + dt.timedelta(hours=1))

    assert scheduler.tick().claimed == []
    assert abs(scheduler.now() - database_now("default")) < dt.timedelta(seconds=5)
    assert not Run.objects.filter(task__name="in-half-an-hour").exists()


def slow_peeks(
    monkeypatch: pytest.MonkeyPatch, delay: float, reading: Callable[[Any], dt.datetime] | None
) -> None:
    """Make the loop's peek take `delay` seconds longer on its way back, and, with `reading`,
    report the database clock's reading it returns for the peek."""
    from django_posixcron.scheduling.claim import peek as real

    def slow(*args: Any, **kwargs: Any) -> Any:
        peeked = real(*args, **kwargs)
        time.sleep(delay)  # the reply's latency, not a wait for a condition
        if reading is None:
            return peeked
        return dataclasses.replace(peeked, db_now=reading(peeked))

    # Where the loop looks it up.
    monkeypatch.setattr("django_posixcron.scheduling.loop.peek", slow)


def test_a_task_due_within_the_peeks_round_trip_is_claimed_in_the_same_tick(
    tasks, make_scheduler, monkeypatch
):
    """The peek finds the task due half a second after the database's clock read, and its
    reply took a second: the same tick claims it, judged by the database's clock when the
    claim reads the task, instead of peeking again."""
    if not has_clock("default"):
        pytest.skip("SQLite has no clock of its own: the host's is read at the tick")
    requested = database_now("default") + dt.timedelta(seconds=0.5)
    tasks("soon", next_run_at=requested + dt.timedelta(days=1), run_requested_at=requested)
    scheduler = make_scheduler()
    scheduler.start()
    slow_peeks(monkeypatch, 1.0, None)

    result = scheduler.tick()

    assert [run.task.name for run in result.claimed] == ["soon"]
    run = Run.objects.get()
    assert run.trigger == "manual"
    assert run.scheduled_for == requested
    assert run.started_at is not None
    assert requested <= run.started_at <= database_now("default")
    assert result.now == run.started_at


def test_a_claim_by_the_database_clock_never_claims_before_the_due_time(
    tasks, make_scheduler, monkeypatch
):
    """A peek whose clock reading runs about five seconds ahead finds the task due within its
    round trip; the claim judges by the database's clock itself and leaves it alone."""
    if not has_clock("default"):
        pytest.skip("SQLite has no clock of its own: the host's is read at the tick")
    requested = database_now("default") + dt.timedelta(seconds=5)
    tasks("later", next_run_at=requested + dt.timedelta(days=1), run_requested_at=requested)
    scheduler = make_scheduler()
    scheduler.start()
    # 50 ms before the due time, whenever the peek comes; the reply takes 100 ms.
    slow_peeks(monkeypatch, 0.1, lambda peeked: peeked.next_due - dt.timedelta(seconds=0.05))

    result = scheduler.tick()

    assert result.claimed == []
    assert not Run.objects.exists()
    assert Task.objects.get(name="later").due_at == requested


@pytest.mark.parametrize("writing", [0, 3])
def test_the_stop_deadline_does_not_cut_off_an_outcome_write_in_progress(
    make_scheduler, monkeypatch, writing
):
    """A graceful stop still going soon after the signal, with no run left and no outcome
    queued, is stuck and forced out at once, unless a batch of outcomes is being written:
    cut off mid-write, runs whose callables returned would be found lost and run again.
    That stop gets the grace period (and its margin) like one with runs to wait for."""
    from django_posixcron.scheduling import shutdown

    scheduler = make_scheduler(grace=0.3)
    forced: list[str] = []
    monkeypatch.setattr(shutdown, "GRACEFUL_PAST_GRACE", 0.1)
    monkeypatch.setattr(shutdown, "_force", lambda scheduler, why: forced.append(why))
    scheduler.runs.writing = writing  # a flush's batch taken out and not committed yet
    scheduler.request_stop()

    deadline = threading.Thread(target=shutdown._stop_deadline, args=(scheduler,))
    deadline.start()
    deadline.join(10)

    assert len(forced) == 1
    if writing:
        assert "overran its 0.3 s grace period" in forced[0]
    else:
        assert "stop was stuck" in forced[0]


def test_run_once_inside_a_callers_transaction_is_refused_and_leaves_it_open(tasks, make_scheduler):
    # Scheduler.run_once() called from code inside atomic() (a project's TestCase drives it
    # so): closing every connection of the thread at the end took the caller's transaction
    # with it, and the caller's next query failed with "the connection is closed". Task code
    # cannot see or join that transaction either: the scheduler refuses to start there, as
    # runscheduler does, and the caller's transaction goes on.
    tasks("later", next_run_at=T0 + dt.timedelta(days=3650))
    with transaction.atomic():
        Hit.objects.create(task_name="before")
        with pytest.raises(RuntimeError, match="inside a transaction on the database"):
            make_scheduler().run_once()
        assert connection.in_atomic_block
        assert Hit.objects.filter(task_name="before").exists()
    assert Hit.objects.filter(task_name="before").exists()


def test_an_outcome_waits_out_a_read_only_postgresql(tasks, make_scheduler, caplog):
    # A standby, or a primary a failover demoted: "cannot execute SELECT FOR UPDATE in a
    # read-only transaction", an InternalError. Taken for a refusal of the outcome itself,
    # the outcome was dropped ("giving up on it"): the run stayed `running` for the life of
    # the process, every later occurrence of its `overlap: skip` task was skipped, and once
    # the process stopped, the run was marked lost and ran again.
    from tests.harness.processes import only_on

    only_on("postgresql", why="PostgreSQL's read-only error is not a connection error")
    from tests.harness.waiting import wait_until

    tasks("short")
    scheduler = make_scheduler()
    [run] = scheduler.tick(T0).started
    wait_until(lambda: scheduler.unrecorded == 1, what="the run to return")

    # Every new connection to the test database is read-only; this one too, from the next
    # transaction on.
    name = connection.ops.quote_name(connection.settings_dict["NAME"])
    with connection.cursor() as cursor:
        cursor.execute(f"ALTER DATABASE {name} SET default_transaction_read_only = on")
        cursor.execute("SET default_transaction_read_only = on")
    try:
        with caplog.at_level(logging.ERROR, logger="django_posixcron"):
            # Kept, as for a database that is away (each failed flush closes the connection
            # and the next opens a new one, read-only as well).
            scheduler.wait_idle(timeout=1)
    finally:
        with connection.cursor() as cursor:
            cursor.execute("SET default_transaction_read_only = off")
            cursor.execute(f"ALTER DATABASE {name} RESET default_transaction_read_only")
    assert scheduler.unrecorded == 1
    assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING
    assert not [r for r in caplog.records if getattr(r, "action", "") == "outcome_dropped"]
    assert "read-only transaction" in caplog.text

    # Writable again (a new connection): written, once.
    assert scheduler.wait_idle(timeout=10)
    assert Run.objects.get(pk=run.pk).status == RunStatus.SUCCEEDED
