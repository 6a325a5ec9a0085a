"""Callables the process tests declare: each writes Hit rows from the task code itself."""

from __future__ import annotations

import time
from pathlib import Path

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
