"""Runs in flight: handing them to the executor, their timeouts, and their queued outcomes.

Worker threads only queue outcomes; the loop writes them in batches on its own connection,
so a worker thread that ran no database code never opens a connection of its own.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime as dt
import functools
import logging
import threading
import time
import traceback
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING

from django.db import DatabaseError, connections

from django_posixcron.context import RunContext
from django_posixcron.db import away, one_line, outage
from django_posixcron.executors import Executor, TaskCodeError, describe_exception
from django_posixcron.log import get_logger
from django_posixcron.models import Run, RunStatus
from django_posixcron.scheduling import rules
from django_posixcron.scheduling.outcomes import (
    OUTCOME_BATCH,
    Notifier,
    Outcome,
    cap,
    write_outcomes,
)
from django_posixcron.signals import run_started

if TYPE_CHECKING:
    from django_posixcron.declarations import TaskDeclaration

# Under the documented "django_posixcron.scheduler" logger, one child per part.
logger = get_logger("django_posixcron.scheduler.execution")

# While waiting for runs (a shutdown's grace, --once), outcomes of the runs that returned are
# written at least this often, not only once every run has ended.
WAIT_FLUSH_EVERY = 0.25

# How much longer than its `kill_after` the graceful exit waits for a stopped run's process to
# be gone and its outcome queued: the run's thread notices within a tenth of a second.
STOP_SLACK = 2.0

# A run whose code would start this long after its claim (the process frozen, SIGSTOP, a
# suspended VM, or starved) first reads its row: another scheduler may have judged this
# process gone meanwhile, marked the run lost and retried it. Healthy, a run starts within
# milliseconds of its claim; a peer needs a heartbeat older than the stale limit (30 s).
LATE_START = 5.0

# An outcome whose task row another transaction holds this long is said in a WARNING; before,
# it is a peer's claim or an admin's pause, let go in a moment.
HELD_WARN_AFTER = 1.0


@dataclasses.dataclass
class InFlight:
    run: Run
    declaration: TaskDeclaration
    deadline: dt.datetime | None
    started_monotonic: float = dataclasses.field(default_factory=time.monotonic)
    # How the run ends, decided while its process is being stopped (timed out, interrupted):
    # recorded when the call has returned, so no run executes after it is recorded as ended.
    ending: Outcome | None = None

    def elapsed_finish(self) -> dt.datetime:
        """Return started_at plus the time measured since, in the claim's clock."""
        assert self.run.started_at is not None
        return self.run.started_at + dt.timedelta(seconds=time.monotonic() - self.started_monotonic)

    def timeout_in(self, now: dt.datetime | None) -> float | None:
        """Return the seconds left before the run's timeout (<= 0: past it); None without one.

        Counted at `now` when a tick is driven at an instant of its own; otherwise on this
        host's monotonic clock from the claim, as the run's duration is: a timeout is time
        the run may take, and a step of the wall clock (an NTP correction, a VM resumed;
        SQLite's clock is this host's) is no time passing.
        """
        if self.deadline is None:
            return None
        if now is not None:
            return (self.deadline - now).total_seconds()
        assert self.run.started_at is not None
        limit = (self.deadline - self.run.started_at).total_seconds()
        return limit - (time.monotonic() - self.started_monotonic)


class _EndedElsewhere(Exception):
    """The run was recorded ended (lost) by another scheduler before its code started."""


