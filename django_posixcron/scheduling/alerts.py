"""The overdue alert: seen by a plain read, claimed once per due time, sent off the loop.

"task_overdue(sender, task, due_at) — a due task not claimed within POLL_INTERVAL (detected
by a plain read, so a locked row is still seen)", "each sent once per episode across the
whole fleet (not once per process) by a live scheduler". The episode is the task's due time:
the scheduler that stores it in ``overdue_signalled_for`` (under the row's lock, or by a
conditional UPDATE on SQLite) sends the signal; every other one finds the episode marked and
sends nothing. Claiming the task moves its due time, which
ends the episode. (run_lost and task_failing are decided with the outcome writes, under the
rows' locks: see outcomes.py.)
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db import connections, transaction
from django.db.models import Exists, F, Q, QuerySet

from django_posixcron.models import Task
from django_posixcron.scheduling.outcomes import Notifier
from django_posixcron.signals import task_overdue

logger = logging.getLogger("django_posixcron.scheduler.alerts")

# At most this many overdue tasks are signalled per tick: a fleet that stopped for an hour
# must not spend one tick sending thousands of signals; the rest follow at the next ticks.
OVERDUE_BATCH = 100
# More tasks than this found overdue at one look are logged in one WARNING that counts them and
# names the first few, each task then getting an INFO line: a fleet back from an outage would
# otherwise log a warning per task, up to OVERDUE_BATCH every poll interval until it catches up.
OVERDUE_WARNINGS = 5


def unsignalled_overdue(before: dt.datetime, using: str) -> QuerySet[Task]:
    """Return active tasks due before `before` whose overdue episode has not been signalled."""
    return (
        Task.objects.using(using)
        .overdue(before)
        .filter(Q(overdue_signalled_for__isnull=True) | ~Q(overdue_signalled_for=F("due_at")))
    )


def any_overdue(before: dt.datetime, using: str) -> Exists:
    """Return an EXISTS for peek()'s one query: is some overdue task not signalled yet?"""
    return Exists(unsignalled_overdue(before, using))


def signal_overdue(before: dt.datetime, using: str, notifier: Notifier) -> list[Task]:
    """Claim the overdue episodes not signalled yet; send task_overdue for those won here.

    Where the database locks rows, one transaction per batch: one locking read (skipping rows
    another process holds: a claim that is about to move the due time, or a scheduler
    signalling them) and one UPDATE, so every row read is won here. On SQLite, whose locking
    read locks nothing, a conditional UPDATE per row decides which were won.
    """
    # By due time alone, the order of the due_at index: with the primary key as a tie-break,
    # PostgreSQL sorted every overdue row to find the first 100 (0.2 s a look, once per poll
    # interval, in a backlog of 100,000). Rows are locked skipping the held ones, so the order
    # among equal due times matters to no deadlock.
    batch = unsignalled_overdue(before, using).order_by("due_at")
    if connections[using].features.has_select_for_update_skip_locked:
        with transaction.atomic(using=using):
            won = list(batch.select_for_update(skip_locked=True)[:OVERDUE_BATCH])
            if won:
                Task.objects.using(using).filter(pk__in=[task.pk for task in won]).update(
                    overdue_signalled_for=F("due_at")
                )
    else:
        # Each UPDATE in its own transaction: a DEFERRED transaction that read first could
        # not wait for the write lock, and would fail at once under a concurrent claim.
        won = [
            task
            for task in batch[:OVERDUE_BATCH]
            if unsignalled_overdue(before, using)
            .filter(pk=task.pk, due_at=task.due_at)
            .update(overdue_signalled_for=task.due_at)
        ]
    _log_overdue(won)
    for task in won:
        task.overdue_signalled_for = task.due_at
        notifier.send(task_overdue, task=task, due_at=task.due_at)
    return won


def _log_overdue(won: list[Task]) -> None:
    """A WARNING per overdue task, or one for them all when there are many, then INFO each."""
    level = logging.WARNING
    if len(won) > OVERDUE_WARNINGS:
        level = logging.INFO
        names = [task.name for task in won]
        logger.warning(
            "%d tasks are overdue (due since %s, not claimed): %s and %d more",
            len(won),
            min(task.due_at for task in won if task.due_at).isoformat(),
            ", ".join(names[:OVERDUE_WARNINGS]),
            len(won) - OVERDUE_WARNINGS,
            extra={"action": "tasks_overdue", "tasks": names},
        )
    for task in won:
        logger.log(
            level,
            "task %s is overdue: due at %s and not claimed",
            task.name,
            task.due_at.isoformat() if task.due_at else None,
            extra={"action": "task_overdue", "task": task.name},
        )


class OverdueWatch:
    """Say when to look for overdue tasks: at most once per POLL_INTERVAL.

    A backlog (thousands of tasks due at once, worked through in many quick ticks) must not
    pay for the look at every tick.
    """

    def __init__(self, poll_interval: float) -> None:
        self.poll = dt.timedelta(seconds=poll_interval)
        self.checked_at: dt.datetime | None = None

    def threshold(self, now: dt.datetime) -> dt.datetime | None:
        """Return the due time before which a task is overdue, or None when not yet time."""
        if self.checked_at is not None and now < self.checked_at + self.poll:
            return None
        self.checked_at = now
        return now - self.poll
