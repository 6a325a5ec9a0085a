"""The overdue alert: seen by a plain read, claimed once per due time, sent off the loop.

"task_overdue(sender, task, due_at) — a due task not claimed within POLL_INTERVAL (detected
by a plain read, so a locked row is still seen)", "each sent once per episode across the
whole fleet (not once per process) by a live scheduler". The episode is the task's due time.
A scheduler wins it by inserting the ``OverdueAlert`` row (task, due time): the unique
constraint lets one insert of the fleet through, and the insert takes no lock on the task's
row, so a task that a scheduler frozen in the middle of its claim holds locked (the case the
alert exists for) is signalled too. The winner also stores the due time in the task's
``overdue_signalled_for`` where it can take the row, which processes of an earlier release
read. Claiming the task moves its due time, which ends the episode. (run_lost and
task_failing are decided with the outcome writes, under the rows' locks: see outcomes.py.)
"""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Mapping
from typing import Any

from django.db import connections, transaction
from django.db.models import Exists, F, OuterRef, Q, QuerySet
from django.utils import timezone

from django_posixcron.log import get_logger
from django_posixcron.models import OverdueAlert, Task
from django_posixcron.scheduling import bulk
from django_posixcron.scheduling.outcomes import Notifier
from django_posixcron.signals import task_failing, task_overdue

logger = get_logger("django_posixcron.scheduler.alerts")

# At most this many overdue tasks are signalled per tick: a fleet that stopped for an hour
# must not spend one tick sending thousands of signals; the rest follow at the next ticks.
OVERDUE_BATCH = 100
# More tasks than this found overdue at one look are logged in one WARNING that counts them and
# names the first few, each task then getting an INFO line: a fleet back from an outage would
# otherwise log a warning per task, up to OVERDUE_BATCH every poll interval until it catches up.
OVERDUE_WARNINGS = 5


def unsignalled_overdue(before: dt.datetime, using: str) -> QuerySet[Task]:
    """Return active tasks due before `before` whose overdue episode has not been signalled."""
    signalled = OverdueAlert.objects.using(using).filter(
        task=OuterRef("pk"), due_at=OuterRef("due_at")
    )
    return (
        Task.objects.using(using)
        .overdue(before)
        .filter(Q(overdue_signalled_for__isnull=True) | ~Q(overdue_signalled_for=F("due_at")))
        .exclude(Exists(signalled))
    )


def any_overdue(before: dt.datetime, using: str) -> Exists:
    """Return an EXISTS for peek()'s one query: is some overdue task not signalled yet?"""
    return Exists(unsignalled_overdue(before, using))


def signal_overdue(before: dt.datetime, using: str, notifier: Notifier) -> list[Task]:
    """Win the overdue episodes not signalled yet; send task_overdue for those won here.

    A plain read finds them (a row another transaction holds is read as it was committed),
    and each is won by inserting its OverdueAlert row, which only one scheduler of the fleet
    does. The tasks' own marks are then written where the rows can be taken at once.
    """
    # By due time alone, the order of the due_at index: with the primary key as a tie-break,
    # PostgreSQL sorted every overdue row to find the first 100 (0.2 s a look, once per poll
    # interval, in a backlog of 100,000).
    batch = list(unsignalled_overdue(before, using).order_by("due_at")[:OVERDUE_BATCH])
    won = _win([task for task in batch if task.due_at is not None], using)
    if won:
        _mark(won, using)
    _log_overdue(won)
    for task in won:
        task.overdue_signalled_for = task.due_at
        notifier.send(task_overdue, task=task, due_at=task.due_at)
    return won


def _win(tasks: list[Task], using: str) -> list[Task]:
    """Insert the episodes' OverdueAlert rows; return the tasks whose insert was the one.

    One statement for the batch where the database says which rows it inserted (PostgreSQL,
    SQLite 3.35+); MariaDB's INSERT IGNORE does not, so there one statement per episode,
    its row count saying. A statement per episode cost a tenth of the loop's time in a burst
    of 10,000 tasks due at once (profiled), where a hundred are overdue at every look.
    """
    if not tasks:
        return []
    now = timezone.now()
    if bulk.can_insert_new(using):
        alerts = [
            OverdueAlert(task=task, due_at=due, signalled_at=now)
            for task in tasks
            if (due := task.due_at) is not None
        ]
        inserted = {alert.task_id for alert in bulk.insert_new(alerts, "task", using)}
        return [task for task in tasks if task.pk in inserted]
    connection = connections[using]
    table = connection.ops.quote_name(OverdueAlert._meta.db_table)
    columns = ", ".join(
        connection.ops.quote_name(name) for name in ("task_id", "due_at", "signalled_at")
    )
    values = "(%s, %s, %s)"
    if connection.vendor == "mysql":
        sql = f"INSERT IGNORE INTO {table} ({columns}) VALUES {values}"
    else:  # SQLite before 3.35
        sql = f"INSERT INTO {table} ({columns}) VALUES {values} ON CONFLICT DO NOTHING"
    adapt = connection.ops.adapt_datetimefield_value
    won = []
    with connection.cursor() as cursor:
        for task in tasks:
            cursor.execute(sql, [task.pk, adapt(task.due_at), adapt(now)])
            if cursor.rowcount == 1:
                won.append(task)
    return won


