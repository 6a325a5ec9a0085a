"""Callables the process tests declare: each writes Hit rows from the task code itself."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from django_posixcron.signals import run_finished
from tests.testapp.models import Hit


def wait_for_file(
    path: str,
    task_name: str = "blocker",
    timeout: float = 120.0,
    record_end: bool = True,
    done_path: str = "",
) -> None:
    """Record a start, block until `path` exists (bounded), then record the end.

    With `record_end` false the end is signalled only by creating `done_path`, without the
    database, so a test can end a run while the database is down.
    """
    Hit.objects.create(task_name=task_name, label="started")
    deadline = time.monotonic() + timeout
    while not Path(path).exists():
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.05)
    if done_path:
        Path(done_path).touch()
    if record_end:
        Hit.objects.create(task_name=task_name, label="finished")


def pid_then_wait(path: str, pid_file: str, task_name: str = "child") -> None:
    """Write this process's pid to `pid_file`, record a start, block until `path` exists."""
    import os

    Path(pid_file).write_text(str(os.getpid()))
    wait_for_file(path, task_name=task_name, timeout=60.0)


def _slow_receiver(sender: object, run: Any, **kwargs: object) -> None:
    """Block on a file named in the task's kwargs: a receiver slower than the stale limit."""
    gate = run.task.kwargs.get("receiver_gate")
    if not gate or run.status == "running":
        return
    Hit.objects.create(task_name=run.task.name, label="receiver-blocked")
    deadline = time.monotonic() + 60.0
    while not Path(gate).exists() and time.monotonic() < deadline:
        time.sleep(0.05)


def with_receiver_gate(receiver_gate: str, task_name: str = "slow-receiver") -> None:
    """Record one hit; the receiver connected below blocks on `receiver_gate` afterwards."""
    Hit.objects.create(task_name=task_name, label="ran")


run_finished.connect(_slow_receiver, dispatch_uid="tests.processes.jobs.slow_receiver")


def wait_then_signal(path: str, task_name: str, record_signals: bool = True) -> None:
    """As wait_for_file; the receiver below records each run_finished for this task."""
    wait_for_file(path, task_name=task_name, timeout=60.0)


def _record_signal(sender: object, run: Any, **kwargs: object) -> None:
    if run.task.kwargs.get("record_signals"):
        Hit.objects.create(task_name=run.task.name, label=f"signal:{run.status}")


run_finished.connect(_record_signal, dispatch_uid="tests.processes.jobs.record_signal")
