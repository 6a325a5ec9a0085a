"""Signal handlers that only set flags, and the forced exit a second signal asks for.

"Signal handlers only set a flag (no database I/O, no locks)." A Python handler runs on the
main thread between two bytecodes of whatever it interrupted, possibly inside a database call
or while holding a lock, and not at all while that thread is blocked in a driver's C call
(mysqlclient waiting on a row lock). So the signal is taken from Python's wakeup fd, which
the interpreter's C-level handler writes the signal number to the moment it arrives; the
Python handlers do nothing. A watcher thread reads the fd and does the rest: the log line,
the stop request, and on a second signal the forced exit, on a connection of its own.
"""

from __future__ import annotations

import contextlib
import logging
import os
import signal
import threading
import time
from collections.abc import Callable
from types import FrameType
from typing import TYPE_CHECKING, Any

from django.db import DatabaseError, connections, transaction

from django_posixcron.db import away, one_line, own_connection
from django_posixcron.log import get_logger
from django_posixcron.models import RunStatus
from django_posixcron.scheduling import alerts, rules
from django_posixcron.scheduling.liveness import mark_stopped, release_declarations
from django_posixcron.scheduling.outcomes import (
    Outcome,
    error_summary,
    log_finished,
    write_outcomes,
)

if TYPE_CHECKING:
    from django_posixcron.scheduling.loop import Scheduler

# Under the documented "django_posixcron.scheduler" logger, one child per part.
logger = get_logger("django_posixcron.scheduler.shutdown")

# "A second signal ends the process within 2 s." The forced exit's writes are bounded by a
# statement timeout of this long; a timer ends the process at FORCED_EXIT_LIMIT whatever
# they are doing (a connection attempt to a database that is down has no statement timeout).
STATEMENT_TIMEOUT = 1.0
FORCED_EXIT_LIMIT = 1.8

# At a graceful exit, signal receivers still busy get up to RECEIVERS_DRAIN (loop.py), but
# never more than this past the grace period, so that the default 25 s grace and the exit fit
# inside Kubernetes' 30 s; and at least RECEIVERS_LEAST, for a receiver about to finish.
RECEIVERS_PAST_GRACE = 2.0
RECEIVERS_LEAST = 0.5

# Outcomes whose rows another transaction holds (a peer's claim, an admin's pause: a moment)
# are tried again this often, up to HELD_PAST_GRACE past the grace period: a run whose
# callable returned must not end lost, and run again elsewhere, for a lock held 1 s.
HELD_RETRY = 0.1
HELD_PAST_GRACE = 2.0

# A graceful stop still going this long past its grace period becomes the forced exit of a
# second signal. Its writes have bounds of their own (HELD_PAST_GRACE, RECEIVERS_PAST_GRACE,
# the process executor's kill), but a database that stops answering without closing the
# connection holds each statement and each connection attempt for the driver's timeouts:
# the stop then took grace + 36 s, past the grace + 15 s the docs tell supervisors to allow.
GRACEFUL_PAST_GRACE = 10.0

# The graceful stop stops the process executor's runs when the grace period ends; this long
# after, a thread of its own does it instead if the stop is held up on the database.
GRACE_END_SLACK = 1.0

_STOP_WATCHING = b"\0"

# The watcher installed in this process, for the fork handler below.
_installed: SignalWatcher | None = None

# The signals that stop the scheduler. SIGHUP too (a closed terminal, an orchestrator's
# choice): by default it killed the process on the spot, its runs left to be found lost.
# An ignored SIGHUP (nohup) stays ignored.
STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)


# The signals the watcher handles, held back in a forking thread until the child has let go
# of the watcher: a SIGTERM reaching the child between fork() and forget_in_child() (a pool
# terminating a worker it has just started) went down the inherited pipe to the scheduler.
_FORK_HELD = frozenset(STOP_SIGNALS)
# The forking thread's signal mask before fork(), per thread: restored in parent and child.
_fork_mask = threading.local()


