"""Time reconciling 10,000 declared tasks: first time (all created), unchanged, and every
task's definition changed (a deploy that rewrites them all).

Run from the repository root against PostgreSQL (a scratch test database is created and
dropped; use a database name of your own):

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/bench .venv/bin/python bench/reconcile_bench.py

Targets (issue 4): under 2 s the first time, under 0.3 s when nothing changed; the same for a
scheduler's start-up (recording its declaration set, reconciling beside 30 live processes of two
versions, issue 13), and with every tenth task deferred to them.
"""

from __future__ import annotations

import argparse
import datetime as dt
import os
import statistics
import sys
import time
from collections.abc import Callable, Mapping
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.settings")

import django

django.setup()

from django.db import connection  # noqa: E402

from django_posixcron.declarations import TaskDeclaration, collect  # noqa: E402
from django_posixcron.deployments import record  # noqa: E402
from django_posixcron.models import DeclarationSet, SchedulerProcess, Task  # noqa: E402
from django_posixcron.reconcile import reconcile  # noqa: E402
from django_posixcron.scheduler import Scheduler  # noqa: E402

NOW = dt.datetime(2086, 1, 7, 10, 0, tzinfo=dt.UTC)


def settings_for(count: int, retry_delay: int = 300) -> dict[str, object]:
    schedules = ["15 3 * * 1-5", "0 * * * *", "0 0 1,15 * 1", "30 2 * * 0", "0 9-17 * * 1-5"]
    return {
        "TASKS": {
            f"task-{i:05d}": {
                "schedule": schedules[i % len(schedules)],
                "callable": "tests.testapp.jobs.record",
                "kwargs": {"label": str(i)},
                "retry_delay": retry_delay,
                "timezone": "Europe/Berlin" if i % 2 else "UTC",
            }
            for i in range(count)
        },
        "POLL_INTERVAL": 10,
    }


def as_scheduler(declarations: Mapping[str, TaskDeclaration], every: int) -> float:
    """Time a scheduler's start-up (record its set, register, reconcile) beside 30 live peers.

    Half the peers declare our set, half another one that differs in every `every`-th task
    (0: none); those tasks are stored at the other version, so they are deferred.
    """
    SchedulerProcess.objects.all().delete()
    DeclarationSet.objects.all().delete()
    ours = {name: d.definition_hash for name, d in declarations.items()}
    other = sorted(ours)[::every] if every else []
    theirs = {**ours, **dict.fromkeys(other, "other")}
    Task.objects.filter(name__in=other).update(definition_hash="other")
    now = dt.datetime.now(dt.UTC)
    digests = [record("default", ours), record("default", theirs)]
    SchedulerProcess.objects.bulk_create(
        SchedulerProcess(
            hostname=f"peer-{i}", pid=i, last_heartbeat_at=now, declaration_set=digests[i % 2]
        )
        for i in range(30)
    )
    scheduler = Scheduler(declarations=declarations)
    start = time.perf_counter()
    scheduler.start()
    result = scheduler.reconcile()
    elapsed = time.perf_counter() - start
    assert len(result.deferred) == len(other), len(result.deferred)
    scheduler.executor.close()
    Task.objects.filter(name__in=other).delete()
    reconcile(now=NOW, declarations=declarations)
    return elapsed


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
        changed, _ = collect(settings_for(args.tasks, retry_delay=301))

        first, unchanged, rewritten = [], [], []
        for _ in range(args.repeat):
            Task.objects.all().delete()
            first.append(timed(lambda: reconcile(now=NOW, declarations=declarations)))
            assert Task.objects.count() == args.tasks
            unchanged.append(timed(lambda: reconcile(now=NOW, declarations=declarations)))
            rewritten.append(timed(lambda: reconcile(now=NOW, declarations=changed)))
            assert Task.objects.filter(retry_delay=dt.timedelta(seconds=301)).count() == args.tasks
        reconcile(now=NOW, declarations=declarations)

        fleet, deferring = [], []
        for _ in range(args.repeat):
            fleet.append(as_scheduler(declarations, every=0))
            deferring.append(as_scheduler(declarations, every=10))

        db = f"{connection.vendor} {'.'.join(map(str, connection.get_database_version()))}"
        print(f"{args.tasks} tasks on {db}, median of {args.repeat}:")
        print(f"  collect() from settings   {statistics.median(collect_times):.3f} s")
        print(f"  reconcile, first time     {statistics.median(first):.3f} s  (target < 2 s)")
        print(f"  reconcile, unchanged      {statistics.median(unchanged):.3f} s  (target < 0.3 s)")
        print(f"  reconcile, all rewritten  {statistics.median(rewritten):.3f} s")
        print(f"  start-up beside 30 peers  {statistics.median(fleet):.3f} s  (target < 0.3 s)")
        print(f"  ... 1/10 tasks deferred   {statistics.median(deferring):.3f} s")
    finally:
        connection.creation.destroy_test_db(old_name, verbosity=0)


if __name__ == "__main__":
    main()
