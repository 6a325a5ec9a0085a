"""Set-based outcome writes, and the integration signals, sent off the loop thread."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime as dt
import logging
import queue
import threading
import time
from collections.abc import Iterable
from typing import Any

from django.db import close_old_connections, connections, transaction
from django.db.models import QuerySet
from django.utils import timezone as dj_timezone

from django_posixcron import signals
from django_posixcron.conf import get_settings
from django_posixcron.db import DatabaseNow, has_clock
from django_posixcron.log import get_logger
from django_posixcron.models import FAILURE_STATUSES, Run, RunStatus, Task, due_at
from django_posixcron.scheduling import rules
from django_posixcron.scheduling.bulk import update_many
from django_posixcron.scheduling.compiled import locked_rows
from django_posixcron.scheduling.counting import count_runs
from django_posixcron.signals import run_finished, run_lost, task_failing, task_overdue

# Under the documented "django_posixcron.scheduler" logger, one child per part.
logger = get_logger("django_posixcron.scheduler.outcomes")

# Error texts and tracebacks are kept whole up to this size; past it an error keeps its start,
# a traceback its first frames and its tail, where the failing frame and the message are. A
# task raising a huge message must not bloat the history table.
TEXT_LIMIT = 64 * 1024
# The first characters of a traceback kept when it is cut: the outer frames, which a message
# of 200,000 characters at its end would otherwise push out entirely.
TRACEBACK_HEAD = 16 * 1024
# A run's error in its log line: the first line, up to this long.
LOG_ERROR_LIMIT = 500

# Outcomes are written this many per transaction: enough to keep up with thousands of short
# runs per second, few enough that the locks they take are held for milliseconds.
OUTCOME_BATCH = 200


def cap(text: str, *, keep_tail: bool = False) -> str:
    """Return text fit for the history table: capped in size, without NUL characters or lone
    surrogates.

    PostgreSQL text columns refuse NUL, and no driver encodes a lone surrogate; an error
    message quoting binary data must not make the outcome unwritable (and the scheduler retry
    it forever). With `keep_tail` (a traceback), a text cut keeps its first frames and its
    tail; otherwise its start.
    """
    text = text.replace("\x00", "\\x00")
    if not text.isascii():
        # A lone surrogate (a file name or a program's output decoded with surrogateescape)
        # cannot be encoded for any database: write it as its escape, "\udcff".
        text = text.encode("utf-8", "backslashreplace").decode("utf-8")
    if len(text) <= TEXT_LIMIT:
        return text
    marker = "\n[... truncated ...]\n"
    if keep_tail:
        return text[:TRACEBACK_HEAD] + marker + text[-(TEXT_LIMIT - TRACEBACK_HEAD - len(marker)) :]
    return text[: TEXT_LIMIT - len(marker)] + marker.rstrip()


@dataclasses.dataclass
class Outcome:
    run: Run
    status: str
    finished_at: dt.datetime
    error: str = ""
    traceback: str = ""
    # False for a run whose code never started (a claim settled at the stop): no duration,
    # no fire lag, as for a lost run.
    ran: bool = True


def send_robust(sig: Any, run: Run | None = None, **kwargs: Any) -> None:
    """Send `sig` (for `run`, or with `kwargs`); log what a receiver raises and carry on."""
    from django_posixcron.scheduler import Scheduler

    if run is not None:
        kwargs["run"] = run
    try:
        results = sig.send_robust(sender=Scheduler, **kwargs)
    except BaseException as exc:
        # Django's send_robust() catches Exception only: a receiver calling sys.exit() ended
        # the signal thread, and every later signal of the process was silently never sent.
        logger.error(
            "a receiver of %s raised %r; ignored, and the receivers after it did not get "
            "this signal",
            describe_signal(sig, kwargs),
            exc,
            exc_info=True,
            extra={"action": "signal_receiver_error", **_subject(kwargs)},
        )
        return
    for receiver, result in results:
        if isinstance(result, BaseException):
            # Django's send_robust() has logged the traceback ("django.dispatch"), without
            # saying which signal, task or run: this line says, without a second traceback.
            logger.error(
                "receiver %s of %s raised %r; ignored (traceback under django.dispatch)",
                getattr(receiver, "__qualname__", repr(receiver)),
                describe_signal(sig, kwargs),
                result,
                extra={"action": "signal_receiver_error", **_subject(kwargs)},
            )


# The signals of the alert thread (see Notifier).
ALERTS = frozenset({task_overdue, run_lost, task_failing})
# The alerts whose episode another scheduler can send if this one gives it back.
EPISODES = frozenset({task_overdue, task_failing})

# An alert receiver busy this long is stuck (a webhook called without a timeout): the episodes
# queued behind it are given back to the fleet, and this process wins no more until it
# returns. A chat post takes seconds.
ALERTS_STUCK_AFTER = 60.0


class _Lane:
    """One queue of signals and the thread that sends them, in order."""

    def __init__(self, name: str) -> None:
        self.name = name
        self._queue: queue.SimpleQueue[tuple[Any, dict[str, Any]] | None] = queue.SimpleQueue()
        self.thread: threading.Thread | None = None
        self._idle = threading.Event()
        self._idle.set()
        self._pending = 0
        self._lock = threading.Lock()
        # What the thread is sending, and since when (monotonic); None between signals.
        self.busy: tuple[float, Any, dict[str, Any]] | None = None

    def start(self) -> None:
        if self.thread is None:
            self.thread = threading.Thread(target=self._serve, name=self.name, daemon=True)
            self.thread.start()

    def put(self, sig: Any, kwargs: dict[str, Any]) -> None:
        with self._lock:
            self._pending += 1
            self._idle.clear()
        self._queue.put((sig, kwargs))

    def drain(self, deadline: float) -> list[tuple[Any, dict[str, Any]]] | None:
        """Wait until `deadline` (monotonic) for the queue to empty, then end the thread.

        Return None if it emptied, else what was still queued (taken off the queue so that
        it is never sent; empty when only a receiver still running was left).
        """
        if self.thread is None:
            return None
        self.thread = None
        abandoned: list[tuple[Any, dict[str, Any]]] | None = None
        if not self._idle.wait(max(0.0, deadline - time.monotonic())):
            abandoned = []
            with contextlib.suppress(queue.Empty):
                while (item := self._queue.get_nowait()) is not None:
                    abandoned.append(item)
        self._queue.put(None)
        return abandoned

    def take(self, wanted: frozenset[Any]) -> list[tuple[Any, dict[str, Any]]]:
        """Take the queued signals among `wanted` off the queue (never sent here); the
        others stay queued, in their order."""
        taken: list[tuple[Any, dict[str, Any]]] = []
        kept: list[tuple[Any, dict[str, Any]] | None] = []
        with contextlib.suppress(queue.Empty):
            while True:
                item = self._queue.get_nowait()
                if item is None:  # the end of the thread, put by drain(): stays last
                    kept.append(item)
                    break
                if item[0] in wanted:
                    taken.append(item)
                else:
                    kept.append(item)
        for item in kept:
            self._queue.put(item)
        if taken:
            with self._lock:
                self._pending -= len(taken)
                if not self._pending:
                    self._idle.set()
        return taken

    def _serve(self) -> None:
        while (item := self._queue.get()) is not None:
            self.busy = (time.monotonic(), *item)
            try:
                send_robust(item[0], **item[1])
            finally:
                self.busy = None
                with self._lock:
                    self._pending -= 1
                    if not self._pending:
                        self._idle.set()
                        # Receivers may query; their connection must not outlive the burst.
                        close_old_connections()
        connections.close_all()


class Notifier:
    """Send the run and alert signals from threads of their own once started.

    "Receivers run off the loop thread; a slow or failing receiver delays neither claims nor
    the heartbeat." The alerts (task_overdue, run_lost, task_failing) have a thread of their
    own: behind one queue, a slow run_finished receiver (a chat post per run) held every page
    back, by minutes after a few of them, and a shutdown then dropped them. A scheduler driven
    by tick() alone (tests, the benchmark) has no thread and sends inline, so what it sent is
    visible when tick() returns.
    """

    def __init__(self) -> None:
        self._runs = _Lane("posixcron-signals")
        self._alerts = _Lane("posixcron-alerts")
        self._started = False

    def start(self) -> None:
        self._started = True
        self._runs.start()
        self._alerts.start()

    def alerts_stuck(self) -> tuple[float, Any, dict[str, Any]] | None:
        """Return (seconds, signal, kwargs) of the alert a receiver has been busy with for
        ALERTS_STUCK_AFTER or longer, or None."""
        busy = self._alerts.busy if self._started else None
        if busy is None:
            return None
        waited = time.monotonic() - busy[0]
        return (waited, busy[1], busy[2]) if waited >= ALERTS_STUCK_AFTER else None

    def alerting(self) -> bool:
        """Whether this process may win alert episodes: not while an alert receiver is
        stuck, since it could not send them."""
        return self.alerts_stuck() is None

    def take_episodes(self) -> list[tuple[Any, dict[str, Any]]]:
        """Take the queued alerts another scheduler can send (overdue, failing) off the
        queue, for the caller to give them back; run_lost stays queued."""
        return self._alerts.take(EPISODES) if self._started else []

    def finished(self, run: Run) -> None:
        # Nobody listening: nothing to hand to the signal thread (a queue item and a thread
        # switch per run in a burst).
        if run_finished.has_listeners():
            self.send(run_finished, run=run)

    def send(self, sig: Any, **kwargs: Any) -> None:
        """Send `sig` with `kwargs` off the loop thread (inline when there is no thread)."""
        if not self._started:
            send_robust(sig, **kwargs)
            return
        lane = self._alerts if sig in ALERTS else self._runs
        lane.put(sig, kwargs)

    def stop(self, timeout: float) -> list[tuple[Any, dict[str, Any]]]:
        """Send what is queued (waiting up to `timeout`), then end the threads.

        Return the signals still queued when the time ran out, taken off the queues so this
        process never sends them: the shutdown gives their episodes back to the fleet.
        """
        if not self._started:
            return []
        self._started = False
        deadline = time.monotonic() + timeout
        # One deadline for both: the time left after the alerts' receivers is the runs'.
        alerts, runs = self._alerts.drain(deadline), self._runs.drain(deadline)
        abandoned = (alerts or []) + (runs or [])
        if alerts is not None or runs is not None:  # a receiver was still busy
            # The signals being sent then: some of their receivers have had them, the ones
            # after the busy one will not (not given back: they were partly sent).
            cut = [lane.busy for lane in (self._alerts, self._runs) if lane.busy is not None]
            logger.warning(
                "signal receivers still busy after %.0f s; %d signal(s) not sent: %s%s",
                timeout,
                len(abandoned),
                ", ".join(describe_signal(sig, kw) for sig, kw in abandoned) or "none queued",
                "; cut off while its receivers ran: "
                + ", ".join(describe_signal(sig, kw) for _, sig, kw in cut)
                if cut
                else "",
                extra={"action": "signals_abandoned"},
            )
        return abandoned


def _subject(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The `task` and `run_id` of a log record about a signal, as every record about one
    run or task carries them."""
    run = kwargs.get("run")
    task = kwargs.get("task") or getattr(run, "task", None)
    subject: dict[str, Any] = {}
    if task is not None:
        subject["task"] = task.name
    if run is not None:
        subject["run_id"] = run.pk
    return subject


