"""The run counters behind ``posixcron_runs_total``, kept apart from the history they count.

"posixcron_runs_total{task,status,trigger} (counter; never goes down, whatever deletes Run
rows: pruning, the admin, the ORM)". Counting rows of the history would go down with every
pruning; a database trigger would need one dialect per backend and live outside the code the
tests run. So each write of a final status adds to a ``RunCount`` row in the same
transaction: the count commits or rolls back with the status it counts, and nothing that
deletes runs touches it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from typing import Any

from django.db import connections

from django_posixcron.models import Run, RunCount
from django_posixcron.scheduling import bulk

Key = tuple[str, str, str]  # task name, trigger, status

# One multi-row upsert per batch: an outcome batch of 200 runs costs one statement, not one
# per counter (a statement per counter halved the scheduler's throughput with many tasks).
# The three dialects say "add to the existing row" each their own way.
_UPSERT = {
    "postgresql": "ON CONFLICT ({key}) DO UPDATE SET {count} = {table}.{count} + EXCLUDED.{count}",
    "sqlite": "ON CONFLICT ({key}) DO UPDATE SET {count} = {table}.{count} + excluded.{count}",
    "mysql": "ON DUPLICATE KEY UPDATE {count} = {count} + VALUES({count})",
}


def count_runs(runs: Iterable[Run], using: str) -> None:
    """Add each run's final status to its counter; call inside the transaction writing it.

    Callers hold the runs' task rows locked (claims and outcome writes both lock them first),
    and the counters are written in key order, so two writers never deadlock on them.
    """
    counts: Counter[Key] = Counter((run.task.name, run.trigger, run.status) for run in runs)
    if not counts:
        return
    connection = connections[using]
    meta = RunCount._meta
    quote = connection.ops.quote_name
    fields: list[Any] = [meta.get_field(n) for n in ("task_name", "trigger", "status", "count")]
    names = [quote(field.column) for field in fields]
    conflict = _UPSERT[connection.vendor].format(
        key=", ".join(names[:3]), count=names[3], table=quote(meta.db_table)
    )
    rows = sorted(counts.items())
    head = f"INSERT INTO {quote(meta.db_table)} ({', '.join(names)})"
    if connection.vendor == "postgresql":
        # One array per column that differs, as the bulk writes send them, in key order: the
        # statement's text stays the same whatever the batch, so the driver parses it once,
        # where a VALUES row per counter (four parameters each) was parsed again for every
        # batch (profiled: the counters were 9% of the loop's time in a burst, now 2%).
        selected, source, params = bulk.unnest(fields, [[*key, n] for key, n in rows], connection)
        sql = f"{head} SELECT {', '.join(selected)} FROM {source} {conflict}"
    else:
        sql = f"{head} VALUES {', '.join(['(%s, %s, %s, %s)'] * len(rows))} {conflict}"
        params = [value for key, n in rows for value in (*key, n)]
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
