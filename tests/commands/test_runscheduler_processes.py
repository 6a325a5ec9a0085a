"""`runscheduler --once`, `--check` and bad settings, as a deployment sees them: exit codes."""

from __future__ import annotations

import datetime as dt
import json
import os
import shutil
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection
from django.db.migrations.recorder import MigrationRecorder

from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task
from tests.harness.processes import (
    ROOT,
    YEARLY,
    Child,
    Schedulers,
    only_on,
    record_task,
    task,
)
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def test_once_fires_what_is_due_waits_for_it_and_exits_0(schedulers: Schedulers) -> None:
    # `* * * * *` matches the current minute, so the first-start rule makes it due at once.
    schedulers.configure(
        {
            "minutely": record_task("minutely", "* * * * *"),
            "broken": task("tests.testapp.jobs.fail", "* * * * *"),
            "yearly": record_task("yearly"),
        }
    )
    result = schedulers.run("--once")

    assert result.returncode == 0, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    statuses = dict(Run.objects.values_list("task__name", "status"))
    assert statuses == {"minutely": RunStatus.SUCCEEDED, "broken": RunStatus.FAILED}
    assert Hit.objects.filter(task_name="minutely").count() == 1
    # --once leaves no process behind that other schedulers would wait on.
    assert Task.objects.get(name="broken").retry_at is not None


def test_check_exits_1_while_the_database_differs_and_0_once_reconciled(
    schedulers: Schedulers,
) -> None:
    # Yearly schedules that cannot fall due while the test runs (not 1 January's either).
    yearly, other = YEARLY, YEARLY.replace("0 12 ", "0 13 ", 1)
    schedulers.configure({"nightly": record_task("nightly", yearly)})
    before = schedulers.run("--check")
    assert before.returncode == 1, before.stdout + before.stderr
    assert "nightly" in before.stdout + before.stderr
    assert "Reconciling 1 declared task would leave: 1 to create, 0 to update" in before.stdout
    assert "Reconciled" not in before.stdout
    assert not Task.objects.exists(), "--check must change nothing"

    assert schedulers.run("--once").returncode == 0
    same = schedulers.run("--check")
    assert same.returncode == 0, same.stdout + same.stderr

    schedulers.configure({"nightly": record_task("nightly", other)})
    changed = schedulers.run("--check")
    assert changed.returncode == 1, changed.stdout + changed.stderr
    assert "nightly" in changed.stdout + changed.stderr
    assert Task.objects.get(name="nightly").schedule == yearly
    assert not Run.objects.exists()


@pytest.mark.parametrize("args", [(), ("--once",), ("--check",)])
def test_a_settings_error_exits_non_zero_with_the_check_message_and_no_traceback(
    schedulers: Schedulers, args: tuple[str, ...]
) -> None:
    schedulers.configure({"every-five": record_task("every-five", "*/5 * * * *")})
    result = schedulers.run(*args)

    output = result.stdout + result.stderr
    assert result.returncode != 0, output
    assert "posixcron.E" in output
    assert "every-five" in output
    assert "Traceback" not in output
    assert not Task.objects.exists()


def test_once_says_the_database_is_unavailable_and_exits_1_without_a_traceback(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    missing = (
        str(tmp_path / "no-such-dir" / "db.sqlite3")
        if connection.vendor == "sqlite"
        else "posixcron_no_such_database"
    )
    schedulers.configure({"minutely": record_task("minutely", "* * * * *")}, db_name=missing)
    result = schedulers.run("--once")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "The database is unavailable" in result.stderr
    assert "Traceback" not in result.stderr
    [line] = [line for line in result.stderr.splitlines() if "is unavailable" in line]
    assert len(line) > len("CommandError: The database is unavailable: ")  # the reason
    assert not Run.objects.exists()


@pytest.fixture
def refusing_database(tmp_path: Path) -> Iterator[dict[str, Any]]:
    """Settings for a database that answers but refuses what the commands ask: on SQLite a
    file that is not a database, on PostgreSQL a role with no privilege on the app's tables
    (a deploy that gave the scheduler the web's read-only role, say)."""
    if connection.vendor == "sqlite":
        junk = tmp_path / "junk.sqlite3"
        junk.write_text("this is not a database\n" * 100)
        yield {"db_name": str(junk)}
        return
    only_on("sqlite", "postgresql", why="a role's privileges are PostgreSQL's here")
    role = f"posixcron_nobody_{os.getpid()}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} LOGIN")
    try:
        yield {"extra": {"DB_SETTINGS": {"USER": role, "PASSWORD": ""}}}
    finally:
        with connection.cursor() as cursor:
            cursor.execute(f"DROP ROLE {role}")


