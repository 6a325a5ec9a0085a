"""The scheduler: claim due tasks exactly once, hand them to an executor, record outcomes.

`Scheduler.tick(now)` is one pass of the loop and can be driven by tests with a fixed time;
`Scheduler.run()` owns sleeping, signals and database connections.
"""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import functools
import logging
import os
import signal
import socket
import threading
import time
import traceback
from collections.abc import Callable, Iterator, Mapping
from types import FrameType
from typing import TYPE_CHECKING, Any, TypeVar

from django.db import (
    DatabaseError,
    IntegrityError,
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    connections,
    transaction,
)
from django.db.models import DateTimeField, Func, Model, Q, Subquery
from django.utils import timezone as dj_timezone

from django_posixcron import __version__
from django_posixcron.conf import get_settings
from django_posixcron.executors import (
    Executor,
    TaskCodeError,
    ThreadExecutor,
    describe_exception,
)
from django_posixcron.models import (
    FAILURE_STATUSES,
    Overlap,
    Run,
    RunStatus,
    SchedulerProcess,
    Task,
    Trigger,
    earliest,
)
from django_posixcron.signals import run_finished, run_started
from django_posixcron.timing import next_occurrence

if TYPE_CHECKING:
    from django_posixcron.declarations import TaskDeclaration

logger = logging.getLogger(__name__)

UTC = dt.UTC
_T = TypeVar("_T")

# A process is presumed dead once it has missed three heartbeats: one slow tick (a big claim,
# a GC pause, a database hiccup) must not turn its runs into lost ones and fire them twice.
# The floor covers very short poll intervals, where three ticks are shorter than a database
# failover or a container being rescheduled.
STALE_AFTER_TICKS = 3
STALE_AFTER_MIN = dt.timedelta(seconds=30)

# Every process heartbeats at least this often, whatever its poll interval, so that a process
# polling every minute is not taken for dead by one whose threshold is the 30 s floor.
HEARTBEAT_EVERY = 10.0

# Error texts and tracebacks are kept whole up to this size; past it the tail, where the
# failing frame is, is kept. A task raising a huge message must not bloat the history table.
TEXT_LIMIT = 64 * 1024

# Retention is counted in days, so pruning once an hour per process is plenty; batches keep
# each DELETE short so it never holds locks that claims wait on.
PRUNE_EVERY = dt.timedelta(hours=1)
PRUNE_BATCH = 1000
PRUNE_MAX_BATCHES_PER_TICK = 20
# Rows of stopped or dead processes are kept this long (and while runs in the history name
# them): long enough to read in the admin what happened to a process that died last night.
PROCESS_ROWS_KEPT = dt.timedelta(days=1)

# Outcomes are written this many per transaction: enough to keep up with thousands of short
# runs per second, few enough that the locks they take are held for milliseconds.
OUTCOME_BATCH = 200

# Tasks whose stored definition differs from ours are left out of the claim query, then
# looked at again after this long, so a rolling deploy that settles is noticed within a minute.
MISMATCH_RECHECK = dt.timedelta(seconds=60)

# Rows due but locked by another scheduler are committed by it within milliseconds; asking
# again this soon neither spins nor leaves the rest of a large due batch waiting a full poll.
CONTENDED_RETRY = 0.05

# Database outage back-off: quick enough to notice a restart within a second, capped so a
# long outage costs one log line and one connection attempt every half minute.
BACKOFF_MIN = 0.5
BACKOFF_MAX = 30.0

# "The scheduler warns at start-up when host and database clocks differ by more than a second."
CLOCK_SKEW_WARNING = dt.timedelta(seconds=1)


def stale_after(poll_interval: float) -> dt.timedelta:
    """Return how long without a heartbeat makes a scheduler process presumed dead."""
    heartbeat_every = min(poll_interval, HEARTBEAT_EVERY)
    return max(STALE_AFTER_MIN, dt.timedelta(seconds=STALE_AFTER_TICKS * heartbeat_every))


class DatabaseNow(Func):
    """The database server's current instant, as UTC: the clock due-ness is judged by."""

    template = "CURRENT_TIMESTAMP"
    output_field = DateTimeField()

    def as_postgresql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # Not CURRENT_TIMESTAMP: on PostgreSQL that is the start of the transaction.
        return self.as_sql(compiler, connection, template="STATEMENT_TIMESTAMP()", **extra)

    def as_mysql(self, compiler: Any, connection: Any, **extra: Any) -> Any:
        # Not CURRENT_TIMESTAMP(6): that follows the session time zone, which Django leaves as
        # the server's; UTC_TIMESTAMP is UTC whatever the server is configured with.
        return self.as_sql(compiler, connection, template="UTC_TIMESTAMP(6)", **extra)


def database_has_clock() -> bool:
    """Return whether due-ness is judged by the database's clock (not SQLite's host clock)."""
    return connection.vendor in ("postgresql", "mysql")


def _cap(text: str, *, keep_tail: bool = False) -> str:
    """Return text fit for the history table: capped in size, without NUL characters.

    PostgreSQL text columns refuse NUL; an error message quoting binary data must not make
    the outcome unwritable (and the scheduler retry it forever).
    """
    text = text.replace("\x00", "\\x00")
    if len(text) <= TEXT_LIMIT:
        return text
    marker = "[... truncated ...]\n"
    if keep_tail:
        return marker + text[-(TEXT_LIMIT - len(marker)) :]
    return text[: TEXT_LIMIT - len(marker)] + "\n" + marker.strip()


def _send_robust(sig: Any, run: Run) -> None:
    for receiver, result in sig.send_robust(sender=Scheduler, run=run):
        if isinstance(result, BaseException):
            logger.error(
                "signal receiver %r raised %r; ignored",
                receiver,
                result,
                exc_info=result,
                extra={"action": "signal_receiver_error"},
            )


