"""The loop: tick wiring, run()/run_once(), back-off after database errors.

`Scheduler.tick(now)` is one pass and can be driven by tests with a fixed time; `run()` owns
sleeping, signals, the heartbeat and receiver threads, and database connections.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from typing import TYPE_CHECKING, TypeVar

from django.db import (
    DatabaseError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connections,
)
from django.db.models import Count, Max, Q
from django.utils import timezone as dj_timezone

from django_posixcron.conf import (
    MAX_POLL_INTERVAL,
    MIN_POLL_INTERVAL,
    get_settings,
    poll_interval_fault,
)
from django_posixcron.db import (
    app_alias,
    close_outside_transactions,
    conflict,
    database_now,
    database_read_only,
    drop_connection,
    fast_timestamps,
    has_clock,
    lock_not_granted,
    migrate_command,
    missing_table,
    one_line,
    outage,
    own_connection,
    pg_read_only,
    read_only,
)
from django_posixcron.executors import Executor, ThreadExecutor
from django_posixcron.log import get_logger
from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task, earliest
from django_posixcron.scheduling import alerts, liveness, rules, shutdown
from django_posixcron.scheduling.claim import Claimer, Peek, peek
from django_posixcron.scheduling.compiled import QueryCache
from django_posixcron.scheduling.execution import Runs
from django_posixcron.scheduling.maintenance import Pruner
from django_posixcron.scheduling.memory import release_freed_memory
from django_posixcron.scheduling.outcomes import (
    Notifier,
    describe_signal,
    log_finished,
    write_outcomes,
)
from django_posixcron.scheduling.rollout import Rollout
from django_posixcron.scheduling.watchdog import Watchdog
from django_posixcron.timing import require_aware

if TYPE_CHECKING:
    from django_posixcron.declarations import TaskDeclaration
    from django_posixcron.reconcile import Plan

logger = get_logger("django_posixcron.scheduler")
_T = TypeVar("_T")

# "The scheduler warns at start-up when host and database clocks differ by more than a second."
CLOCK_SKEW_WARNING = dt.timedelta(seconds=1)

# Two readings of the clock due-ness is judged by that differ from the time elapsed between
# them on this host's monotonic clock by more than this: that clock stepped.
CLOCK_STEP = dt.timedelta(seconds=2)

# In a burst, what the loop claims without asking the database clock is judged this far back.
BURST_CLOCK_MARGIN = dt.timedelta(milliseconds=5)

# At shutdown, run_finished receivers get this long to catch up before the process exits.
RECEIVERS_DRAIN = 10.0
# How often the loop counts the task rows: rows are never deleted by the scheduler (a task
# left out of settings is retired, its row kept), so fewer rows than the last count plus
# those created since means someone deleted some (a shell, a data migration, a test's
# teardown), maybe of tasks this process declares, which would then never fire again until
# the next start-up.
ROWS_CHECK_EVERY = 60.0
# How often the loop looks for failing episodes whose alert nobody sent (a shutdown gave it
# back, a forced exit left it unmarked): alerts.signal_owed_failing(). First at start-up.
OWED_CHECK_EVERY = 60.0


class Outage:
    """The loop's back-off through a database outage, and the grace it gives others after."""

    def __init__(
        self, stale_after: dt.timedelta, stall: float = float("inf"), using: str = "default"
    ) -> None:
        self.stale_after = stale_after
        self.using = using
        self.failures = 0
        # Whether one of them was the database not answering (not only a lock not granted).
        self.unreachable = False
        # After a database outage every process's heartbeat looks stale, its own included:
        # until this monotonic instant, no other process's runs are presumed lost.
        self.judge_from = 0.0
        # A wait on the database longer than this is a stall the others' heartbeats may have
        # waited through too (see stalled()).
        self.stall = stall
        # Whether this process itself did not run within the last given seconds (the
        # watchdog's view): such a wait was the process's, not the database's.
        self.starved: Callable[[float], bool] = lambda seconds: False

    def may_judge_others(self) -> bool:
        return time.monotonic() >= self.judge_from

    def stalled(self, waited: float, what: str) -> bool:
        """Hold judging the others if `what` waited on the database longer than a stall.

        A database that answers again after a long wait, without an error (a table lock held
        by a migration or a VACUUM FULL, a server frozen for a while), made the others'
        heartbeats wait as long as ours: the first read after it found every peer stale, and
        a live process's running runs were marked lost and retried beside themselves ("a run
        whose process is alive is never marked lost"). As after an outage, the others get a
        full stale threshold plus one back-off to beat again. Safe from any thread (the
        heartbeat's calls it too). Return whether it held.
        """
        if waited <= self.stall:
            return False
        until = time.monotonic() + self.stale_after.total_seconds() + rules.BACKOFF_MAX
        held, self.judge_from = self.judge_from, max(self.judge_from, until)
        if held <= time.monotonic():  # said once per hold, not at every slow statement
            logger.warning(
                "%s waited %.1f s %s; no other scheduler is judged gone for the next %.0f s, "
                "as their heartbeats may have waited as long",
                what,
                waited,
                # After a SIGSTOP or a suspended VM: the statement waited on this process.
                "(this process itself did not run for part of it: see process_starved)"
                if self.starved(waited)
                else "on the database",
                until - time.monotonic(),
                extra={"action": "judging_held"},
            )
        return True

    def failed(self, exc: BaseException, *, log: bool = True, exc_info: bool = False) -> float:
        """Count one more failure; log it; return how long to wait before the next try."""
        self.failures += 1
        delay = rules.back_off(self.failures)
        if conflict(exc):
            # The database answered: another process held a lock this one waited for (the
            # reconcile lock, say), or it turned this transaction away for a concurrent one
            # (a deadlock; a serialization failure, under SERIALIZABLE). Not an outage:
            # nobody's heartbeat was cut off, so judging the others is not put off either.
            if log:
                granted = lock_not_granted(exc)
                logger.warning(
                    "a database lock was not granted in time (attempt %d), retrying in %.1f s: %s"
                    if granted
                    else "the database turned a transaction away for a concurrent one "
                    "(attempt %d), retrying in %.1f s: %s",
                    self.failures,
                    delay,
                    one_line(exc),
                    extra={"action": "db_lock_timeout" if granted else "db_conflict"},
                )
            return delay
        self.unreachable = True
        if isinstance(exc, DatabaseError):
            # The others were cut off as long as we were, and may be sleeping in their own
            # back-off: once we are back, give them a full stale threshold plus one back-off
            # to heartbeat again before their running runs are marked lost (and retried while
            # they may still be running).
            self.judge_from = (
                time.monotonic() + delay + self.stale_after.total_seconds() + rules.BACKOFF_MAX
            )
        if log and missing_table(exc):
            # Not a bug to trace: the database answered without this app's tables.
            logger.error(
                "the database answers without this app's tables (attempt %d), retrying in "
                "%.1f s: %s: a database replaced, emptied or restored without them (SQLite "
                "creates an empty file where one was deleted)? Restore it, or run `%s` for "
                "a new one",
                self.failures,
                delay,
                one_line(exc),
                migrate_command(self.using),
                extra={"action": "db_error"},
            )
        elif log and database_read_only(exc):
            logger.error(
                "the database refuses writes, read-only (attempt %d), retrying in %.1f s: %s: "
                "a standby, or a primary a failover demoted? The scheduler waits until it "
                "accepts writes",
                self.failures,
                delay,
                one_line(exc),
                extra={"action": "db_error"},
            )
        elif log:
            logger.error(
                "database unavailable (attempt %d), retrying in %.1f s: %s",
                self.failures,
                delay,
                one_line(exc),
                exc_info=exc if exc_info else None,
                extra={"action": "db_error"},
            )
        return delay

    def recovered(self) -> None:
        if self.failures and self.unreachable:
            logger.warning(
                "database reachable again after %d failed attempts",
                self.failures,
                extra={"action": "db_recovered"},
            )
        self.failures = 0
        self.unreachable = False