def describe_signal(sig: Any, kwargs: dict[str, Any]) -> str:
    """Name a signal and what it is about, for the log line of those not sent."""
    name = next((name for name, value in vars(signals).items() if value is sig), "signal")
    subject = kwargs.get("task") or getattr(kwargs.get("run"), "task", None)
    run = kwargs.get("run")
    about = getattr(subject, "name", "?")
    return f"{name}(task={about}{f', run={run.pk}' if run is not None else ''})"


def error_summary(error: str) -> str:
    """Return the first line of a run's error for a log line, cut at LOG_ERROR_LIMIT: the
    whole text is on the run, and a log line of 64 KB helps no one reading the log."""
    first_line = error.splitlines()[0] if error else ""
    if len(first_line) > LOG_ERROR_LIMIT:
        first_line = first_line[:LOG_ERROR_LIMIT] + "..."
    return first_line


def log_finished(run: Run) -> None:
    level = logging.WARNING if run.status in FAILURE_STATUSES else logging.INFO
    if not logger.isEnabledFor(level):
        # The line's parts cost more than the logging call that would drop it.
        return
    # A lost run has no duration (nobody saw it end): "-", as the admin shows it.
    duration = f"{run.duration.total_seconds():.3f}s" if run.duration is not None else "-"
    first_line = error_summary(run.error)
    logger.log(
        level,
        "run finished task=%s trigger=%s status=%s duration=%s run=%s%s",
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


def write_outcomes(
    outcomes: list[Outcome],
    using: str,
    notifier: Notifier | None = None,
    *,
    confirm: QuerySet[Run] | None = None,
    held: list[Outcome] | None = None,
) -> list[Outcome]:
    """Record final statuses once; the retry rule applies; return those recorded.

    "Writes touch only their own fields, so a concurrent pause from the admin is never
    lost": the run's outcome fields, and the task's last_run_*, retry_at and due_at.
    `confirm`: the runs the outcomes were judged from (lost ones); once locked, a run no
    longer in it keeps its status.
    `held`: where the database can skip locked rows, outcomes whose task or run row another
    transaction holds are not waited for but appended here, for the caller to try again
    later. A scheduler frozen in the middle of a transaction (SIGSTOP, a paused VM) holds its
    rows until it wakes up: waiting on them stalled every loop of the fleet, without a line
    in any log. Without `held`, the write waits for the rows.
    """
    skip = held is not None and connections[using].features.has_select_for_update_skip_locked
    with transaction.atomic(using=using):
        # Task rows first, then run rows: the order a claim takes them in (it locks tasks,
        # then inserts runs). The other order deadlocks with a concurrent claim on InnoDB.
        task_ids = {o.run.task_id for o in outcomes}
        task_rows = _lock_task_rows(task_ids, using, skip_locked=skip)
        if len(task_rows) < len(task_ids):
            # Held elsewhere, or deleted (with its runs): only a row that still exists is
            # worth another try.
            unlocked = task_ids - set(task_rows)
            there = _existing(Task, unlocked, using) if skip else set()
            if there:
                assert held is not None
                held += [o for o in outcomes if o.run.task_id in there]
            _log_gone([o for o in outcomes if o.run.task_id in unlocked - there])
            outcomes = [o for o in outcomes if o.run.task_id in task_rows]
        by_pk = {o.run.pk: o for o in outcomes}
        # Locked, so a run marked timed out meanwhile is never overwritten. By primary key
        # alone, status checked here: with the status in the WHERE clause InnoDB may walk
        # the (status, process) index and lock other processes' running rows on the way,
        # deadlocking with their own outcome writes.
        current = {
            row["pk"]: row["status"]
            for row in locked_rows(Run, by_pk, ["pk", "status"], using, skip_locked=skip)
        }
        if len(current) < len(by_pk):
            # Held elsewhere, or deleted: only a row that still exists is worth another try.
            missing = [pk for pk in by_pk if pk not in current]
            there = _existing(Run, missing, using) if skip else set()
            if there:
                assert held is not None
                held += [by_pk[pk] for pk in missing if pk in there]
            _log_gone([by_pk[pk] for pk in missing if pk not in there])
        if confirm is not None:
            # The rows are locked: what still matches the verdict cannot change under it.
            still = set(confirm.filter(pk__in=list(current)).values_list("pk", flat=True))
            current = {pk: status for pk, status in current.items() if pk in still}
        recorded = [
            o for o in outcomes if rules.accepts_outcome(current.get(o.run.pk, ""), o.status)
        ]
        if not recorded:
            return []
        for o in recorded:
            run = o.run
            run.status, run.finished_at = o.status, o.finished_at
            run.error, run.traceback = o.error, o.traceback
            # A lost run's end is when it was found lost, not when it stopped: no duration.
            run.duration = (
                max(dt.timedelta(0), o.finished_at - run.started_at)
                if run.started_at is not None and o.status != RunStatus.LOST and o.ran
                else None
            )
        update_many(
            Run,
            ["status", "finished_at", "duration", "error", "traceback"],
            [
                (o.run.pk, o.status, o.finished_at, o.run.duration, o.error, o.traceback)
                for o in recorded
            ],
            using,
        )
        # With an alert receiver stuck, a failing episode is left for the others to send.
        alerting = notifier is not None and notifier.alerting()
        failing = _record_task_outcomes(recorded, current, task_rows, using, signals=alerting)
        count_runs((o.run for o in recorded), using)
    _announce(recorded, current, notifier)
    for task, failures, paused in failing if alerting else ():
        _send(notifier, task_failing, task=task, failures=failures, paused=paused)
    return recorded


def _existing(model: type[Task] | type[Run], pks: Iterable[int], using: str) -> set[int]:
    """Return which of the rows `pks` exist (skipped as locked, not deleted)."""
    return set(model.objects.using(using).filter(pk__in=list(pks)).values_list("pk", flat=True))


def _log_gone(outcomes: list[Outcome]) -> None:
    """Say which outcomes have no row left to be recorded on (the run, or its task with its
    runs, deleted while it ran): nothing else would ever show how those runs ended."""
    for o in outcomes:
        logger.warning(
            "run %s of task %s ended %s, but its row was deleted while it ran: the outcome "
            "is not recorded",
            o.run.pk,
            o.run.task.name,
            o.status,
            extra={"action": "run_deleted", "task": o.run.task.name, "run_id": o.run.pk},
        )


def _send(notifier: Notifier | None, sig: Any, **kwargs: Any) -> None:
    # Without a notifier (the forced exit, which has 2 s and holds a transaction) nothing is
    # sent, as for run_finished.
    if notifier is not None:
        notifier.send(sig, **kwargs)


def _announce(recorded: list[Outcome], previous: dict[int, str], notifier: Notifier | None) -> None:
    """Log each recorded outcome and send run_finished for it."""
    for o in recorded:
        if previous[o.run.pk] == RunStatus.LOST:
            logger.warning(
                "run %s of task %s was marked lost, then its outcome arrived: recorded as %s",
                o.run.pk,
                o.run.task.name,
                o.status,
                extra={"action": "late_outcome", "task": o.run.task.name, "run_id": o.run.pk},
            )
        log_finished(o.run)
        if o.status == RunStatus.LOST:
            # Recorded by this process alone: the run rows were locked, and an outcome is
            # taken only over a running run, so this is the one run_lost of its episode.
            _send(notifier, run_lost, run=o.run)
        if notifier is not None:
            notifier.finished(o.run)


def _lock_task_rows(
    task_ids: set[int], using: str, *, skip_locked: bool = False
) -> dict[int, dict[str, Any]]:
    """Lock tasks in pk order; return their cursor fields by pk (with `skip_locked`, only
    those no other transaction holds).

    The row locks make next_run_at and run_requested_at current for the due_at computed
    from them (a claim elsewhere may have just moved the cursor).
    """
    rows = locked_rows(Task, task_ids, TASK_LOCKED_FIELDS, using, skip_locked=skip_locked)
    return {row["pk"]: row for row in rows}


# The task fields an outcome reads under the row's lock.
TASK_LOCKED_FIELDS = [
    "pk",
    "next_run_at",
    "run_requested_at",
    "retry_at",
    "retry_occurrence",
    "retry_attempt",
    "consecutive_failures",
    "failing_signalled",
    "paused",
    "last_success_at",
    "last_duration",
    "last_fire_lag",
    # Kept as they are by an older occurrence's late success (rules.outdated_success) or by
    # the real outcome of a run marked lost (rules.is_latest_run).
    "last_run_status",
    "last_run_started_at",
    "last_run_finished_at",
    "due_at",
]


# The task fields an outcome writes, in the order of the rows _record_task_outcomes builds.
TASK_OUTCOME_FIELDS = [
    "last_run_status",
    "last_run_finished_at",
    "retry_at",
    "due_at",
    "retry_occurrence",
    "retry_attempt",
    "consecutive_failures",
    "failing_signalled",
    "last_success_at",
    "last_duration",
    "last_fire_lag",
]


# What an outcome leaves on the run's task instance: what it wrote, and the pause its locking
# read found (or _apply_streak made).
TASK_WRITTEN_FIELDS = [*TASK_OUTCOME_FIELDS, "paused"]


def _record_task_outcomes(
    outcomes: list[Outcome],
    previous: dict[int, str],
    rows: dict[int, dict[str, Any]],
    using: str,
    *,
    signals: bool,
) -> list[tuple[Task, int, bool]]:
    """Apply finished runs to their tasks: last_run_*, the retry rule, the failure streak.

    `previous`: each run's status before this outcome. Return the (task, failures, paused)
    to send task_failing for: the task rows are locked by this transaction, so only this
    process sees the streak cross its threshold.
    """
    touched: dict[int, dict[str, Any]] = {}
    failing: dict[int, tuple[Task, int, bool]] = {}
    for o in sorted(outcomes, key=lambda o: o.finished_at):
        row = rows.get(o.run.task_id)
        if row is None:
            continue
        touched[row["pk"]] = row
        if o.status == RunStatus.SUCCEEDED and (
            row["last_success_at"] is None or o.finished_at > row["last_success_at"]
        ):
            row["last_success_at"] = o.finished_at
        if o.run.duration is not None:
            # What the metrics show once the history no longer holds the run: the latest
            # finished run's figures, whatever its status (a lost run has none).
            row["last_duration"] = o.run.duration
            assert o.run.started_at is not None
            row["last_fire_lag"] = o.run.started_at - o.run.scheduled_for
        occurrence = o.run.occurrence or o.run.scheduled_for
        if previous[o.run.pk] == RunStatus.LOST:
            _apply_late_outcome(o, occurrence, row, using)
            continue
        if rules.outdated_success(
            o.status, occurrence, row["consecutive_failures"], row["retry_occurrence"]
        ):
            # An older occurrence's late success: the newer failure's retry, streak and
            # last run stand; only the last success moves.
            continue
        # An older occurrence's late failure: the newer failure's retry and last run stand;
        # the streak counts it.
        outdated = rules.outdated_failure(
            o.status, occurrence, row["retry_at"], row["retry_occurrence"]
        )
        if not outdated:
            retry_at = rules.retry_after_outcome(
                o.status, o.finished_at, o.run.task.retry_delay, row["retry_at"]
            )
            if retry_at is not None and o.status in FAILURE_STATUSES:
                # The retry this failure sets up retries this run's occurrence, one attempt on:
                # also when an older occurrence's failure, written just before in the same
                # batch, set up a retry at the same instant (two runs timed out at one tick).
                row["retry_occurrence"] = occurrence
                row["retry_attempt"] = o.run.attempt
            row["retry_at"] = retry_at
        alert = _apply_streak(o, row, using, signals=signals)
        if alert is not None:
            failing[row["pk"]] = alert
        if outdated:
            continue
        due = due_at(row["next_run_at"], row["retry_at"], row["run_requested_at"])
        row["last_run_status"], row["last_run_finished_at"], row["due_at"] = (
            o.status,
            o.finished_at,
            due,
        )
    update_many(
        Task,
        TASK_OUTCOME_FIELDS,
        [(pk, *(row[field] for field in TASK_OUTCOME_FIELDS)) for pk, row in touched.items()],
        using,
    )
    for o in outcomes:
        # The run's task, which run_finished and task_failing hand to receivers, as written:
        # its retry and streak to read, and a receiver's save() that writes only its own
        # changes (Task._scheduler_wrote).
        if (row := touched.get(o.run.task_id)) is not None:
            o.run.task._scheduler_wrote({field: row[field] for field in TASK_WRITTEN_FIELDS})
    return list(failing.values())


def _apply_late_outcome(
    o: Outcome, occurrence: dt.datetime, row: dict[str, Any], using: str
) -> None:
    """Apply the real outcome of a run marked lost: the verdict "lost" already applied the
    retry rule and counted the failure, so no second retry and no second failure. A success
    ends the streak, and lifts the pause the verdict made (pause_after_failures)."""
    if rules.late_success_cancels_retry(
        o.status,
        occurrence,
        o.run.attempt,
        row["retry_at"],
        row["retry_occurrence"],
        row["retry_attempt"],
    ):
        # Its retry has not fired yet: the occurrence succeeded after all.
        row["retry_at"] = None
        row["due_at"] = due_at(row["next_run_at"], None, row["run_requested_at"])
    if rules.is_latest_run(o.run.started_at, row["last_run_started_at"]):
        # No run started since: the task's last run is this one, as it really ended.
        row["last_run_status"], row["last_run_finished_at"] = o.status, o.finished_at
        if o.status == RunStatus.SUCCEEDED:
            row["consecutive_failures"], row["failing_signalled"] = 0, False
            if row["paused"] and _lift_pause(o.run.task, using):
                row["paused"] = False


def _lift_pause(task: Task, using: str) -> bool:
    """Resume a task the scheduler paused (pause_after_failures) for failures that, with a
    lost run's late success, are no longer in a row. Its reason tells an automatic pause from
    an operator's (which no outcome lifts): resuming clears it, and an operator's pause sets
    none. Return whether the pause was lifted."""
    lifted = (
        Task.objects.using(using)
        .filter(pk=task.pk, paused=True)
        .exclude(paused_reason="")
        .update(paused=False, paused_reason="", updated_at=_stamp(using))
    )
    if lifted:
        task._scheduler_wrote({"paused_reason": ""})
        logger.warning(
            "task %s resumed: it was paused after failed runs in a row, and its run marked "
            "lost has since succeeded",
            task.name,
            extra={"action": "auto_pause_lifted", "task": task.name},
        )
    return bool(lifted)


def _apply_streak(
    o: Outcome, row: dict[str, Any], using: str, *, signals: bool
) -> tuple[Task, int, bool] | None:
    """Count the outcome into the task's failure streak; pause if its policy says so.

    Return what to send task_failing with, if anything. Without `signals` (the forced exit)
    an episode is not marked signalled, so the writer of the next failure sends it.
    """
    conf = get_settings()
    task = o.run.task
    pause_after = conf.pause_after_failures.get(task.name)
    streak = rules.failure_streak(
        o.status,
        row["consecutive_failures"],
        row["failing_signalled"],
        failing_after=conf.failing_after,
        pause_after=pause_after,
        paused=row["paused"],
    )
    row["consecutive_failures"] = streak.failures
    if signals or not streak.send:
        row["failing_signalled"] = streak.signalled
    if streak.pause:
        row["paused"] = True
        task._scheduler_wrote({"paused_reason": _pause(task, streak.failures, pause_after, using)})
    return (task, streak.failures, streak.pause) if streak.send else None


def _pause(task: Task, failures: int, pause_after: int | None, using: str) -> str:
    """Pause a task whose failures reached its pause_after_failures; return why."""
    runs = "1 failed run" if failures == 1 else f"{failures} failed runs in a row"
    reason = f"Paused automatically after {runs} (pause_after_failures = {pause_after})."
    Task.objects.using(using).filter(pk=task.pk).update(
        paused=True, paused_reason=reason, updated_at=_stamp(using)
    )
    logger.warning(
        "task %s paused after %s",
        task.name,
        runs,
        extra={"action": "auto_paused", "task": task.name},
    )
    return reason


def _stamp(using: str) -> Any:
    """The instant a pause or its lift is stamped with: the database's clock where it has
    one, as an operator's pause and resume are, so that a task resumed is not overdue before
    it had POLL_INTERVAL by the clock overdue is judged by."""
    return DatabaseNow() if has_clock(using) else dj_timezone.now()
