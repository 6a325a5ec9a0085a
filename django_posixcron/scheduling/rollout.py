"""Deferred definition changes: recorded at start-up, applied once no live process holds them.

"[A process] defers that change, logs it once, and applies it as soon as no live process holds
the other version (at once when that process stops cleanly; once its heartbeat is stale when it
dies)." The loop asks `due()` every tick (no query); only a process with deferred changes looks
at the live processes' sets, one small query per heartbeat interval, and reconciles again when
a holder has gone.
"""

from __future__ import annotations

import datetime as dt
import logging
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from django_posixcron.deployments import live_digests, record
from django_posixcron.reconcile import Peers, Plan, reconcile

if TYPE_CHECKING:
    from django_posixcron.declarations import TaskDeclaration
    from django_posixcron.models import SchedulerProcess

# Under the documented "django_posixcron.scheduler" logger, one child per part.
logger = logging.getLogger("django_posixcron.scheduler.rollout")


class Rollout:
    """This process's declaration set and the changes it defers to live peers."""

    def __init__(
        self,
        declarations: Mapping[str, TaskDeclaration],
        using: str,
        stale_after: dt.timedelta,
        every: float,
    ) -> None:
        self.hashes = {name: d.definition_hash for name, d in declarations.items()}
        self.declarations = declarations
        self.using = using
        self.stale_after = stale_after
        self.every = every
        self.plan: Plan | None = None
        self.logged: set[tuple[str, str, str | None]] = set()
        self._next_check = 0.0

    def record(self) -> str:
        """Store this process's declaration set; return the digest its process row names."""
        return record(self.using, self.hashes)

    @property
    def deferred(self) -> bool:
        return bool(self.plan and self.plan.deferred)

    def reconcile(self, process: SchedulerProcess, now: dt.datetime) -> Plan:
        """Reconcile settings, deferring what live peers hold; remember what was deferred."""
        self.plan = reconcile(
            now=now,
            declarations=self.declarations,
            using=self.using,
            peers=Peers(process, self.stale_after),
            logged=self.logged,
        )
        self._next_check = time.monotonic() + self.every
        return self.plan

    def holder_gone(self, process: SchedulerProcess, now: dt.datetime) -> bool:
        """Return whether some deferred change has no live holder left; at most every `every`.

        `now` is the database clock's instant, which heartbeats are judged by.
        """
        if self.plan is None or not self.plan.deferred or time.monotonic() < self._next_check:
            return False
        self._next_check = time.monotonic() + self.every
        live = live_digests(self.using, now, self.stale_after, exclude=process.pk)
        gone = [d for d in self.plan.deferred if not live.intersection(d.holder_sets)]
        if gone:
            logger.info(
                "no live process holds the stored version of %s any more; reconciling again",
                ", ".join(d.name for d in gone[:10]) + (" ..." if len(gone) > 10 else ""),
                extra={"action": "deferred_released"},
            )
        return bool(gone)