def _before_fork() -> None:
    if _installed is not None:
        _fork_mask.previous = signal.pthread_sigmask(signal.SIG_BLOCK, _FORK_HELD)


def _restore_mask() -> None:
    previous = getattr(_fork_mask, "previous", None)
    if previous is not None:
        _fork_mask.previous = None
        signal.pthread_sigmask(signal.SIG_SETMASK, previous)


def _after_fork_in_child() -> None:
    if _installed is not None:
        _installed.forget_in_child()
    # A signal held back meanwhile is delivered now, to the child's own dispositions.
    _restore_mask()


# Task code run by the thread executor may fork: multiprocessing pools, os.fork(). The child
# must not inherit the scheduler's signal handling (see forget_in_child).
os.register_at_fork(
    before=_before_fork, after_in_parent=_restore_mask, after_in_child=_after_fork_in_child
)


class SignalWatcher:
    """Own SIGTERM, SIGINT and SIGHUP: the first asks for a graceful stop, the second a forced
    exit."""

    def __init__(self, on_first: Callable[[str], None], on_second: Callable[[str], None]) -> None:
        self._on_first = on_first
        self._on_second = on_second
        self._previous: dict[int, Any] = {}
        self._handled: frozenset[int] = frozenset()
        self._pipe: tuple[int, int] | None = None
        self._thread: threading.Thread | None = None
        self._previous_fd = -1
        self.received = 0

    def install(self) -> bool:
        """Handle the stop signals; return False if already handled or not possible here."""
        if self._previous or threading.current_thread() is not threading.main_thread():
            return False
        self._pipe = os.pipe()
        os.set_blocking(self._pipe[1], False)
        self._previous_fd = signal.set_wakeup_fd(self._pipe[1], warn_on_full_buffer=False)
        # Started under nohup, SIGHUP is ignored: the user asked for that.
        self._handled = frozenset(
            s for s in STOP_SIGNALS if s != signal.SIGHUP or signal.getsignal(s) != signal.SIG_IGN
        )
        self._thread = threading.Thread(target=self._watch, name="posixcron-signals-watch")
        self._thread.daemon = True
        self._thread.start()
        for signum in self._handled:
            self._previous[signum] = signal.signal(signum, self._handle)
        global _installed
        _installed = self
        return True

    def forget_in_child(self) -> None:
        """In a process forked from the scheduler, give the signals back their dispositions.

        The child inherits the wakeup fd, the scheduler's own pipe: a SIGTERM the child gets
        (``Pool.terminate()`` sends one to each worker) was read by the scheduler's watcher
        as its own, and stopped the scheduler. And it inherits the handlers that do nothing,
        so the child itself never died of SIGTERM or SIGINT. Runs in the child only, in the
        thread that forked, which is the child's main thread.
        """
        global _installed
        _installed = None
        with contextlib.suppress(ValueError, OSError):
            signal.set_wakeup_fd(-1)
        for signum, handler in self._previous.items():
            with contextlib.suppress(ValueError, OSError, TypeError):
                signal.signal(signum, signal.SIG_DFL if handler is None else handler)
        self._previous = {}
        if self._pipe is not None:
            for fd in self._pipe:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._pipe = None
        self._thread = None

    def restore(self) -> None:
        global _installed
        if _installed is self:
            _installed = None
        for signum, handler in self._previous.items():
            signal.signal(signum, handler)
        self._previous.clear()
        if self._pipe is not None:
            signal.set_wakeup_fd(self._previous_fd)
            with contextlib.suppress(OSError):
                os.write(self._pipe[1], _STOP_WATCHING)
            if self._thread is not None and self._thread is not threading.current_thread():
                self._thread.join(5)
            for fd in self._pipe:
                with contextlib.suppress(OSError):
                    os.close(fd)
            self._pipe = None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        """Do nothing: the wakeup fd already told the watcher (and replaces the default)."""

    def _watch(self) -> None:
        assert self._pipe is not None
        read_fd = self._pipe[0]
        while True:
            try:
                data = os.read(read_fd, 64)
            except OSError:
                return
            if not data:
                return
            for signum in data:
                if signum == _STOP_WATCHING[0]:
                    return
                if signum not in self._handled:
                    continue  # another signal some other code handles
                self.received += 1
                name = signal.Signals(signum).name
                if self.received == 1:
                    self._on_first(name)
                else:
                    self._on_second(name)
                    return