class Runs:
    """The runs this process executes, and the outcomes waiting to be written."""

    def __init__(self, executor: Executor, using: str, notifier: Notifier) -> None:
        self.executor = executor
        self.using = using
        self.notifier = notifier
        self.lock = threading.Lock()
        self.inflight: dict[int, InFlight] = {}
        self.outcomes: list[Outcome] = []
        # Outcomes taken out of `outcomes` by a flush whose write has not returned yet.
        self.writing = 0
        # Runs whose outcome is held back by rows locked elsewhere: since when (monotonic),
        # and which were logged (once each).
        self._held_since: dict[int, float] = {}
        self._held_logged: set[int] = set()
        # Set by the forced exit: from then on a returning run's outcome is not taken here,
        # the forced exit records what it holds and marks the rest interrupted.
        self.sealed = False

    def pks(self) -> list[int]:
        with self.lock:
            return list(self.inflight)

    def timeouts_in(self, now: dt.datetime | None = None) -> list[float]:
        """Return the seconds left before each timeout of the runs in flight, never
        negative (see InFlight.timeout_in)."""
        with self.lock:
            left = [i.timeout_in(now) for i in self.inflight.values()]
        return [max(0.0, s) for s in left if s is not None]

    @property
    def unrecorded(self) -> int:
        with self.lock:
            return len(self.outcomes)

    def unrecorded_outcomes(self) -> list[Outcome]:
        """Return the outcomes still waiting to be written."""
        with self.lock:
            return list(self.outcomes)

    def busy(self) -> bool:
        """Whether a run is in flight, an outcome queued or one being written, read at one
        moment: an outcome moves between the three under the lock."""
        with self.lock:
            return bool(self.inflight or self.outcomes or self.writing)

    def launch(
        self,
        run: Run,
        declaration: TaskDeclaration,
        now: dt.datetime,
        claimed_monotonic: float | None = None,
    ) -> None:
        """Hand a claimed run to the executor.

        `claimed_monotonic`: this host's monotonic clock when the claim was sent, the instant
        `run.started_at` records. The run's end is counted from it, so that the commit and
        the hand-off are not left out of its duration (its finish was recorded before the
        callable had even started, for a quick one).
        """
        assert run.started_at is not None
        timeout = run.task.timeout
        inflight = InFlight(run, declaration, run.started_at + timeout if timeout else None)
        if claimed_monotonic is not None:
            inflight.started_monotonic = claimed_monotonic
        with self.lock:
            self.inflight[run.pk] = inflight
        try:
            self.executor.submit(run.pk, functools.partial(self._execute, inflight))
        except Exception as exc:
            with self.lock:
                self.inflight.pop(run.pk, None)
            outcome = Outcome(
                run,
                RunStatus.FAILED,
                now,
                cap(f"Could not start the run: {describe_exception(exc)}"),
                cap(traceback.format_exc(), keep_tail=True),
            )
            # Written with the others by the next flush, kept while the database is away.
            self.queue(outcome)

    def _execute(self, inflight: InFlight) -> None:
        """Run one task in the executor's thread and queue its outcome."""
        run = inflight.run
        status, error, tb = RunStatus.SUCCEEDED, "", ""
        # Everything from here on is in the try: anything that raised out of it ended this
        # thread with the run `running` under a live heartbeat, never lost nor retried.
        try:
            if time.monotonic() - inflight.started_monotonic >= LATE_START:
                self._refuse_ended_elsewhere(inflight)
            if logger.isEnabledFor(logging.INFO):
                logger.info(
                    "run started task=%s trigger=%s scheduled_for=%s run=%s",
                    run.task.name,
                    run.trigger,
                    run.scheduled_for.isoformat(),
                    run.pk,
                    extra={"action": "run_started", "task": run.task.name, "run_id": run.pk},
                )
            # Off this thread, as run_finished: a slow receiver must delay neither the run
            # (its timeout counts from the claim) nor anything else. One queue keeps them in
            # order.
            if run_started.has_listeners():
                # A copy: the outcome may be written on the run before the receiver sees it.
                self.notifier.send(run_started, run=copy.copy(run))
            with self.lock:
                # Timed out or interrupted before its code started: it never starts ("no run
                # keeps executing after the run is recorded as ended").
                ended = self.inflight.get(run.pk) is not inflight or inflight.ending is not None
            if ended:
                raise TaskCodeError("Stopped before its code started.", "")
            # What runs is always resolved from settings, never from the stored path.
            declaration = inflight.declaration
            context = None
            if declaration.takes_context:
                context = RunContext.of(run, declaration.timezone)
            self.executor.invoke(run.pk, declaration, context)
        except TaskCodeError as exc:
            status, error = RunStatus.FAILED, cap(exc.error)
            tb = cap(exc.remote_traceback, keep_tail=True)
        except _EndedElsewhere:
            # Its row says how it ended, and its retry is another run's: nothing to record.
            with self.lock:
                self.inflight.pop(run.pk, None)
            return
        except BaseException as exc:  # SystemExit and KeyboardInterrupt too
            status, error = RunStatus.FAILED, cap(describe_exception(exc))
            tb = cap(traceback.format_exc(), keep_tail=True)
        finished_at = inflight.elapsed_finish()
        with self.lock:
            mine = not self.sealed and self.inflight.pop(run.pk, None) is not None
            if mine and inflight.ending is not None:
                # Stopped: it ended as decided, now that its process is gone.
                self.outcomes.append(dataclasses.replace(inflight.ending, finished_at=finished_at))
            elif mine:
                left = inflight.timeout_in(None)
                started = run.started_at
                if left is not None and left <= 0 and inflight.deadline and started:
                    # Returned past its timeout before the loop could judge it (the process
                    # frozen or starved meanwhile): as the loop would have recorded it.
                    took = inflight.deadline - started
                    status, error = (
                        RunStatus.TIMED_OUT,
                        cap(
                            f"Timed out after {took}: it returned "
                            f"{finished_at - started} after its start, before the scheduler "
                            f"could stop it." + (f" It had failed: {error}" if error else "")
                        ),
                    )
                self.outcomes.append(Outcome(run, status, finished_at, error, tb))
        if not mine:
            logger.info(
                "run %s of task %s returned after it was recorded as ended (timed out, or "
                "interrupted by the shutdown)",
                run.pk,
                run.task.name,
                extra={"action": "run_returned_late", "task": run.task.name, "run_id": run.pk},
            )

    def _refuse_ended_elsewhere(self, inflight: InFlight) -> None:
        """Raise _EndedElsewhere if the run's row no longer says `running`: a run starting
        late (see LATE_START) whose process another scheduler judged gone meanwhile, and
        whose retry may already be executing elsewhere, must not start beside it."""
        run = inflight.run
        try:
            status = (
                Run.objects.using(self.using)
                .filter(pk=run.pk)
                .values_list("status", flat=True)
                .first()
            )
        except DatabaseError:
            return  # cannot tell: the run is this process's as far as it knows
        if status == RunStatus.RUNNING:
            return
        logger.warning(
            "run %s of task %s was not started: it was claimed %.0f s ago, and meanwhile "
            "another scheduler %s (this process did not run, or did not reach the database, "
            "for longer than the stale limit); its retry is that scheduler's",
            run.pk,
            run.task.name,
            time.monotonic() - inflight.started_monotonic,
            f"recorded it {status}" if status else "deleted it",
            extra={"action": "run_ended_elsewhere", "task": run.task.name, "run_id": run.pk},
        )
        raise _EndedElsewhere

    def check_timeouts(
        self, now: dt.datetime, stops_on_timeout: bool, *, explicit: bool = False
    ) -> list[Run]:
        """Time out the runs past their timeout; return them.

        `explicit`: the tick is driven at `now`, an instant of its own, and the timeouts
        are judged at it; otherwise by the time each run has taken (InFlight.timeout_in),
        and a thread's run ends when that time is up.

        An executor that stops runs has each one's process stopped, and the run is recorded
        timed_out once it is gone (the next tick writes it): "no run keeps executing after the
        run is recorded as ended", so neither its retry nor, with overlap=skip, the task's next
        occurrence can start beside it. Threads cannot be stopped: such a run is recorded
        timed_out at once, its slot freed, its call left to return in the background.
        """
        at = now if explicit else None
        with self.lock:
            expired = [
                i
                for i in self.inflight.values()
                if (left := i.timeout_in(at)) is not None and left <= 0
            ]
        timed_out = []
        for inflight in expired:
            run = inflight.run
            if stops_on_timeout:
                with self.lock:
                    deadline = inflight.deadline
                    if self.inflight.get(run.pk) is not inflight or deadline is None:
                        continue  # it returned meanwhile: its own outcome is queued, and wins
                    assert run.started_at is not None
                    took = deadline - run.started_at
                    inflight.ending = Outcome(
                        run,
                        RunStatus.TIMED_OUT,
                        now if explicit else inflight.elapsed_finish(),
                        f"Timed out after {took}.",
                    )
                    inflight.deadline = None
                self.executor.stop(run.pk)
                timed_out.append(run)
                continue
            assert inflight.deadline is not None
            assert run.started_at is not None
            outcome = Outcome(
                run,
                RunStatus.TIMED_OUT,
                now if explicit else inflight.elapsed_finish(),
                f"Timed out after {inflight.deadline - run.started_at}. The thread executor "
                "cannot stop Python code: the call may still be running in the background.",
            )
            held: list[Outcome] = []
            written = False
            with self.lock:
                if self.inflight.pop(run.pk, None) is None:
                    # It returned meanwhile: its own outcome is queued, and wins.
                    continue
                # Out of `inflight`, in no queue: counted as being written in the same
                # moment, so the stop deadline never finds it nowhere.
                self.writing += 1
            try:
                if write_outcomes([outcome], self.using, self.notifier, held=held):
                    timed_out.append(run)
                written = True
            except DatabaseError:
                self.queue(outcome)
                raise
            finally:
                with self.lock:
                    if written:
                        self.outcomes.extend(held)
                    self.writing -= 1
                self.executor.release(run.pk)
            if held:
                self._note_held(held)
        return timed_out

    def wait_idle(self, timeout: float | None, now: Callable[[], dt.datetime]) -> bool:
        """Wait for the runs in flight to finish and record their outcomes.

        Return False if `timeout` passed first. Timeouts of runs in flight are enforced while
        waiting; outcomes the database cannot take yet stay queued for the next attempt.
        """
        deadline = None if timeout is None else time.monotonic() + timeout
        flush_at, failures = 0.0, 0
        while True:
            step = None if deadline is None else max(0.0, deadline - time.monotonic())
            deadlines = self.timeouts_in()
            if deadlines:
                until = min(deadlines)
                step = until if step is None else min(step, until)
            if self.unrecorded and time.monotonic() >= flush_at:
                # A run that returned is recorded while the others go on (a shutdown's grace,
                # --once): a kill before they all end must not leave it to be marked lost.
                failures = 0 if self._flush_or_keep() else failures + 1
                flush_at = time.monotonic() + (rules.back_off(failures) if failures else 0.0)
            step = WAIT_FLUSH_EVERY if step is None else min(step, WAIT_FLUSH_EVERY)
            idle = self.executor.wait_idle(step)
            if not idle and deadlines:
                try:
                    self.check_timeouts(now(), self.executor.stops_on_timeout)
                except DatabaseError as exc:
                    logger.error(
                        "could not record a timeout: %s",
                        one_line(exc),
                        extra={"action": "db_error"},
                    )
                idle = self.executor.wait_idle(0)
            if idle:
                if not self._flush_or_keep() or not self.unrecorded:
                    return True  # recorded, or kept for the caller while the database is away
                # Rows another transaction holds (a peer's claim, an admin's pause) are let
                # go in a moment: tried again until the deadline, not left to end lost.
                left = WAIT_FLUSH_EVERY if deadline is None else deadline - time.monotonic()
                if left <= 0:
                    return False
                time.sleep(min(WAIT_FLUSH_EVERY, left))
                continue
            if deadline is not None and time.monotonic() >= deadline:
                return False

    def _flush_or_keep(self) -> bool:
        """Write the queued outcomes; keep them if the database is away (and return False)."""
        try:
            self.flush()
            return True
        except DatabaseError as exc:
            if not away(exc):
                raise
            # Kept in memory for the next attempt (a tick, or the shutdown's).
            logger.error(
                "could not record %d outcome(s) yet, database unavailable: %s",
                self.unrecorded,
                one_line(exc),
                extra={"action": "db_error"},
            )
            with contextlib.suppress(Exception):
                connections[self.using].close()
            return False

    def queue(self, outcome: Outcome) -> None:
        with self.lock:
            self.outcomes.append(outcome)

    def take_all(self, error: str) -> list[Outcome]:
        """Seal: return the queued outcomes, then every run in flight as interrupted."""
        with self.lock:
            self.sealed = True
            held, self.outcomes = self.outcomes, []
            remaining = list(self.inflight.values())
            self.inflight.clear()
        return held + [
            dataclasses.replace(i.ending, finished_at=i.elapsed_finish())
            if i.ending is not None
            else Outcome(i.run, RunStatus.INTERRUPTED, i.elapsed_finish(), error)
            for i in remaining
        ]

    def stop_processes(self, error: str, now: Callable[[], dt.datetime]) -> int:
        """Have the process of each run in flight stopped, the run to end interrupted once
        its process is gone; return how many were not ending already. Safe from any thread.

        Only for an executor that stops runs: threads cannot be stopped.
        """
        with self.lock:
            stopping = [i for i in self.inflight.values() if i.ending is None]
            for inflight in stopping:
                inflight.ending = Outcome(inflight.run, RunStatus.INTERRUPTED, now(), error)
                inflight.deadline = None
        for inflight in stopping:
            self.executor.stop(inflight.run.pk)
        return len(stopping)

    def interrupt_remaining(self, error: str, now: Callable[[], dt.datetime]) -> None:
        """Queue every run still in flight as interrupted, releasing its executor slot.

        An executor that stops runs has their processes stopped first, and each is queued once
        its process is gone (waiting up to the executor's `kill_after` and a little more).
        """
        if self.executor.stops_on_timeout:
            self.stop_processes(error, now)
            self.executor.wait_idle(getattr(self.executor, "kill_after", 0.0) + STOP_SLACK)
        with self.lock:
            remaining = list(self.inflight.values())
            self.inflight.clear()
        for inflight in remaining:
            # A process executor stops the run's process; threads cannot be stopped.
            self.executor.release(inflight.run.pk)
            ending = inflight.ending or Outcome(inflight.run, RunStatus.INTERRUPTED, now(), error)
            self.queue(dataclasses.replace(ending, finished_at=inflight.elapsed_finish()))

    def flush(self, *, queued_only: bool = False) -> None:
        """Write the outcomes finished runs left behind; keep them if the database is away.

        `queued_only` (the loop's tick) writes those queued when called, not the ones runs
        finishing meanwhile add: each of those runs wakes the loop again, and its outcome goes
        in the next tick's batch instead of a transaction for a handful of rows (a burst of
        short runs wrote about 60 outcomes per transaction, not the 100 a tick claims).
        """
        with self.lock:
            left = len(self.outcomes) if queued_only else -1
        while left:
            with self.lock:
                size = OUTCOME_BATCH if left < 0 else min(OUTCOME_BATCH, left)
                batch = self.outcomes[:size]
                del self.outcomes[:size]
                self.writing += len(batch)
            if not batch:
                return
            if left > 0:
                left -= len(batch)
            held: list[Outcome] = []
            written = False
            try:
                self._write_batch(batch, held)
                written = True
            finally:
                with self.lock:
                    # Queued again before they stop counting as being written: nothing may
                    # see them nowhere (the stop deadline would take the process for idle).
                    if written:
                        self.outcomes.extend(held)
                    self.writing -= len(batch)
            if held:
                self._note_held(held)
                return  # tried again at the next flush, after what is queued behind them

    def _write_batch(self, batch: list[Outcome], held: list[Outcome]) -> None:
        """Write one batch; put it back if the database is away, else one by one if refused."""
        try:
            write_outcomes(batch, self.using, self.notifier, held=held)
        except Exception as exc:
            if outage(exc):
                # The database is away: keep the outcomes for the tick that finds it back.
                with self.lock:
                    self.outcomes[:0] = batch
                raise
            # Refused for what it holds, not for an outage (a text the column's character
            # set cannot store, a driver that cannot encode it): retrying the same batch
            # would fail forever and stall the loop, and dropping it would leave its runs
            # `running` until they were found lost and run again. Write the outcomes one
            # at a time instead.
            logger.exception(
                "could not record a batch of %d outcomes; recording them one by one",
                len(batch),
                extra={"action": "outcome_write_error"},
            )
            # What the refused write found held is in the batch: each is tried again below.
            held.clear()
            for index, outcome in enumerate(batch):
                self._write_alone(outcome, batch[index + 1 :], held)

    def _note_held(self, held: list[Outcome]) -> None:
        """Note outcomes whose rows another transaction holds, kept for the next flush; say
        so once.

        Behind the others queued, so a hundred held outcomes cannot keep every later one out
        of its batch; a task's outcomes keep their order, since its row holds them all. A row
        held for a moment (an admin's pause, a peer's claim of the next occurrence) is let go
        by the next flushes (several schedulers claiming at a minute's boundary hold rows for
        milliseconds, and a burst flushes that often): only an outcome held for
        HELD_WARN_AFTER seconds is worth a WARNING.
        """
        now = time.monotonic()
        with self.lock:
            waiting = {o.run.pk for o in self.outcomes}
        # Forget the runs recorded since: the two stay as small as what is held.
        for pk in [pk for pk in self._held_since if pk not in waiting]:
            del self._held_since[pk]
            self._held_logged.discard(pk)
        for o in held:
            self._held_since.setdefault(o.run.pk, now)
        new = [
            o
            for o in held
            if now - self._held_since[o.run.pk] >= HELD_WARN_AFTER
            and o.run.pk not in self._held_logged
        ]
        if new:
            self._held_logged.update(o.run.pk for o in new)
            logger.warning(
                "%d outcome(s) wait for rows another transaction holds (a scheduler frozen in "
                "the middle of a write, or task code still running that locked its own task "
                "or run?): %s; trying again at the next tick",
                len(new),
                ", ".join(f"run {o.run.pk} of {o.run.task.name}" for o in new),
                extra={"action": "outcome_held"},
            )

    def _write_alone(self, outcome: Outcome, rest: Sequence[Outcome], held: list[Outcome]) -> None:
        """Record one outcome; if the database refuses its texts, record it with plainer ones.

        First with the characters outside the Basic Multilingual Plane escaped (a utf8mb3
        connection or table on MySQL refuses an emoji), then with the error alone, in ASCII.
        If the database goes away meanwhile, the outcome and `rest` (the rest of its batch,
        not written yet) are kept, in their order, for the next flush. An outcome whose rows
        another transaction holds is added to `held`, not waited for.
        """
        refused: BaseException | None = None
        for version in (outcome, *self._plainer(outcome)):
            if refused is not None:
                note = (
                    "[the error text could not be stored as written: "
                    f"{describe_exception(refused)}]"
                )
                version = dataclasses.replace(version, error=cap(note + "\n" + version.error))
            try:
                write_outcomes([version], self.using, self.notifier, held=held)
                return
            except Exception as exc:
                if outage(exc):
                    # The ones held before it too: the flush an outage ends keeps nothing.
                    with self.lock:
                        self.outcomes[:0] = [*held, version, *rest]
                    held.clear()
                    raise
                refused = refused or exc
        # Dropping one outcome leaves its run `running` until this process stops (then it is
        # marked lost); retrying it would stop every other outcome and claim instead.
        logger.error(
            "could not record the outcome of run %s (task %s, status %s); giving up on it: %s",
            outcome.run.pk,
            outcome.run.task.name,
            outcome.status,
            describe_exception(refused) if refused is not None else "",
            extra={
                "action": "outcome_dropped",
                "task": outcome.run.task.name,
                "run_id": outcome.run.pk,
            },
        )

    @staticmethod
    def _plainer(outcome: Outcome) -> list[Outcome]:
        def escaped(text: str) -> str:
            return "".join(c if c <= "\uffff" else f"\\U{ord(c):08x}" for c in text)

        return [
            dataclasses.replace(
                outcome,
                error=escaped(outcome.error),
                traceback=cap(escaped(outcome.traceback), keep_tail=True),
            ),
            dataclasses.replace(
                outcome, error=outcome.error.encode("ascii", "replace").decode(), traceback=""
            ),
        ]
