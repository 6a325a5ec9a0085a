"""The process executor: task code in a child process that a timeout really stops."""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import threading
import time
from pathlib import Path

import pytest
from django.db import connection

from django_posixcron.declarations import TaskDeclaration
from django_posixcron.executors import ProcessExecutor, TaskCodeError
from django_posixcron.models import Run, RunStatus
from tests.harness.processes import running
from tests.harness.tasks import T0
from tests.harness.waiting import wait_until
from tests.testapp.models import Hit

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.mark.parametrize(
    ("path", "status", "error"),
    [
        ("tests.testapp.jobs.noop", RunStatus.SUCCEEDED, ""),
        ("tests.testapp.jobs.fail", RunStatus.FAILED, "RuntimeError: boom"),
        ("tests.testapp.jobs.exit_now", RunStatus.FAILED, "SystemExit: 3"),
    ],
)
def test_outcomes_come_back_from_the_child(tasks, make_scheduler, path, status, error):
    tasks(callable_path=path)
    scheduler = make_scheduler(executor=ProcessExecutor(2))
    scheduler.tick(T0)
    assert scheduler.wait_idle(timeout=60)

    run = Run.objects.get()
    assert (run.status, run.error) == (status, error)
    if status == RunStatus.FAILED:
        assert "Traceback" in run.traceback


def started_pids(folder: Path) -> list[int]:
    marker = folder / "started"
    return [int(pid) for pid in marker.read_text().split()] if marker.exists() else []


def test_a_timeout_stops_the_run_and_the_processes_it_started(tasks, make_scheduler, tmp_path):
    tasks(
        callable_path="tests.testapp.jobs.spawn_and_sleep",
        kwargs={"directory": str(tmp_path), "seconds": 120},
        timeout=1,
    )
    executor = ProcessExecutor(1, kill_after=2)
    scheduler = make_scheduler(executor=executor)
    run = scheduler.tick(T0).started[0]
    pids = wait_until(lambda: started_pids(tmp_path), 30, "the run to start its grandchild")

    result = scheduler.tick(T0 + dt.timedelta(seconds=2))

    assert [r.pk for r in result.timed_out] == [run.pk]
    # The run's thread returns once it has stopped the group and reaped the child; the
    # outcome is written then (here by wait_idle, in the loop by its next tick).
    assert scheduler.wait_idle(10)
    assert not executor._children
    wait_until(lambda: not any(running(pid) for pid in pids), 10, "the whole group to be gone")
    assert not (tmp_path / "finished").exists()
    run.refresh_from_db()
    assert run.status == RunStatus.TIMED_OUT
    assert run.error == "Timed out after 0:00:01."


@pytest.mark.parametrize("ending", ["timeout", "grace"])
def test_a_stopped_run_is_recorded_ended_only_once_its_process_is_gone(
    tasks, make_scheduler, tmp_path, ending
):
    # "No run keeps executing after the run is recorded as ended": recorded timed_out (or
    # interrupted) while its process still cleans up, its retry could start beside it.
    tasks(
        callable_path="tests.testapp.jobs.cleans_up_slowly",
        kwargs={"directory": str(tmp_path), "cleanup": 1.5},
        timeout=1 if ending == "timeout" else None,
        retry_delay=1,
    )
    scheduler = make_scheduler(executor=ProcessExecutor(1, kill_after=5))
    run = scheduler.tick(T0).started[0]
    wait_until(lambda: (tmp_path / "started").exists(), 30, "the run to start")

    if ending == "timeout":
        scheduler.tick(T0 + dt.timedelta(seconds=2))
        # Its process is cleaning up: the run is still running, and blocks overlap=skip.
        assert Run.objects.get(pk=run.pk).status == RunStatus.RUNNING
        assert scheduler.wait_idle(10)
    else:
        scheduler.runs.interrupt_remaining("Interrupted.", scheduler.now)
        scheduler.runs.flush()

    assert (tmp_path / "cleaned").exists()
    run.refresh_from_db()
    assert run.status == (RunStatus.TIMED_OUT if ending == "timeout" else RunStatus.INTERRUPTED)
    assert run.finished_at is not None
    assert run.duration is not None
    assert run.duration >= dt.timedelta(seconds=1.5)  # it ended when its clean-up did


