"""What a run knows about itself: the `RunContext` a `takes_context` task gets first."""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import TYPE_CHECKING

from django_posixcron.timing import in_zone

if TYPE_CHECKING:
    from django_posixcron.models import Run


@dataclasses.dataclass(frozen=True)
class RunContext:
    """The run a callable declared with ``"takes_context": True`` is called for.

    ``occurrence`` and ``attempt`` make a job idempotent: "export the hour ending at
    occurrence" does the same work on every attempt at that occurrence.
    """

    task_name: str
    run_id: int
    trigger: str  # "cron", "retry" or "manual"
    # The run's own instant (the occurrence, or the retry or manual-request instant), aware,
    # in the task's zone.
    scheduled_for: dt.datetime
    # The cron occurrence the run serves: for a retry, the one whose failure it retries; for a
    # manual run, the request instant. Aware, in the task's zone.
    occurrence: dt.datetime
    # 1 for an occurrence's first run, +1 for each retry of it, whatever ended the one before.
    attempt: int

    @classmethod
    def of(cls, run: Run, timezone: str | None = None) -> RunContext:
        """Return the context of a claimed run (its task loaded), in `timezone`: the zone of
        the declaration that runs it (the row's, by default)."""
        zone = timezone or run.task.timezone
        occurrence = run.occurrence if run.occurrence is not None else run.scheduled_for
        return cls(
            task_name=run.task.name,
            run_id=run.pk,
            trigger=str(run.trigger),
            # in_zone keeps the fold of a repeated hour where astimezone() may not.
            scheduled_for=in_zone(run.scheduled_for, zone),
            occurrence=in_zone(occurrence, zone),
            attempt=run.attempt,
        )