@dataclasses.dataclass
class TickResult:
    """What one tick did and how long the loop may sleep afterwards."""

    now: dt.datetime
    started: list[Run] = dataclasses.field(default_factory=list)
    skipped: list[Run] = dataclasses.field(default_factory=list)
    lost: list[Run] = dataclasses.field(default_factory=list)
    timed_out: list[Run] = dataclasses.field(default_factory=list)
    next_due_at: dt.datetime | None = None
    wake_in: float = 0.0

    @property
    def claimed(self) -> list[Run]:
        return self.started + self.skipped

    @property
    def next_wake_at(self) -> dt.datetime:
        return self.now + dt.timedelta(seconds=self.wake_in)


@dataclasses.dataclass
class _InFlight:
    run: Run
    declaration: TaskDeclaration
    deadline: dt.datetime | None
    started_monotonic: float = dataclasses.field(default_factory=time.monotonic)

    def elapsed_finish(self) -> dt.datetime:
        """Return started_at plus the time measured since, in the claim's clock."""
        assert self.run.started_at is not None
        return self.run.started_at + dt.timedelta(seconds=time.monotonic() - self.started_monotonic)


@dataclasses.dataclass
class _Outcome:
    run: Run
    status: str
    finished_at: dt.datetime
    error: str = ""
    traceback: str = ""


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
    ) -> None:
        conf = get_settings()
        if declarations is None:
            from django_posixcron.declarations import load_declarations

            declarations = load_declarations()
        self.declarations: dict[str, TaskDeclaration] = dict(declarations)
        self.poll_interval = float(conf.poll_interval if poll_interval is None else poll_interval)
        self.concurrency = int(conf.concurrency if concurrency is None else concurrency)
        self.grace = float(grace)
        self.batch_size = int(batch_size)
        self.history_days = conf.history_days
        self.executor: Executor = executor or ThreadExecutor(self.concurrency)
        self.executor.set_wakeup(self._wake_soon)
        self.heartbeat_every = min(self.poll_interval, HEARTBEAT_EVERY)
        self.stale_after = stale_after(self.poll_interval)
        self.process: SchedulerProcess | None = None

        self._stop = threading.Event()
        self._wake = threading.Event()
        # Reentrant: the second-signal handler runs on the main thread and takes it, possibly
        # while the main thread it interrupted holds it.
        self._lock = threading.RLock()
        self._inflight: dict[int, _InFlight] = {}
        self._outcomes: list[_Outcome] = []
        self._clock_offset = dt.timedelta(0)
        self._mismatched: dict[int, str] = {}
        self._mismatch_logged: set[tuple[str, str]] = set()
        self._mismatch_recheck_at: dt.datetime | None = None
        self._next_prune_at: dt.datetime | None = None
        self._failures = 0
        # After a database outage every process's heartbeat looks stale, its own included:
        # until this monotonic instant, no other process's runs are presumed lost.
        self._lost_check_from = 0.0
        self._signals_received = 0
        self._previous_handlers: dict[int, Any] = {}

    # -- clocks ---------------------------------------------------------------------------

    def database_clock(self) -> dt.datetime | None:
        """Return the database's current UTC instant, or None where it has no clock."""
        if not database_has_clock():
            return None
        sql = "SELECT STATEMENT_TIMESTAMP()" if connection.vendor == "postgresql" else None
        with connection.cursor() as cursor:
            cursor.execute(sql or "SELECT UTC_TIMESTAMP(6)")
            value: dt.datetime = cursor.fetchone()[0]
        if value.tzinfo is None:
            value = value.replace(tzinfo=UTC)
        return value.astimezone(UTC)

    def measure_clock(self) -> dt.timedelta:
        """Measure how far the database clock is ahead of this host's; remember it."""
        before = dj_timezone.now()
        db_now = self.database_clock()
        after = dj_timezone.now()
        if db_now is None:
            self._clock_offset = dt.timedelta(0)
        else:
            self._clock_offset = db_now - (before + (after - before) / 2)
        return self._clock_offset

    def now(self) -> dt.datetime:
        """Return the best estimate of the database clock without asking it."""
        return dj_timezone.now() + self._clock_offset

    # -- lifecycle ------------------------------------------------------------------------

    def start(self) -> None:
        """Register this process (host, pid) with its first heartbeat."""
        offset = self.measure_clock()
        if abs(offset) > CLOCK_SKEW_WARNING:
            logger.warning(
                "host and database clocks differ by %.3f s (database %s); due times follow "
                "the database clock, fix NTP on this host",
                offset.total_seconds(),
                "ahead" if offset > dt.timedelta(0) else "behind",
                extra={"action": "clock_skew"},
            )
        now = self.now()
        self.process = SchedulerProcess.objects.create(
            hostname=socket.gethostname()[:255],
            pid=os.getpid(),
            started_at=now,
            last_heartbeat_at=now,
            version=__version__,
        )
        self._next_prune_at = now
        logger.info(
            "scheduler started process=%s tasks=%d concurrency=%d poll_interval=%s",
            self.process.label,
            len(self.declarations),
            self.concurrency,
            self.poll_interval,
            extra={"action": "scheduler_started"},
        )

    def request_stop(self) -> None:
        """Stop claiming; `run()` then waits for running tasks and returns."""
        self._stop.set()
        self._wake.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _wake_soon(self) -> None:
        self._wake.set()

    # -- the tick -------------------------------------------------------------------------

    def tick(self, now: dt.datetime | None = None) -> TickResult:
        """Do one pass: heartbeat, mark lost runs, claim and start due tasks, prune."""
        if self.process is None:
            self.start()
        explicit = now is not None
        estimate = now if now is not None else self.now()
        self._flush_outcomes()
        self._heartbeat(estimate)
        result = TickResult(now=estimate)
        result.lost = self._mark_lost(estimate)
        result.timed_out = self._check_timeouts(estimate)

        self._refresh_mismatches(estimate)
        db_now, next_due = self._peek(with_clock=not explicit)
        if not explicit and db_now is not None:
            self._clock_offset = db_now - dj_timezone.now()
            estimate = db_now
        now = estimate
        result.now = now
        result.next_due_at = next_due

        limit = 0
        if next_due is not None and next_due <= now and not self.stopping:
            limit = min(self.batch_size, self.executor.free_slots())
            if limit > 0:
                result.started, result.skipped = self._claim(now, limit)
        self._prune(now)
        result.wake_in = self._wake_in(result, limit)
        return result

    def _wake_in(self, result: TickResult, limit: int) -> float:
        now = result.now
        candidates = [self.heartbeat_every]
        due = result.next_due_at
        if due is not None:
            if due > now:
                candidates.append((due - now).total_seconds())
            elif limit > 0 and len(result.claimed) >= limit:
                # A full batch: more may be due right now.
                candidates.append(0.0)
            elif limit > 0 and result.claimed:
                # Claimed what was due; the cursors moved, so ask the database again.
                candidates.append(0.0)
            elif limit > 0:
                candidates.append(CONTENDED_RETRY)
            # limit == 0: every slot is busy; a finishing run wakes the loop.
        with self._lock:
            deadlines = [i.deadline for i in self._inflight.values() if i.deadline is not None]
        if deadlines:
            candidates.append((min(deadlines) - now).total_seconds())
        return max(0.0, min(candidates))

    def _heartbeat(self, now: dt.datetime) -> None:
        assert self.process is not None
        updated = SchedulerProcess.objects.filter(pk=self.process.pk).update(last_heartbeat_at=now)
        if not updated:
            # Someone deleted our row (a cleanup in the admin); register again so our runs
            # keep an owner that heartbeats.
            logger.warning(
                "scheduler process row %s disappeared; registering again",
                self.process.label,
                extra={"action": "process_reregistered"},
            )
            self.process.pk = None
            self.process.last_heartbeat_at = now
            self.process.save(force_insert=True)
            # The deletion orphaned the runs in flight here (process set to NULL); take them
            # back before anyone presumes them lost, or they would be retried while running.
            with self._lock:
                mine = list(self._inflight)
            if mine:
                Run.objects.filter(
                    pk__in=mine, status=RunStatus.RUNNING, process__isnull=True
                ).update(process=self.process)

    def _mark_lost(self, now: dt.datetime) -> list[Run]:
        """Mark running runs whose process stopped heartbeating as lost; retry applies."""
        assert self.process is not None
        if time.monotonic() < self._lost_check_from:
            return []
        threshold = now - self.stale_after
        candidates = list(
            Run.objects.select_related("task")
            .filter(status=RunStatus.RUNNING)
            .exclude(process_id=self.process.pk)
            .filter(
                Q(process__isnull=True)
                | Q(process__last_heartbeat_at__lt=threshold)
                | Q(process__stopped_at__isnull=False)
            )
        )
        outcomes = [
            _Outcome(
                run,
                RunStatus.LOST,
                now,
                f"Lost: scheduler process {run.process_label or 'unknown'} stopped heartbeating "
                f"(nothing heard for more than {self.stale_after.total_seconds():.0f} s) while "
                "this run was running; its outcome is unknown.",
            )
            for run in candidates
        ]
        return [o.run for o in self._write_outcomes(outcomes)] if outcomes else []

    def _check_timeouts(self, now: dt.datetime) -> list[Run]:
        """Record runs past their timeout as timed_out and free their slots."""
        with self._lock:
            expired = [
                i for i in self._inflight.values() if i.deadline is not None and now >= i.deadline
            ]
        timed_out = []
        for inflight in expired:
            run = inflight.run
            with self._lock:
                if self._inflight.pop(run.pk, None) is None:
                    # It returned meanwhile: its own outcome is queued, and wins.
                    continue
            timeout = inflight.deadline - run.started_at if run.started_at else None  # type: ignore[operator]
            note = (
                ""
                if self.executor.stops_on_timeout
                else " The thread executor cannot stop Python code: the call may still be "
                "running in the background."
            )
            error = f"Timed out after {timeout}.{note}"
            try:
                if self._finish(run, RunStatus.TIMED_OUT, now, error=error):
                    timed_out.append(run)
            except DatabaseError:
                self._queue(_Outcome(run, RunStatus.TIMED_OUT, now, error))
                raise
            finally:
                self.executor.release(run.pk)
        return timed_out

    def _peek(self, *, with_clock: bool) -> tuple[dt.datetime | None, dt.datetime | None]:
        """Return (database clock, earliest due_at) in one query."""
        assert self.process is not None
        earliest_due = Task.objects.filter(
            declared=True, paused=False, due_at__isnull=False
        ).order_by("due_at")
        if self._mismatched:
            earliest_due = earliest_due.exclude(pk__in=list(self._mismatched))
        query = SchedulerProcess.objects.filter(pk=self.process.pk).annotate(
            next_due=Subquery(earliest_due.values("due_at")[:1])
        )
        fields = ["next_due"]
        if with_clock and database_has_clock():
            query = query.annotate(db_now=DatabaseNow())
            fields.append("db_now")
        rows = list(query.values(*fields)[:1])
        if not rows:
            return None, None
        row = rows[0]
        return row.get("db_now"), row["next_due"]

    # -- claiming -------------------------------------------------------------------------

    def _refresh_mismatches(self, now: dt.datetime) -> None:
        if self._mismatch_recheck_at is None or now >= self._mismatch_recheck_at:
            self._mismatched.clear()
            self._mismatch_recheck_at = now + MISMATCH_RECHECK

    def _note_mismatch(self, task: Task, declaration: TaskDeclaration | None) -> None:
        self._mismatched[task.pk] = task.name
        key = (task.name, task.definition_hash)
        if key in self._mismatch_logged:
            return
        self._mismatch_logged.add(key)
        if declaration is None:
            reason = "is not declared in this process's settings"
        else:
            reason = "has a stored definition that differs from this process's settings"
        logger.warning(
            "task %s %s (stored hash %s); not claiming it: another deploy owns it",
            task.name,
            reason,
            task.definition_hash[:12],
            extra={"action": "definition_differs"},
        )

    @staticmethod
    def _decide(task: Task, now: dt.datetime) -> tuple[str, dt.datetime] | None:
        """Return (trigger, scheduled_for) for a due task, or None if nothing is due.

        Precedence when several are due at once: cron, then retry, then manual. One run
        answers every reason the task was due for: the cron occurrence is what the
        exactly-once promise is about, and a retry or a manual request only asks for
        "one more run soon", which that run is.
        """
        if task.next_run_at is not None and task.next_run_at <= now:
            return Trigger.CRON, task.next_run_at
        if task.retry_at is not None and task.retry_at <= now:
            return Trigger.RETRY, task.retry_at
        if task.run_requested_at is not None and task.run_requested_at <= now:
            return Trigger.MANUAL, task.run_requested_at
        return None

    def _claim(self, now: dt.datetime, limit: int) -> tuple[list[Run], list[Run]]:
        """Claim up to `limit` due tasks in one transaction; start them once it commits."""
        assert self.process is not None
        started: list[tuple[Run, TaskDeclaration]] = []
        skipped: list[Run] = []
        with transaction.atomic():
            query = Task.objects.select_for_update(skip_locked=True).filter(
                due_at__lte=now, paused=False, declared=True
            )
            if self._mismatched:
                query = query.exclude(pk__in=list(self._mismatched))
            rows = list(query.order_by("due_at")[:limit])
            claimable: list[tuple[Task, TaskDeclaration]] = []
            for task in rows:
                declaration = self.declarations.get(task.name)
                if declaration is None or declaration.definition_hash != task.definition_hash:
                    self._note_mismatch(task, declaration)
                else:
                    claimable.append((task, declaration))
            skip_ids = [t.pk for t, _ in claimable if t.overlap == Overlap.SKIP]
            busy = (
                set(
                    Run.objects.filter(task_id__in=skip_ids, status=RunStatus.RUNNING).values_list(
                        "task_id", flat=True
                    )
                )
                if skip_ids
                else set()
            )
            planned = [
                (task, declaration, *self._plan(task, now, overlapping=task.pk in busy))
                for task, declaration in claimable
            ]
            if connection.features.has_select_for_update_skip_locked:
                runs = self._write_locked(planned)
            else:
                runs = self._write_compare_and_set(planned)
            for run, declaration in runs:
                if run.status == RunStatus.SKIPPED:
                    skipped.append(run)
                else:
                    started.append((run, declaration))
        # The transaction is closed before any task code runs.
        for run in skipped:
            self._log_finished(run)
            _send_robust(run_finished, run)
        for run, declaration in started:
            self._launch(run, declaration)
        return [r for r, _ in started], skipped

    def _plan(
        self, task: Task, now: dt.datetime, *, overlapping: bool
    ) -> tuple[dict[str, Any], Run | None]:
        """Return the task's new state and the run to insert (None when nothing is due)."""
        assert self.process is not None
        decided = self._decide(task, now)
        next_run_at = task.next_run_at
        run_requested_at = task.run_requested_at
        retry_at = task.retry_at
        last_run_started_at = task.last_run_started_at
        run = None
        if decided is not None:
            trigger, scheduled_for = decided
            if trigger == Trigger.CRON:
                # "No make-up: after downtime a task fires once, then resumes its schedule."
                # The cursor goes to the first occurrence strictly after now, however many
                # occurrences were missed.
                next_run_at = next_occurrence(task.schedule, task.timezone, now)
            # Any run consumes a pending retry ("when the next cron occurrence comes first, it
            # fires first and consumes the retry") and a manual request already made.
            retry_at = None
            if run_requested_at is not None and run_requested_at <= now:
                run_requested_at = None
            run = Run(
                task=task,
                trigger=trigger,
                status=RunStatus.SKIPPED if overlapping else RunStatus.RUNNING,
                scheduled_for=scheduled_for,
                started_at=now,
                process=self.process,
                process_label=self.process.label,
            )
            if overlapping:
                run.finished_at = now
                run.duration = dt.timedelta(0)
                run.error = (
                    "Skipped: the previous run of this task is still running (overlap=skip)."
                )
            else:
                last_run_started_at = now
        changes = {
            "next_run_at": next_run_at,
            "retry_at": retry_at,
            "run_requested_at": run_requested_at,
            "due_at": earliest(next_run_at, retry_at, run_requested_at),
            "last_run_started_at": last_run_started_at,
        }
        return changes, run

    def _write_locked(
        self, planned: list[tuple[Task, TaskDeclaration, dict[str, Any], Run | None]]
    ) -> list[tuple[Run, TaskDeclaration]]:
        """Advance the locked tasks and insert their runs: a few statements per batch."""
        if not planned:
            return []
        for task, _, changes, _ in planned:
            for field, value in changes.items():
                setattr(task, field, value)
        # The rows are locked by this transaction, so no compare-and-set is needed.
        fields = list(planned[0][2])
        _update_many(
            Task,
            fields,
            [(task.pk, *(changes[f] for f in fields)) for task, _, changes, _ in planned],
        )
        pending = [(run, declaration) for _, declaration, _, run in planned if run is not None]
        if not pending:
            return []
        if connection.features.can_return_rows_from_bulk_insert:
            try:
                with transaction.atomic():
                    Run.objects.bulk_create([run for run, _ in pending])
                return pending
            except IntegrityError:
                # One of them already fired elsewhere: find which, one at a time.
                for run, _ in pending:
                    run.pk = None
        return [(run, d) for run, d in pending if self._insert(run)]

    def _write_compare_and_set(
        self, planned: list[tuple[Task, TaskDeclaration, dict[str, Any], Run | None]]
    ) -> list[tuple[Run, TaskDeclaration]]:
        """Advance each task only if its due_at is unchanged, then insert its run.

        On SQLite select_for_update is a no-op: a second scheduler that already moved this
        task's cursor makes the conditional UPDATE match no row, and nothing fires here.
        """
        inserted = []
        for task, declaration, changes, run in planned:
            original = task.due_at
            if not Task.objects.filter(pk=task.pk, due_at=original).update(**changes):
                logger.info(
                    "task %s was claimed by another scheduler first",
                    task.name,
                    extra={"action": "claim_lost_race"},
                )
                continue
            for field, value in changes.items():
                setattr(task, field, value)
            if run is not None and self._insert(run):
                inserted.append((run, declaration))
        return inserted

    def _insert(self, run: Run) -> bool:
        try:
            with transaction.atomic():
                run.save(force_insert=True)
        except IntegrityError:
            # "A unique-constraint conflict means another process already fired that
            # occurrence"; the cursor still moves on with this transaction.
            logger.info(
                "task %s %s occurrence %s already fired elsewhere",
                run.task.name,
                run.trigger,
                run.scheduled_for.isoformat(),
                extra={"action": "already_fired"},
            )
            return False
        return True

    # -- executing ------------------------------------------------------------------------

    def _launch(self, run: Run, declaration: TaskDeclaration) -> None:
        assert run.started_at is not None
        timeout = run.task.timeout
        deadline = run.started_at + timeout if timeout else None
        inflight = _InFlight(run=run, declaration=declaration, deadline=deadline)
        with self._lock:
            self._inflight[run.pk] = inflight
        try:
            self.executor.submit(run.pk, functools.partial(self._execute, inflight))
        except Exception as exc:
            with self._lock:
                self._inflight.pop(run.pk, None)
            self._finish(
                run,
                RunStatus.FAILED,
                self.now(),
                error=_cap(f"Could not start the run: {describe_exception(exc)}"),
                traceback_text=_cap(traceback.format_exc(), keep_tail=True),
            )

    def _execute(self, inflight: _InFlight) -> None:
        """Run one task in the executor's thread and record its outcome."""
        run = inflight.run
        logger.info(
            "run started task=%s trigger=%s scheduled_for=%s run=%s",
            run.task.name,
            run.trigger,
            run.scheduled_for.isoformat(),
            run.pk,
            extra={"action": "run_started", "task": run.task.name, "run_id": run.pk},
        )
        _send_robust(run_started, run)
        inflight.started_monotonic = time.monotonic()
        status, error, tb = RunStatus.SUCCEEDED, "", ""
        try:
            # What runs is always resolved from settings, never from the stored path.
            self.executor.invoke(run.pk, inflight.declaration)
        except TaskCodeError as exc:
            status = RunStatus.FAILED
            error = _cap(exc.error)
            tb = _cap(exc.remote_traceback, keep_tail=True)
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too
            status = RunStatus.FAILED
            error = _cap(describe_exception(exc))
            tb = _cap(traceback.format_exc(), keep_tail=True)
        finished_at = inflight.elapsed_finish()
        with self._lock:
            mine = self._inflight.pop(run.pk, None) is not None
            if mine:
                # The loop writes outcomes, in batches, on its own connection: a worker thread
                # that ran no database code never opens a connection of its own.
                self._outcomes.append(_Outcome(run, status, finished_at, error, tb))
        if not mine:
            logger.info(
                "run %s of task %s returned after it was recorded as %s",
                run.pk,
                run.task.name,
                run.status,
                extra={"action": "run_returned_late", "task": run.task.name, "run_id": run.pk},
            )

    def _queue(self, outcome: _Outcome) -> None:
        with self._lock:
            self._outcomes.append(outcome)
        self._wake_soon()

    def _flush_outcomes(self) -> None:
        """Write the outcomes finished runs left behind; keep them if the database is away."""
        while True:
            with self._lock:
                batch = self._outcomes[:OUTCOME_BATCH]
                del self._outcomes[:OUTCOME_BATCH]
            if not batch:
                return
            try:
                self._write_outcomes(batch)
            except (OperationalError, InterfaceError):
                # The database is away: keep the outcomes for the tick that finds it back.
                with self._lock:
                    self._outcomes[:0] = batch
                raise
            except DatabaseError:
                # Refused for what it holds, not for an outage: retrying the same batch would
                # fail forever and stall the loop. Write the outcomes one at a time instead.
                logger.exception(
                    "could not record a batch of %d outcomes; recording them one by one",
                    len(batch),
                    extra={"action": "outcome_write_error"},
                )
                for outcome in batch:
                    self._write_outcome_alone(outcome)

    def _write_outcome_alone(self, outcome: _Outcome) -> None:
        """Record one outcome; if the database refuses its texts, record it without them."""
        try:
            self._write_outcomes([outcome])
            return
        except (OperationalError, InterfaceError):
            self._queue(outcome)
            raise
        except DatabaseError as exc:
            note = f"[the error text could not be stored: {describe_exception(exc)}]"
            plain = dataclasses.replace(
                outcome,
                error=_cap(note + "\n" + outcome.error.encode("ascii", "replace").decode()),
                traceback="",
            )
        try:
            self._write_outcomes([plain])
        except (OperationalError, InterfaceError):
            self._queue(plain)
            raise
        except DatabaseError:
            # Dropping one outcome leaves its run `running` until this process stops (then it
            # is marked lost); retrying it would stop every other outcome and claim instead.
            logger.exception(
                "could not record the outcome of run %s (task %s, status %s); giving up on it",
                outcome.run.pk,
                outcome.run.task.name,
                outcome.status,
                extra={"action": "outcome_dropped", "run_id": outcome.run.pk},
            )

    def _finish(
        self,
        run: Run,
        status: str,
        finished_at: dt.datetime,
        *,
        error: str = "",
        traceback_text: str = "",
    ) -> bool:
        """Record one final status; return False if the run was no longer `running`."""
        return bool(
            self._write_outcomes([_Outcome(run, status, finished_at, error, traceback_text)])
        )

    def _write_outcomes(self, outcomes: list[_Outcome]) -> list[_Outcome]:
        """Record final statuses once (only runs still `running` change); retry rule applies.

        "Writes touch only their own fields, so a concurrent pause from the admin is never
        lost": the run's outcome fields, and the task's last_run_*, retry_at and due_at.
        """
        by_pk = {o.run.pk: o for o in outcomes}
        with transaction.atomic():
            # Task rows first, then run rows: the order a claim takes them in (it locks tasks,
            # then inserts runs). The other order deadlocks with a concurrent claim on InnoDB.
            task_rows = _lock_task_rows({o.run.task_id for o in outcomes})
            # Locked, so a run marked lost or timed out meanwhile is never overwritten.
            # By primary key alone, status checked here: with the status in the WHERE clause
            # InnoDB may walk the (status, process) index and lock other processes' running
            # rows on the way, deadlocking with their own outcome writes.
            live = {
                pk
                for pk, status in Run.objects.select_for_update()
                .filter(pk__in=list(by_pk))
                .order_by("pk")
                .values_list("pk", "status")
                if status == RunStatus.RUNNING
            }
            recorded = [o for o in outcomes if o.run.pk in live]
            if not recorded:
                return []
            for o in recorded:
                run = o.run
                run.status, run.finished_at = o.status, o.finished_at
                run.error, run.traceback = o.error, o.traceback
                run.duration = (
                    max(dt.timedelta(0), o.finished_at - run.started_at)
                    if run.started_at is not None
                    else None
                )
            _update_many(
                Run,
                ["status", "finished_at", "duration", "error", "traceback"],
                [
                    (o.run.pk, o.status, o.finished_at, o.run.duration, o.error, o.traceback)
                    for o in recorded
                ],
            )
            _record_task_outcomes(recorded, task_rows)
        for o in recorded:
            self._log_finished(o.run)
            _send_robust(run_finished, o.run)
        return recorded

    @staticmethod
    def _log_finished(run: Run) -> None:
        duration = run.duration.total_seconds() if run.duration is not None else 0.0
        level = logging.WARNING if run.status in FAILURE_STATUSES else logging.INFO
        first_line = run.error.splitlines()[0] if run.error else ""
        logger.log(
            level,
            "run finished task=%s trigger=%s status=%s duration=%.3fs run=%s%s",
            run.task.name,
            run.trigger,
            run.status,
            duration,
            run.pk,
            f" error={first_line!r}" if first_line else "",
            extra={
                "action": "run_finished",
                "task": run.task.name,
                "run_id": run.pk,
                "status": run.status,
            },
        )

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Wait for the runs in flight to finish and record their outcomes.

        Return False if `timeout` passed first. Timeouts of runs in flight are enforced
        while waiting.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            remaining = None if deadline is None else max(0.0, deadline - time.monotonic())
            step = remaining
            with self._lock:
                deadlines = [i.deadline for i in self._inflight.values() if i.deadline]
            if deadlines:
                until = max(0.0, (min(deadlines) - self.now()).total_seconds())
                step = until if step is None else min(step, until)
            idle = self.executor.wait_idle(step)
            if not idle and deadlines:
                try:
                    self._check_timeouts(self.now())
                except DatabaseError as exc:
                    logger.error(
                        "could not record a timeout: %s", exc, extra={"action": "db_error"}
                    )
                idle = self.executor.wait_idle(0)
            if idle:
                try:
                    self._flush_outcomes()
                except (OperationalError, InterfaceError) as exc:
                    # Kept in memory for the next attempt (a tick, or the shutdown's).
                    logger.error(
                        "could not record %d outcome(s) yet, database unavailable: %s",
                        self.unrecorded,
                        exc,
                        extra={"action": "db_error"},
                    )
                    with contextlib.suppress(Exception):
                        connection.close()
                return True
            if deadline is not None and time.monotonic() >= deadline:
                return False

    @property
    def unrecorded(self) -> int:
        """Return how many finished runs' outcomes are waiting to be written."""
        with self._lock:
            return len(self._outcomes)

    # -- pruning --------------------------------------------------------------------------

    def _prune(self, now: dt.datetime) -> int:
        """Delete finished runs older than HISTORY_DAYS, a batch at a time."""
        days = self.history_days
        if not days or days <= 0:
            return 0
        if self._next_prune_at is not None and now < self._next_prune_at:
            return 0
        cutoff = now - dt.timedelta(days=days)
        total = 0
        more = False
        for _ in range(PRUNE_MAX_BATCHES_PER_TICK):
            # By when the run finished, not when it was scheduled: a task resumed after a
            # long pause fires once for its oldest missed occurrence, and that run is new.
            # A running run has no finished_at and is never pruned.
            ids = list(
                Run.objects.filter(finished_at__lt=cutoff)
                .order_by()
                .values_list("pk", flat=True)[:PRUNE_BATCH]
            )
            if ids:
                Run.objects.filter(pk__in=ids).delete()
                total += len(ids)
            more = len(ids) == PRUNE_BATCH
            if not more:
                break
        if not more:
            # By this host's estimate of the database clock, not the tick's `now`: whether a
            # process has been silent for a day is a fact about real time, and a tick driven
            # at another instant (a test, a replay) must not delete the rows of live processes.
            self._prune_processes(self.now())
        # With more left, carry on next tick rather than hold this one.
        self._next_prune_at = now if more else now + PRUNE_EVERY
        if total:
            logger.info(
                "pruned %d runs older than %d days",
                total,
                days,
                extra={"action": "history_pruned"},
            )
        return total

    def _prune_processes(self, now: dt.datetime) -> int:
        """Delete rows of processes gone for a while that no run in the history names.

        `runscheduler --once` from system cron adds a row per invocation. A row whose runs
        are still in the history stays, so the run list keeps its link to it; once pruning
        has removed those runs, the row goes too.
        """
        gone = now - PROCESS_ROWS_KEPT
        ids = list(
            SchedulerProcess.objects.filter(
                Q(stopped_at__lt=gone) | Q(stopped_at__isnull=True, last_heartbeat_at__lt=gone)
            )
            .filter(runs__isnull=True)
            .order_by()
            .values_list("pk", flat=True)[:PRUNE_BATCH]
        )
        if ids:
            SchedulerProcess.objects.filter(pk__in=ids).delete()
            logger.info(
                "pruned %d rows of scheduler processes gone since before %s",
                len(ids),
                gone.isoformat(),
                extra={"action": "processes_pruned"},
            )
        return len(ids)

    # -- the loop -------------------------------------------------------------------------

    def run(self) -> None:
        """Tick until asked to stop, then wait for running tasks and return."""
        with self._serving():
            while not self.stopping:
                self._wake.clear()
                wake_in = self._safe_tick()
                if not self.stopping and wake_in > 0:
                    self._wake.wait(wake_in)

    def run_once(self) -> TickResult:
        """Tick once, wait for the runs it started, record their outcomes, stop."""
        with self._serving():
            if self.process is None:
                self.start()
            result = self.tick()
            while not self.stopping and not self.wait_idle(self.heartbeat_every):
                self._keep_alive()
            return result

    @contextlib.contextmanager
    def _serving(self) -> Iterator[None]:
        """Handle signals while serving; then shut down, whatever ended it."""
        self._install_signal_handlers()
        try:
            yield
        finally:
            try:
                self.shutdown()
            finally:
                self._restore_signal_handlers()
                # This thread's connection would otherwise outlive the loop it served.
                connections.close_all()

    def _safe_tick(self) -> float:
        try:
            close_old_connections()
            if self.process is None:
                self.start()
            result = self.tick()
        except (OperationalError, InterfaceError) as exc:
            return self._back_off(exc)
        except DatabaseError as exc:
            # Anything else from the driver (SQLite's "closed database", a missing table
            # before migrate): the same back-off, with the traceback since it may be a bug.
            return self._back_off(exc, exc_info=True)
        except Exception as exc:
            logger.exception("scheduler tick failed", extra={"action": "tick_error"})
            return self._back_off(exc, log=False)
        self._note_recovered()
        return result.wake_in

    def _back_off(self, exc: BaseException, *, log: bool = True, exc_info: bool = False) -> float:
        self._failures += 1
        delay: float = min(BACKOFF_MAX, BACKOFF_MIN * 2.0 ** (self._failures - 1))
        if isinstance(exc, DatabaseError):
            # The others were cut off as long as we were, and may be sleeping in their own
            # back-off: once we are back, give them a full stale threshold plus one back-off
            # to heartbeat again before their running runs are marked lost (and retried while
            # they may still be running).
            self._lost_check_from = (
                time.monotonic() + delay + self.stale_after.total_seconds() + BACKOFF_MAX
            )
        if log:
            logger.error(
                "database unavailable (attempt %d), retrying in %.1f s: %s",
                self._failures,
                delay,
                str(exc).strip() or type(exc).__name__,
                exc_info=exc if exc_info else None,
                extra={"action": "db_error"},
            )
        try:
            # Throw the broken connection away; the next tick opens a fresh one.
            connection.close()
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
        installed = self._install_signal_handlers()
        ready = False
        try:
            while not self.stopping:
                try:
                    result = prepare()
                except (OperationalError, InterfaceError) as exc:
                    self._wake.clear()
                    self._wake.wait(self._back_off(exc))
                    continue
                self._note_recovered()
                ready = True
                return result
            return None
        finally:
            if installed and not ready:
                self._restore_signal_handlers()

    def _note_recovered(self) -> None:
        if self._failures:
            logger.warning(
                "database reachable again after %d failed attempts",
                self._failures,
                extra={"action": "db_recovered"},
            )
            self._failures = 0

    def _keep_alive(self) -> None:
        """Heartbeat while waiting on runs, so a long wait never looks like a dead process."""
        if self.process is None:
            return
        try:
            self._heartbeat(self.now())
        except DatabaseError as exc:
            logger.error(
                "heartbeat failed while waiting for runs: %s", exc, extra={"action": "db_error"}
            )
            with contextlib.suppress(Exception):
                connection.close()

    def shutdown(self) -> None:
        """Stop claiming, wait up to `grace` for runs, mark the rest interrupted."""
        self.request_stop()
        if self.process is None:
            return
        with self._lock:
            running = len(self._inflight)
        if running:
            logger.info(
                "waiting up to %.0f s for %d running task(s)",
                self.grace,
                running,
                extra={"action": "shutdown_waiting"},
            )
        end = time.monotonic() + self.grace
        while not self.wait_idle(max(0.0, min(end - time.monotonic(), self.heartbeat_every))):
            if time.monotonic() >= end:
                break
            self._keep_alive()
        try:
            self._interrupt_remaining()
            self._flush_outcomes()
            SchedulerProcess.objects.filter(pk=self.process.pk).update(stopped_at=self.now())
        except DatabaseError as exc:
            logger.error(
                "could not record the shutdown (%s); %d outcome(s) unrecorded; other "
                "schedulers will mark the runs lost",
                exc,
                self.unrecorded,
                extra={"action": "shutdown_db_error"},
            )
        self.executor.close()
        logger.info(
            "scheduler stopped process=%s",
            self.process.label,
            extra={"action": "scheduler_stopped"},
        )

    def _interrupt_remaining(self, *, forced: bool = False) -> None:
        with self._lock:
            remaining = list(self._inflight.values())
            self._inflight.clear()
        if forced:
            # "No run keeps executing after the run is recorded as ended": kill, then record.
            # After the runs left _inflight, so the killed calls' own outcomes are dropped.
            self.executor.kill_all()
        for inflight in remaining:
            # A process executor stops the run's process; threads cannot be stopped.
            self.executor.release(inflight.run.pk)
            self._finish(
                inflight.run,
                RunStatus.INTERRUPTED,
                inflight.elapsed_finish(),
                error=(
                    "Interrupted: the scheduler was told to exit at once (a second signal)."
                    if forced
                    else "Interrupted: the scheduler was asked to stop and the run did not "
                    f"finish within the {self.grace:g} s grace period."
                ),
            )

    # -- signals --------------------------------------------------------------------------

    def _install_signal_handlers(self) -> bool:
        """Handle SIGTERM and SIGINT; return False if already handled or not possible here."""
        if self._previous_handlers or threading.current_thread() is not threading.main_thread():
            return False
        for signum in (signal.SIGTERM, signal.SIGINT):
            self._previous_handlers[signum] = signal.signal(signum, self._on_signal)
        return True

    def _restore_signal_handlers(self) -> None:
        for signum, handler in self._previous_handlers.items():
            signal.signal(signum, handler)
        self._previous_handlers.clear()

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self._signals_received += 1
        name = signal.Signals(signum).name
        if self._signals_received == 1:
            logger.warning(
                "%s received: no new claims; waiting up to %g s for running tasks "
                "(send it again to exit at once)",
                name,
                self.grace,
                extra={"action": "shutdown_requested"},
            )
            self.request_stop()
            return
        logger.warning("second %s received: exiting now", name, extra={"action": "shutdown_forced"})
        try:
            # Only outside a transaction: a write inside the main thread's open transaction
            # would vanish with it. What is not marked here, heartbeat expiry marks lost.
            if not connection.in_atomic_block:
                self._interrupt_remaining(forced=True)
                if self.process is not None:
                    SchedulerProcess.objects.filter(pk=self.process.pk).update(
                        stopped_at=self.now()
                    )
        except BaseException:
            logger.exception("could not record the forced exit", extra={"action": "exit_error"})
        finally:
            # Here too when nothing could be recorded: no run outlives the process.
            with contextlib.suppress(BaseException):
                self.executor.kill_all()
            logging.shutdown()
            os._exit(1)


