"""The process executor under real signals: the forced exit, a dead scheduler, a terminal's Ctrl-C.

DESIGN 6: children run "in their own process group, so a terminal's Ctrl-C reaches only the
scheduler", a second signal "kills the process executor's children", and "no run keeps
executing after the run is recorded as ended".
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest

from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task
from tests.harness.processes import Child, Schedulers, running, task
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

PROCESS = ("--executor", "process")


def spawner(folder: Path, seconds: float) -> dict[str, Any]:
    """A task whose run starts a grandchild, then leaves a `finished` file after `seconds`."""
    folder.mkdir()
    return task(
        "tests.testapp.jobs.spawn_and_sleep",
        kwargs={"directory": str(folder), "seconds": seconds},
    )


def started_pids(folder: Path) -> list[int]:
    """The pids of the run's process and of the grandchild it started, once it has."""
    marker = folder / "started"
    return [int(pid) for pid in marker.read_text().split()] if marker.exists() else []


def start_spawner(schedulers: Schedulers, folder: Path, seconds: float) -> tuple[Child, list[int]]:
    schedulers.configure({"spawner": spawner(folder, seconds)})
    (child,) = schedulers.start_live(1, *PROCESS)
    Task.objects.get(name="spawner").request_run()
    pids = schedulers.wait_for(lambda: started_pids(folder), what="the run to start")
    return child, pids