class ClockSteps:
    """Notice a step of the clock due-ness is judged by, between two of the loop's readings.

    That clock is the database's on PostgreSQL and MariaDB, this host's on SQLite; it steps
    when NTP corrects it, when a virtual machine resumes from suspend, when someone sets it.
    Heartbeats are stamped by it: after a step forward every one stamped before the step
    looks that much older, and a process that beat a second ago would be presumed dead, its
    running runs marked lost and retried beside themselves; every due task would look
    overdue. For `hold` after a step forward no other process is judged and no task reported
    overdue: each live process beats again in that time, by the clock as it is now.
    """

    def __init__(self, hold: dt.timedelta) -> None:
        self.hold = hold.total_seconds()
        # The last reading, the monotonic clock when it arrived, and how long it took.
        self._last: tuple[dt.datetime, float, float] | None = None
        self.hold_until = 0.0

    def holding(self) -> bool:
        return time.monotonic() < self.hold_until

    def read(self, reading: dt.datetime, took: float = 0.0) -> None:
        """Take a reading of the clock; say so when it stepped since the last one.

        `took`: how long the query that read it took (the database reads its clock when the
        statement starts, the host pairs it with the moment the reply arrives): a statement
        that waited on a lock is no step of the clock.
        """
        at = time.monotonic()
        last, self._last = self._last, (reading, at, took)
        if last is None:
            return
        step = reading - (last[0] + dt.timedelta(seconds=at - last[1]))
        if abs(step) <= CLOCK_STEP + dt.timedelta(seconds=took + last[2]):
            return
        forward = step > dt.timedelta(0)
        if forward:
            self.hold_until = at + self.hold
        logger.warning(
            "the clock due times are judged by stepped %s by %.1f s (an NTP correction, a "
            "virtual machine resumed, a clock set by hand)%s",
            "forward" if forward else "back",
            abs(step.total_seconds()),
            f"; for the next {self.hold:.0f} s no other process is presumed dead and no task "
            "reported overdue, until heartbeats stamped after the step arrive"
            if forward
            else "",
            extra={"action": "clock_step", "seconds": step.total_seconds()},
        )


