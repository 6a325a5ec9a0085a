"""A Django Tasks worker whose database restarts while it executes a handed-off run."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from django_posixcron.models import Run, RunStatus, Task
from tests.harness.processes import Schedulers, only_on, task
from tests.harness.proxy import Relay, relay_to_test_database
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.long, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def relay() -> Iterator[Relay]:
    only_on("postgresql", "mysql", why="a server the relay can stand for")
    with relay_to_test_database() as relay:
        yield relay


def test_a_run_that_returned_after_a_database_restart_is_recorded_once(
    schedulers: Schedulers, relay: Relay, tmp_path: Path
) -> None:
    # The worker wrote the outcome on the connection the restart had broken: the write
    # failed at once, the success was dropped, and the run ended lost and ran again.
    release = tmp_path / "release"
    long_run = task(
        "tests.testapp.jobs.wait_for_file",
        # Its end is a file, not a row: the task's own queries after the restart are its own.
        kwargs={"path": str(release), "task_name": "long", "record_end": False},
        enqueue=True,
    )
    schedulers.configure({"long": long_run})
    schedulers.start_live(1)  # the scheduler reaches the database directly
    schedulers.configure({"long": long_run}, extra={"DB_PORT": relay.port})
    worker = schedulers.start_worker()  # the worker through the relay
    Task.objects.get(name="long").request_run()
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="long", label="started").exists(),
        what="the worker to start the run",
    )
    relay.cut()
    relay.restore()  # back at once; the worker's connection is broken all the same
    release.touch()
    schedulers.wait_for(
        lambda: Run.objects.filter(status=RunStatus.SUCCEEDED).exists(),
        what="the run's outcome",
    )
    run = Run.objects.get()  # one run: no retry
    assert run.status == RunStatus.SUCCEEDED, (run.error, worker.output())
    assert Hit.objects.filter(task_name="long", label="started").count() == 1
