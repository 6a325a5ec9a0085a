"""Django's connection pool (PostgreSQL ``OPTIONS["pool"]``), sized as small as CONCURRENCY:
task code holds every pooled connection, and the scheduler's own work goes on beside it."""

from __future__ import annotations

import signal
from pathlib import Path

import pytest
from django.db import connections, transaction

from django_posixcron.db import own_connection
from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task
from tests.harness.pgbouncer import pgbouncer_to_test_database
from tests.harness.processes import Child, Schedulers, only_on, task
from tests.testapp.models import Hit

pytestmark = pytest.mark.django_db(transaction=True)


def two_runs_holding_the_pool(schedulers: Schedulers, release: Path, *args: str) -> Child:
    """Start `runscheduler *args` with a pool of two connections and two runs that each take
    one and hold it until `release` exists; return the process once both hold theirs."""
    only_on("postgresql", why="Django's connection pool is PostgreSQL's")
    pytest.importorskip("psycopg_pool")
    holders = {
        f"hold-{i}": task(
            "tests.testapp.jobs.hold_connection",
            kwargs={"path": str(release), "task_name": f"hold-{i}"},
        )
        for i in (1, 2)
    }
    schedulers.configure(
        holders,
        CONCURRENCY=2,
        # As many connections as runs, and a short wait for one: the scheduler's threads
        # would fail to get one within seconds.
        extra={"DB_OPTIONS": {"pool": {"min_size": 1, "max_size": 2, "timeout": 2}}},
    )
    [child] = schedulers.start_live(1, *args)
    Task.objects.filter(name__in=holders).request_run()
    schedulers.wait_for(
        lambda: Hit.objects.filter(label__startswith="started idle bound").count() == 2,
        what="both runs to hold a pooled connection",
    )
    return child


def test_tasks_holding_the_whole_pool_leave_the_heartbeat_and_the_loop_going(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    child = two_runs_holding_the_pool(schedulers, release)
    process = SchedulerProcess.objects.get(pid=child.pid)
    beats = [process.last_heartbeat_at]

    def beat_again() -> bool:
        process.refresh_from_db()
        if process.last_heartbeat_at != beats[-1]:
            beats.append(process.last_heartbeat_at)
        return len(beats) >= 4

    # The heartbeat beats every second (POLL_INTERVAL 1) while the tasks hold the pool.
    schedulers.wait_for(beat_again, timeout=15, what="three heartbeats while the pool is held")
    # Task code keeps the project's session settings: the scheduler's idle-transaction bound
    # is set on its own connections, never on a pooled one a task takes next.
    bounds = set(Hit.objects.filter(label__startswith="started idle bound").values_list("label"))
    assert bounds == {("started idle bound 0",)}, bounds

    release.touch()
    schedulers.wait_for(
        lambda: Run.objects.filter(status=RunStatus.SUCCEEDED).count() == 2,
        what="both runs to succeed",
    )
    child.signal(signal.SIGTERM)
    schedulers.expect_exit(child)
    assert child.wait() == 0
    output = child.output()
    assert "heartbeat failed" not in output, output
    assert "database unavailable" not in output, output
    assert not Run.objects.exclude(status=RunStatus.SUCCEEDED).exists()


def test_a_sigterm_while_tasks_hold_the_pool_records_them_interrupted(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    child = two_runs_holding_the_pool(schedulers, tmp_path / "never", "--grace", "2")

    child.signal(signal.SIGTERM)
    schedulers.expect_exit(child)

    assert child.wait(timeout=20) == 0, schedulers.outputs()
    statuses = list(Run.objects.values_list("status", flat=True))
    assert statuses == [RunStatus.INTERRUPTED] * 2, schedulers.outputs()
    assert SchedulerProcess.objects.get(pid=child.pid).stopped_at is not None


def test_a_thread_gets_its_own_connection_and_back_but_never_inside_a_transaction() -> None:
    pooled = connections["default"]
    options = pooled.settings_dict["OPTIONS"]
    with transaction.atomic():
        # A command called from code inside atomic(): the transaction ends where it began.
        options["pool"] = True  # as if the alias had a pool
        try:
            give_back = own_connection("default")
            assert connections["default"] is pooled
            give_back()
        finally:
            del options["pool"]

    pooled.close()  # not opened again with the pool flag below (no pool here)
    options["pool"] = True
    try:
        give_back = own_connection("default")
        own = connections["default"]
        assert own is not pooled
        assert "pool" not in own.settings_dict["OPTIONS"]
        assert own.settings_dict["CONN_MAX_AGE"] is None  # kept between ticks, checked on reuse
        assert Task.objects.count() == 0  # it connects and works
        give_back()
        assert connections["default"] is pooled
        assert own.connection is None
    finally:
        del options["pool"]
        connections["default"] = pooled


def test_behind_pgbouncer_in_transaction_pooling_the_idle_bound_reaches_no_other_client(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    # The scheduler's 30 s idle-transaction bound was a session SET: under transaction
    # pooling it stayed on PgBouncer's server connection and reached whichever client got it
    # next (a web process, whose long transactions it ended).
    only_on("postgresql", why="PgBouncer pools PostgreSQL connections")
    import psycopg

    release = tmp_path / "release"
    release.touch()  # the probe records the bound it sees and returns at once
    probe = task(
        "tests.testapp.jobs.hold_connection", kwargs={"path": str(release), "task_name": "probe"}
    )
    # One server connection: the loop, the heartbeat and task code all take turns on it.
    with pgbouncer_to_test_database("transaction", pool_size=1) as port:
        schedulers.configure(
            {"probe": probe},
            extra={"DB_PORT": port, "DB_SETTINGS": {"DISABLE_SERVER_SIDE_CURSORS": True}},
        )
        [child] = schedulers.start_live(1)
        for runs in (1, 2):  # a claim's and an outcome's transactions between the two
            Task.objects.get(name="probe").request_run()
            schedulers.wait_for(
                lambda: Run.objects.filter(status=RunStatus.SUCCEEDED).count() == runs,  # noqa: B023
                what=f"run {runs} to succeed",
            )
        settings = connections["default"].settings_dict
        with psycopg.connect(
            host="127.0.0.1", port=port, dbname=settings["NAME"], user=settings["USER"]
        ) as other:
            row = other.execute("SHOW idle_in_transaction_session_timeout").fetchone()
        child.signal(signal.SIGTERM)
        schedulers.expect_exit(child)
        assert child.wait() == 0, schedulers.outputs()
    assert row == ("0",), row
    seen = list(
        Hit.objects.filter(label__startswith="started idle bound").values_list("label", flat=True)
    )
    assert seen == ["started idle bound 0"] * 2, seen
    assert "database unavailable" not in child.output(), child.output()
