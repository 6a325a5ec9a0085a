"""A database that stops answering without closing its connections.

A refused connection fails at once; a silent one (a partition, a failover that moves the
address, a frozen server) holds every statement and every connection attempt for the
driver's timeouts. The processes reach the test database through a relay the test silences.
PostgreSQL only: libpq's timeouts are the ones these tests depend on.
"""

from __future__ import annotations

import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from django_posixcron.db import IDLE_IN_TRANSACTION_LIMIT
from django_posixcron.models import Task
from tests.harness.processes import Schedulers, only_on, record_task, running, task
from tests.harness.proxy import Relay, relay_to_test_database
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True), pytest.mark.long]

# What the docs tell supervisors to allow a first signal: --grace plus 15 s.
STOP_BUDGET_PAST_GRACE = 15


@pytest.fixture
def relay() -> Iterator[Relay]:
    only_on("postgresql", why="libpq's connection timeouts")
    with relay_to_test_database() as relay:
        yield relay


@pytest.fixture
def any_relay() -> Iterator[Relay]:
    only_on("postgresql", "mysql", why="server-side session timeouts")
    with relay_to_test_database() as relay:
        yield relay


def through(schedulers: Schedulers, relay: Relay, tasks: dict[str, Any]) -> None:
    schedulers.configure(tasks, extra={"DB_PORT": relay.port})


def test_a_first_signal_ends_the_process_in_time_while_the_database_is_silent(
    schedulers: Schedulers, relay: Relay, tmp_path: Path
) -> None:
    # The grace period started only once the loop's stalled tick gave up (about 20 s), and
    # each write of the stop then waited its connection timeout: the process exited 36 s
    # past its grace period, after the supervisor's SIGKILL would have come.
    release = tmp_path / "release"
    job = task(
        "tests.testapp.jobs.wait_for_file",
        kwargs={"path": str(release), "task_name": "held"},
    )
    through(schedulers, relay, {"held": job})
    child = schedulers.start_live(1, "--grace", "3")[0]
    Task.objects.get(name="held").request_run()
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="held", label="started").exists(),
        what="the run to start",
    )
    relay.silence()
    schedulers.expect_exit(child)
    sent = time.monotonic()
    child.signal(signal.SIGTERM)
    code = child.wait(timeout=3 + STOP_BUDGET_PAST_GRACE + 30)
    elapsed = time.monotonic() - sent
    assert elapsed < 3 + STOP_BUDGET_PAST_GRACE, schedulers.outputs()
    assert code == 1, schedulers.outputs()  # forced: the shutdown could not be recorded
    assert "the graceful stop has not ended 10 s past the 3 s grace period" in child.output()


def test_the_grace_period_ends_the_runs_processes_while_the_database_is_silent(
    schedulers: Schedulers, relay: Relay, tmp_path: Path
) -> None:
    # The graceful stop, held up on the silent database, reached the end of the grace period
    # only at the forced exit 10 s later: the process executor's run went on executing past
    # the grace it was given.
    release, pid_file = tmp_path / "release", tmp_path / "child.pid"
    job = task(
        "tests.testapp.jobs.pid_then_wait",
        kwargs={"path": str(release), "pid_file": str(pid_file), "task_name": "held"},
    )
    through(schedulers, relay, {"held": job})
    child = schedulers.start_live(1, "--executor", "process", "--grace", "3")[0]
    Task.objects.get(name="held").request_run()
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="held", label="started").exists(),
        what="the run to start",
    )
    pid = int(pid_file.read_text())
    relay.silence()
    schedulers.expect_exit(child)
    child.signal(signal.SIGTERM)
    schedulers.wait_for(
        lambda: not running(pid), timeout=30, what=f"the run's process {pid} to be stopped"
    )
    # Stopped by the end of the grace period, not by the forced exit 10 s after it.
    assert "the graceful stop has not ended" not in child.output(), schedulers.outputs()
    assert child.alive(), schedulers.outputs()
    assert "the 3 s grace period is over and the stop is held up" in child.output()
    assert child.wait(timeout=3 + STOP_BUDGET_PAST_GRACE + 30) == 1, schedulers.outputs()


