"""The heartbeat thread, by the database clock; marking runs of dead processes lost.

"The heartbeat itself beats on its own thread, by the database clock, whatever the loop, task
code or signal receivers are doing."
"""

from __future__ import annotations

import datetime as dt
import os
import socket
import time
from collections.abc import Callable
from typing import Any

from django.db import DatabaseError, connections
from django.db.models import QuerySet
from django.utils import timezone as dj_timezone

from django_posixcron import __version__
from django_posixcron.db import DatabaseNow, database_now, has_clock, one_line, own_connection
from django_posixcron.log import get_logger
from django_posixcron.models import Run, RunStatus, SchedulerProcess
from django_posixcron.scheduling.compiled import QueryCache
from django_posixcron.scheduling.outcomes import Notifier, Outcome, write_outcomes
from django_posixcron.scheduling.periodic import Periodic
from django_posixcron.scheduling.watchdog import Watchdog

# Under the documented "django_posixcron.scheduler" logger, one child per part.
logger = get_logger("django_posixcron.scheduler.liveness")


def register(using: str, now: dt.datetime, declaration_set: str = "") -> SchedulerProcess:
    """Insert this process's row (host, pid, what it declares) with its first heartbeat."""
    return SchedulerProcess.objects.using(using).create(
        hostname=socket.gethostname()[:255],
        pid=os.getpid(),
        started_at=now,
        last_heartbeat_at=now,
        version=__version__,
        declaration_set=declaration_set,
    )


def mark_stopped(using: str, process: SchedulerProcess) -> None:
    """Record that this process stopped: its runs are no longer anyone's."""
    SchedulerProcess.objects.using(using).filter(pk=process.pk).update(
        stopped_at=DatabaseNow() if has_clock(using) else dj_timezone.now()
    )


def release_declarations(using: str, process: SchedulerProcess) -> None:
    """Stop holding this process's declarations, as a stopping process does first.

    "[A deferred change is applied] at once when that process stops cleanly": a process in
    its grace period claims nothing new, so the fleet need not wait for its runs to end
    before applying what it deferred. Its row stays live (its runs are still its own).
    """
    SchedulerProcess.objects.using(using).filter(pk=process.pk).update(declaration_set="")
    process.declaration_set = ""


class Heartbeat(Periodic):
    """Beat for one process row every `every` seconds on a thread and connection of its own."""

    thread_name = "posixcron-heartbeat"

    def __init__(
        self,
        using: str,
        process: SchedulerProcess,
        every: float,
        running: Callable[[], list[int]],
        stale_after: float | None = None,
        watchdog: Watchdog | None = None,
        stalled: Callable[[float, str], object] | None = None,
    ) -> None:
        super().__init__(every)
        self.using = using
        # Told how long the beats were apart, and of a beat that failed: the others' beats
        # were likely held up alike, so the loop holds judging them (loop.Outage.stalled).
        self._stalled = stalled
        # Told of each beat on the thread, so that one the database does not answer is logged.
        self._watchdog = watchdog
        self.process = process
        self._running = running
        # A silence longer than this (the process stopped, frozen, or cut off from the
        # database) let the others judge us dead: noted for the loop (silence()).
        self._stale_after = stale_after
        # Registering the process wrote its first heartbeat, just before this is built: a
        # silence from then on counts, or a database lost within the first poll interval went
        # unnoticed, and peers that retired what this process declares were never undone.
        self._last_beat: float | None = time.monotonic()
        # The end of the last beat, written or failed: how long a beat was held up is
        # counted from it (from the last written one, the beat after a failure had "waited"
        # the retry interval slept after it).
        self._last_attempt: float | None = self._last_beat
        self._silence: float | None = None
        # The beat's UPDATE, compiled once per shape; safe on either thread (no converters).
        self._queries = QueryCache(using)
        # The cause of the failing beats (_cause()), or False while they are written.
        self._failing: tuple[object, ...] | bool = False

    def beat(self, now: dt.datetime | None = None) -> None:
        """Write one heartbeat: `now`, else the database's own clock (in the statement)."""
        by_database = now is None and has_clock(self.using)
        pk = self.process.pk

        def row(**at: dt.datetime) -> QuerySet[Any]:
            return SchedulerProcess.objects.using(self.using).filter(pk=pk)

        def stamped(**at: dt.datetime) -> dict[str, Any]:
            return {"last_heartbeat_at": DatabaseNow() if by_database else at["now"]}

        compiled = self._queries.get(
            ("beat", pk, by_database), row, [] if by_database else ["now"], update=stamped
        )
        stamp = {} if by_database else {"now": now or dj_timezone.now()}
        if not compiled.update(**stamp):
            self._register_again(now)
        self._beaten()

    def _beaten(self) -> None:
        at = time.monotonic()
        last, self._last_beat = self._last_beat, at
        self._last_attempt = at
        if last is not None and self._stale_after is not None and at - last > self._stale_after:
            self._silence = at - last

    def silence(self) -> float | None:
        """Return, once, how long this process went without a beat if that was longer than
        the stale limit (the others may have judged it dead meanwhile), else None."""
        silence, self._silence = self._silence, None
        return silence

    def _register_again(self, now: dt.datetime | None) -> None:
        # Someone deleted our row (a cleanup in the admin); register again so our runs keep an
        # owner that heartbeats.
        logger.warning(
            "scheduler process row %s disappeared; registering again",
            self.process.label,
            extra={"action": "process_reregistered"},
        )
        self.process.pk = None
        self.process.last_heartbeat_at = now or database_now(self.using)
        self.process.save(force_insert=True, using=self.using)
        # The deletion orphaned the runs in flight here (process set to NULL); take them back
        # before anyone presumes them lost, or they would be retried while running.
        mine = self._running()
        if mine:
            Run.objects.using(self.using).filter(
                pk__in=mine, status=RunStatus.RUNNING, process__isnull=True
            ).update(process=self.process)

    def _serve(self) -> None:
        # "The heartbeat beats on its own thread ... whatever task code is doing": on a
        # connection of its own, not one from a pool that task code may hold all of.
        own_connection(self.using)
        try:
            while not self._stop.wait(self.every):
                last = self._last_attempt
                try:
                    if self._watchdog is None:
                        self.beat()
                    else:
                        with self._watchdog.watching("heartbeat"):
                            self.beat()
                except DatabaseError as exc:
                    self._failed(exc)
                else:
                    if last is not None and self._stalled is not None:
                        # Beats further apart than their interval: held up, as the others'.
                        self._stalled(time.monotonic() - last - self.every, "the heartbeat")
                    if self._failing:
                        # Said, as its failure was: a log that shows only the failure
                        # leaves the reader guessing whether the process is alive.
                        logger.warning(
                            "heartbeat written again", extra={"action": "heartbeat_recovered"}
                        )
                    self._failing = False
        finally:
            connections.close_all()

    def _failed(self, exc: DatabaseError) -> None:
        if self._stalled is not None and self._last_attempt is not None:
            # A lock not granted in time fails the others' beats as it fails ours. How long
            # this beat waited: the time since the last one less the interval slept between
            # them, as for a beat that succeeds. A beat refused at once (a server shutting
            # down) waited nothing, and holds judging the others for nothing.
            self._stalled(time.monotonic() - self._last_attempt - self.every, "the heartbeat")
        self._last_attempt = time.monotonic()
        # Said once per cause, not at every retry: a connection terminated, then a database
        # that answers read-only, is two things to know.
        cause = _cause(exc)
        if self._failing != cause:
            logger.error(
                "heartbeat failed, retrying every %.0f s: %s",
                self.every,
                one_line(exc),
                extra={"action": "heartbeat_error"},
            )
        self._failing = cause
        try:
            connections[self.using].close()
        except Exception:
            logger.debug("closing the heartbeat's broken connection failed", exc_info=True)