def test_a_run_that_returned_ends_without_waiting_for_threads_it_left(
    tasks, make_scheduler, tmp_path
):
    # The interpreter's exit joins non-daemon threads: the run went on after its callable
    # had returned, and was recorded timed_out past its timeout (or its duration stretched).
    tasks(
        callable_path="tests.testapp.jobs.leave_thread_running",
        kwargs={"directory": str(tmp_path), "seconds": 60},
        timeout=10,
    )
    scheduler = make_scheduler(executor=ProcessExecutor(1))
    scheduler.tick(T0)
    assert scheduler.wait_idle(timeout=30)
    run = Run.objects.get()
    assert run.status == RunStatus.SUCCEEDED
    assert run.duration is not None
    assert run.duration < dt.timedelta(seconds=10)
    # Its atexit handlers ran (an error tracker's flush, logging's).
    assert (tmp_path / "atexit").read_text() == "ran"


@pytest.mark.parametrize(
    ("path", "how"),
    [
        ("leave_atomic_open", "an atomic block it never exited"),
        ("leave_autocommit_off", "autocommit turned off and no commit"),
    ],
)
def test_a_run_that_leaves_a_transaction_open_in_its_process_is_told_so(
    tasks, make_scheduler, capfd, monkeypatch, path, how
):
    # The run's process closed its connections without a word: its writes were rolled back
    # and the run read as a plain success.
    monkeypatch.setenv("DATABASE_URL", child_database_url())  # the run's process writes there
    tasks(callable_path=f"tests.testapp.jobs.{path}", kwargs={"task_name": "open"})
    scheduler = make_scheduler(executor=ProcessExecutor(1))
    scheduler.tick(T0)
    assert scheduler.wait_idle(timeout=60)
    assert Run.objects.get().status == RunStatus.SUCCEEDED
    assert not Hit.objects.exists()  # rolled back
    assert f"left a transaction open on database 'default' ({how})" in capfd.readouterr().err


def test_a_run_that_leaves_a_transaction_open_is_told_so_under_a_root_only_logging(
    tasks, make_scheduler, capfd, monkeypatch
):
    # The run's process imports the executors before django.setup() configures logging: a
    # LOGGING with disable_existing_loggers=True disabled their loggers there, and the warning
    # was lost, where the scheduler's own process (which imports them after) logs it.
    monkeypatch.setenv("DATABASE_URL", child_database_url())
    monkeypatch.setenv("DJANGO_SETTINGS_MODULE", "tests.harness.root_logging_settings")
    tasks(callable_path="tests.testapp.jobs.leave_atomic_open", kwargs={"task_name": "open"})
    scheduler = make_scheduler(executor=ProcessExecutor(1))
    scheduler.tick(T0)
    assert scheduler.wait_idle(timeout=60)
    assert Run.objects.get().status == RunStatus.SUCCEEDED
    assert "left a transaction open on database 'default'" in capfd.readouterr().err


def test_a_run_whose_connection_close_fails_in_its_process_still_reports_success(
    tasks, make_scheduler, capfd, monkeypatch
):
    # The failed close (MySQL) went up through the run's process before it reported: a run
    # that had succeeded was recorded failed, "ended without reporting".
    monkeypatch.setenv("DATABASE_URL", child_database_url())
    tasks(callable_path="tests.testapp.jobs.close_driver_connection", kwargs={"task_name": "c"})
    scheduler = make_scheduler(executor=ProcessExecutor(1))
    scheduler.tick(T0)
    assert scheduler.wait_idle(timeout=60)
    assert Run.objects.get().status == RunStatus.SUCCEEDED
    assert Hit.objects.filter(task_name="c").count() == 1
    if connection.vendor == "mysql":
        assert "closing the connection to database 'default' after run" in capfd.readouterr().err


def child_database_url() -> str:
    """DATABASE_URL for tests.settings in a run's process: the test database itself."""
    s = connection.settings_dict
    if connection.vendor == "sqlite":
        return f"sqlite:///{s['NAME']}"
    scheme = {"postgresql": "postgres", "mysql": "mysql"}[connection.vendor]
    port = s["PORT"] or (5432 if connection.vendor == "postgresql" else 3306)
    credentials = f"{s['USER']}:{s['PASSWORD']}" if s["PASSWORD"] else s["USER"]
    return f"{scheme}://{credentials}@{s['HOST'] or '127.0.0.1'}:{port}/{s['NAME']}"