def test_a_first_signal_does_not_wait_out_the_grace_with_nothing_running(
    schedulers: Schedulers, relay: Relay
) -> None:
    # The grace period is for runs: with none, a loop stuck on a silent database (or Tasks
    # broker) made the process wait it out, 25 s and more, before exiting.
    through(schedulers, relay, {"idle": task()})
    child = schedulers.start_live(1)[0]  # the default 25 s grace
    relay.silence()
    schedulers.expect_exit(child)
    sent = time.monotonic()
    child.signal(signal.SIGTERM)
    code = child.wait(timeout=60)
    elapsed = time.monotonic() - sent
    assert elapsed < 20, schedulers.outputs()
    assert code == 1, schedulers.outputs()
    assert "has not stopped 10 s after the signal, with no run to wait for" in child.output()


def test_schedulerstatus_answers_while_the_database_is_silent(
    schedulers: Schedulers, relay: Relay
) -> None:
    # A monitoring job without a timeout of its own waited for ever.
    through(schedulers, relay, {})
    relay.silence()
    result = schedulers.manage("schedulerstatus", timeout=60)
    assert result.returncode == 1, result
    assert "database unavailable: " in result.stderr, result
    # One attempt waited out, not a second one to look for missing migrations: a probe's
    # timeout (20 s in the documented one) ran out before the line was printed.
    assert relay.unanswered == 1, result


def test_a_scheduler_cut_off_in_the_middle_of_a_claim_does_not_hold_the_task(
    schedulers: Schedulers, any_relay: Relay
) -> None:
    # Its claim's row lock stayed on the server with its session, for hours: every other
    # scheduler skipped the row (SKIP LOCKED), and the task never fired again.
    job = record_task("asked")
    through(schedulers, any_relay, {"asked": job})
    schedulers.start_live(1)
    schedulers.configure({"asked": job})  # the next one reaches the database directly
    any_relay.silence_after(b"SKIP LOCKED")
    Task.objects.get(name="asked").request_run()
    schedulers.wait_for(any_relay.silent.is_set, what="the first scheduler's claim")
    schedulers.start_live(1)
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="asked").exists(),
        timeout=IDLE_IN_TRANSACTION_LIMIT + 30,
        what="the other scheduler to run the task",
    )


def test_a_scheduler_cut_off_while_reconciling_says_so_and_lets_others_start(
    schedulers: Schedulers, any_relay: Relay
) -> None:
    # Cut off while holding the reconcile lock, it logged nothing (the watchdog started
    # with the loop), and the server kept the lock with its session for hours: no other
    # scheduler could start.
    postgresql = connection.vendor == "postgresql"
    tasks = {"job": record_task("job")}
    through(schedulers, any_relay, tasks)
    any_relay.silence_after(b"pg_advisory_xact_lock" if postgresql else b"GET_LOCK")
    cut_off = schedulers.start()
    schedulers.wait_for(any_relay.silent.is_set, what="the first scheduler's reconcile")
    schedulers.configure(tasks)  # the next one reaches the database directly
    other = schedulers.start()
    schedulers.wait_for(
        lambda: "django-posixcron scheduler " in other.output(),
        timeout=IDLE_IN_TRANSACTION_LIMIT + 30,
        what="the other scheduler to start",
    )
    schedulers.wait_for(
        lambda: "the start-up (registering, reconciling settings) has waited" in cut_off.output(),
        timeout=IDLE_IN_TRANSACTION_LIMIT + 30,
        what="the cut-off scheduler to say it waits",
    )


def test_a_liveness_probe_can_stay_healthy_while_the_database_is_away(
    schedulers: Schedulers, relay: Relay
) -> None:
    # The documented probe restarted a healthy scheduler during an outage, and a run that
    # ended meanwhile, whose outcome it kept to write later, was then marked lost and retried.
    through(schedulers, relay, {})
    relay.down.set()
    result = schedulers.manage("schedulerstatus", "--this-host", "--ignore-unavailable", timeout=60)
    assert result.returncode == 0, result
    assert result.stdout.startswith("database unavailable: "), result
    assert result.stdout.rstrip().endswith("(ignored: --ignore-unavailable)"), result
    # A database that accepts the connection and never answers is away too.
    relay.down.clear()
    relay.silence()
    result = schedulers.manage("schedulerstatus", "--ignore-unavailable", timeout=60)
    assert result.returncode == 0, result
    assert "database unavailable: " in result.stdout, result