@pytest.mark.parametrize(
    "command",
    [("runscheduler",), ("runscheduler", "--once"), ("runscheduler", "--check")],
    ids=["loop", "once", "check"],
)
def test_a_database_that_refuses_the_commands_is_one_line_and_exit_1(
    schedulers: Schedulers, refusing_database: dict[str, Any], command: tuple[str, ...]
) -> None:
    # --once and --check caught connection errors only: a refusal (permission denied, "file
    # is not a database") ended them with the driver's traceback, where the loop's start-up
    # said it in one line.
    schedulers.configure({"minutely": record_task("minutely", "* * * * *")}, **refusing_database)
    result = schedulers.manage(*command)
    output = result.stdout + result.stderr
    assert result.returncode == 1, output
    assert "Traceback" not in output
    [line] = [line for line in result.stderr.splitlines() if line.startswith("CommandError")]
    refused = "refused the check" if "--check" in command else "refused the start-up"
    assert f"The database {refused}: " in line, output
    reason = "permission denied" if connection.vendor == "postgresql" else "not a database"
    assert reason in line, output


def test_a_read_only_postgresql_is_waited_for_at_start_up(schedulers: Schedulers) -> None:
    # A standby, or a primary a failover demoted, answers every write with "cannot execute
    # ... in a read-only transaction" (an InternalError, not a connection error): the
    # scheduler exited 1, "refused the start-up", into a restart loop under systemd or
    # Kubernetes, for as long as the database stayed read-only. MariaDB's read-only error
    # was waited out already.
    only_on("postgresql", why="read-only by a role's default_transaction_read_only")
    role = f"posixcron_standby_{os.getpid()}"
    with connection.cursor() as cursor:
        cursor.execute(f"CREATE ROLE {role} LOGIN")
        cursor.execute(f"GRANT ALL ON ALL TABLES IN SCHEMA public TO {role}")
        cursor.execute(f"GRANT ALL ON ALL SEQUENCES IN SCHEMA public TO {role}")
        cursor.execute(f"ALTER ROLE {role} SET default_transaction_read_only = on")
    try:
        schedulers.configure(
            {"minutely": record_task("minutely", "* * * * *")},
            extra={"DB_SETTINGS": {"USER": role, "PASSWORD": ""}},
        )
        child = schedulers.start()
        schedulers.wait_for(
            lambda: "the database refuses writes, read-only (attempt 2)" in child.output(),
            what="the read-only database to be waited for",
        )
        assert child.alive(), child.output()
        assert "Traceback" not in child.output()

        with connection.cursor() as cursor:
            cursor.execute(f"ALTER ROLE {role} SET default_transaction_read_only = off")
        schedulers.wait_for(
            lambda: "django-posixcron scheduler " in child.output(),
            what="the scheduler to start once the database accepts writes",
        )
        child.signal(signal.SIGTERM)
        assert child.wait() == 0, schedulers.outputs()
    finally:
        schedulers.close()
        with connection.cursor() as cursor:
            cursor.execute(f"DROP OWNED BY {role}")
            cursor.execute(f"DROP ROLE {role}")


