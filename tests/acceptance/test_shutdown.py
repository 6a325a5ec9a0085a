"""The forced exit: a second signal ends the process within 2 s and records what it holds.

"A second signal ends the process within 2 s: it kills the process executor's children,
records the outcomes it already has, marks the rest interrupted in one short transaction
bounded by a statement timeout, and exits."
"""

from __future__ import annotations

import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from django.db import connection, connections, transaction

from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task, Trigger
from tests.harness.processes import Schedulers, only_on, running, task, utcnow
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

# "Ends the process within 2 s", plus what it takes this test to see the exit.
FORCED_EXIT_WITHIN = 2.5


def waiter(name: str, release: Path, **extra: Any) -> dict[str, Any]:
    return task(
        "tests.testapp.jobs.wait_for_file",
        kwargs={"path": str(release), "task_name": name},
        **extra,
    )


def hits(name: str, label: str) -> int:
    return Hit.objects.filter(task_name=name, label=label).count()


def force_exit(schedulers: Schedulers, child: Any) -> float:
    """Send SIGINT twice (the second once the first is handled); return seconds to exit."""
    schedulers.expect_exit(child)
    child.signal(signal.SIGINT)
    schedulers.wait_for(
        lambda: "no new claims" in child.output(), what="the first signal to be handled"
    )
    sent = time.monotonic()
    child.signal(signal.SIGINT)
    code = child.wait(timeout=30)
    elapsed = time.monotonic() - sent
    assert code != 0, schedulers.outputs()
    return elapsed


def test_a_forced_exit_kills_the_process_executors_child(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    """Item 1: the child was left running, so the run recorded interrupted ran on, twice."""
    release, pid_file = tmp_path / "release", tmp_path / "child.pid"
    schedulers.configure(
        {
            "child": task(
                "tests.testapp.jobs.pid_then_wait",
                kwargs={"path": str(release), "pid_file": str(pid_file)},
            )
        }
    )
    (scheduler,) = schedulers.start_live(1, "--executor", "process", "--grace", "60")
    Task.objects.get(name="child").request_run()
    schedulers.wait_for(lambda: hits("child", "started") == 1, what="the child run to start")
    pid = int(pid_file.read_text())

    assert force_exit(schedulers, scheduler) < FORCED_EXIT_WITHIN, schedulers.outputs()

    schedulers.wait_for(
        lambda: not running(pid), timeout=5, what=f"the run's process {pid} to be gone"
    )
    release.touch()  # a child still running would now record its end
    run = Run.objects.get()
    assert run.status == RunStatus.INTERRUPTED, schedulers.outputs()
    assert hits("child", "finished") == 0


def test_a_forced_exit_while_the_loop_waits_on_a_lock_records_what_it_holds(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    """Items 2 and 5: the handler wrote on the connection the loop was using.

    The loop is held inside a statement (its history pruning waits on a row lock the test
    holds) when a run finishes and the second signal arrives. Before, the process either
    hung in that statement or exited without writing anything: the finished run was then
    marked lost and run again. Now the forced exit writes on a connection of its own.
    """
    only_on(
        "postgresql",
        "mysql",
        why="SQLite has one writer: the held lock would block the forced exit's write too",
    )
    quick_release, never = tmp_path / "quick", tmp_path / "never"
    schedulers.configure({"quick": waiter("quick", quick_release), "slow": waiter("slow", never)})
    assert schedulers.run("--once").returncode == 0  # reconciled; nothing was due
    quick, slow = Task.objects.get(name="quick"), Task.objects.get(name="slow")
    old = utcnow().replace(year=2000)
    pruned = Run.objects.create(
        task=quick,
        trigger=Trigger.CRON,
        status=RunStatus.SUCCEEDED,
        scheduled_for=old,
        finished_at=old,
    )
    holding, release_lock = threading.Event(), threading.Event()

    def hold_the_old_run() -> None:
        try:
            with transaction.atomic():
                Run.objects.select_for_update().get(pk=pruned.pk)
                holding.set()
                release_lock.wait(40)
        finally:
            connections.close_all()

    holder = threading.Thread(target=hold_the_old_run)
    holder.start()
    try:
        assert holding.wait(10)
        quick.request_run()
        slow.request_run()
        (scheduler,) = schedulers.start_live(1, "--grace", "60")
        schedulers.wait_for(
            lambda: hits("quick", "started") == hits("slow", "started") == 1,
            what="both runs to start",
        )
        schedulers.wait_for(blocked_delete, what="the loop to wait on the held row")
        quick_release.touch()
        schedulers.wait_for(lambda: hits("quick", "finished") == 1, what="the quick run to end")

        assert force_exit(schedulers, scheduler) < FORCED_EXIT_WITHIN, schedulers.outputs()
        statuses = dict(Run.objects.exclude(pk=pruned.pk).values_list("task__name", "status"))
        assert statuses == {"quick": RunStatus.SUCCEEDED, "slow": RunStatus.INTERRUPTED}, (
            schedulers.outputs()
        )
        assert SchedulerProcess.objects.get(pid=scheduler.pid).stopped_at is not None
    finally:
        release_lock.set()
        holder.join(30)


BLOCKED_DELETE = {
    "postgresql": """
        SELECT count(*) FROM pg_stat_activity
        WHERE wait_event_type = 'Lock' AND query LIKE 'DELETE FROM "django_posixcron_run"%%'
    """,
    "mysql": """
        SELECT count(*) FROM information_schema.processlist
        WHERE info LIKE 'DELETE FROM `django_posixcron_run`%%'
    """,
}


def blocked_delete() -> bool:
    with connection.cursor() as cursor:
        cursor.execute(BLOCKED_DELETE[connection.vendor])
        return bool(cursor.fetchone()[0])


def test_a_run_that_returned_during_the_grace_is_recorded_before_the_others_end(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    """A run whose callable returned is never marked lost: killed later in the grace (the
    orchestrator's SIGKILL, an OOM kill), the scheduler must already have recorded it."""
    quick, slow = tmp_path / "quick", tmp_path / "slow"
    schedulers.configure({"quick": waiter("quick", quick), "slow": waiter("slow", slow)})
    (scheduler,) = schedulers.start_live(1, "--grace", "60")
    for name in ("quick", "slow"):
        Task.objects.get(name=name).request_run()
    schedulers.wait_for(
        lambda: hits("quick", "started") == 1 and hits("slow", "started") == 1,
        what="both runs to start",
    )
    schedulers.expect_exit(scheduler)
    scheduler.signal(signal.SIGTERM)
    schedulers.wait_for(lambda: "no new claims" in scheduler.output(), what="the SIGTERM")

    quick.touch()
    schedulers.wait_for(
        lambda: Run.objects.filter(task__name="quick", status=RunStatus.SUCCEEDED).exists(),
        timeout=10,
        what="the returned run to be recorded while the other still runs",
    )
    assert Run.objects.get(task__name="slow").status == RunStatus.RUNNING
    scheduler.kill()
    slow.touch()
