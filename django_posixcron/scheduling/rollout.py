"""Deferred definition changes: recorded at start-up, applied once no live process holds them.

"[A process] defers that change, logs it once, and applies it as soon as no live process holds
the other version (at once when that process stops cleanly; once its heartbeat is stale when it
dies)." The loop's one idle query also returns a fingerprint of the live processes that declare
another set than ours, and the newest process's id (peek()); only when it changes does a process
read which sets are live (one small query), and only when a set it saw has gone does it
reconcile again: then it applies what it deferred, and retires what only the gone set declared
(a canary taken away). A process that registered and stopped between two looks (a
`runscheduler --once` with new settings, a new version that exited right after reconciling) was
never seen live, yet it may have created tasks nobody else declares: its id, past the newest one
seen, makes the fleet reconcile again too, as does one seen first while already stopping.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import TYPE_CHECKING

from django_posixcron.db import database_now
from django_posixcron.deployments import live_digests, record
from django_posixcron.log import get_logger
from django_posixcron.models import SchedulerProcess
from django_posixcron.reconcile import Peers, Plan, reconcile

if TYPE_CHECKING:
    from django_posixcron.declarations import TaskDeclaration

# Under the documented "django_posixcron.scheduler" logger, one child per part.
logger = get_logger("django_posixcron.scheduler.rollout")


class Rollout:
    """This process's declaration set and the changes it defers to live peers."""

    def __init__(
        self,
        declarations: Mapping[str, TaskDeclaration],
        using: str,
        stale_after: dt.timedelta,
    ) -> None:
        self.declarations = declarations
        # Every digest now, kept for the process's life, in a pass of their own: computed
        # while record() builds its hex strings, which are garbage once it returns, they
        # interleaved with them and left 13 MiB of the allocator's pools unused but resident
        # at 100,000 tasks.
        for declaration in declarations.values():
            declaration.definition_digest  # noqa: B018 (computed and kept on first use)
        self.using = using
        self.stale_after = stale_after
        # How many changes the last reconciliation deferred; None before the first one. Not
        # the plan itself: a first start's plan holds a new Task row per declared task, and
        # a long-running process has no use for it after start-up.
        self.deferred: int | None = None
        self.logged: set[tuple[str, str, str | None]] = set()
        # The other sets live at our last look, peek()'s fingerprint of them, and the newest
        # process id then.
        self.peer_sets: set[str] = set()
        self.others: tuple[int, int, int] | None = None
        self.newest = 0

    def record(self) -> str:
        """Store this process's declaration set; return the digest its process row names."""
        # Built for the call only: kept, the mapping was 4 MiB at 100,000 tasks for the
        # process's life, and only registering reads it.
        hashes = {name: d.definition_hash for name, d in self.declarations.items()}
        return record(self.using, hashes)

    def reconcile(self, process: SchedulerProcess, now: dt.datetime) -> Plan:
        """Reconcile settings, deferring what live peers hold; remember who was live."""
        # Looked at before reconciling: a set that goes in between is then seen to go, and a
        # process that registers in between has a newer id. The id first: a process that
        # registered between the two reads, were they the other way round, would be in
        # neither, and its going unseen.
        newest = _newest_process(self.using)
        seen = self._live_sets(process, database_now(self.using))
        plan = reconcile(
            now=now,
            declarations=self.declarations,
            using=self.using,
            peers=Peers(process, self.stale_after),
            logged=self.logged,
        )
        self.deferred = len(plan.deferred)
        self.peer_sets, self.others, self.newest = seen, None, newest
        return plan

    def peers_changed(
        self, process: SchedulerProcess, others: tuple[int, int, int], now: dt.datetime
    ) -> bool:
        """Return whether a declaration set live at our last look has gone since, or a
        process registered and stopped in between.

        `others` is peek()'s fingerprint of the live processes declaring other sets. A
        scheduler that never reconciled (driven by tick() alone) has nothing to re-check.
        `now` is the database clock's instant, which heartbeats are judged by.
        """
        if self.deferred is None or others == self.others:
            return False
        live = self._live_sets(process, now)
        gone = self.peer_sets - live
        newest = others[2]
        unseen = newest > self.newest and self._came_and_went(process, self.newest, newest, now)
        if not gone and not unseen:
            self.others = others
            self.peer_sets = live
            self.newest = max(self.newest, newest)
            return False
        # Remembered only once the reconciliation that follows succeeds (reconcile() resets
        # them): a tick that fails on the way looks again at the next one.
        self.others = None
        if gone:
            logger.info(
                "declaration set(s) %s no longer live; reconciling again (%d deferred change(s))",
                ", ".join(sorted(d[:12] for d in gone)),
                self.deferred,
                extra={"action": "declarations_gone"},
            )
        else:
            logger.info(
                "a scheduler process started and stopped since the last look; reconciling "
                "again, as it may have declared tasks no live process declares",
                extra={"action": "declarations_gone"},
            )
        return True

    def _came_and_went(
        self, process: SchedulerProcess, after: int, upto: int, now: dt.datetime
    ) -> bool:
        """Return whether a process registered after id `after` no longer holds what it
        declares (stopped, stale, or stopping: in its grace period it let go of them), unless
        it declared what we do (a `--once` of the fleet's own settings, every minute)."""
        processes = SchedulerProcess.objects.using(self.using)
        newcomers = processes.filter(pk__gt=after, pk__lte=upto)
        holding = processes.live(now, self.stale_after).exclude(declaration_set="")
        gone = newcomers.exclude(pk__in=holding.values("pk"))
        return gone.exclude(declaration_set=process.declaration_set).exists()

    def _live_sets(self, process: SchedulerProcess, now: dt.datetime) -> set[str]:
        return live_digests(self.using, now, self.stale_after) - {process.declaration_set}


def _newest_process(using: str) -> int:
    newest = SchedulerProcess.objects.using(using).order_by("-pk").values_list("pk", flat=True)
    return newest.first() or 0