@dataclasses.dataclass
class TickResult:
    """What one tick did and how long the loop may sleep afterwards."""

    now: dt.datetime
    started: list[Run] = dataclasses.field(default_factory=list)
    queued: list[Run] = dataclasses.field(default_factory=list)  # handed to Django Tasks
    skipped: list[Run] = dataclasses.field(default_factory=list)
    lost: list[Run] = dataclasses.field(default_factory=list)
    timed_out: list[Run] = dataclasses.field(default_factory=list)
    overdue: list[Task] = dataclasses.field(default_factory=list)  # task_overdue sent for
    next_due_at: dt.datetime | None = None
    wake_in: float = 0.0
    # Tasks were due and the claim stopped at its limit (a full batch, or every local slot
    # busy): some may still be due. `run_once` claims them as slots free.
    left_due: bool = False

    @property
    def claimed(self) -> list[Run]:
        return self.started + self.queued + self.skipped


def inside_a_transaction(what: str, using: str) -> str:
    """The refusal to run tasks from inside a transaction of the caller's (a TestCase's)."""
    return (
        f"{what} inside a transaction on the database {using!r} (a TestCase, or "
        "transaction.atomic()). Task code runs on the scheduler's own threads and "
        "connections, which cannot see or join that transaction. Call it from a "
        "TransactionTestCase (pytest-django: @pytest.mark.django_db(transaction=True)), or "
        'test the task by calling its function directly; see "Testing your project" in the '
        "documentation."
    )