def _lock_task_rows(task_ids: set[int]) -> dict[int, dict[str, Any]]:
    """Lock tasks in pk order; return their cursor fields by pk.

    The row locks make next_run_at and run_requested_at current for the due_at computed
    from them (a claim elsewhere may have just moved the cursor).
    """
    return {
        row["pk"]: dict(row)
        for row in Task.objects.select_for_update()
        .filter(pk__in=sorted(task_ids))
        .order_by("pk")
        .values("pk", "next_run_at", "run_requested_at", "retry_at")
    }


def _record_task_outcomes(outcomes: list[_Outcome], rows: dict[int, dict[str, Any]]) -> None:
    """Apply finished runs to their tasks: last_run_*, and the retry rule on retry_at/due_at.

    "On failure set retry_at = failure time + retry_delay; on success clear it."
    """
    touched: dict[int, tuple[Any, ...]] = {}
    for o in sorted(outcomes, key=lambda o: o.finished_at):
        row = rows.get(o.run.task_id)
        if row is None:
            continue
        if o.status == RunStatus.SUCCEEDED:
            row["retry_at"] = None
        elif o.status in FAILURE_STATUSES:
            row["retry_at"] = o.finished_at + o.run.task.retry_delay
        due_at = earliest(row["next_run_at"], row["retry_at"], row["run_requested_at"])
        touched[row["pk"]] = (row["pk"], o.status, o.finished_at, row["retry_at"], due_at)
    _update_many(
        Task,
        ["last_run_status", "last_run_finished_at", "retry_at", "due_at"],
        list(touched.values()),
    )


def _update_many(model: type[Model], fields: list[str], rows: list[tuple[Any, ...]]) -> None:
    """Run one parameterised UPDATE ... WHERE pk = %s for many rows (pk first in each row).

    The ORM's bulk_update builds a CASE expression per field and row, which costs more
    Python time than the round trips it saves; executemany pipelines plain statements.
    Values go through each field's own preparation, so every backend gets its types.
    """
    if not rows:
        return
    meta = model._meta
    quote = connection.ops.quote_name
    columns: list[Any] = [meta.get_field(name) for name in fields]
    pk_column: str = meta.pk.column  # type: ignore[assignment]
    sql = "UPDATE {} SET {} WHERE {} = %s".format(
        quote(meta.db_table),
        ", ".join(f"{quote(field.column)} = %s" for field in columns),
        quote(pk_column),
    )
    params = [
        [
            field.get_db_prep_save(value, connection)
            for field, value in zip(columns, values, strict=True)
        ]
        + [pk]
        for pk, *values in rows
    ]
    with connection.cursor() as cursor:
        cursor.executemany(sql, params)
