"""Liveness while receivers are slow, and outcomes that arrive for runs already marked lost."""

from __future__ import annotations

import datetime as dt
import signal
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from django_posixcron.db import database_now
from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task
from tests.harness.processes import Schedulers, only_on, record_task, task, utcnow
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


@pytest.mark.long
def test_a_slow_run_finished_receiver_delays_neither_the_heartbeat_nor_claims(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    """Item 3: receivers ran on the loop thread, before the heartbeat.

    "Receivers run off the loop thread; a slow or failing receiver delays neither claims nor
    the heartbeat." The receiver (tests.testapp.jobs) blocks until the test releases it;
    meanwhile the process must keep beating (every second here) and start other runs.
    """
    gate = tmp_path / "receiver-gate"
    schedulers.configure(
        {
            "slow-receiver": task(
                "tests.testapp.jobs.with_receiver_gate",
                kwargs={"receiver_gate": str(gate)},
            ),
            "other": record_task("other"),
        }
    )
    (child,) = schedulers.start_live(1)
    try:
        Task.objects.get(name="slow-receiver").request_run()
        schedulers.wait_for(
            lambda: Hit.objects.filter(label="receiver-blocked").exists(),
            what="the receiver to block",
        )
        process = SchedulerProcess.objects.get(pid=child.pid)
        blocked_at = process.last_heartbeat_at
        schedulers.wait_for(
            lambda: (
                SchedulerProcess.objects.get(pk=process.pk).last_heartbeat_at
                > blocked_at + dt.timedelta(seconds=2)
            ),
            timeout=10,
            what="a heartbeat while the receiver blocks",
        )
        Task.objects.get(name="other").request_run()
        schedulers.wait_for(
            lambda: Run.objects.filter(task__name="other", status=RunStatus.SUCCEEDED).exists(),
            timeout=10,
            what="another run to be claimed and finish while the receiver blocks",
        )
    finally:
        gate.touch()
    schedulers.expect_exit(child)
    child.signal(signal.SIGTERM)
    assert child.wait(timeout=20) == 0, schedulers.outputs()


def test_an_outcome_for_a_run_already_marked_lost_is_recorded_logged_and_signalled(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    """Item 6: the outcome was dropped without a log line or a signal.

    A peer marks the run lost (as one does when it judges the owner dead after an outage);
    the run then returns in its own process: "an outcome that arrives for a run already
    marked lost is still recorded on it (logged and signalled), never dropped."
    """
    release = tmp_path / "release"
    schedulers.configure(
        {
            "late": task(
                "tests.testapp.jobs.wait_then_signal",
                kwargs={"path": str(release), "task_name": "late", "record_signals": True},
            )
        }
    )
    (child,) = schedulers.start_live(1)
    late = Task.objects.get(name="late")
    late.request_run()
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="late", label="started").exists(),
        what="the run to start",
    )
    run = Run.objects.get()
    Run.objects.filter(pk=run.pk).update(status=RunStatus.LOST, error="Lost: (a peer)")
    release.touch()

    schedulers.wait_for(
        lambda: Run.objects.filter(pk=run.pk, status=RunStatus.SUCCEEDED).exists(),
        what="the real outcome to be recorded over lost",
    )
    schedulers.wait_for(
        lambda: "late_outcome" in child.output() or "then its outcome arrived" in child.output(),
        what="the late outcome to be logged",
    )
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="late", label="signal:succeeded").exists(),
        what="run_finished to be sent for the late outcome",
    )
    late.refresh_from_db()
    assert late.last_run_status == RunStatus.SUCCEEDED
    assert late.retry_at is None
    schedulers.expect_exit(child)
    child.signal(signal.SIGTERM)
    assert child.wait(timeout=20) == 0, schedulers.outputs()