class Scheduler:
    """Claim due tasks, run them through an executor, record outcomes; one per process."""

    def __init__(
        self,
        *,
        declarations: Mapping[str, TaskDeclaration] | None = None,
        poll_interval: float | None = None,
        concurrency: int | None = None,
        grace: float = 25.0,
        batch_size: int = 100,
        executor: Executor | None = None,
        database: str | None = None,
    ) -> None:
        conf = get_settings()
        if declarations is None:
            from django_posixcron.declarations import load_declarations

            declarations = load_declarations()
        if poll_interval is not None and (fault := poll_interval_fault(poll_interval)):
            raise ValueError(
                f"poll_interval must be a number of seconds from {MIN_POLL_INTERVAL:g} to "
                f"{MAX_POLL_INTERVAL:g} (as POSIXCRON['POLL_INTERVAL']), got {poll_interval!r}: "
                f"{fault}"
            )
        self.using = app_alias(database)
        self.declarations: dict[str, TaskDeclaration] = dict(declarations)
        self.poll_interval = float(conf.poll_interval if poll_interval is None else poll_interval)
        self.concurrency = int(conf.concurrency if concurrency is None else concurrency)
        self.grace = float(grace)
        self.batch_size = int(batch_size)
        self.executor: Executor = executor or ThreadExecutor(self.concurrency)
        self.executor.set_wakeup(self._wake_soon)
        self.heartbeat_every = min(self.poll_interval, rules.HEARTBEAT_EVERY)
        self.stale_after = rules.stale_after(self.poll_interval)
        self.process: SchedulerProcess | None = None
        self.heartbeat: liveness.Heartbeat | None = None
        self.notifier = Notifier()
        self.runs = Runs(self.executor, self.using, self.notifier)
        self.claimer = Claimer(self.declarations, self.using)
        # The idle tick's statements, compiled once (compiled.py); used on this thread only.
        self.queries = QueryCache(self.using)
        self.rollout = Rollout(self.declarations, self.using, self.stale_after)
        self.pruner = Pruner(self.using, conf.history_days, self.now)
        self.signals = shutdown.SignalWatcher(
            functools.partial(shutdown.first_signal, self),
            functools.partial(shutdown.second_signal, self),
        )

        self._stop = threading.Event()
        # When the stop was first asked for (monotonic): the grace period counts from then.
        self.stop_requested_at: float | None = None
        # Whether the graceful stop is giving signal receivers their time, and whether it
        # has ended (a first signal's deadline watches both: shutdown.first_signal), and the
        # lock of the forced exit, which the deadline and a second signal may race to.
        self.draining_receivers = False
        self.stopped = threading.Event()
        self.forcing = threading.Lock()
        self._wake = threading.Event()
        # The database clock's last reading and this host's monotonic clock then: now()
        # counts from them, so a step of the host's wall clock (NTP) moves no estimate. None
        # until the first reading, and on a backend without a clock.
        self._clock_read: tuple[dt.datetime, float] | None = None
        self.overdue_watch = alerts.OverdueWatch(self.poll_interval)
        # run_once() looks for overdue tasks once, after its claims, not in each tick.
        self._overdue_after_claims = False
        # A wait longer than a heartbeat interval, and at least 5 s (a slow statement on a busy
        # server is not yet a stall), may have held the others' beats past their interval.
        self.outage = Outage(
            self.stale_after, stall=max(5.0, self.heartbeat_every), using=self.using
        )
        self.clock_steps = ClockSteps(self.stale_after)
        # Says so when the loop or the heartbeat waits on a database that does not answer.
        self.watchdog = Watchdog(self.stale_after.total_seconds())
        self.outage.starved = self.watchdog.starved_within
        # run() and run_once() beat and send run_finished from threads of their own; a
        # scheduler driven by tick() alone does both inline.
        self._serving_threads = False
        # Whether the last tick claimed a full batch, and when the loop last peeked.
        self._burst = False
        self._peeked_at = 0.0
        # The task rows counted at the last reconcile or check, and their highest id (see
        # ROWS_CHECK_EVERY).
        self._rows: tuple[int, int] | None = None
        self._rows_check_at = 0.0
        self._owed_check_at = 0.0
        # Whether an alert receiver was found stuck (said once per episode of it).
        self._alerts_stuck = False

    # -- clocks and lifecycle ---------------------------------------------------------------

    def measure_clock(self) -> dt.timedelta:
        """Measure how far the database clock is ahead of this host's; remember it."""
        before = dj_timezone.now()
        db_now = database_now(self.using)
        after = dj_timezone.now()
        if has_clock(self.using):  # SQLite's clock is this host's: nothing to estimate
            self._clock_read = (db_now, time.monotonic())
        return db_now - (before + (after - before) / 2)

    def now(self) -> dt.datetime:
        """Return the best estimate of the database clock without asking it.

        The last reading of the database clock plus the time elapsed since on this host's
        monotonic clock: never ahead of the database clock by more than their drift since
        (the reading is taken when its reply arrives, so it is behind by the reply's
        latency), and blind to steps of the host's wall clock, which judging due-ness by a
        wall-clock offset would take for time passing, and fire occurrences early.
        """
        if self._clock_read is None:
            return dj_timezone.now()
        read, at = self._clock_read
        return read + dt.timedelta(seconds=time.monotonic() - at)

    def start(self) -> None:
        """Register this process (host, pid) with its first heartbeat."""
        if connections[self.using].in_atomic_block:
            # As runscheduler (refuse_inside_a_transaction): a TestCase driving a Scheduler.
            raise RuntimeError(inside_a_transaction("a Scheduler was started", self.using))
        offset = self.measure_clock()
        if abs(offset) > CLOCK_SKEW_WARNING:
            logger.warning(
                "host and database clocks differ by %.3f s (database %s); due times follow "
                "the database clock, fix NTP on this host",
                offset.total_seconds(),
                "ahead" if offset > dt.timedelta(0) else "behind",
                extra={"action": "clock_skew"},
            )
        # The set first: a peer that sees our row can read what we declare.
        digest = self.rollout.record()
        now = self.now()
        self.process = liveness.register(self.using, now, digest)
        self.heartbeat = liveness.Heartbeat(
            self.using,
            self.process,
            self.heartbeat_every,
            self.runs.pks,
            stale_after=self.stale_after.total_seconds(),
            watchdog=self.watchdog,
            stalled=self.outage.stalled,
        )
        self.pruner.next_at = now
        if self._serving_threads:
            self.heartbeat.start()
        handed_off = len(self.claimer.handoff_names)
        logger.info(
            "scheduler started process=%s tasks=%d concurrency=%d poll_interval=%s%s",
            self.process.label,
            len(self.declarations),
            self.concurrency,
            self.poll_interval,
            f" handed_off={handed_off}" if handed_off else "",
            extra={"action": "scheduler_started"},
        )

    def _silent_too_long(self) -> bool:
        """Whether this process went silent past the stale limit, so that peers of another
        declaration set may have judged it gone and retired or rewritten what it declares.

        "A task that any live scheduler declares never stops firing": back, it reconciles
        again, restoring what it declares and deferring what live peers hold, as at start-up.
        """
        silence = None if self.heartbeat is None else self.heartbeat.silence()
        if silence is None or self.rollout.deferred is None:
            return False
        logger.warning(
            "this process went %.0f s without a heartbeat, past the %.0f s after which others "
            "judge it gone; reconciling again",
            silence,
            self.stale_after.total_seconds(),
            extra={"action": "silence_reconcile"},
        )
        return True

    def reconcile(self, now: dt.datetime | None = None) -> Plan:
        """Reconcile settings into the database as this registered process; return the plan.

        Registered first, so that every process reconciling after us defers to what we
        declare, and we to what the live ones declare.
        """
        if self.process is None:
            self.start()
        assert self.process is not None
        result = self.rollout.reconcile(self.process, now or self.now())
        self._rows = self._count_rows()[:2]
        self._rows_check_at = time.monotonic() + ROWS_CHECK_EVERY
        # What reconciling read and planned is garbage now; at 100,000 tasks the pages it
        # used stayed resident for the process's life.
        release_freed_memory()
        # Definitions may now match ours: look at every due task again at once.
        self.claimer.forget_mismatches()
        return result

    def _count_rows(self, above: int = 0) -> tuple[int, int, int]:
        """Return how many task rows there are, the highest id, and how many ids are above
        `above` (one query)."""
        counted = Task.objects.using(self.using).aggregate(
            rows=Count("pk"), top=Max("pk"), created=Count("pk", filter=Q(pk__gt=above))
        )
        return counted["rows"], counted["top"] or 0, counted["created"]

    def _rows_deleted(self) -> bool:
        """Whether task rows were deleted since the last count (at most once a minute).

        Rows created since (another deploy's new tasks) have ids above the last count's
        highest (ids only grow, on SQLite too: Django's AUTOINCREMENT), so a deletion is seen
        even when as many rows were created meanwhile.
        """
        if self._rows is None or time.monotonic() < self._rows_check_at:
            return False
        self._rows_check_at = time.monotonic() + ROWS_CHECK_EVERY
        (before, top), (rows, new_top, created) = self._rows, self._count_rows(self._rows[1])
        self._rows = rows, max(top, new_top)
        deleted = before + created - rows
        if deleted <= 0:
            return False
        logger.warning(
            "%d task row(s) were deleted while this scheduler ran; reconciling, so that every "
            "task it declares has its row again",
            deleted,
            extra={"action": "task_rows_deleted"},
        )
        return True

    def request_stop(self) -> None:
        """Stop claiming; `run()` then waits for running tasks and returns."""
        if self.stop_requested_at is None:
            self.stop_requested_at = time.monotonic()
        self._stop.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    @property
    def unrecorded(self) -> int:
        """Return how many finished runs' outcomes are waiting to be written."""
        return self.runs.unrecorded

    def _wake_soon(self) -> None:
        self._wake.set()

    # -- the tick ---------------------------------------------------------------------------

    def tick(
        self, now: dt.datetime | None = None, *, due_by: dt.datetime | None = None
    ) -> TickResult:
        """Do one pass: mark lost runs, claim and start due tasks, prune.

        `due_by` claims only what was due by that instant (`--once`: what its first tick
        found due), however late the tick is; the runs still start at the tick's instant.
        """
        if now is not None:
            require_aware(now)
        if due_by is not None:
            require_aware(due_by, "due_by")
        if self.process is None:
            self.start()
        assert self.process is not None
        assert self.heartbeat is not None
        explicit = now is not None
        began = time.monotonic()
        # Once per connection: this thread's queries are the scheduler's own.
        fast_timestamps(connections[self.using])
        self.runs.flush(queued_only=True)
        if not self.heartbeat.threaded:
            # Driven by tick() alone (tests, the benchmark): beat here, at the tick's instant.
            self.heartbeat.beat(now)
        self.claimer.refresh_mismatches(now or self.now())
        # In a burst (the last tick claimed a full batch) the loop claims again at once and
        # skips the peek: the clock, the peers, lost runs and overdue tasks it reads are read
        # again within a heartbeat interval, when the burst ends or its turn comes.
        bursting = (
            not explicit
            and self._burst
            and time.monotonic() - self._peeked_at < self.heartbeat_every
        )
        overdue_before = None
        round_trip = 0.0
        if bursting:
            # Judged by this host's estimate of the database clock, measured at the last peek
            # (under a second ago) and set back a little, so that the estimate's error (the
            # reply's latency counts against the host; drift is well under a millisecond a
            # second) never claims an occurrence before the database clock reaches it.
            now = self.now() - BURST_CLOCK_MARGIN
            peeked = Peek(None, now, (0, 0, 0))
        else:
            if not explicit and not has_clock(self.using):
                # SQLite: due-ness is judged by this host's clock, read here.
                self.clock_steps.read(self.now())
            # "A due task not claimed within POLL_INTERVAL"; by this host's estimate of the
            # database clock when no instant is given (a threshold, not a due-ness judgement).
            if not self.clock_steps.holding() and not self._overdue_after_claims:
                overdue_before = self.overdue_watch.threshold(now or self.now())
            probe_at = now or self.now()
            sent = time.monotonic()
            # Liveness is a fact about real time, even in a tick driven at another instant.
            peeked = peek(
                self.using,
                self.process,
                self.claimer.mismatched,
                with_clock=not explicit,
                live_since=self.now() - self.stale_after,
                overdue_before=overdue_before,
                # By this host's estimate of the database clock when no instant is given: a
                # threshold of seconds, and mark_lost() judges again at the tick's instant.
                lost_at=(probe_at - self.stale_after, probe_at),
                cache=self.queries,
            )
            self._peeked_at = time.monotonic()
            round_trip = self._peeked_at - sent
        db_now, next_due = peeked.db_now, peeked.next_due
        if now is None:
            now = db_now or self.now()
            if db_now is not None:
                self.clock_steps.read(db_now, round_trip)
                self._clock_read = (db_now, time.monotonic())
        # A read that waited long (a table lock, a frozen server) found the others as stale
        # as the wait made them; so does one made while our own heartbeat is still waiting.
        self.outage.stalled(round_trip, "the scheduler loop's read")
        self.outage.stalled(self.watchdog.waited("heartbeat"), "the heartbeat")
        judging = self.outage.may_judge_others() and not bursting and not self.clock_steps.holding()
        # After an outage every peer looks stale: judge none gone until they could beat.
        silent = self._silent_too_long() if judging else False
        if judging and (
            self.rollout.peers_changed(self.process, peeked.others, self.now())
            or silent
            or self._rows_deleted()
        ):
            self.reconcile(now)
            # Tasks deferred until now may be due: let the claim look at once.
            next_due = now
        result = TickResult(now=now, next_due_at=next_due)
        if self.claimer.unsure:
            # The last claim's commit lost its reply: what it committed starts now, or its
            # runs would stay `running` for as long as this process lives.
            # A beat first: after a silence that long, no peer takes this process for gone
            # (and marks these runs lost) while they start.
            self.heartbeat.beat(now if explicit else None)
            committed = self.claimer.committed_runs(self.process, now)
            for run, _ in committed:
                if run.status == RunStatus.SKIPPED:
                    log_finished(run)
                    self.notifier.finished(run)
                    result.skipped.append(run)
            started = [(r, d) for r, d in committed if r.status != RunStatus.SKIPPED]
            self._start(started, now, time.monotonic(), result)
        if judging and peeked.lost:
            result.lost = liveness.mark_lost(
                self.using, self.process, now, self.stale_after, self.notifier
            )
        result.timed_out = self.runs.check_timeouts(
            now, self.executor.stops_on_timeout, explicit=explicit
        )
        if result.lost or result.timed_out:
            # Their retries fall due retry_delay from now, maybe before what the peek read:
            # the loop wakes for them instead of sleeping until the next poll.
            next_due = result.next_due_at = earliest(
                next_due, *(now + run.task.retry_delay for run in result.lost + result.timed_out)
            )
        # An alert receiver stuck: the episodes queued behind it go back to the fleet, and
        # this process wins no more until it returns.
        alerting = self._alerting() if judging else self.notifier.alerting()
        if judging and alerting and time.monotonic() >= self._owed_check_at:
            self._owed_check_at = time.monotonic() + OWED_CHECK_EVERY
            conf = get_settings()
            alerts.signal_owed_failing(
                self.using, self.notifier, conf.failing_after, conf.pause_after_failures
            )
        if peeked.overdue and overdue_before is not None and alerting:
            result.overdue = alerts.signal_overdue(overdue_before, self.using, self.notifier)
        limit = 0
        slotless = False
        # A task that falls due within the peek's own round trip is due by the time a claim
        # reaches the database: claimed now, by the database's clock, instead of after
        # another peek (a millisecond of a firing's latency). Never before its due time.
        by_db_clock = (
            not explicit
            and due_by is None
            and db_now is not None
            and rules.due_within(next_due, now, round_trip)
        )
        due_at_most = now if due_by is None else min(now, due_by)
        due = (
            next_due is not None and (next_due <= due_at_most or by_db_clock) and not self.stopping
        )
        free = 0
        if due:
            free = self.executor.free_slots()
            limit = min(self.batch_size, free)
            # Every local slot busy: runs handed to workers elsewhere can still be claimed, and
            # occurrences skipped because their task's previous run is still going.
            slotless = limit == 0
            if slotless:
                limit = self.batch_size
            if limit > 0:
                claim_sent = time.monotonic()
                started, result.skipped, claimed_at = self.claimer.claim(
                    None if by_db_clock else now,
                    limit,
                    self.process,
                    slotless=slotless,
                    due_by=due_by,
                )
                if claimed_at is not None:
                    now = result.now = claimed_at
                # The transaction is closed before any task code runs.
                for run in result.skipped:
                    log_finished(run)
                    self.notifier.finished(run)
                self._start(started, now, claim_sent, result)
        # Not when a task falls due within moments, nor after a claim (what it read is due);
        # but when what is due waits for a slot and nothing was claimed, since nothing can
        # start meanwhile: a saturated scheduler always has tasks due, and never pruned.
        waiting_for_slots = slotless and not result.claimed
        self.pruner.prune(now, None if waiting_for_slots else result.next_due_at)
        claimed = bool(result.claimed)
        self._burst = not slotless and limit > 0 and len(result.claimed) >= limit
        result.left_due = due and (free == 0 or len(result.claimed) >= limit)
        if slotless and not claimed:
            # What is due waits for a local slot: sleep until one frees, not at CONTENDED_RETRY.
            limit = 0
        wait = rules.wake_in(now, self.heartbeat_every, result.next_due_at, limit, claimed)
        # wake_in counts from the tick's start (run() takes the tick's time off it), and the
        # timeouts, counted at this moment, from the same.
        timeouts = self.runs.timeouts_in(now if explicit else None)
        if not explicit:
            timeouts = [left + (time.monotonic() - began) for left in timeouts]
        result.wake_in = min([wait, *timeouts])
        return result

    def _start(
        self,
        started: list[tuple[Run, TaskDeclaration]],
        now: dt.datetime,
        claimed_monotonic: float,
        result: TickResult,
    ) -> None:
        """Start the claimed local runs, then hand the others to their Tasks backends."""
        # The local runs first, before anything after the commit can fail or wait: a
        # database that drops the connection, or a Tasks broker slow to answer, must not
        # leave a committed `running` run unexecuted (its process alive, nobody would ever
        # mark it lost) nor start it late.
        for run, declaration in started:
            if run.backend:  # handed off (or refused by its backend, and recorded)
                result.queued.append(run)
            else:
                self.runs.launch(run, declaration, now, claimed_monotonic)
                result.started.append(run)
        with self.watchdog.waiting_on("loop", "a Tasks backend's enqueue"):
            refused = self.claimer.enqueue_after_commit(started)
        if refused:
            try:
                write_outcomes(refused, self.using, self.notifier)
            except Exception:
                # Kept, and written with the runs' outcomes once the database is back.
                for outcome in refused:
                    self.runs.queue(outcome)
                raise

    def _alerting(self) -> bool:
        """Whether this process may win alert episodes; give back those queued behind an
        alert receiver that is stuck, and say so."""
        stuck = self.notifier.alerts_stuck()
        if stuck is None:
            if self._alerts_stuck:
                self._alerts_stuck = False
                logger.warning(
                    "the alert receivers answer again: this process signals alerts again",
                    extra={"action": "alerts_unstuck"},
                )
            return True
        if not self._alerts_stuck:
            self._alerts_stuck = True
            waited, sig, kwargs = stuck
            logger.warning(
                "a receiver of %s has been busy for %.0f s (a call without a timeout?): this "
                "process gives the alerts queued behind it back to the other schedulers, and "
                "signals none until it returns",
                describe_signal(sig, kwargs),
                waited,
                extra={"action": "alerts_stuck"},
            )
        taken = self.notifier.take_episodes()
        if taken:
            alerts.give_back(taken, self.using)
            logger.warning(
                "gave %d alert(s) back to the other schedulers: %s",
                len(taken),
                ", ".join(describe_signal(sig, kwargs) for sig, kwargs in taken),
                extra={"action": "alerts_given_back"},
            )
        return False

    # -- the loop ---------------------------------------------------------------------------

    def run(self) -> None:
        """Tick until asked to stop, then wait for running tasks and return."""
        with self._serving():
            slept = float("inf")
            while not self.stopping:
                self._wake.clear()
                started = time.monotonic()
                # wake_in counts from the tick's instant, not from its end: "a run starts
                # within milliseconds of its occurrence", not the tick's duration after it.
                with self.watchdog.watching("loop"):
                    wake_in = self._safe_tick(recycle=slept >= self.heartbeat_every)
                wake_in -= time.monotonic() - started
                self._sleep(wake_in)
                slept = time.monotonic() - started

    def _sleep(self, seconds: float) -> None:
        """Sleep until the next tick: `seconds`, or less when woken (a run ended, a stop).

        Through an outage the back-off is slept whole, woken only to stop: a run ending
        cannot make the database answer, and every run that ended meanwhile cut the back-off
        short (ten attempts in three seconds, each saying "retrying in 10.0 s")."""
        until = time.monotonic() + seconds
        while not self.stopping and (left := until - time.monotonic()) > 0:
            self._wake.wait(left)
            if not self.outage.failures:
                return
            self._wake.clear()

    def run_once(self) -> TickResult:
        """Fire what is due now, wait for the runs, record their outcomes, stop.

        One tick, and more while it left tasks due for want of a free slot (more due than
        `CONCURRENCY`): those are claimed as runs end, until nothing due at the first tick's
        instant is left. Left to the next invocation, they would be claimed after their next
        occurrence had passed too, and that occurrence never fired ("no make-up"). What fell
        due after the first tick's instant (the next minute's occurrences, a retry, a
        request) is left to the next invocation, as one tick would leave it. Return what all
        the ticks did.
        """
        with self._serving():
            if self.process is None:
                self.start()
            # Looked for before the claim, a retry or a request due mid-minute (claims happen
            # at minute boundaries when system cron runs --once) read as overdue, "not
            # claimed", to the very invocation about to claim it: a warning mailed by cron at
            # every retry. What the claims leave due is looked at once they are done.
            self._overdue_after_claims = True
            with self.watchdog.watching("loop"):
                result = self.tick()
            as_of, total = result.now, result
            while not self.stopping and result.left_due:
                self._wake.clear()
                if self.executor.free_slots() == 0:
                    # Woken when a run ends; a tick at least every heartbeat interval records
                    # outcomes meanwhile, and one at the first timeout of a run in flight
                    # records it on time (it waited for another run to end).
                    self._wake.wait(min([self.heartbeat_every, *self.runs.timeouts_in()]))
                # A peek, not a burst's blind claim: it reads what is still due.
                self._burst = False
                with self.watchdog.watching("loop"):
                    result = self.tick(due_by=as_of)
                for field in ("started", "queued", "skipped", "lost", "timed_out", "overdue"):
                    getattr(total, field).extend(getattr(result, field))
                if result.next_due_at is None or result.next_due_at > as_of:
                    break
            with self.watchdog.watching("loop"):
                total.overdue.extend(self._overdue_left(as_of))
            while not self.stopping:
                # Each wait lasts a heartbeat interval at most, unless writing the outcomes
                # waits on the database: the watchdog then says so.
                with self.watchdog.watching("loop"):
                    if self.wait_idle(self.heartbeat_every):
                        break
            return total

    def _overdue_left(self, as_of: dt.datetime) -> list[Task]:
        """Signal the tasks the claims left due for longer than POLL_INTERVAL at `as_of`
        (held by another scheduler, declared differently by a live peer, ...)."""
        if self.stopping or self.clock_steps.holding() or not self.notifier.alerting():
            return []
        before = as_of - dt.timedelta(seconds=self.poll_interval)
        try:
            return alerts.signal_overdue(before, self.using, self.notifier)
        except DatabaseError as exc:
            # Runs started by this invocation are still going: an alert that cannot be
            # looked for must not end the wait for them (past --grace, they would be
            # recorded interrupted while they run, and retried).
            logger.error(
                "could not look for overdue tasks: %s",
                one_line(exc),
                extra={"action": "db_error"},
            )
            drop_connection(self.using)
            return []

    @contextlib.contextmanager
    def _serving(self) -> Iterator[None]:
        """Handle signals and beat while serving; then shut down, whatever ended it."""
        # The loop's queries on a connection of its own, outside a pool task code may hold
        # all of (runscheduler has given it one already; run() called from code has not).
        give_back = own_connection(self.using)
        self.signals.install()
        self._serving_threads = True
        if self.heartbeat is not None:
            self.heartbeat.start()
        self.notifier.start()
        self.watchdog.start()
        try:
            yield
        finally:
            try:
                self.shutdown()
            finally:
                self.stopped.set()
                self.watchdog.stop()
                self.signals.restore()
                # This thread's connections would otherwise outlive the loop it served; not
                # one inside a transaction of the caller's (a test case's, a command called
                # from code in atomic()): closed, it took that transaction with it.
                close_outside_transactions()
                give_back()

    def _safe_tick(self, *, recycle: bool = True) -> float:
        try:
            if recycle:
                # Between bursts only: with CONN_MAX_AGE = 0 (Django's default) this closes
                # the connection, and reconnecting in every tick of a burst of claims, or
                # at a due instant the loop woke for, cost more than the claim itself.
                close_old_connections()
            if self.process is None:
                self.start()
            result = self.tick()
        except (OperationalError, InterfaceError) as exc:
            return self._back_off(exc)
        except DatabaseError as exc:
            # Anything else from the driver (SQLite's "closed database", a missing table
            # before migrate): the same back-off, with the traceback since it may be a bug;
            # not for a read-only PostgreSQL (a standby, a demoted primary), an outage.
            return self._back_off(exc, exc_info=not pg_read_only(exc))
        except Exception as exc:
            logger.exception("scheduler tick failed", extra={"action": "tick_error"})
            return self._back_off(exc, log=False)
        self.outage.recovered()
        return result.wake_in

    def _back_off(self, exc: BaseException, *, log: bool = True, exc_info: bool = False) -> float:
        delay = self.outage.failed(exc, log=log, exc_info=exc_info)
        try:
            # Throw the broken connection away; the next tick opens a fresh one.
            connections[self.using].close()
        except Exception:
            logger.debug("closing the broken connection failed", exc_info=True)
        return delay

    def until_reachable(self, prepare: Callable[[], _T]) -> _T | None:
        """Call `prepare` until the database lets it finish, backing off as the loop does.

        Return its result, or None when a signal asked the process to stop meanwhile. A
        scheduler started while its database is down (a reboot where the application comes
        up first) waits for it instead of exiting into a crash loop.
        """
        # The handlers stay installed on success, so a signal between start-up and the loop
        # is a graceful stop (run() finds `stopping` set), not the default: death by SIGTERM.
        installed = self.signals.install()
        ready = False
        try:
            while not self.stopping:
                try:
                    result = self.starting_up(prepare)
                except DatabaseError as exc:
                    if not outage(exc) or read_only(exc):
                        raise  # refused what was sent: waiting would not change the answer
                    self._wake.clear()
                    self._wake.wait(self._back_off(exc))
                    continue
                self.outage.recovered()
                ready = True
                return result
            return None
        finally:
            if installed and not ready:
                self.signals.restore()

    def starting_up(self, prepare: Callable[[], _T]) -> _T:
        """Call `prepare` (registering, reconciling) under the watchdog's eye: a database
        that stops answering in the middle of it is logged (``db_stalled``), not waited on in
        silence. The watchdog goes on watching the loop that follows; it stops with it, or
        here when `prepare` fails."""
        self.watchdog.start()
        try:
            with self.watchdog.watching("start-up"):
                return prepare()
        except BaseException:
            self.watchdog.stop()
            raise

    # -- waiting and stopping -----------------------------------------------------------------

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for the runs in flight to finish and record their outcomes.

        Return False if `timeout` passed first. Timeouts of runs in flight are enforced
        while waiting.
        """
        return self.runs.wait_idle(timeout, self.now)

    def shutdown(self) -> None:
        """Stop claiming, wait up to `grace` for runs, mark the rest interrupted."""
        self.request_stop()
        if self.process is not None:
            shutdown.graceful(self, RECEIVERS_DRAIN)