def graceful(scheduler: Scheduler, receivers_drain: float) -> None:
    """Wait up to the grace period for runs, mark the rest interrupted, stop the threads.

    "First SIGTERM / SIGINT: stop claiming, wait up to --grace for running runs, mark those
    still running interrupted (their retry rule applies), exit 0."
    """
    assert scheduler.process is not None
    runs, grace = scheduler.runs, scheduler.grace
    # From the stop request (the signal), not from when the loop got here: a tick waiting
    # on a database that does not answer holds the loop, and the supervisor's clock runs.
    ends = (scheduler.stop_requested_at or time.monotonic()) + grace
    running = len(runs.pks())
    if running:
        # With the database away, the stop recorded below releases them as well. With
        # nothing running the stop follows at once, and the stopped row keeps naming what
        # it declared: the fleet then knows a `--once` of its own settings changed nothing.
        with contextlib.suppress(DatabaseError):
            release_declarations(scheduler.using, scheduler.process)
    left = max(0.0, ends - time.monotonic())
    if running:
        logger.info(
            "waiting up to %.0f s for %d running task(s)",
            left,
            running,
            extra={"action": "shutdown_waiting"},
        )
    scheduler.wait_idle(left)
    runs.interrupt_remaining(_past_grace(grace), scheduler.now)
    failures = 0
    while True:
        try:
            try:
                _never_started(scheduler)
            except DatabaseError as exc:
                if away(exc):
                    raise  # the database away: tried again with the rest, as below
                # Refused: the rest of the stop is still recorded, and the others mark
                # that claim's runs lost.
                logger.error(
                    "could not look up the claim whose commit lost its reply: %s",
                    one_line(exc),
                    extra={"action": "shutdown_db_error"},
                )
                _claim_unresolved(scheduler)
                scheduler.claimer.unsure = []
            runs.flush()
            if runs.unrecorded and time.monotonic() < ends + HELD_PAST_GRACE:
                time.sleep(HELD_RETRY)
                continue
            if runs.unrecorded:
                logger.error(
                    "could not record %d outcome(s): another transaction still holds their "
                    "rows (a scheduler frozen in the middle of a write?); other schedulers "
                    "will mark the runs lost",
                    runs.unrecorded,
                    extra={"action": "shutdown_db_error"},
                )
                log_unrecorded(runs.unrecorded_outcomes())
            mark_stopped(scheduler.using, scheduler.process)
            break
        except DatabaseError as exc:
            if not away(exc):
                _unrecorded(exc, runs.unrecorded_outcomes())
                _claim_unresolved(scheduler)
                break
            # The database is away for a moment: what the grace period has left is spent
            # trying again, since a run whose callable returned must not end lost.
            failures += 1
            left = ends - time.monotonic()
            if left > 0:
                delay = min(rules.back_off(failures), left)
                logger.error(
                    "could not record the shutdown yet (%s); %d outcome(s) waiting, trying "
                    "again in %.1f s",
                    one_line(exc),
                    runs.unrecorded,
                    delay,
                    extra={"action": "shutdown_db_error"},
                )
                with contextlib.suppress(Exception):
                    connections[scheduler.using].close()
                time.sleep(delay)
                continue
            _unrecorded(exc, runs.unrecorded_outcomes())
            _claim_unresolved(scheduler)
            break
    if scheduler.heartbeat is not None:
        scheduler.heartbeat.stop()
    scheduler.draining_receivers = True  # bounded by receivers_time(), not stuck
    abandoned = scheduler.notifier.stop(receivers_time(ends, receivers_drain, time.monotonic()))
    if abandoned:
        try:
            alerts.give_back(abandoned, scheduler.using)
        except DatabaseError as exc:
            logger.error(
                "could not give the alerts not sent back to the other schedulers: %s",
                one_line(exc),
                extra={"action": "shutdown_db_error"},
            )
    scheduler.executor.close()
    logger.info(
        "scheduler stopped process=%s",
        scheduler.process.label,
        extra={"action": "scheduler_stopped"},
    )


