"""Time reconciling 10,000 declared tasks: first time (all created) and unchanged.

Run from the repository root against PostgreSQL (a scratch test database is created and
dropped; use a database name of your own):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/reconcile_bench.py

Targets (issue 4): under 2 s the first time, under 0.3 s when nothing changed.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.db import connection  # noqa: E402

from django_posixcron.declarations import collect  # noqa: E402
from django_posixcron.models import Task  # noqa: E402
from django_posixcron.reconcile import reconcile  # noqa: E402

NOW = dt.datetime(2030, 1, 7, 10, 0, tzinfo=dt.UTC)


def settings_for(count: int) -> dict[str, object]:
    schedules = ["15 3 * * 1-5", "0 * * * *", "0 0 1,15 * 1", "30 2 * * 0", "0 9-17 * * 1-5"]
    return {
        "TASKS": {
            f"task-{i:05d}": {
                "schedule": schedules[i % len(schedules)],
                "callable": "tests.testapp.jobs.record",
                "kwargs": {"label": str(i)},
                "retry_delay": 300,
                "timezone": "Europe/Berlin" if i % 2 else "UTC",
            }
            for i in range(count)
        },
        "POLL_INTERVAL": 10,
    }


def timed(func: Callable[[], object]) -> float:
    start = time.perf_counter()
    func()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--repeat", type=int, default=5)
    args = parser.parse_args()

    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    try:
        raw = settings_for(args.tasks)
        collect_times = []
        for _ in range(args.repeat):
            collect_times.append(timed(lambda: collect(raw)))
        declarations, problems = collect(raw)
        assert not problems, problems[:3]

        first, unchanged = [], []
        for _ in range(args.repeat):
            Task.objects.all().delete()
            first.append(timed(lambda: reconcile(now=NOW, declarations=declarations)))
            assert Task.objects.count() == args.tasks
            unchanged.append(timed(lambda: reconcile(now=NOW, declarations=declarations)))

        db = f"{connection.vendor} {'.'.join(map(str, connection.get_database_version()))}"
        print(f"{args.tasks} tasks on {db}, median of {args.repeat}:")
        print(f"  collect() from settings   {statistics.median(collect_times):.3f} s")
        print(f"  reconcile, first time     {statistics.median(first):.3f} s  (target < 2 s)")
        print(f"  reconcile, unchanged      {statistics.median(unchanged):.3f} s  (target < 0.3 s)")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
