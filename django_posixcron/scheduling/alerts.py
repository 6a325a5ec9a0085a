"""The overdue alert: seen by a plain read, claimed once per due time, sent off the loop.

"task_overdue(sender, task, due_at) — a due task not claimed within POLL_INTERVAL (detected
by a plain read, so a locked row is still seen)", "each sent once per episode across the
whole fleet (not once per process) by a live scheduler". The episode is the task's due time:
the scheduler whose conditional UPDATE stores it in ``overdue_signalled_for`` sends the signal;
every other one updates no row and sends nothing. Claiming the task moves its due time, which
ends the episode. (run_lost and task_failing are decided with the outcome writes, under the
rows' locks: see outcomes.py.)
"""

from __future__ import annotations

import datetime as dt
import logging

from django.db.models import Exists, F, Q, QuerySet

from django_posixcron.models import Task
from django_posixcron.scheduling.outcomes import Notifier
from django_posixcron.signals import task_overdue

logger = logging.getLogger("django_posixcron.scheduler.alerts")

# At most this many overdue tasks are signalled per tick: a fleet that stopped for an hour
# must not spend one tick sending thousands of signals; the rest follow at the next ticks.
OVERDUE_BATCH = 100


def unsignalled_overdue(before: dt.datetime, using: str) -> QuerySet[Task]:
    """Return active tasks due before `before` whose overdue episode has not been signalled."""
    return (
        Task.objects.using(using)
        .active()
        .filter(due_at__lt=before)
        .filter(Q(overdue_signalled_for__isnull=True) | ~Q(overdue_signalled_for=F("due_at")))
    )


def any_overdue(before: dt.datetime, using: str) -> Exists:
    """Return an EXISTS for peek()'s one query: is some overdue task not signalled yet?"""
    return Exists(unsignalled_overdue(before, using))


def signal_overdue(before: dt.datetime, using: str, notifier: Notifier) -> list[Task]:
    """Claim the overdue episodes not signalled yet; send task_overdue for those won here."""
    sent = []
    for task in unsignalled_overdue(before, using).order_by("due_at")[:OVERDUE_BATCH]:
        due = task.due_at
        claimed = (
            unsignalled_overdue(before, using)
            .filter(pk=task.pk, due_at=due)
            .update(overdue_signalled_for=due)
        )
        if not claimed:
            continue  # another scheduler won this episode, or the task was just claimed
        task.overdue_signalled_for = due
        logger.warning(
            "task %s is overdue: due at %s and not claimed",
            task.name,
            due.isoformat() if due else None,
            extra={"action": "task_overdue", "task": task.name},
        )
        notifier.send(task_overdue, task=task, due_at=due)
        sent.append(task)
    return sent


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