def _mark(won: list[Task], using: str) -> None:
    """Store each won episode on its task too, where the row can be taken without waiting.

    For processes of an earlier release, which look only there; a row held elsewhere keeps
    its old mark, and the OverdueAlert row speaks for it. A task whose due time moved since
    it was read (claimed meanwhile) is left alone: its new due time is a new episode.
    """
    due = {task.pk: task.due_at for task in won}
    tasks = Task.objects.using(using)
    if connections[using].features.has_select_for_update_skip_locked:
        with transaction.atomic(using=using):
            # Locked here, so the due times read are the ones the update finds.
            free = (
                tasks.select_for_update(skip_locked=True)
                .filter(pk__in=list(due))
                .values_list("pk", "due_at")
            )
            same = [pk for pk, due_at in free if due_at == due[pk]]
            if same:
                tasks.filter(pk__in=same).update(overdue_signalled_for=F("due_at"))
    elif bulk.can_compare_and_set(using):
        # SQLite locks the whole database, not rows: nothing is held for long. The due time
        # is compared in the statement itself.
        bulk.compare_and_set(
            Task,
            "due_at",
            ["overdue_signalled_for"],
            [(pk, at, at) for pk, at in due.items()],
            using,
        )
    else:
        same_episode = Q()
        for pk, at in due.items():
            same_episode |= Q(pk=pk, due_at=at)
        tasks.filter(same_episode).update(overdue_signalled_for=F("due_at"))


def forget_episodes(episodes: list[tuple[int, dt.datetime]], using: str) -> None:
    """Give back overdue episodes whose signal was never sent, so another scheduler sends it.

    Called at shutdown for the task_overdue signals still queued when the receivers' time ran
    out: the episode was won here, and nobody would ever send it.
    """
    for task_id, due_at in episodes:
        OverdueAlert.objects.using(using).filter(task_id=task_id, due_at=due_at).delete()
        Task.objects.using(using).filter(pk=task_id, overdue_signalled_for=due_at).update(
            overdue_signalled_for=None
        )


def give_back(abandoned: list[tuple[Any, dict[str, Any]]], using: str) -> None:
    """Give the fleet the alert episodes whose signal this process will never send.

    At shutdown, signals still queued when the receivers' time ran out were won here: their
    episodes are marked signalled, and no other scheduler would ever send them. An overdue
    episode is forgotten, so the next look of any scheduler sends it; a failing episode is
    unmarked, so the next look for owed ones sends it (signal_owed_failing(), as after a
    forced exit).
    run_lost and run_finished have no episode to give back: the warning names them.
    """
    overdue = [
        (kwargs["task"].pk, kwargs["due_at"]) for sig, kwargs in abandoned if sig is task_overdue
    ]
    failing = [kwargs["task"].pk for sig, kwargs in abandoned if sig is task_failing]
    if overdue:
        forget_episodes(overdue, using)
    if failing:
        Task.objects.using(using).filter(pk__in=failing, failing_signalled=True).update(
            failing_signalled=False
        )


def signal_owed_failing(
    using: str, notifier: Notifier, failing_after: int, pause_after: Mapping[str, int]
) -> list[Task]:
    """Send task_failing for the failing episodes nobody sent; return their tasks.

    The writer of the failure that starts an episode sends it, marking it signalled in the
    same transaction. An episode whose signal was given back at a shutdown, or that a forced
    exit left unmarked, is owed: left to the writer of the task's next failure, a task paused
    by its failures (which never fails again) was never paged about. Any live scheduler sends
    it, once: a conditional UPDATE wins it, as the writer's lock does.
    """
    threshold = min([failing_after, *pause_after.values()])
    candidates = Task.objects.using(using).filter(
        declared=True, failing_signalled=False, consecutive_failures__gte=threshold
    )
    sent = []
    for task in candidates:
        failures = task.consecutive_failures
        paused_by_failures = task.paused and failures >= pause_after.get(task.name, failures + 1)
        if failures < failing_after and not paused_by_failures:
            continue
        # As read: a success written since ended the episode (marking it now would mute the
        # next one's alert), and the writer of a new failure sends it.
        won = Task.objects.using(using).filter(
            pk=task.pk, failing_signalled=False, consecutive_failures=failures
        )
        if not won.update(failing_signalled=True):
            continue  # another scheduler, or the writer of a new failure or success, has it
        logger.warning(
            "task %s is failing (%d failed runs in a row%s); sending the alert its last "
            "failure's scheduler did not send",
            task.name,
            failures,
            ", paused" if task.paused else "",
            extra={"action": "failing_owed", "task": task.name},
        )
        notifier.send(task_failing, task=task, failures=failures, paused=task.paused)
        sent.append(task)
    return sent


def prune_ended_episodes(using: str) -> int:
    """Delete the OverdueAlert rows of episodes that ended: the task's due time moved on."""
    ongoing = Task.objects.using(using).filter(pk=OuterRef("task_id"), due_at=OuterRef("due_at"))
    deleted, _ = OverdueAlert.objects.using(using).exclude(Exists(ongoing)).delete()
    return deleted


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
        # A clock stepped back (now before the last look) does not put the next one off.
        if self.checked_at is not None and self.checked_at <= now < self.checked_at + self.poll:
            return None
        self.checked_at = now
        return now - self.poll
