"""The commands as an operator runs them: runscheduler --once, the refusal, schedulerstatus."""

from __future__ import annotations

import io
import logging
import sqlite3
import threading
from typing import Any

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import OperationalError, connection

from django_posixcron.models import Run, SchedulerProcess, Task
from django_posixcron.scheduler import Scheduler
from tests.harness.processes import only_on, runscheduler_with
from tests.harness.world import hits

pytestmark = pytest.mark.django_db(transaction=True)


def every_minute(
    name: str, func: str = "tests.testapp.jobs.record", **extra: Any
) -> dict[str, Any]:
    """A task due in the current minute whenever the command starts: it fires at once."""
    kwargs = {} if func == "tests.testapp.jobs.fail" else {"task_name": name}
    return {"schedule": "* * * * *", "callable": func, "kwargs": kwargs, "retry_delay": 60, **extra}


def runscheduler(*args: str) -> str:
    out = io.StringIO()
    call_command("runscheduler", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def status(*args: str) -> tuple[int, str]:
    out = io.StringIO()
    try:
        call_command("schedulerstatus", *args, stdout=out, stderr=io.StringIO())
    except CommandError as error:
        return error.returncode, out.getvalue() + str(error)
    return 0, out.getvalue()


def test_once_waits_out_a_write_lock_another_process_holds_on_sqlite(
    posixcron, monkeypatch, caplog
):
    """A file busy for a few seconds (another process's long write, a backup) made --once
    exit 1 at start-up, "The database is unavailable: database is locked", and the minute's
    occurrences never fired: the next invocation comes a minute later."""
    only_on("sqlite", why="SQLite's write lock on the whole file")
    posixcron({"ok": every_minute("ok")}, POLL_INTERVAL=1)
    # The busy timeout, 20 s for the suite, as a project might set it: 1 s.
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "timeout", 1)
    connection.close()
    holder = sqlite3.connect(
        connection.settings_dict["NAME"], isolation_level=None, check_same_thread=False
    )
    holder.execute("BEGIN IMMEDIATE")
    release = threading.Timer(4, lambda: holder.execute("ROLLBACK"))
    release.start()
    try:
        with caplog.at_level(logging.WARNING, logger="django_posixcron.scheduler"):
            out = runscheduler("--once")
    finally:
        release.join()
        holder.close()
    assert "Ran 1 task(s)" in out
    assert hits("ok") == 1
    waits = [r for r in caplog.records if getattr(r, "action", "") == "db_lock_timeout"]
    assert waits
    assert "database is locked" in waits[0].getMessage()


def test_a_read_only_sqlite_file_is_refused_at_start_up(posixcron, monkeypatch):
    """ "attempt to write a readonly database" (a file or directory this user cannot write)
    was waited for forever as an outage, an ERROR every 10 s, the scheduler never started."""
    only_on("sqlite", why="SQLite's read-only refusal")
    posixcron({"ok": every_minute("ok")}, POLL_INTERVAL=1)
    # Every connection opened from here on refuses writes, as one to a read-only file.
    monkeypatch.setitem(connection.settings_dict["OPTIONS"], "init_command", "PRAGMA query_only=1")
    connection.close()
    try:
        with pytest.raises(CommandError, match="refused the start-up: attempt to write a readonly"):
            runscheduler("--once")
        # The long-running scheduler: refused too, not waited for.
        scheduler = Scheduler(declarations={})

        def prepare() -> None:
            SchedulerProcess.objects.create(hostname="h", pid=1)

        # Bounded: waited for as an outage, it would retry until stopped.
        stop = threading.Timer(10, scheduler.request_stop)
        stop.start()
        try:
            with pytest.raises(OperationalError, match="readonly"):
                scheduler.until_reachable(prepare)
        finally:
            stop.cancel()
    finally:
        connection.close()


def test_once_fires_what_is_due_records_outcomes_and_exits_zero(posixcron):
    posixcron(
        {
            "ok": every_minute("ok"),
            "exits": every_minute("exits", "tests.testapp.jobs.raise_system_exit"),
            "interrupts": every_minute("interrupts", "tests.testapp.jobs.raise_keyboard_interrupt"),
        },
        POLL_INTERVAL=1,
    )
    runscheduler("--once")  # returns normally: task code cannot end the command

    outcome = dict(Run.objects.values_list("task__name", "status"))
    assert outcome == {"ok": "succeeded", "exits": "failed", "interrupts": "failed"}
    assert set(Run.objects.values_list("trigger", flat=True)) == {"cron"}
    assert "SystemExit" in Run.objects.get(task__name="exits").traceback
    assert "KeyboardInterrupt" in Run.objects.get(task__name="interrupts").traceback
    assert hits("ok") == hits("exits") == hits("interrupts") == 1
    exits = Task.objects.get(name="exits")
    assert exits.retry_at is not None
    assert exits.last_run_status == "failed"
    assert SchedulerProcess.objects.get().stopped_at is not None


def test_a_second_once_in_the_same_minute_does_not_fire_again(posixcron):
    posixcron({"ok": every_minute("ok")}, POLL_INTERVAL=1)
    runscheduler("--once")
    first = Run.objects.get()
    runscheduler("--once")
    # Unless the minute turned over between the two commands, nothing more ran; either way
    # no occurrence ran twice.
    scheduled = list(Run.objects.values_list("scheduled_for", flat=True))
    assert len(scheduled) == len(set(scheduled))
    assert first.scheduled_for in scheduled
    assert hits("ok") == len(scheduled)


def test_status_exit_codes(posixcron):
    posixcron({"ok": every_minute("ok"), "bad": every_minute("bad", "tests.testapp.jobs.fail")})
    # Nothing has ever run: no live scheduler.
    code, out = status()
    assert code != 0
    assert "no live scheduler" in out

    runscheduler("--once")
    # --once stopped its process: still no live scheduler, and "bad" is failing.
    code, out = status()
    assert code != 0
    assert "bad" in out

    live = Scheduler(grace=1)
    live.start()
    try:
        code, out = status("--ignore-failing")
        assert code == 0, out
        code, out = status()
        assert code != 0
        assert "failing" in out
        code, out = status("--json")
        assert '"healthy": false' in out
        assert '"bad"' in out
    finally:
        live.shutdown()


def test_manage_py_runscheduler_exits_non_zero_with_a_readable_message():
    proc = runscheduler_with("tests.acceptance.bad_settings", "--once")
    assert proc.returncode != 0
    assert "Traceback" not in proc.stderr
    assert "settings.POSIXCRON['TASKS']['nightly-report']['schedule']" in proc.stderr
    assert "'mon-fri'" in proc.stderr
    assert "use 1-5" in proc.stderr
    assert "settings.POSIXCRON['TASKS']['cleanup']['callable']" in proc.stderr
    assert "posixcron.E0" in proc.stderr
    assert "HINT" in proc.stderr


@pytest.mark.parametrize("command", ["runscheduler", "schedulerstatus"])
def test_version_names_this_package_and_django(command: str, capsys: Any) -> None:
    import django
    from django.core.management import load_command_class

    from django_posixcron import __version__

    parser = load_command_class("django_posixcron", command).create_parser("manage.py", command)
    with pytest.raises(SystemExit) as exit:
        parser.parse_args(["--version"])
    assert exit.value.code == 0
    expected = f"django-posixcron {__version__} (Django {django.get_version()})"
    assert capsys.readouterr().out.strip() == expected