def test_a_second_sigterm_kills_the_run_and_its_processes_before_exiting(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    child, pids = start_spawner(schedulers, folder, seconds=4)
    schedulers.expect_exit(child)

    child.signal(signal.SIGTERM)
    schedulers.wait_for(
        lambda: "SIGTERM received: no new claims" in child.output(),
        what="the first SIGTERM to be handled",
    )
    forced_at = time.monotonic()
    child.signal(signal.SIGTERM)
    assert child.wait(timeout=10) == 1, schedulers.outputs()
    # DESIGN 6: "A second signal ends the process within 2 s".
    assert time.monotonic() - forced_at < 2.5, schedulers.outputs()

    # SIGKILL is delivered at once, but a grandchild may take a moment to die.
    schedulers.wait_for(
        lambda: not [pid for pid in pids if running(pid)],
        timeout=1,
        what="the run's processes to be gone",
    )
    run = Run.objects.get()
    assert run.status == RunStatus.INTERRUPTED, schedulers.outputs()
    assert "second signal" in run.error
    # Both processes are gone, so nothing can still write it.
    assert not (folder / "finished").exists()


def test_the_end_of_the_grace_stops_the_run_and_its_processes(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    folder = tmp_path / "run"
    schedulers.configure({"spawner": spawner(folder, seconds=30)})
    (child,) = schedulers.start_live(1, "--grace", "1", *PROCESS)
    Task.objects.get(name="spawner").request_run()
    pids = schedulers.wait_for(lambda: started_pids(folder), what="the run to start")
    schedulers.expect_exit(child)

    stopped_at = time.monotonic()
    child.signal(signal.SIGTERM)
    assert child.wait(timeout=20) == 0, schedulers.outputs()
    # The grace, then at most kill_after (5 s) for the group to go after its SIGTERM.
    assert time.monotonic() - stopped_at < 1 + 5 + 2, schedulers.outputs()

    schedulers.wait_for(
        lambda: not [pid for pid in pids if running(pid)],
        timeout=1,
        what="the run's processes to be gone",
    )
    run = Run.objects.get()
    assert run.status == RunStatus.INTERRUPTED, schedulers.outputs()
    assert "grace" in run.error
    assert not (folder / "finished").exists()


def test_a_killed_scheduler_leaves_no_run_executing(schedulers: Schedulers, tmp_path: Path) -> None:
    folder = tmp_path / "run"
    child, pids = start_spawner(schedulers, folder, seconds=6)
    schedulers.expect_exit(child)

    child.kill()

    schedulers.wait_for(
        lambda: not [pid for pid in pids if running(pid)],
        timeout=4,
        what="the run's processes to end with their scheduler",
    )
    assert not (folder / "finished").exists()
    assert f"the scheduler process {child.pid} is gone while run" in child.output()
    # Its run is left to the heartbeat rule (lost, then retried): none of it still executes.
    assert Run.objects.get().status == RunStatus.RUNNING


def test_a_task_may_use_multiprocessing_itself(schedulers: Schedulers, tmp_path: Path) -> None:
    result = tmp_path / "result"
    schedulers.configure(
        {"pool": task("tests.testapp.jobs.uses_multiprocessing", kwargs={"path": str(result)})}
    )
    (child,) = schedulers.start_live(1, *PROCESS)
    Task.objects.get(name="pool").request_run()

    schedulers.wait_for(
        lambda: Run.objects.exclude(status=RunStatus.RUNNING).exists(),
        what="the run to end",
    )
    run = Run.objects.get()
    assert (run.status, run.error) == (RunStatus.SUCCEEDED, ""), schedulers.outputs()
    assert result.read_text() == "1,2,3"
    schedulers.expect_exit(child)
    child.signal(signal.SIGTERM)
    assert child.wait() == 0


class ForegroundChild(Child):
    """A runscheduler started as a shell starts a foreground job: a process group of its own.

    Ctrl-C in a terminal sends SIGINT to that whole group.
    """

    def __init__(self, label: str, args: list[str], env: dict[str, str], log: Path) -> None:
        super().__init__(label, args, env, log, process_group=0)

    def ctrl_c(self) -> None:
        os.killpg(self.pid, signal.SIGINT)


def test_ctrl_c_in_a_terminal_lets_a_running_task_finish_within_the_grace(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    release = tmp_path / "release"
    schedulers.configure(
        {
            "blocker": task(
                "tests.testapp.jobs.wait_for_file",
                kwargs={"path": str(release), "task_name": "blocker"},
            )
        }
    )
    child = ForegroundChild(
        "scheduler-1", ["--grace", "20", *PROCESS], schedulers.env(), tmp_path / "fg.log"
    )
    schedulers.children.append(child)
    schedulers.wait_for(
        lambda: (
            SchedulerProcess.objects.filter(pid=child.pid).exists()
            and Task.objects.filter(name="blocker").exists()
        ),
        what="the scheduler to register and reconcile",
    )
    Task.objects.get(name="blocker").request_run()
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="blocker", label="started").exists(),
        what="the run to start",
    )
    schedulers.expect_exit(child)

    child.ctrl_c()
    schedulers.wait_for(
        lambda: "SIGINT received: no new claims" in child.output(),
        what="the scheduler to take the Ctrl-C as a first signal",
    )
    release.touch()

    assert child.wait(timeout=30) == 0, schedulers.outputs()
    run = Run.objects.get()
    assert (run.status, run.error) == (RunStatus.SUCCEEDED, ""), schedulers.outputs()
    assert Hit.objects.filter(task_name="blocker", label="finished").count() == 1


def test_a_process_forked_by_task_code_keeps_the_schedulers_signals_out(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    """The thread executor: a child forked by task code inherited the scheduler's wakeup fd,
    so the SIGTERM that Pool.terminate() sends each worker stopped the scheduler, and the
    handlers that do nothing, so the child never died of it."""
    ended = tmp_path / "child-ended"
    schedulers.configure(
        {
            "forks": task("tests.testapp.jobs.fork_and_terminate", kwargs={"path": str(ended)}),
            "after": task("tests.testapp.jobs.record", kwargs={"task_name": "after"}),
        }
    )
    (child,) = schedulers.start_live(1)
    Task.objects.get(name="forks").request_run()
    schedulers.wait_for(lambda: ended.exists(), what="the run to fork and reap its child")
    assert ended.read_text() == str(-signal.SIGTERM)  # the child died of its SIGTERM
    schedulers.wait_for(
        lambda: Run.objects.filter(task__name="forks", status=RunStatus.SUCCEEDED).exists(),
        what="the run to succeed",
    )

    # The scheduler heard nothing, and still runs what is asked of it.
    Task.objects.get(name="after").request_run()
    schedulers.wait_for(lambda: Hit.objects.filter(task_name="after").exists(), what="the next run")
    assert "received" not in child.output(), child.output()
    assert child.alive()
    schedulers.expect_exit(child)
    child.signal(signal.SIGTERM)
    assert child.wait(timeout=30) == 0, child.output()