NEVER_STARTED = (
    "never started: the connection was lost while its claim committed, and the scheduler "
    "stopped before the database answered again"
)


def _never_started(scheduler: Scheduler) -> None:
    """Settle a claim whose commit lost its reply just before the stop (or the tick of
    ``--once``): what it committed is recorded now instead of staying `running` until the
    others mark it lost with "its outcome is unknown" and the next occurrence takes its retry.

    Its local runs never started and do not start now: they are recorded `interrupted`
    (their retry rule applies). Its hand-offs are enqueued (a worker runs them, not this
    process), and its skips logged and signalled, as the claim does after its commit.
    Raises while the database cannot answer, and keeps them for the next try.
    """
    claimer = scheduler.claimer
    if not claimer.unsure:
        return
    assert scheduler.process is not None
    now = scheduler.now()
    committed = claimer.committed_runs(scheduler.process, now, start=False)
    handed = []
    for run, declaration in committed:
        if run.status == RunStatus.SKIPPED:
            log_finished(run)
            scheduler.notifier.finished(run)
        elif run.backend:
            handed.append((run, declaration))
        else:
            scheduler.runs.queue(Outcome(run, RunStatus.INTERRUPTED, now, NEVER_STARTED, ran=False))
    for outcome in claimer.enqueue_after_commit(handed):
        scheduler.runs.queue(outcome)


def _claim_unresolved(scheduler: Scheduler) -> None:
    unsure = scheduler.claimer.unsure
    if unsure:
        logger.error(
            "a claim of %d run(s) lost its commit's reply and could not be looked up before "
            "the stop: if it committed, its runs end lost (they never started): %s",
            len(unsure),
            ", ".join(f"{run.task.name} at {run.scheduled_for.isoformat()}" for run, _ in unsure),
            extra={"action": "claim_commit_lost"},
        )


def _past_grace(grace: float) -> str:
    return (
        "Interrupted: the scheduler was asked to stop and the run did not "
        f"finish within the {grace:g} s grace period."
    )


def receivers_time(grace_ends: float, most: float, now: float) -> float:
    """Return how long signal receivers may still take at shutdown: up to `most`, but no
    more than RECEIVERS_PAST_GRACE past the grace period (at least RECEIVERS_LEAST).

    A run that used the whole grace period left receivers 10 s more: 35 s with the default
    25 s grace, past the 30 s after which Kubernetes (and most process managers) kill the
    process, before the alerts not sent were given back to the fleet or even logged.
    """
    return max(RECEIVERS_LEAST, min(most, grace_ends + RECEIVERS_PAST_GRACE - now))


def _unrecorded(exc: BaseException, outcomes: list[Outcome]) -> None:
    logger.error(
        "could not record the shutdown (%s); %d outcome(s) unrecorded; other "
        "schedulers will mark the runs lost",
        one_line(exc),
        len(outcomes),
        extra={"action": "shutdown_db_error"},
    )
    log_unrecorded(outcomes)


