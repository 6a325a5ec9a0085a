"""History pruning: finished runs past HISTORY_DAYS, rows of processes long gone, and the marks
of overdue episodes that ended."""

from __future__ import annotations

import datetime as dt
import time
from collections.abc import Callable

from django.db import connections
from django.db.models import Q

from django_posixcron.log import get_logger
from django_posixcron.models import DeclarationSet, Run, SchedulerProcess
from django_posixcron.scheduling.alerts import prune_ended_episodes

# Under the documented "django_posixcron.scheduler" logger, one child per part.
logger = get_logger("django_posixcron.scheduler.maintenance")

# Retention is counted in days, so pruning once an hour per process is plenty; batches keep
# each DELETE short so it never holds locks that claims wait on.
PRUNE_EVERY = dt.timedelta(hours=1)
PRUNE_BATCH = 1000
PRUNE_MAX_BATCHES_PER_TICK = 20
# A backlog of history (a first upgrade, a HISTORY_DAYS lowered) is worked through on the
# loop's thread: a tick spends at most about this long on it, and none while a task falls due
# within PRUNE_DUE_MARGIN, so that pruning never starts a run late (a tick of 20 batches took
# 0.2-1.2 s on a history of a million runs, and every minutely run started that much late).
PRUNE_TICK_BUDGET = 0.5
PRUNE_DUE_MARGIN = dt.timedelta(seconds=2)
# But not for longer than this: a scheduler that always has a task falling due (a stream of
# requests, a fleet behind its schedules) would otherwise never prune, and its history, the
# rows of dead processes and the marks of overdue episodes would grow without bound.
PRUNE_DEFER_LIMIT = dt.timedelta(minutes=10)
# On SQLite each DELETE holds the whole file's write lock, and a backlog's batches followed
# each other closely enough that other writers (the admin pausing a task, a claim) waited
# past their busy timeout and failed with "database is locked" (1 s: 10 writes in 85). The
# pruner lets go this long between batches there; its tick budget counts the pauses.
PRUNE_SQLITE_PAUSE = 0.2
# Rows of stopped or dead processes are kept this long (and while runs in the history name
# them): long enough to read in the admin what happened to a process that died last night.
PROCESS_ROWS_KEPT = dt.timedelta(days=1)


class Pruner:
    """Delete old history a batch at a time, at most once an hour unless behind."""

    def __init__(
        self, using: str, history_days: int | None, clock: Callable[[], dt.datetime]
    ) -> None:
        self.using = using
        self.history_days = history_days
        self.next_at: dt.datetime | None = None
        # Since when pruning has waited for tasks falling due (see PRUNE_DEFER_LIMIT).
        self._deferred_since: dt.datetime | None = None
        # Real time, for the process rows: see prune().
        self._clock = clock

    def prune(self, now: dt.datetime, next_due: dt.datetime | None = None) -> int:
        """Delete finished runs older than HISTORY_DAYS, a batch at a time, and the marks of
        overdue episodes that ended; not when a task falls due (`next_due`) within moments."""
        if self.next_at is not None and now < self.next_at:
            return 0
        if next_due is not None and next_due - now < PRUNE_DUE_MARGIN:
            if self._deferred_since is None:
                self._deferred_since = now
            if now - self._deferred_since < PRUNE_DEFER_LIMIT:
                return 0
        self._deferred_since = None
        days = self.history_days
        if not days or days <= 0:
            # Whatever HISTORY_DAYS says, the marks of ended overdue episodes are not history.
            prune_ended_episodes(self.using)
            self.next_at = now + PRUNE_EVERY
            return 0
        cutoff = now - dt.timedelta(days=days)
        total = 0
        more = False
        stop_at = time.monotonic() + PRUNE_TICK_BUDGET
        pause = PRUNE_SQLITE_PAUSE if connections[self.using].vendor == "sqlite" else 0.0
        for batch in range(PRUNE_MAX_BATCHES_PER_TICK):
            if batch and pause:
                time.sleep(pause)
            # By when the run finished, not when it was scheduled: a task resumed after a
            # long pause fires once for its oldest missed occurrence, and that run is new.
            # A running run has no finished_at and is never pruned.
            ids = list(
                Run.objects.using(self.using)
                .filter(finished_at__lt=cutoff)
                .order_by()
                .values_list("pk", flat=True)[:PRUNE_BATCH]
            )
            if ids:
                # What this DELETE removed: another scheduler pruning at once may have taken
                # some of the same rows first.
                _deleted, by_model = Run.objects.using(self.using).filter(pk__in=ids).delete()
                total += by_model.get(Run._meta.label, 0)
            more = len(ids) == PRUNE_BATCH
            if not more or time.monotonic() >= stop_at:
                break
        if not more:
            prune_ended_episodes(self.using)
            # By the real clock, not the tick's `now`: whether a process has been silent for a
            # day is a fact about real time, and a tick driven at another instant (a test, a
            # replay) must not delete the rows of live processes.
            self.prune_processes(self._clock())
        # With more left, carry on next tick rather than hold this one.
        self.next_at = now if more else now + PRUNE_EVERY
        if total:
            logger.info(
                "pruned %d runs older than %d days",
                total,
                days,
                extra={"action": "history_pruned"},
            )
        return total

    def prune_processes(self, now: dt.datetime) -> int:
        """Delete rows of processes gone for a while that no run in the history names.

        `runscheduler --once` from system cron adds a row per invocation. A row whose runs
        are still in the history stays, so the run list keeps its link to it; once pruning
        has removed those runs, the row goes too.
        """
        gone = now - PROCESS_ROWS_KEPT
        processes = SchedulerProcess.objects.using(self.using)
        ids = list(
            processes.filter(
                Q(stopped_at__lt=gone) | Q(stopped_at__isnull=True, last_heartbeat_at__lt=gone)
            )
            .filter(runs__isnull=True)
            .order_by()
            .values_list("pk", flat=True)[:PRUNE_BATCH]
        )
        if ids:
            processes.filter(pk__in=ids).delete()
            logger.info(
                "pruned %d rows of scheduler processes gone since before %s",
                len(ids),
                gone.isoformat(),
                extra={"action": "processes_pruned"},
            )
            # A declaration set no process row names any more is history nobody reads; one
            # a process registers with later is stored again.
            named = processes.values("declaration_set")
            DeclarationSet.objects.using(self.using).filter(created_at__lt=gone).exclude(
                digest__in=named
            ).delete()
        return len(ids)