def test_a_database_file_deleted_under_a_running_scheduler_is_said_with_the_migrate_hint(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    # SQLite creates an empty file where the database was: every tick then failed with
    # "no such table" and a traceback, as if it were a bug, and said nothing of migrate.
    only_on("sqlite", why="SQLite creates a deleted database file again, empty")
    database = tmp_path / "private.sqlite3"
    schedulers.configure({"yearly": record_task("yearly")}, db_name=str(database))
    migrated = schedulers.manage("migrate", "-v", "0")
    assert migrated.returncode == 0, migrated.stderr
    child = schedulers.start()
    schedulers.wait_for(
        lambda: "django-posixcron scheduler " in child.output(), what="the scheduler to start"
    )

    for path in tmp_path.glob("private.sqlite3*"):
        path.unlink()

    schedulers.wait_for(
        lambda: "answers without this app's tables" in child.output(),
        what="the missing tables to be said",
    )
    line = next(x for x in child.output().splitlines() if "without this app's tables" in x)
    assert "no such table: django_posixcron_" in line
    assert "run `manage.py migrate` for a new one" in line
    assert "unavailable" not in line  # it answered
    assert "Traceback" not in child.output()
    assert child.alive()  # waiting for the database, as for any outage

    # Migrated again: the scheduler goes on, without a restart.
    assert schedulers.manage("migrate", "-v", "0").returncode == 0
    schedulers.wait_for(
        lambda: "database reachable again" in child.output(), what="the scheduler to go on"
    )
    child.signal(signal.SIGTERM)
    assert child.wait() == 0, schedulers.outputs()


def test_schedulerstatus_says_a_refusal_is_not_an_outage(
    schedulers: Schedulers, refusing_database: dict[str, Any]
) -> None:
    schedulers.configure({"minutely": record_task("minutely", "* * * * *")}, **refusing_database)
    for args in ((), ("--json",)):
        result = schedulers.manage("schedulerstatus", *args)
        output = result.stdout + result.stderr
        assert result.returncode == 1, output
        assert "Traceback" not in output
        assert "database refused the status query: " in result.stderr, output
        assert "unavailable" not in output


def test_settings_without_posixcron_retire_nothing(schedulers: Schedulers) -> None:
    # A misspelt setting (POSIXCRONS = {...}) or the web's settings module given to the
    # scheduler declared no task: the scheduler started, retired every task and dropped the
    # retry a failed run was owed, with no word above INFO.
    schedulers.configure({"fails": task("tests.testapp.jobs.fail", "* * * * *", retry_delay=600)})
    first = schedulers.run("--once")
    assert first.returncode == 0, first.stdout + first.stderr
    schedulers.wait_for(
        lambda: Run.objects.filter(status=RunStatus.FAILED).exists(), what="the failed run"
    )
    owed = Task.objects.get(name="fails").retry_at
    assert owed is not None

    schedulers.configure({}, extra={"NO_POSIXCRON": True})
    for args in ((), ("--once",), ("--check",)):
        result = schedulers.run(*args)
        output = result.stdout + result.stderr
        assert result.returncode == 1, output
        assert "Traceback" not in output
        assert "settings.POSIXCRON is not set (posixcron.W004)" in result.stderr, output
    check = schedulers.manage("check")
    assert check.returncode == 0, check.stdout + check.stderr  # a warning, for the web too
    assert "posixcron.W004" in check.stderr
    fails = Task.objects.get(name="fails")
    assert fails.declared
    assert fails.retry_at == owed


def test_once_records_a_timeout_on_time_while_other_runs_wait_for_a_slot(
    schedulers: Schedulers,
) -> None:
    # With every slot busy and a task still due, --once woke only when a run ended or after
    # a heartbeat interval (10 s here): a run past its timeout was recorded seconds late.
    bounded = task("tests.testapp.jobs.sleep_for", "* * * * *", kwargs={"seconds": 30}, timeout=2)
    schedulers.configure({"bounded-1": bounded, "bounded-2": bounded}, POLL_INTERVAL=10)
    result = schedulers.run("--once", "--concurrency", "1")
    assert result.returncode == 0, result.stdout + result.stderr
    runs = Run.objects.all()
    assert {run.status for run in runs} == {RunStatus.TIMED_OUT}, runs
    assert len(runs) == 2
    for run in runs:
        assert run.finished_at is not None
        assert run.started_at is not None
        # Recorded near its 2 s, well before the next heartbeat-interval wake (10 s).
        assert run.finished_at - run.started_at < dt.timedelta(seconds=8), run


def test_schedulerstatus_piped_into_a_reader_that_stopped_says_only_the_schedulers_state(
    schedulers: Schedulers,
) -> None:
    # `schedulerstatus | head -1` printed a BrokenPipeError traceback and exited 1, healthy
    # or not: a shell check under `set -o pipefail` read it as a problem.
    schedulers.configure({f"task-{i}": record_task(f"task-{i}") for i in range(40)})
    for args, expected in ((("--json",), 1), ((), 1)):
        child = subprocess.Popen(
            [sys.executable, "-m", "django", "schedulerstatus", *args],
            cwd=ROOT,
            env=schedulers.env(),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
        )
        assert child.stdout is not None
        child.stdout.close()  # the reader is gone before the first line
        _out, err = child.communicate(timeout=60)
        stderr = err.decode()
        assert child.returncode == expected, stderr
        assert "Traceback" not in stderr
        assert "BrokenPipeError" not in stderr
        assert "no live scheduler" in stderr


def test_the_loop_waits_for_a_database_that_is_down_at_start_up(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    real = Path(str(connection.settings_dict["NAME"]))
    later = tmp_path / "appears-later"
    missing = str(later / real.name) if connection.vendor == "sqlite" else "posixcron_no_such_db"
    schedulers.configure({"minutely": record_task("minutely", "* * * * *")}, db_name=missing)
    child = schedulers.start()
    schedulers.wait_for(
        lambda: "database unavailable" in child.output(), what="the outage to be logged"
    )
    assert child.alive()
    if connection.vendor == "sqlite":
        # The database appears (a volume mounted late): the scheduler starts without a restart.
        later.symlink_to(real.parent, target_is_directory=True)
        schedulers.wait_for(
            lambda: (
                Task.objects.filter(name="minutely").exists()
                and child.pid in set(SchedulerProcess.objects.values_list("pid", flat=True))
            ),
            what="the scheduler to start once the database is there",
        )
        # Logged once start-up returns, a moment after its rows are committed.
        schedulers.wait_for(
            lambda: "database reachable again" in child.output(), what="the recovery to be logged"
        )
    schedulers.expect_exit(child)
    child.signal(signal.SIGTERM)
    assert child.wait() == 0, child.output()
    assert "Traceback" not in child.output()


def test_an_unmigrated_database_is_refused_with_the_command_to_run(
    schedulers: Schedulers,
) -> None:
    recorder = MigrationRecorder(connection)
    ours = [key for key in recorder.applied_migrations() if key[0] == "django_posixcron"]
    for app, name in ours:
        recorder.record_unapplied(app, name)
    try:
        schedulers.configure({"minutely": record_task("minutely", "* * * * *")})
        for args in ((), ("--once",), ("--check",)):
            result = schedulers.run(*args)
            assert result.returncode == 1, result.stdout + result.stderr
            assert "manage.py migrate" in result.stderr
            assert "0001_initial" in result.stderr
            assert "Traceback" not in result.stderr
    finally:
        for app, name in ours:
            recorder.record_applied(app, name)


def test_an_empty_database_gets_the_migrate_command_from_both_commands(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    only_on("sqlite", why="an empty database is a new file there")
    schedulers.configure(
        {"minutely": record_task("minutely", "* * * * *")}, db_name=str(tmp_path / "empty.db")
    )
    for result in (schedulers.run("--once"), schedulers.manage("schedulerstatus")):
        assert result.returncode == 1, result.stdout + result.stderr
        assert "lacks django_posixcron migrations" in result.stderr
        assert "run `manage.py migrate` first" in result.stderr
        assert "Traceback" not in result.stderr
    as_json = schedulers.manage("schedulerstatus", "--json")
    assert as_json.returncode == 1
    answer = json.loads(as_json.stdout)
    assert answer["healthy"] is False
    assert "lacks django_posixcron migrations" in answer["problems"][0]


def test_the_migrate_command_names_the_alias_the_routers_choose(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    """A plain `migrate` leaves an alias the routers keep the app on unmigrated."""
    only_on("sqlite", why="an empty database is a new file there")
    schedulers.configure(
        {"minutely": record_task("minutely", "* * * * *")},
        db_name=str(tmp_path / "cron.db"),
        extra={"EMPTY_DB_NAME": str(tmp_path / "default.db")},
    )
    for result in (schedulers.run("--once"), schedulers.manage("schedulerstatus")):
        assert result.returncode == 1, result.stdout + result.stderr
        assert "The database 'cron' lacks django_posixcron migrations" in result.stderr
        assert "run `manage.py migrate --database cron` first" in result.stderr
        assert "Traceback" not in result.stderr


def test_threads_task_code_leaves_running_keep_neither_once_nor_a_stopped_scheduler_alive(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    # The interpreter's exit waits for every non-daemon thread: one a task started in the
    # thread executor kept `--once` from ever exiting (a crontab's invocations piled up) and a
    # stopped scheduler alive after "scheduler stopped", until a second signal killed it.
    leaves = task(
        "tests.testapp.jobs.leave_thread_running",
        "* * * * *",  # matches the current minute: due at once on the first start
        kwargs={"directory": str(tmp_path), "seconds": 3600},
    )
    schedulers.configure({"leaves": leaves})
    result = schedulers.run("--once", timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr
    assert "exiting without waiting for 1 thread(s) task code left running" in result.stderr
    assert (tmp_path / "atexit").read_text() == "ran"  # logging's flush and the like still run
    assert Run.objects.get().status == RunStatus.SUCCEEDED

    (tmp_path / "atexit").unlink()
    [child] = schedulers.start_live(1)
    Task.objects.get(name="leaves").request_run()
    schedulers.wait_for(
        lambda: Run.objects.filter(status=RunStatus.SUCCEEDED).count() >= 2,
        what="the requested run to succeed",
    )
    child.signal(signal.SIGTERM)
    schedulers.expect_exit(child)
    assert child.wait(timeout=30) == 0
    assert "thread(s) task code left running" in child.output()
    assert (tmp_path / "atexit").read_text() == "ran"


def test_once_with_no_thread_left_running_says_nothing_of_threads(schedulers: Schedulers) -> None:
    # The scheduler's own threads have ended (or are daemons) when the command returns.
    schedulers.configure({"minutely": record_task("minutely", "* * * * *")})
    result = schedulers.run("--once")
    assert result.returncode == 0, result.stdout + result.stderr
    assert "thread(s)" not in result.stdout + result.stderr


def test_the_summary_and_what_tasks_print_reach_a_pipe_while_it_runs(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    # Without PYTHONUNBUFFERED, stdout to a pipe or a file is block-buffered: a log collector
    # saw the start-up summary, and what tasks print, only when the process exited (never
    # after a kill -9).
    schedulers.configure({"prints": task("tests.testapp.jobs.print_line", kwargs={"text": "hi"})})
    env = {k: v for k, v in schedulers.env().items() if k != "PYTHONUNBUFFERED"}
    child = Child("buffered", [], env, tmp_path / "buffered.log")
    schedulers.children.append(child)
    schedulers.wait_for(
        lambda: "django-posixcron scheduler " in child.output(), what="the start-up summary"
    )
    schedulers.wait_for(
        lambda: Task.objects.filter(name="prints").exists(), what="the task to be reconciled"
    )
    Task.objects.get(name="prints").request_run()
    schedulers.wait_for(lambda: "\nhi\n" in child.output(), what="what the task printed")
    child.signal(signal.SIGTERM)
    schedulers.expect_exit(child)
    assert child.wait() == 0, child.output()


def test_sighup_stops_it_gracefully(schedulers: Schedulers, tmp_path: Path) -> None:
    # SIGHUP (a closed terminal, an orchestrator's choice) killed it on the spot, without a
    # word, its running runs left to be found lost.
    release = tmp_path / "release"
    schedulers.configure(
        {
            "held": task(
                "tests.testapp.jobs.wait_for_file",
                kwargs={"path": str(release), "task_name": "held"},
            )
        }
    )
    [child] = schedulers.start_live(1)
    Task.objects.get(name="held").request_run()
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="held", label="started").exists(),
        what="the run to start",
    )
    child.signal(signal.SIGHUP)
    schedulers.wait_for(lambda: "SIGHUP" in child.output(), what="the stop to be logged")
    release.touch()
    schedulers.expect_exit(child)
    assert child.wait() == 0, child.output()
    assert Run.objects.get().status == RunStatus.SUCCEEDED
    assert SchedulerProcess.objects.get(pid=child.pid).stopped_at is not None


def test_as_pid_1_it_says_to_run_it_under_an_init(schedulers: Schedulers) -> None:
    # As PID 1 of a container it reaps no orphan and ignores signals it has no handler for
    # yet: the fix is an init, and the scheduler says so.
    unshare = shutil.which("unshare")
    if unshare is None or os.getuid() != 0:
        pytest.skip("needs unshare(1) and root to start a process as PID 1")
    schedulers.configure({"job": record_task("job")})
    as_pid_1 = [unshare, "--pid", "--fork", "--mount-proc"]
    result = subprocess.run(
        [*as_pid_1, sys.executable, "-m", "django", "runscheduler", "--check"],
        cwd=ROOT,
        env=schedulers.env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    if result.returncode not in (0, 1) or "unshare:" in result.stderr:
        pytest.skip(f"unshare cannot start a PID namespace here: {result.stderr.strip()}")
    assert "running as PID 1 (a container without an init)" in result.stderr, result.stderr
    assert "run it under an init (docker run --init, tini" in result.stderr
