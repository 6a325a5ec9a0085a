"""The run counters behind ``posixcron_runs_total``, kept apart from the history they count.

"posixcron_runs_total{task,status,trigger} (counter; never goes down, whatever deletes Run
rows: pruning, the admin, the ORM)". Counting rows of the history would go down with every
pruning; a database trigger would need one dialect per backend. So each write of a final
status increments a ``RunCount`` row in the same transaction: the count commits or rolls
back with the status it counts, and nothing that deletes runs touches it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable

from django.db import IntegrityError, transaction
from django.db.models import F

from django_posixcron.models import Run, RunCount

Key = tuple[str, str, str]  # task name, trigger, status


def count_runs(runs: Iterable[Run], using: str) -> None:
    """Add each run's final status to its counter; call inside the transaction writing it.

    Callers hold the runs' task rows locked (claims and outcome writes both lock them first),
    so two processes never race on one task's counters, and take them in the same order.
    """
    counts: Counter[Key] = Counter((run.task.name, run.trigger, run.status) for run in runs)
    for key, n in sorted(counts.items()):
        _add(key, n, using)


def _add(key: Key, n: int, using: str) -> None:
    name, trigger, status = key
    rows = RunCount.objects.using(using).filter(task_name=name, trigger=trigger, status=status)
    if rows.update(count=F("count") + n):
        return
    try:
        with transaction.atomic(using=using):
            RunCount.objects.using(using).create(
                task_name=name, trigger=trigger, status=status, count=n
            )
    except IntegrityError:
        # Created meanwhile by a writer that did not hold this task (a renamed task's row).
        rows.update(count=F("count") + n)