def log_unrecorded(outcomes: list[Outcome]) -> None:
    """Say, one line each, how the runs whose outcome could not be written really ended: the
    history will say lost (other schedulers mark them so), and a run whose callable returned
    is retried; the log keeps what happened."""
    for o in outcomes:
        logger.error(
            "run %s of task %s ended %s at %s; its outcome could not be recorded, and the "
            "run will be marked lost%s",
            o.run.pk,
            o.run.task.name,
            o.status,
            o.finished_at.isoformat(),
            f" (error: {error_summary(o.error)})" if o.error else "",
            extra={
                "action": "outcome_unrecorded",
                "task": o.run.task.name,
                "run_id": o.run.pk,
                "status": o.status,
            },
        )


def first_signal(scheduler: Scheduler, name: str) -> None:
    logger.warning(
        "%s received: no new claims; waiting up to %g s for running tasks "
        "(send it again to exit at once)",
        name,
        scheduler.grace,
        extra={"action": "shutdown_requested"},
    )
    scheduler.request_stop()
    threading.Thread(
        target=_stop_deadline, args=(scheduler,), name="posixcron-stop-deadline", daemon=True
    ).start()
    if scheduler.executor.stops_on_timeout:
        threading.Thread(
            target=_grace_end, args=(scheduler,), name="posixcron-grace-end", daemon=True
        ).start()


def _grace_end(scheduler: Scheduler) -> None:
    """Stop the runs' processes when the grace period ends (runs on its own thread).

    The graceful stop does so itself, unless the main thread is held up on a database that
    does not answer (a statement, a connection attempt): then the runs' processes would go on
    executing until the forced exit, GRACEFUL_PAST_GRACE later, although the grace period
    they were given is over. Their outcomes are then recorded as the stop goes on, or by the
    forced exit.
    """
    since = scheduler.stop_requested_at
    assert since is not None
    ends = since + scheduler.grace + GRACE_END_SLACK
    if scheduler.stopped.wait(max(0.0, ends - time.monotonic())):
        return
    stopped = scheduler.runs.stop_processes(_past_grace(scheduler.grace), scheduler.now)
    if stopped:
        logger.warning(
            "the %g s grace period is over and the stop is held up (a database that does "
            "not answer?): stopping the process of %d run(s) still executing",
            scheduler.grace,
            stopped,
            extra={"action": "shutdown_grace_over"},
        )


def _stop_deadline(scheduler: Scheduler) -> None:
    """Force the exit of a graceful stop that does not end in time (runs on its own thread).

    GRACEFUL_PAST_GRACE after the signal, with no run to wait for and no outcome to record
    (queued or being written), a stop still going is stuck on a database or a Tasks broker
    that does not answer (unless it is giving signal receivers their bounded time): the grace
    period, which is for runs, is not waited out. Otherwise the stop gets until
    GRACEFUL_PAST_GRACE past the grace period.
    """
    stopped, since, runs = scheduler.stopped, scheduler.stop_requested_at, scheduler.runs
    assert since is not None
    if stopped.wait(GRACEFUL_PAST_GRACE):
        return
    # An outcome batch being written counts: cut off mid-write, its runs, whose callables
    # returned, would be left `running` and found lost (run again).
    if not runs.busy() and not scheduler.draining_receivers:
        logger.error(
            "the scheduler has not stopped %g s after the signal, with no run to wait for "
            "(a database or a Tasks backend that does not answer?); exiting now, as on a "
            "second signal",
            GRACEFUL_PAST_GRACE,
            extra={"action": "shutdown_forced"},
        )
        _force(scheduler, "Interrupted: the scheduler's stop was stuck and it exited at once.")
        return
    ends = since + scheduler.grace + GRACEFUL_PAST_GRACE
    if stopped.wait(max(0.0, ends - time.monotonic())):
        return
    logger.error(
        "the graceful stop has not ended %g s past the %g s grace period (a database that "
        "does not answer?); exiting now, as on a second signal",
        GRACEFUL_PAST_GRACE,
        scheduler.grace,
        extra={"action": "shutdown_forced"},
    )
    _force(
        scheduler,
        f"Interrupted: the scheduler's graceful stop overran its {scheduler.grace:g} s grace "
        "period and it exited at once.",
    )