@pytest.mark.long
def test_heartbeats_follow_the_database_clock_when_the_host_clock_steps(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    """Item 7: heartbeats were host-clock estimates.

    "The heartbeat itself beats on its own thread, by the database clock." The host clock
    steps an hour ahead while the scheduler runs; no heartbeat may be written an hour ahead
    (that would keep a dead process looking alive, and its runs unrecovered, for an hour).
    """
    only_on("postgresql", "mysql", why="SQLite has no clock of its own; the host's is used")
    clock = tmp_path / "host-clock"
    # Beats every 3 s: a beat written from a stepped host clock would stand that long.
    schedulers.configure(
        {"other": record_task("other")}, extra={"HOST_CLOCK_FILE": str(clock)}, POLL_INTERVAL=3
    )
    (child,) = schedulers.start_live(1)
    process = SchedulerProcess.objects.get(pid=child.pid)
    first = process.last_heartbeat_at
    clock.write_text("3600")
    latest: list[dt.datetime] = []

    def beats_seen() -> bool:
        beat = SchedulerProcess.objects.get(pk=process.pk).last_heartbeat_at
        assert beat <= database_now("default") + dt.timedelta(seconds=1), (
            f"heartbeat {beat.isoformat()} is ahead of the database clock\n{schedulers.outputs()}"
        )
        latest.append(beat)
        return beat > first + dt.timedelta(seconds=5)

    schedulers.wait_for(beats_seen, timeout=15, what="heartbeats after the host clock stepped")
    schedulers.expect_exit(child)
    child.signal(signal.SIGTERM)
    assert child.wait(timeout=20) == 0, schedulers.outputs()


@pytest.mark.long
def test_a_process_backing_off_keeps_beating(schedulers: Schedulers) -> None:
    """Item 9: heartbeats came from the tick, so a loop in back-off stopped beating.

    "The stale limit is longer than the loop's longest back-off", and the heartbeat does not
    wait for the loop at all. Here every tick fails (the task table is gone, the process
    table is not), so the loop backs off 0.5, 1, 2, 4, then 8 s; the process must keep
    beating meanwhile.
    """
    schedulers.configure({"broken": record_task("broken")})
    (child,) = schedulers.start_live(1)
    table = Task._meta.db_table
    with connection.schema_editor() as editor:
        editor.alter_db_table(Task, table, f"{table}_away")
    try:
        schedulers.wait_for(
            # "the database answers without this app's tables (attempt N), retrying in ..."
            lambda: child.output().count("(attempt ") >= 5,
            timeout=20,
            what="the loop to back off five times",
        )
        process = SchedulerProcess.objects.get(pid=child.pid)
        backing_off_since = process.last_heartbeat_at
        schedulers.wait_for(
            lambda: (
                SchedulerProcess.objects.get(pk=process.pk).last_heartbeat_at
                > backing_off_since + dt.timedelta(seconds=3)
            ),
            timeout=6,
            what="heartbeats while the loop backs off for 8 s",
        )
    finally:
        with connection.schema_editor() as editor:
            editor.alter_db_table(Task, f"{table}_away", table)
    schedulers.expect_exit(child)
    child.signal(signal.SIGTERM)
    assert child.wait(timeout=20) == 0, schedulers.outputs()


def test_a_host_clock_step_on_sqlite_presumes_no_live_scheduler_dead(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    """Two schedulers on one SQLite file, whose clock is the host's: it steps two hours
    forward while one of them runs a task. Every heartbeat stamped before the step looks two
    hours old; the run must stay running, not be marked lost and run again beside itself."""
    only_on("sqlite", why="the host's clock is the one due times follow there")
    clock = tmp_path / "host-clock"
    release = tmp_path / "release"
    long_run = task(
        "tests.testapp.jobs.wait_for_file",
        kwargs={"path": str(release), "task_name": "long"},
        retry_delay=10,
    )
    schedulers.configure({"long": long_run}, extra={"HOST_CLOCK_FILE": str(clock)})
    children = schedulers.start_live(2)
    Task.objects.filter(name="long").request_run()
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="long", label="started").exists(),
        what="the run to start",
    )

    clock.write_text("7200")
    schedulers.wait_for(
        lambda: all("stepped forward by" in c.output() for c in children),
        timeout=15,
        what="both schedulers to see the step",
    )
    stepped = utcnow() + dt.timedelta(hours=2)
    # Both beat again by the clock as it now is (every second), then judge each other.
    schedulers.wait_for(
        lambda: SchedulerProcess.objects.filter(last_heartbeat_at__gt=stepped).count() == 2,
        timeout=15,
        what="both schedulers to beat after the step",
    )
    schedulers.wait_for(
        lambda: (
            SchedulerProcess.objects.filter(
                last_heartbeat_at__gt=stepped + dt.timedelta(seconds=2)
            ).count()
            == 2
        ),
        timeout=15,
        what="two more seconds of ticks",
    )
    [run] = Run.objects.all()
    assert run.status == RunStatus.RUNNING, schedulers.outputs()

    release.touch()
    schedulers.wait_for(
        lambda: Run.objects.filter(status=RunStatus.SUCCEEDED).exists(), what="the run to end"
    )
    assert Run.objects.count() == 1, schedulers.outputs()  # no retry of a run "lost"
    for child in children:
        schedulers.expect_exit(child)
        child.signal(signal.SIGTERM)
    assert [child.wait(timeout=20) for child in children] == [0, 0], schedulers.outputs()