def test_an_exception_whose_str_raises_in_the_child_is_recorded_with_its_traceback(
    tasks, make_scheduler
):
    tasks(callable_path="tests.testapp.jobs.raise_interrupting_str")
    scheduler = make_scheduler(executor=ProcessExecutor(1))
    scheduler.tick(T0)
    assert scheduler.wait_idle(timeout=60)
    run = Run.objects.get()
    assert run.status == RunStatus.FAILED
    assert run.error == "InterruptingStrError: <str() of the exception raised an error>"
    assert "raise InterruptingStrError" in run.traceback


def test_a_task_may_use_multiprocessing_itself(tasks, make_scheduler, tmp_path):
    result = tmp_path / "result"
    tasks(callable_path="tests.testapp.jobs.uses_multiprocessing", kwargs={"path": str(result)})
    scheduler = make_scheduler(executor=ProcessExecutor(1))
    scheduler.tick(T0)
    assert scheduler.wait_idle(timeout=60)

    run = Run.objects.get()
    assert (run.status, run.error) == (RunStatus.SUCCEEDED, "")
    assert result.read_text() == "1,2,3"


def spawner(name: str, folder: Path, seconds: float) -> TaskDeclaration:
    """A task whose process starts a grandchild, both recording their pids in `folder`."""
    return TaskDeclaration(
        name=name,
        schedule="0 * * * *",
        callable_path="tests.testapp.jobs.spawn_and_sleep",
        kwargs={"directory": str(folder), "seconds": seconds},
        retry_delay=dt.timedelta(seconds=1),
        overlap="skip",
        timeout=None,
        timezone="UTC",
    )


def test_kill_all_kills_every_group_at_once(tmp_path):
    executor = ProcessExecutor(2)
    folders = [tmp_path / "a", tmp_path / "b"]
    for key, folder in enumerate(folders):
        folder.mkdir()
        declaration = spawner(f"t{key}", folder, 120)
        executor.submit(key, functools.partial(_invoke_quietly, executor, key, declaration))
    pids = [
        pid
        for folder in folders
        for pid in wait_until(functools.partial(started_pids, folder), 30, "both runs to start")
    ]

    began = time.monotonic()
    executor.kill_all()

    assert time.monotonic() - began < 2
    # SIGKILL is delivered at once, but a grandchild may take a moment to die.
    wait_until(lambda: not any(running(pid) for pid in pids), 1, "every process to be gone")
    assert executor.wait_idle(5)
    assert not any((folder / "finished").exists() for folder in folders)


def test_a_run_stopped_before_its_process_starts_never_starts(tmp_path):
    # Timed out or interrupted while its thread had not started its process yet: none starts.
    executor = ProcessExecutor(1)
    declaration = spawner("late", tmp_path, 1)
    go = threading.Event()
    errors = []

    def job() -> None:
        go.wait(10)
        try:
            executor.invoke(7, declaration)
        except TaskCodeError as exc:
            errors.append(exc.error)

    executor.submit(7, job)
    executor.stop(7)
    go.set()
    assert executor.wait_idle(10)
    assert errors == ["Stopped before its process started."]
    assert started_pids(tmp_path) == []


def _invoke_quietly(executor: ProcessExecutor, key: int, declaration: TaskDeclaration) -> None:
    with contextlib.suppress(TaskCodeError):
        executor.invoke(key, declaration)


def test_task_code_in_the_child_uses_the_test_database(tasks, make_scheduler):
    # The child read the settings module afresh: under a test run, its task code wrote to
    # the database the settings name (a developer's own), not to the test database.
    tasks(callable_path="tests.testapp.jobs.record", kwargs={"task_name": "in-child"})
    scheduler = make_scheduler(executor=ProcessExecutor(1))
    scheduler.tick(T0)
    assert scheduler.wait_idle(timeout=60)

    run = Run.objects.get()
    assert (run.status, run.error) == (RunStatus.SUCCEEDED, "")
    assert Hit.objects.filter(task_name="in-child").count() == 1