def second_signal(scheduler: Scheduler, name: str) -> None:
    logger.warning("second %s received: exiting now", name, extra={"action": "shutdown_forced"})
    _force(scheduler, "Interrupted: the scheduler was told to exit at once (a second signal).")


def _force(scheduler: Scheduler, reason: str) -> None:
    """Force the exit, once: a second signal and the graceful stop's deadline may race."""
    if not scheduler.forcing.acquire(blocking=False):
        return  # the other one is ending the process
    process = scheduler.process
    _claim_unresolved(scheduler)
    forced_exit(
        using=scheduler.using,
        kill_children=scheduler.executor.kill_all,
        take_outcomes=lambda: scheduler.runs.take_all(reason),
        mark_stopped=lambda using: mark_stopped(using, process) if process else None,
    )


def forced_exit(
    *,
    using: str,
    kill_children: Callable[[], None],
    take_outcomes: Callable[[], list[Outcome]],
    mark_stopped: Callable[[str], None],
) -> None:
    """End the process now: kill the executor's children, record what it can, exit 1.

    "It kills the process executor's children, records the outcomes it already has, marks
    the rest interrupted in one short transaction bounded by a statement timeout, and exits."
    Runs on the watcher thread, so the transaction uses that thread's own connection, never
    the one the main thread may be in the middle of using.
    """
    timer = threading.Timer(FORCED_EXIT_LIMIT, _exit_now, args=("the forced exit ran out of time",))
    timer.daemon = True
    timer.start()
    outcomes: list[Outcome] = []
    try:
        own_connection(using)  # not one task code may hold all of, from the pool
        # What returned is taken (and the rest sealed) before the kill, so a killed child is
        # recorded interrupted, not failed; the kill comes before any write: a child that went
        # on executing after its run is recorded as ended would run twice once retried.
        outcomes = take_outcomes()
        kill_children()
        # Session settings before BEGIN (SQLite's IMMEDIATE or EXCLUSIVE waits for the lock there);
        # PostgreSQL's SET LOCAL inside, where it lasts just this transaction.
        postgresql = connections[using].vendor == "postgresql"
        if not postgresql:
            _bound_statements(using)
        with transaction.atomic(using=using):
            if postgresql:
                _bound_statements(using)
            for start in range(0, len(outcomes), 200):
                write_outcomes(outcomes[start : start + 200], using)
            mark_stopped(using)
        logger.warning(
            "forced exit: %d outcome(s) recorded",
            len(outcomes),
            extra={"action": "forced_exit_recorded"},
        )
    except BaseException:
        logger.exception("could not record the forced exit", extra={"action": "exit_error"})
        with contextlib.suppress(BaseException):
            log_unrecorded(outcomes)
    _exit_now("")


def _bound_statements(using: str) -> None:
    """Bound each statement of the current transaction by STATEMENT_TIMEOUT."""
    connection = connections[using]
    millis = int(STATEMENT_TIMEOUT * 1000)
    seconds = max(1, int(STATEMENT_TIMEOUT))
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(f"SET LOCAL statement_timeout = {millis}")
            cursor.execute(f"SET LOCAL lock_timeout = {millis}")
        elif connection.vendor == "mysql" and getattr(connection, "mysql_is_mariadb", False):
            cursor.execute(f"SET SESSION max_statement_time = {STATEMENT_TIMEOUT}")
            cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {seconds}")
        elif connection.vendor == "mysql":
            cursor.execute(f"SET SESSION innodb_lock_wait_timeout = {seconds}")
        elif connection.vendor == "sqlite":
            cursor.execute(f"PRAGMA busy_timeout = {millis}")


def _exit_now(reason: str) -> None:
    if reason:
        logger.error("%s; exiting", reason, extra={"action": "exit_error"})
    with contextlib.suppress(Exception):
        logging.shutdown()
    os._exit(1)
