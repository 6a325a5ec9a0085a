"""Scheduler benchmarks on PostgreSQL, MariaDB or SQLite: idle tick, latency, throughput, memory.

Run from the repository root (a scratch database test_NAME is created and dropped, NAME
from the URL; on SQLite the file /tmp/test_bench_scheduler.sqlite3 or $BENCH_SQLITE_FILE):

    .venv/bin/python bench/scheduler_bench.py --database postgres://postgres@127.0.0.1:5432/bench
    .venv/bin/python bench/scheduler_bench.py --database mysql://root@127.0.0.1:3306/bench
    .venv/bin/python bench/scheduler_bench.py --database sqlite:// --json /tmp/sqlite.json

What it measures, with 10,000 declared tasks (plus 120 latency probes) in the database:

- idle tick: time and queries of one `Scheduler.tick()` when nothing is due (in-process), with
  the heartbeat written inline and with it on its own thread, as `run()` ticks;
- fire latency: 120 manual requests at known instants 100 ms apart, one real `runscheduler`
  process; latency = the instant the callable started (time.time() in the task code) minus the
  requested instant; p50, p99, max;
- throughput: all 10,000 no-op tasks due at one instant a few seconds ahead (as a shared
  cron occurrence is: the processes know it and sleep until it), 1 then 2 real `runscheduler`
  processes; rate = runs / (last run's start - the instant), and the same for completion;
  compared in the same run with a raw claim loop (psycopg, batch 100, FOR UPDATE SKIP LOCKED,
  insert run + advance cursor), 1 and 2 processes, and with the same loop also recording each
  batch's outcome (run finished, task's last run: "raw claim + outcome"); with each, the CPU
  time a run cost the scheduler processes (or the raw loop's workers) and the database
  server when it runs on this machine (its processes' CPU read from /proc), steadier from
  round to round than the rates, which share the machine's cores;
- memory: RSS of a `runscheduler` process idle with 10,000 tasks once it is ready (its start-up
  summary printed), and its peak (VmHWM) after the throughput run;
- start-up (`--scenarios startup`): collecting the declarations from settings, the first and
  an unchanged reconcile, and how long a `runscheduler` process takes to be ready.

`--json PATH` writes every figure (each round, and the medians) for charts and comparisons.

Targets (issue 5): p99 <= 50 ms; >= 50% of the raw rate; 2 processes >= 1.5x one; RSS <= 100 MB.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime as dt
import json
import multiprocessing
import os
import resource
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
SETTINGS = "bench.scheduler_bench_settings"
RAW_BATCH = 100
# The start-up summary's last line when more than 100 tasks are declared (the bench's are).
READY_LINE = b"manage.py schedulerstatus lists every task."


def stamp(name: str) -> None:
    """Task code for the latency probe: note when it started, first thing."""
    started = time.time()
    from tests.testapp.models import Hit

    Hit.objects.create(task_name=name, label=repr(started))


# -- helpers ---------------------------------------------------------------------------------


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q / 100 * (len(ordered) - 1))))
    return ordered[index]


def cpu_seconds(pid: int, *, reaped: bool = False) -> float:
    """The CPU time (user + system) process `pid` has used so far; with `reaped`, and its
    children that ended and were waited for (PostgreSQL's backends, once they exit)."""
    # After the command name in parentheses: state, then 10 fields, then utime, stime,
    # cutime and cstime.
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = sum(int(value) for value in fields[11 : 15 if reaped else 13])
    return ticks / os.sysconf("SC_CLK_TCK")


# The database servers' process names, whose CPU the bench adds up when the server runs here.
SERVERS = {"postgres", "mariadbd", "mysqld"}


def server_cpu_seconds() -> float:
    """The CPU time every database server process on this machine has used so far (0 for
    SQLite, which has none): what a burst costs the server, read as a difference."""
    total = 0.0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            if (entry / "comm").read_text().strip() in SERVERS:
                # A backend that exits is added to its parent's reaped children.
                total += cpu_seconds(int(entry.name), reaped=True)
        except (FileNotFoundError, ProcessLookupError, PermissionError):
            continue  # a backend that ended meanwhile
    return total


def rss_kib(pid: int, field: str = "VmRSS") -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    return 0


def wait_until(condition: Callable[[], Any], timeout: float, what: str, poll: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise SystemExit(f"timed out after {timeout} s waiting for {what}")
        time.sleep(poll)


def db_now() -> dt.datetime:
    from django.utils import timezone

    from django_posixcron.db import database_now, has_clock

    if has_clock("default"):
        return database_now("default").astimezone(dt.UTC)
    return timezone.now()


def reset(*, truncate_runs: bool = True) -> None:
    """Put every task back to "not due" and forget the runs and hits of the last scenario."""
    from django.db import connection
    from django.db.models import F

    from django_posixcron.models import Run, SchedulerProcess, Task
    from tests.testapp.models import Hit

    vendor = connection.vendor
    with connection.cursor() as cursor:
        if truncate_runs and vendor == "postgresql":
            cursor.execute("TRUNCATE django_posixcron_run, testapp_hit")
        elif truncate_runs:
            cursor.execute(f"DELETE FROM {Run._meta.db_table}")
            cursor.execute(f"DELETE FROM {Hit._meta.db_table}")
    SchedulerProcess.objects.all().delete()
    Task.objects.update(
        run_requested_at=None, retry_at=None, due_at=F("next_run_at"), last_run_status=""
    )
    with connection.cursor() as cursor:
        if vendor == "postgresql":
            cursor.execute("VACUUM ANALYZE django_posixcron_task")
        elif vendor == "mysql":
            cursor.execute("ANALYZE TABLE django_posixcron_task")
            cursor.fetchall()
        else:
            cursor.execute("ANALYZE")


class Children:
    """Real runscheduler processes on the benchmark database."""

    def __init__(self, db_name: str, concurrency: int) -> None:
        self.db_name = db_name
        self.concurrency = concurrency
        self.procs: list[subprocess.Popen[bytes]] = []

    def start(self, count: int) -> list[subprocess.Popen[bytes]]:
        from django_posixcron.models import SchedulerProcess

        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE=SETTINGS,
            BENCH_DB_NAME=self.db_name,
            PYTHONPATH=str(ROOT),
            PYTHONUNBUFFERED="1",
        )
        with contextlib.ExitStack() as files:
            # Each child's output, read for the summary's last line; gone when closed.
            outputs = [files.enter_context(tempfile.TemporaryFile()) for _ in range(count)]
            procs = [
                subprocess.Popen(
                    [
                        sys.executable,
                        "-m",
                        "django",
                        "runscheduler",
                        "--concurrency",
                        str(self.concurrency),
                        "--grace",
                        "5",
                    ],
                    cwd=ROOT,
                    env=env,
                    stdout=output,
                )
                for output in outputs
            ]
            self.procs.extend(procs)
            pids = {p.pid for p in procs}
            wait_until(
                lambda: (
                    pids
                    <= set(
                        SchedulerProcess.objects.filter(stopped_at__isnull=True).values_list(
                            "pid", flat=True
                        )
                    )
                ),
                120,
                "the schedulers to start",
            )

            def summarised(output: Any) -> bool:
                output.seek(0)
                return READY_LINE in output.read()

            # Registered, then reconciled, then the start-up summary: its last line says the
            # process is about to loop (and its RSS includes what reconciling kept).
            wait_until(
                lambda: all(summarised(output) for output in outputs), 120, "the start-up summary"
            )
        return procs

    def stop(self) -> None:
        for proc in self.procs:
            if proc.poll() is None:
                proc.send_signal(signal.SIGTERM)
        for proc in self.procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        self.procs.clear()


# -- scenarios -------------------------------------------------------------------------------


def idle_tick(ticks: int) -> dict[str, float]:
    """Time tick() with nothing due: with the heartbeat written inline (tick() driven alone,
    as tests drive it), then as run() ticks, the heartbeat on its own thread."""
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from django_posixcron.scheduler import Scheduler

    scheduler = Scheduler(grace=0)
    scheduler.start()
    scheduler.tick()

    def measure() -> tuple[list[float], list[int]]:
        times, queries = [], []
        for _ in range(ticks):
            with CaptureQueriesContext(connection) as captured:
                start = time.perf_counter()
                result = scheduler.tick()
                times.append(time.perf_counter() - start)
            assert not result.claimed
            queries.append(len(captured.captured_queries))
        return times, queries

    inline, inline_queries = measure()
    assert scheduler.heartbeat is not None
    scheduler.heartbeat.start()
    looped, looped_queries = measure()
    scheduler.shutdown()
    return {
        "median_ms": statistics.median(inline) * 1000,
        "p99_ms": percentile(inline, 99) * 1000,
        "queries": max(inline_queries),
        "loop_median_ms": statistics.median(looped) * 1000,
        "loop_p99_ms": percentile(looped, 99) * 1000,
        "loop_queries": max(looped_queries),
    }


def latency(children: Children, probes: int, spacing: float) -> dict[str, float]:
    from django_posixcron.models import Task
    from tests.testapp.models import Hit

    reset()
    (proc,) = children.start(1)
    idle_rss = rss_kib(proc.pid)
    base = db_now() + dt.timedelta(seconds=2)
    instants = {}
    for i in range(probes):
        name = f"stamp-{i:03d}"
        # A sub-poll offset that walks through the second, so no instant sits on a boundary.
        instant = base + dt.timedelta(seconds=i * spacing + (i * 0.0137) % 0.05)
        Task.objects.filter(name=name).update(run_requested_at=instant, due_at=instant)
        instants[name] = instant
    wait_until(
        lambda: Hit.objects.count() >= probes, probes * spacing + 60, "the latency probes", 0.2
    )
    children.stop()
    by_probe = {
        name: float(label) - instants[name].timestamp()
        for name, label in Hit.objects.values_list("task_name", "label")
    }
    lat = list(by_probe.values())
    worst = sorted(by_probe, key=by_probe.__getitem__)[-5:]
    print("  slowest probes: " + ", ".join(f"{n} {by_probe[n] * 1000:.0f} ms" for n in worst))
    return {
        "p50_ms": percentile(lat, 50) * 1000,
        "p99_ms": percentile(lat, 99) * 1000,
        "max_ms": max(lat) * 1000,
        "min_ms": min(lat) * 1000,
        "n": len(lat),
        "idle_rss_mib": idle_rss / 1024,
    }


def due_ahead(tasks: Any, count: int) -> dt.datetime:
    """Make `tasks` due at one instant a little ahead, as a cron occurrence is; return it.

    The processes learn of it at their next peek, at most a poll interval after the update
    commits, and sleep until it, as they would for 10,000 tasks sharing a schedule. Made due
    "now" instead, the rate would also count the update's own time and the rest of the
    poll interval the processes were sleeping through when it committed (0-1 s, a quarter of
    a burst of 10,000): the raw loop's clock starts when its workers are told to go.
    """
    from django_posixcron.conf import get_settings

    poll = dt.timedelta(seconds=get_settings().poll_interval)
    # Long enough for the update (about 3 s for 100,000 rows here) and one poll after it.
    lead = poll + dt.timedelta(seconds=1 + count / 20_000)
    instant = db_now() + lead
    tasks.update(run_requested_at=instant, due_at=instant)
    left = instant - db_now()
    if left < poll + dt.timedelta(seconds=0.2):
        raise SystemExit(
            f"making {count} tasks due took too long: {left.total_seconds():.2f} s were left "
            f"before their instant, and the processes need a poll interval ({poll}) to see it"
        )
    return instant


def throughput(children: Children, processes: int, tasks: int) -> dict[str, float]:
    from django.db.models import Max, Min

    from django_posixcron.models import Run, RunStatus, Task

    reset()
    procs = children.start(processes)
    idle_rss = max(rss_kib(p.pid) for p in procs)
    cpu_before = sum(cpu_seconds(p.pid) for p in procs)
    server_before = server_cpu_seconds()
    instant = due_ahead(Task.objects.filter(name__startswith="noop-"), tasks)
    wait_until(
        lambda: Run.objects.exclude(status=RunStatus.RUNNING).count() >= tasks,
        600,
        "the runs",
        0.25,
    )
    peak = max(rss_kib(p.pid, "VmHWM") for p in procs)
    # Through the burst (and the idle ticks before its instant, a few milliseconds): a figure
    # that moves far less from round to round than the rates, which share the machine's two
    # cores with the database server.
    cpu = sum(cpu_seconds(p.pid) for p in procs) - cpu_before
    # The server's includes making the tasks due and the bench's own polling: a few percent.
    server = server_cpu_seconds() - server_before
    children.stop()
    agg = Run.objects.aggregate(
        first=Min("started_at"), started=Max("started_at"), finished=Max("finished_at")
    )
    statuses = set(Run.objects.values_list("status", flat=True))
    assert statuses == {RunStatus.SUCCEEDED}, statuses
    assert Run.objects.count() == tasks
    claimed = (agg["started"] - instant).total_seconds()
    done = (agg["finished"] - instant).total_seconds()
    return {
        "claim_rate": tasks / claimed,
        "done_rate": tasks / done,
        "first_start_ms": (agg["first"] - instant).total_seconds() * 1000,
        "cpu_us_per_run": cpu / tasks * 1e6,
        "server_cpu_us_per_run": server / tasks * 1e6,
        "idle_rss_mib": idle_rss / 1024,
        "peak_rss_mib": peak / 1024,
    }


RAW_SELECT = (
    "SELECT id, due_at FROM django_posixcron_task "
    "WHERE due_at <= {now} AND NOT paused AND declared "
    "ORDER BY due_at LIMIT {limit}{lock}"
)
RAW_INSERT = (
    "INSERT INTO django_posixcron_run (task_id, `trigger`, status, scheduled_for,"
    " started_at, error, traceback, process_label)"
    " VALUES ({p}, 'manual', '{status}', {p}, {now}, '', '', 'raw')"
)
# The outcome, for the raw loop that also records one ("claim + outcome"): the run's status
# and finish, and the task's last run, in a transaction of their own as the scheduler does.
RAW_FINISH_RUNS = (
    "UPDATE django_posixcron_run SET status = 'succeeded', finished_at = {now} "
    "WHERE task_id IN ({ids}) AND status = 'running'"
)
RAW_FINISH_TASKS = (
    "UPDATE django_posixcron_task SET last_run_status = 'succeeded', "
    "last_run_finished_at = {now} WHERE id IN ({ids})"
)
RAW_ADVANCE = (
    "UPDATE django_posixcron_task SET run_requested_at = NULL, due_at = next_run_at "
    "WHERE id IN ({ids})"
)


def _raw_connect(db: dict[str, Any]) -> Any:
    """A DB-API connection in autocommit mode, and the SQL spelling of "now" and params."""
    if db["ENGINE"].endswith("postgresql"):
        import psycopg

        conn = psycopg.connect(
            host=db["HOST"] or "127.0.0.1",
            port=db["PORT"] or 5432,
            user=db["USER"],
            dbname=db["NAME"],
            password=db["PASSWORD"] or None,
            autocommit=True,
        )
        return conn, "now()", "%s", " FOR UPDATE SKIP LOCKED"
    if db["ENGINE"].endswith("mysql"):
        import MySQLdb

        conn = MySQLdb.connect(
            host=db["HOST"] or "127.0.0.1",
            port=int(db["PORT"] or 3306),
            user=db["USER"],
            password=db["PASSWORD"] or "",
            database=db["NAME"],
            autocommit=True,
        )
        return conn, "NOW(6)", "%s", " FOR UPDATE SKIP LOCKED"
    import sqlite3

    lite = sqlite3.connect(db["TEST"]["NAME"], isolation_level=None, timeout=20)
    # Django stores SQLite datetimes as ISO text; the lock is BEGIN IMMEDIATE's.
    return lite, "strftime('%Y-%m-%d %H:%M:%f', 'now')", "?", ""


def _raw_worker(
    db: dict[str, Any], ready: Any, go: Any, counts: Any, index: int, record: bool
) -> None:
    """The claim protocol alone, in plain SQL: select a locked batch, insert runs, advance.

    With `record`, each batch's outcome is then written too (run finished, task's last run),
    in a second transaction: the least any scheduler that keeps a history does per run.
    """
    conn, now, p, lock = _raw_connect(db)
    sqlite = p == "?"
    select = RAW_SELECT.format(now=now, limit=RAW_BATCH, lock=lock)
    insert = RAW_INSERT.format(p=p, now=now, status="running" if record else "succeeded")
    if not db["ENGINE"].endswith("mysql"):
        insert = insert.replace("`trigger`", "trigger")
    claimed = 0
    ready.release()
    go.wait()
    cur = conn.cursor()
    while True:
        cur.execute("BEGIN IMMEDIATE" if sqlite else "BEGIN")
        try:
            cur.execute(select)
            rows = cur.fetchall()
            if rows:
                cur.executemany(insert, rows)
                cur.execute(RAW_ADVANCE.format(ids=", ".join(str(r[0]) for r in rows)))
        except Exception as exc:
            # InnoDB may pick this transaction as a deadlock victim: do the batch again.
            if "Deadlock" not in str(exc):
                raise
            cur.execute("ROLLBACK")
            continue
        cur.execute("COMMIT")
        if not rows:
            break
        claimed += len(rows)
        if record:
            ids = ", ".join(str(r[0]) for r in rows)
            cur.execute("BEGIN IMMEDIATE" if sqlite else "BEGIN")
            cur.execute(RAW_FINISH_RUNS.format(now=now, ids=ids))
            cur.execute(RAW_FINISH_TASKS.format(now=now, ids=ids))
            cur.execute("COMMIT")
    conn.close()
    counts[index] = claimed


def raw_loop(
    db: dict[str, Any], processes: int, tasks: int, *, record: bool = False
) -> dict[str, float]:
    from django_posixcron.models import Task

    reset()
    Task.objects.filter(name__startswith="noop-").update(run_requested_at=db_now(), due_at=db_now())
    ctx = multiprocessing.get_context("spawn")
    ready, go = ctx.Semaphore(0), ctx.Event()
    counts = ctx.Array("i", processes)
    workers = [
        ctx.Process(target=_raw_worker, args=(db, ready, go, counts, i, record))
        for i in range(processes)
    ]
    for worker in workers:
        worker.start()
    for _ in workers:
        ready.acquire()
    children_before = _children_cpu()
    server_before = server_cpu_seconds()
    start = time.perf_counter()
    go.set()
    for worker in workers:
        worker.join()
        if worker.exitcode:
            raise SystemExit(f"a raw claim worker failed (exit status {worker.exitcode})")
    elapsed = time.perf_counter() - start
    server = server_cpu_seconds() - server_before
    claimed = [counts[i] for i in range(processes)]
    assert sum(claimed) == tasks, claimed
    return {
        "rate": tasks / elapsed,
        # The workers' whole lives (their start-up too): an upper bound of the loop's own.
        "cpu_us_per_run": (_children_cpu() - children_before) / tasks * 1e6,
        "server_cpu_us_per_run": server / tasks * 1e6,
    }


def _children_cpu() -> float:
    """The CPU time of this process's children that have ended and been waited for."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def startup(children: Children, tasks: int) -> dict[str, float]:
    """Collect the declarations, reconcile first and unchanged, start a process until ready."""
    from django_posixcron.declarations import load_declarations
    from django_posixcron.models import Task
    from django_posixcron.reconcile import reconcile

    Task.objects.all().delete()
    start = time.perf_counter()
    declarations = load_declarations()
    collect = time.perf_counter() - start
    start = time.perf_counter()
    reconcile(declarations=declarations)
    first = time.perf_counter() - start
    start = time.perf_counter()
    reconcile(declarations=declarations)
    unchanged = time.perf_counter() - start
    reset()
    start = time.perf_counter()
    (proc,) = children.start(1)
    ready = time.perf_counter() - start
    idle = rss_kib(proc.pid)
    peak = rss_kib(proc.pid, "VmHWM")
    children.stop()
    return {
        "tasks": tasks,
        "collect_s": collect,
        "reconcile_first_s": first,
        "reconcile_unchanged_s": unchanged,
        "process_ready_s": ready,
        "idle_rss_mib": idle / 1024,
        "startup_peak_rss_mib": peak / 1024,
    }


def rounds(children: Children, db: dict[str, Any], args: argparse.Namespace) -> list[Any]:
    runs: list[dict[str, dict[str, float]]] = []
    for repeat in range(args.repeat):
        print(f"-- round {repeat + 1} of {args.repeat}")
        round_: dict[str, dict[str, float]] = {}
        if "latency" in args.scenarios:
            lat = round_["lat"] = latency(children, args.probes, args.spacing)
            print(
                f"fire latency over {lat['n']:.0f} firings: p50 {lat['p50_ms']:.1f} ms, "
                f"p99 {lat['p99_ms']:.1f} ms, max {lat['max_ms']:.1f} ms, "
                f"min {lat['min_ms']:.1f} ms; idle RSS {lat['idle_rss_mib']:.0f} MiB"
            )
        if "throughput" in args.scenarios:
            raw1 = round_["raw1"] = raw_loop(db, 1, args.tasks)
            raw2 = round_["raw2"] = raw_loop(db, 2, args.tasks)
            rec1 = round_["rec1"] = raw_loop(db, 1, args.tasks, record=True)
            rec2 = round_["rec2"] = raw_loop(db, 2, args.tasks, record=True)
            one = round_["one"] = throughput(children, 1, args.tasks)
            two = round_["two"] = throughput(children, 2, args.tasks)
            print(f"raw loop: 1 process {raw1['rate']:.0f}/s, 2 processes {raw2['rate']:.0f}/s")
            print(
                f"raw claim + outcome loop: 1 process {rec1['rate']:.0f}/s, "
                f"2 processes {rec2['rate']:.0f}/s"
            )
            for label, result, raw, rec in (
                ("1 process", one, raw1, rec1),
                ("2 processes", two, raw2, rec2),
            ):
                print(
                    f"scheduler, {label}: claimed {result['claim_rate']:.0f}/s "
                    f"({result['claim_rate'] / raw['rate']:.0%} of raw), completed "
                    f"{result['done_rate']:.0f}/s ({result['done_rate'] / raw['rate']:.0%}; "
                    f"{result['done_rate'] / rec['rate']:.0%} of claim + outcome); first "
                    f"run {result['first_start_ms']:.1f} ms after the instant; CPU a run: "
                    f"scheduler {result['cpu_us_per_run']:.0f} µs, server "
                    f"{result['server_cpu_us_per_run']:.0f} µs (raw loop "
                    f"{raw['cpu_us_per_run']:.0f} + {raw['server_cpu_us_per_run']:.0f}, with "
                    f"outcome {rec['cpu_us_per_run']:.0f} + {rec['server_cpu_us_per_run']:.0f}); "
                    f"RSS idle "
                    f"{result['idle_rss_mib']:.0f} MiB, "
                    f"peak {result['peak_rss_mib']:.0f} MiB"
                )
        runs.append(round_)
    return runs


def medians(runs: list[dict[str, dict[str, float]]]) -> dict[str, dict[str, float]]:
    """The median of every figure over the rounds, with its spread (max - min) as the noise."""
    out: dict[str, dict[str, float]] = {}
    for scenario in runs[0] if runs else ():
        out[scenario] = {}
        for key in runs[0][scenario]:
            values = [r[scenario][key] for r in runs]
            out[scenario][key] = statistics.median(values)
            out[scenario][key + "_spread"] = max(values) - min(values)
    if "one" in out:
        one, two = out["one"], out["two"]
        raw1, raw2 = out["raw1"]["rate"], out["raw2"]["rate"]
        rec1, rec2 = out["rec1"]["rate"], out["rec2"]["rate"]
        out["ratios"] = {
            "one_of_raw": one["done_rate"] / raw1,
            "two_of_raw": two["done_rate"] / raw2,
            "one_of_raw_outcome": one["done_rate"] / rec1,
            "two_of_raw_outcome": two["done_rate"] / rec2,
            "two_vs_one": two["done_rate"] / one["done_rate"],
            "raw_two_vs_one": raw2 / raw1,
        }
    return out


def report(med: dict[str, dict[str, float]], repeat: int, tasks: int) -> None:
    print(f"== medians over {repeat} rounds (spread = max - min)")
    if "lat" in med:
        lat = med["lat"]
        print(
            f"fire latency: p50 {lat['p50_ms']:.1f} ms (spread {lat['p50_ms_spread']:.1f}), "
            f"p99 {lat['p99_ms']:.1f} ms (spread {lat['p99_ms_spread']:.1f}), "
            f"max {lat['max_ms']:.1f} ms; idle RSS {lat['idle_rss_mib']:.0f} MiB"
        )
    if "ratios" in med:
        r = med["ratios"]
        for label, key, raw, rec in (
            ("1 process", "one", "raw1", "rec1"),
            ("2 processes", "two", "raw2", "rec2"),
        ):
            print(
                f"throughput, {label}: scheduler {med[key]['done_rate']:.0f}/s "
                f"(spread {med[key]['done_rate_spread']:.0f}), raw {med[raw]['rate']:.0f}/s "
                f"(spread {med[raw]['rate_spread']:.0f}); "
                f"{med[key]['done_rate'] / med[raw]['rate']:.0%}; raw claim + outcome "
                f"{med[rec]['rate']:.0f}/s (spread {med[rec]['rate_spread']:.0f}); "
                f"{med[key]['done_rate'] / med[rec]['rate']:.0%}"
            )
            print(
                f"  CPU a run, {label}: scheduler {med[key]['cpu_us_per_run']:.0f} µs "
                f"(spread {med[key]['cpu_us_per_run_spread']:.0f}) + server "
                f"{med[key]['server_cpu_us_per_run']:.0f} µs; raw loop "
                f"{med[raw]['cpu_us_per_run']:.0f} + {med[raw]['server_cpu_us_per_run']:.0f} µs; "
                f"raw claim + outcome {med[rec]['cpu_us_per_run']:.0f} + "
                f"{med[rec]['server_cpu_us_per_run']:.0f} µs"
            )
        print(f"2 processes vs 1: scheduler {r['two_vs_one']:.2f}x, raw {r['raw_two_vs_one']:.2f}x")
        print(
            f"RSS with {tasks} tasks: idle {med['one']['idle_rss_mib']:.0f} MiB, peak "
            f"{med['one']['peak_rss_mib']:.0f} MiB"
        )


# -- main ------------------------------------------------------------------------------------

SCENARIOS = ("idle", "latency", "throughput", "startup")


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--database",
        metavar="URL",
        help="database URL (postgres://, mysql://, sqlite://); default: $DATABASE_URL",
    )
    parser.add_argument("--tasks", type=int, default=10_000)
    parser.add_argument("--probes", type=int, default=120)
    parser.add_argument("--spacing", type=float, default=0.1, help="seconds between probes")
    parser.add_argument(
        "--concurrency",
        type=int,
        default=100,
        help="CONCURRENCY of the scheduler processes; 100 lets a claim take a batch of 100 "
        "no-op runs, like the raw loop",
    )
    parser.add_argument("--ticks", type=int, default=200)
    parser.add_argument("--repeat", type=int, default=3, help="rounds of latency + throughput")
    parser.add_argument(
        "--scenarios",
        default="idle,latency,throughput",
        help=f"comma-separated, of {', '.join(SCENARIOS)}",
    )
    parser.add_argument("--json", metavar="PATH", help="also write every figure as JSON here")
    args = parser.parse_args()
    args.scenarios = set(args.scenarios.split(","))
    if args.scenarios - set(SCENARIOS):
        parser.error(f"unknown scenarios: {', '.join(sorted(args.scenarios - set(SCENARIOS)))}")
    if args.database:
        os.environ["DATABASE_URL"] = args.database
    return args


def main() -> None:
    args = parse_args()
    sys.path.insert(0, str(ROOT))
    os.environ["DJANGO_SETTINGS_MODULE"] = SETTINGS
    os.environ["BENCH_NOOP_TASKS"] = str(args.tasks)
    os.environ["BENCH_STAMP_TASKS"] = str(args.probes)
    os.environ["BENCH_CONCURRENCY"] = str(args.concurrency)
    os.environ.pop("BENCH_DB_NAME", None)

    import django

    django.setup()
    from django.db import connection

    from django_posixcron.reconcile import reconcile

    old_name = connection.creation.create_test_db(verbosity=0, autoclobber=True)
    db = dict(connection.settings_dict)
    children = Children(db["NAME"], args.concurrency)
    results: dict[str, Any] = {
        "vendor": connection.vendor,
        "tasks": args.tasks,
        "repeat": args.repeat,
        "concurrency": args.concurrency,
        "load_average": os.getloadavg(),
    }
    print(f"{connection.vendor}, {args.tasks} tasks")
    try:
        if "startup" in args.scenarios:
            results["startup"] = up = startup(children, args.tasks)
            print(
                f"start-up: collect {up['collect_s']:.2f} s, reconcile first "
                f"{up['reconcile_first_s']:.2f} s, unchanged {up['reconcile_unchanged_s']:.2f} s; "
                f"process ready {up['process_ready_s']:.2f} s, idle RSS "
                f"{up['idle_rss_mib']:.0f} MiB (peak {up['startup_peak_rss_mib']:.0f} MiB)"
            )
        else:
            start = time.perf_counter()
            reconcile()
            print(
                f"reconciled {args.tasks + args.probes} tasks "
                f"in {time.perf_counter() - start:.2f} s"
            )
        if "idle" in args.scenarios:
            results["idle"] = tick = idle_tick(args.ticks)
            print(
                f"idle tick: median {tick['median_ms']:.2f} ms, p99 {tick['p99_ms']:.2f} ms, "
                f"{tick['queries']:.0f} queries (heartbeat inline); as run() ticks (heartbeat "
                f"on its thread): median {tick['loop_median_ms']:.2f} ms, p99 "
                f"{tick['loop_p99_ms']:.2f} ms, {tick['loop_queries']:.0f} queries"
            )
        if args.scenarios & {"latency", "throughput"}:
            results["rounds"] = runs = rounds(children, db, args)
            results["medians"] = med = medians(runs)
            report(med, args.repeat, args.tasks)
    finally:
        children.stop()
        connection.creation.destroy_test_db(old_name, verbosity=0)
    if args.json:
        Path(args.json).write_text(json.dumps(results, indent=2) + "\n")
        print(f"figures written to {args.json}")


if __name__ == "__main__":
    main()