def _cause(exc: BaseException) -> tuple[object, ...]:
    """What kind of database error `exc` is: its class and the driver's code (PostgreSQL's
    SQLSTATE, MySQL's error number), not its text (which may name pids or instants)."""
    code = getattr(exc.__cause__, "sqlstate", None)
    if code is None and exc.args and isinstance(exc.args[0], int):
        code = exc.args[0]
    return (type(exc), code)


def mark_lost(
    using: str,
    process: SchedulerProcess,
    now: dt.datetime,
    stale_after: dt.timedelta,
    notifier: Notifier,
) -> list[Run]:
    """Mark running runs whose process stopped heartbeating as lost; retry applies.

    The loop calls it when peek() saw such runs (its `lost` probe), not at every tick.
    """
    heartbeat_before = now - stale_after
    silence = f"nothing heard for more than {stale_after.total_seconds():.0f} s"
    presumed = Run.objects.using(using).presumed_lost(process, heartbeat_before, now)
    outcomes = [
        Outcome(run, RunStatus.LOST, now, _why_lost(run, silence))
        for run in presumed.select_related("task", "process")
    ]
    if not outcomes:
        return []
    # Judged again once the runs are locked: a worker that started a queued run, or beat
    # for it, between this read and the lock keeps it ("a run whose process is alive is
    # never marked lost").
    # A run whose rows a frozen process holds (in the middle of its own outcome write) is
    # judged again at the next look, instead of the loop waiting for that process to wake.
    recorded = write_outcomes(outcomes, using, notifier, confirm=presumed, held=[])
    return [o.run for o in recorded]


def _why_lost(run: Run, silence: str) -> str:
    # Handed-off runs (DESIGN section 6): "a run whose worker went silent is lost; a run
    # still queued after start_deadline (message lost, no worker running) is lost".
    if run.status == RunStatus.QUEUED:
        deadline = f"{run.start_deadline_at:%Y-%m-%d %H:%M:%S} UTC"
        return (
            f"Lost: no worker of backend {run.backend!r} started this run within its "
            f"start_deadline (queued until {deadline}): the message was lost or no worker "
            "is running."
        )
    if run.backend:
        return (
            f"Lost: worker {run.worker or 'unknown'} stopped heartbeating ({silence}) while "
            f"this run was running on backend {run.backend!r}; its outcome is unknown."
        )
    stopped = run.process.stopped_at if run.process is not None else None
    if stopped is not None:
        # It said it stopped, but could not write this outcome (its rows held by a frozen
        # transaction past the grace, or the outcome refused): no silence to report.
        return (
            f"Lost: scheduler process {run.process_label or 'unknown'} stopped at "
            f"{stopped:%Y-%m-%d %H:%M:%S} UTC without recording this run's outcome; its "
            "outcome is unknown."
        )
    return (
        f"Lost: scheduler process {run.process_label or 'unknown'} stopped heartbeating "
        f"({silence}) while this run was running; its outcome is unknown."
    )