def _hold_the_process_table(seconds: float, holding: threading.Event) -> None:
    """Lock the scheduler process table for `seconds`, as a migration or a VACUUM FULL
    would: every heartbeat, and every read of it, waits without an error."""
    from django.db import connection as own
    from django.db import transaction

    try:
        with transaction.atomic(), own.cursor() as cursor:
            if own.vendor == "postgresql":
                cursor.execute(
                    "LOCK TABLE django_posixcron_schedulerprocess IN ACCESS EXCLUSIVE MODE"
                )
            else:
                cursor.execute("LOCK TABLES django_posixcron_schedulerprocess WRITE")
            holding.set()
            time.sleep(seconds)  # the lock's own length, not a wait for something
            if own.vendor == "mysql":
                cursor.execute("UNLOCK TABLES")
    finally:
        own.close()


@pytest.mark.long
def test_a_database_stall_past_the_stale_limit_marks_no_live_run_lost(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    # Both schedulers waited on the lock; the first read after it found the other's
    # heartbeat 40 s old, marked its running run lost and retried it beside itself.
    only_on("postgresql", "mysql", why="a table lock every statement waits on")
    release = tmp_path / "release"
    schedulers.configure(
        {
            "held": task(
                "tests.testapp.jobs.wait_for_file",
                kwargs={"path": str(release), "task_name": "held", "timeout": 300},
                retry_delay=1,
            )
        }
    )
    schedulers.start_live(2)
    Task.objects.get(name="held").request_run()
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="held", label="started").exists(),
        what="the run to start",
    )
    holding = threading.Event()
    stall = threading.Thread(target=_hold_the_process_table, args=(40.0, holding))
    stall.start()
    try:
        assert holding.wait(10), "the lock was not taken"
    finally:
        stall.join(60)
    released = database_now(connection.alias)
    # Both processes beat again after the stall: each had seen the other's beat as late as
    # its own, and judged nobody gone meanwhile.
    schedulers.wait_for(
        lambda: SchedulerProcess.objects.filter(last_heartbeat_at__gt=released).count() == 2,
        what="both heartbeats after the stall",
    )
    assert not Run.objects.filter(status=RunStatus.LOST).exists()
    for child in schedulers.children:
        assert "no other scheduler is judged gone" in child.output(), child.output()
    release.touch()
    schedulers.wait_for(
        lambda: Run.objects.filter(task__name="held", status=RunStatus.SUCCEEDED).exists(),
        what="the run to finish",
    )
    assert Run.objects.filter(task__name="held").count() == 1
    assert Hit.objects.filter(task_name="held", label="started").count() == 1
