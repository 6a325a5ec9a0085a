"""The runscheduler command in-process: arguments, checks, --check and --once."""

from __future__ import annotations

import datetime as dt
import io

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError
from django.db import ProgrammingError, connection, connections
from django.utils import timezone as dj_timezone

from django_posixcron.db import database_now
from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task
from django_posixcron.reconcile import reconcile
from tests.factories import TaskFactory
from tests.harness.charsets import utf8mb3_columns
from tests.harness.processes import YEARLY
from tests.testapp.models import Hit

pytestmark = pytest.mark.django_db(transaction=True)

EVERY_MINUTE = {
    "every-minute": {
        "schedule": "* * * * *",
        "callable": "tests.testapp.jobs.record",
        "kwargs": {"task_name": "every-minute"},
        "retry_delay": 60,
    }
}


def run(*args: str) -> str:
    out = io.StringIO()
    call_command("runscheduler", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--poll-interval", "0"], "must be a positive number of seconds"),
        (["--poll-interval", "soon"], "expected a number of seconds"),
        (["--concurrency", "0"], "must be at least 1"),
        (["--concurrency", "2.5"], "expected a whole number"),
        (["--grace", "-1"], "must be a finite number of seconds, zero or more"),
        (["--grace", "inf"], "must be a finite number of seconds, zero or more, got 'inf'"),
    ],
)
def test_bad_arguments_are_refused(args, message):
    with pytest.raises(CommandError, match=message):
        run(*args)


@pytest.mark.django_db(transaction=True)
def test_the_frequency_guard_applies_to_the_poll_interval_option(posixcron):
    posixcron(
        {
            "minutely": {"schedule": "* * * * *", "callable": "tests.testapp.jobs.noop"},
            "hourly": {"schedule": "0 * * * *", "callable": "tests.testapp.jobs.noop"},
        }
    )
    with pytest.raises(CommandError) as refused:
        run("--once", "--poll-interval", "90")
    message = str(refused.value)
    assert message.startswith("--poll-interval 90 is longer than the shortest interval")
    assert "minutely (* * * * *)" in message
    assert "hourly" not in message
    assert "posixcron.E024" in message
    run("--once", "--poll-interval", "60")  # exactly the shortest interval is fine


def test_it_refuses_to_start_on_system_check_errors(posixcron):
    posixcron({"broken": {"schedule": "*/5 * * * *", "callable": "tests.testapp.jobs.noop"}})
    with pytest.raises(SystemCheckError):
        run("--once")
    assert not SchedulerProcess.objects.exists()


def test_check_exits_1_when_the_database_differs_and_changes_nothing(posixcron):
    posixcron(EVERY_MINUTE)
    with pytest.raises(CommandError) as excinfo:
        run("--check")
    assert excinfo.value.returncode == 1
    assert not Task.objects.exists()

    run("--once")
    assert "nothing to reconcile" in run("--check")


def test_check_words_the_changes_it_would_make_as_pending(posixcron):
    other = {"other": {**EVERY_MINUTE["every-minute"], "kwargs": {"task_name": "other"}}}
    posixcron({**EVERY_MINUTE, **other})
    run("--once")
    posixcron(EVERY_MINUTE)

    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("runscheduler", "--check", stdout=out, stderr=io.StringIO())
    assert out.getvalue().startswith("task to retire 'other': "), out.getvalue()
    assert "1 to retire" in out.getvalue()
    assert Task.objects.get(name="other").declared

    run("--once")
    posixcron({**EVERY_MINUTE, **other})
    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("runscheduler", "--check", stdout=out, stderr=io.StringIO())
    assert out.getvalue().startswith("task to restore 'other': "), out.getvalue()


def test_check_counts_the_next_runs_from_the_database_clock(posixcron, monkeypatch):
    if connection.vendor == "sqlite":
        pytest.skip("SQLite has no clock of its own: this host's is the one")
    # Due in two minutes by the database's clock, a time this host's clock (five minutes
    # ahead) has passed today: --check must say today, as the scheduler will set it.
    due = (database_now("default") + dt.timedelta(minutes=2)).replace(second=0, microsecond=0)
    daily = {**EVERY_MINUTE["every-minute"], "schedule": f"{due.minute} {due.hour} * * *"}
    posixcron({"daily": {**daily, "timezone": "UTC"}})
    host = dj_timezone.now
    monkeypatch.setattr(dj_timezone, "now", lambda: host() + dt.timedelta(minutes=5))

    out = io.StringIO()
    with pytest.raises(CommandError):
        call_command("runscheduler", "--check", stdout=out, stderr=io.StringIO())

    assert f"next run {due:%Y-%m-%dT%H:%M}" in out.getvalue(), out.getvalue()


def test_once_fires_everything_due_even_with_fewer_slots_than_tasks(posixcron):
    # From system cron every minute: what one invocation leaves due is claimed by the next
    # one after its next occurrence, which would then never fire.
    names = [f"job-{i}" for i in range(7)]
    posixcron(
        {name: {**EVERY_MINUTE["every-minute"], "kwargs": {"task_name": name}} for name in names}
    )

    # Even across a minute boundary: the two claimed first, due again once it turns, are
    # the next invocation's.
    out = run("--once", "--concurrency", "2")

    assert "Ran 7 task(s), skipped 0; exiting." in out
    runs = Run.objects.all()
    assert sorted(runs.values_list("task__name", flat=True)) == names
    assert {run.status for run in runs} == {RunStatus.SUCCEEDED}
    assert sorted(Hit.objects.values_list("task_name", flat=True)) == names


def test_once_prints_nothing_at_verbosity_0(posixcron):
    # System cron mails whatever a command prints: with --once every minute, the start-up
    # summary and the "Ran" line were a mail a minute, and -v 0 (Django's "minimal output")
    # did not stop them.
    posixcron(EVERY_MINUTE)

    assert run("--once", "--verbosity", "0") == ""
    assert Run.objects.get().status == RunStatus.SUCCEEDED


def test_once_leaves_what_fell_due_after_its_first_tick_to_the_next_invocation(posixcron):
    # One slot, two tasks due: the second is claimed when the first's run ends. The first
    # asks for a run of a third task meanwhile; due after the first tick, it is the next
    # invocation's, as the next minute's occurrences are.
    yearly = {"schedule": YEARLY, "retry_delay": 60}  # never due now, even on 1 January
    posixcron(
        {
            "requester": {
                **yearly,
                "callable": "tests.testapp.jobs.request_run_of",
                "kwargs": {"task_name": "asked"},
            },
            "second": {**yearly, "callable": "tests.testapp.jobs.record"},
            "asked": {**yearly, "callable": "tests.testapp.jobs.record"},
        }
    )
    reconcile()
    now = database_now(connection.alias)
    Task.objects.get(name="requester").request_run(now - dt.timedelta(minutes=2))
    Task.objects.get(name="second").request_run(now - dt.timedelta(minutes=1))

    out = run("--once", "--concurrency", "1")

    assert "Ran 2 task(s), skipped 0; exiting." in out
    assert sorted(Run.objects.values_list("task__name", flat=True)) == ["requester", "second"]
    asked = Task.objects.get(name="asked")
    assert asked.run_requested_at is not None
    assert asked.run_requested_at > now

    run("--once")
    assert Run.objects.get(task=asked).status == RunStatus.SUCCEEDED


def test_once_reconciles_fires_what_is_due_waits_and_exits(posixcron):
    posixcron(EVERY_MINUTE)

    out = run("--once", "--poll-interval", "1")

    assert "every-minute: * * * * *" in out
    assert f"{connection.vendor}" in out.lower() or "MariaDB" in out
    run_ = Run.objects.get()
    assert run_.status == RunStatus.SUCCEEDED
    assert Hit.objects.filter(task_name="every-minute").count() == 1
    process = SchedulerProcess.objects.get()
    assert process.stopped_at is not None
    assert run_.process == process


@pytest.mark.skipif(connection.vendor != "mysql", reason="MariaDB/MySQL only")
def test_old_mariadb_is_refused_with_a_clear_message(monkeypatch):
    wrapper = connections["default"]  # the wrapper itself: the command asks it by alias
    wrapper.ensure_connection()
    monkeypatch.setitem(wrapper.__dict__, "mysql_version", (10, 5, 9))
    monkeypatch.setitem(wrapper.__dict__, "mysql_is_mariadb", True)
    with pytest.raises(CommandError, match=r"SKIP LOCKED, which MariaDB has from 10\.6"):
        run("--once")


def test_once_with_the_process_executor(posixcron):
    posixcron(
        {"noop": {"schedule": "* * * * *", "callable": "tests.testapp.jobs.noop", "timeout": 60}}
    )

    run("--once", "--executor", "process")

    assert Run.objects.get().status == RunStatus.SUCCEEDED


@pytest.mark.parametrize("count", [0, 3, 103])
def test_the_start_up_summary_lists_the_first_hundred_tasks_then_how_many_more(posixcron, count):
    from django.test.utils import CaptureQueriesContext

    from django_posixcron.management.commands.runscheduler import SUMMARY_TASKS, Command
    from django_posixcron.reconcile import reconcile
    from django_posixcron.scheduler import Scheduler

    posixcron(
        {
            f"task-{i:03d}": {"schedule": "0 3 * * *", "callable": "tests.testapp.jobs.noop"}
            for i in range(count)
        }
    )
    # Not at the real time: in the minute 03:00 UTC a task created then fires at once.
    reconcile(now=dt.datetime(2086, 1, 7, 10, 0, tzinfo=dt.UTC))
    Task.objects.filter(name="task-001").update(paused=True)
    # Back after downtime: its due time is behind, and it fires now, not "next" at a past time.
    behind = dt.datetime(2020, 1, 1, 3, 0, 0, 250_000, tzinfo=dt.UTC)
    Task.objects.filter(name="task-002").update(next_run_at=behind, due_at=behind)
    scheduler = Scheduler(grace=0)
    scheduler.start()
    out = io.StringIO()
    with CaptureQueriesContext(connection) as queries:
        Command(stdout=out)._summary(scheduler, "the database")
    scheduler.shutdown()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("django-posixcron scheduler ")
    listed = [line for line in lines if line.startswith("  task-")]
    assert len(listed) == min(count, SUMMARY_TASKS)
    if count == 0:
        assert lines[1:] == ["No tasks declared in settings.POSIXCRON['TASKS']."]
    else:
        assert listed[0].startswith("  task-000: 0 3 * * * -> next ")
        assert listed[1] == "  task-001: 0 3 * * * -> paused"
    if count > 2:
        assert listed[2].startswith("  task-002: 0 3 * * * -> due now (since 2020-01-01T")
        assert ".250000" not in listed[2]  # to the second
    if count > SUMMARY_TASKS:
        assert lines[-1] == "  ... and 3 more; manage.py schedulerstatus lists every task."
    else:
        assert "more; manage.py" not in lines[-1]
    assert len(queries) <= 2  # the first hundred, and the count past them


def test_the_start_up_summary_survives_the_database_going_away_after_start_up(posixcron):
    """Between a finished start-up and its summary, the task table can become unreadable.

    CI saw it: the process died with a traceback from the summary's query; the summary is
    only informative, so it says so and the loop (which waits outages out) goes on.
    """
    from django_posixcron.management.commands.runscheduler import Command
    from django_posixcron.reconcile import reconcile
    from django_posixcron.scheduler import Scheduler

    posixcron({"nightly": {"schedule": "0 3 * * *", "callable": "tests.testapp.jobs.noop"}})
    reconcile()
    scheduler = Scheduler(grace=0)
    scheduler.start()
    table = Task._meta.db_table
    out = io.StringIO()
    with connection.schema_editor() as editor:
        editor.alter_db_table(Task, table, f"{table}_away")
    try:
        Command(stdout=out)._summary(scheduler, "the database")
    finally:
        with connection.schema_editor() as editor:
            editor.alter_db_table(Task, f"{table}_away", table)
        scheduler.shutdown()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("django-posixcron scheduler ")
    assert lines[1].startswith("The task list could not be read: "), lines
    assert table in lines[1]
    assert len(lines) == 2


def test_the_start_up_summary_marks_what_another_deploy_declares(posixcron):
    # An old release restarted during a rollout listed the new release's definitions as if
    # it were going to run them.
    from django_posixcron.management.commands.runscheduler import Command
    from django_posixcron.reconcile import reconcile
    from django_posixcron.scheduler import Scheduler

    job = {"callable": "tests.testapp.jobs.noop"}
    posixcron(
        {
            "ours": {"schedule": "0 3 * * *", **job},
            "rescheduled": {"schedule": "0 3 * * *", **job},
            "new-kwargs": {"schedule": "0 3 * * *", **job, "kwargs": {}},
        }
    )
    # Not at the real time: in the minute 03:00 UTC a task created then fires at once.
    reconcile(now=dt.datetime(2086, 1, 7, 10, 0, tzinfo=dt.UTC))
    scheduler = Scheduler(grace=0)
    scheduler.start()
    # What the other release wrote: its definitions, and a task of its own.
    Task.objects.filter(name="rescheduled").update(schedule="0 4 * * *", definition_hash="f" * 64)
    Task.objects.filter(name="new-kwargs").update(definition_hash="e" * 64)
    TaskFactory.create(
        name="theirs", schedule="0 5 * * *", next_run_at=dt.datetime(2086, 1, 7, 5, tzinfo=dt.UTC)
    )
    out = io.StringIO()
    Command(stdout=out)._summary(scheduler, "the database")
    scheduler.shutdown()
    listed = {line.split(":")[0].strip(): line for line in out.getvalue().splitlines()[1:]}
    assert listed["ours"].endswith("(UTC)")
    assert listed["new-kwargs"].endswith(
        "(UTC) [another deploy's definition, not run here; this process declares it differently]"
    )
    assert listed["rescheduled"].startswith("  rescheduled: 0 4 * * * -> next ")
    assert listed["rescheduled"].endswith(
        "(UTC) [another deploy's definition, not run here; this process declares '0 3 * * *']"
    )
    assert listed["theirs"].endswith(
        "(UTC) [not declared by this process: another deploy's task, not run here]"
    )


@pytest.mark.parametrize("zone", ["Europe", "No/Such_Zone"])
def test_the_start_up_summary_survives_a_stored_zone_this_host_cannot_load(posixcron, zone):
    from django_posixcron.management.commands.runscheduler import Command
    from django_posixcron.reconcile import reconcile
    from django_posixcron.scheduler import Scheduler

    posixcron({"elsewhere": {"schedule": "0 3 * * *", "callable": "tests.testapp.jobs.noop"}})
    reconcile()
    # Stored by a process whose zone files name a zone this host's lack.
    due = dt.datetime(2086, 1, 7, 3, 0, tzinfo=dt.UTC)
    Task.objects.update(timezone=zone, next_run_at=due, due_at=due)
    scheduler = Scheduler(grace=0)
    scheduler.start()
    out = io.StringIO()
    Command(stdout=out)._summary(scheduler, "the database")
    scheduler.shutdown()
    assert f"  elsewhere: 0 3 * * * -> next 2086-01-07T03:00:00+00:00 ({zone})" in out.getvalue()


def test_the_schedulers_connections_get_timeouts_the_project_did_not_set(posixcron):
    # A database that stops answering must be an error the loop logs and backs off from,
    # not a silent wait on the socket: runscheduler gives its alias the timeouts the
    # project's OPTIONS leave out, and keeps the ones it sets.
    from django_posixcron.db import CONNECTION_TIMEOUTS

    options = connection.settings_dict.setdefault("OPTIONS", {})
    saved = dict(options)
    try:
        options.pop("connect_timeout", None)
        if connection.vendor == "postgresql":
            options["keepalives_idle"] = 42
        posixcron({"noop": {"schedule": "0 4 * * *", "callable": "tests.testapp.jobs.noop"}})
        call_command("runscheduler", "--once", stdout=io.StringIO())

        expected = dict(CONNECTION_TIMEOUTS.get(connection.vendor, {}))
        if connection.vendor == "postgresql":
            expected["keepalives_idle"] = 42
        assert {key: options[key] for key in expected} == expected
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:  # the options are libpq's own: it connects
                cursor.execute("SELECT 1")
                assert cursor.fetchone() == (1,)
            assert connection.connection.info.get_parameters()["keepalives"] == "1"
    finally:
        connection.close()
        options.clear()
        options.update(saved)


def test_a_value_the_database_refuses_at_start_up_is_an_error_not_an_outage(posixcron):
    # MySQL refuses an emoji in a utf8mb3 column with error 1366, an OperationalError: the
    # start-up took it for an outage and waited for the database forever, logging
    # "database unavailable".
    posixcron(
        {
            "emoji": {
                "schedule": "0 4 * * *",
                "callable": "tests.testapp.jobs.noop",
                "description": "Deploy \U0001f680",
            }
        }
    )
    with (
        utf8mb3_columns(Task, "description"),
        pytest.raises(CommandError, match=r"The database refused the start-up: .*1366"),
    ):
        run("--once")


@pytest.mark.django_db  # inside a transaction, as a project's TestCase runs its tests
def test_it_refuses_to_run_tasks_inside_a_callers_transaction(posixcron):
    # Task code runs on threads with connections of their own: inside a TestCase its writes
    # failed on SQLite ("database table is locked", the run recorded failed, exit 0) and
    # committed outside the test elsewhere, leaking into the next tests.
    posixcron({"noop": {"schedule": "0 4 * * *", "callable": "tests.testapp.jobs.noop"}})
    with pytest.raises(CommandError, match="inside a transaction on the database 'default'") as e:
        run("--once")
    assert "TransactionTestCase" in str(e.value)
    assert "django_db(transaction=True)" in str(e.value)
    assert not SchedulerProcess.objects.exists()
    assert connection.in_atomic_block  # the test's transaction goes on
    assert not Task.objects.exists()


@pytest.mark.django_db
def test_check_works_inside_a_callers_transaction(posixcron):
    posixcron({"noop": {"schedule": "0 4 * * *", "callable": "tests.testapp.jobs.noop"}})
    with pytest.raises(CommandError, match="differs from settings"):
        run("--check")
    assert connection.in_atomic_block


def test_a_test_database_made_without_migrations_is_not_refused(posixcron):
    # DATABASES["default"]["TEST"]["MIGRATE"] = False: Django's test runner makes the tables
    # from the models and records no migration. runscheduler --once in such a project's
    # TransactionTestCase was refused with "run `manage.py migrate` first".
    from django.db.migrations.recorder import MigrationRecorder

    posixcron({"noop": {"schedule": "0 4 * * *", "callable": "tests.testapp.jobs.noop"}})
    recorder = MigrationRecorder(connection)
    ours = [key for key in recorder.applied_migrations() if key[0] == "django_posixcron"]
    test_settings = connection.settings_dict.setdefault("TEST", {})
    saved = dict(test_settings)
    for app, name in ours:
        recorder.record_unapplied(app, name)
    try:
        with pytest.raises(CommandError, match="lacks django_posixcron migrations"):
            run("--once")  # a real database that lacks them is still refused
        test_settings["MIGRATE"] = False
        assert "Ran 0 task(s)" in run("--once")
        assert Task.objects.filter(name="noop").exists()
        out = io.StringIO()
        with pytest.raises(CommandError, match="no live scheduler"):  # --once has ended
            call_command("schedulerstatus", "--json", stdout=out, stderr=io.StringIO())
        assert "migrations" not in out.getvalue()
        # A database that records some of them is partly migrated, whatever TEST says.
        recorder.record_applied(*ours[0])
        with pytest.raises(CommandError, match="lacks django_posixcron migrations"):
            run("--once")
    finally:
        test_settings.clear()
        test_settings.update(saved)
        for app, name in ours:
            recorder.record_applied(app, name)


def test_a_database_other_than_default_is_named_in_the_one_line_a_command_stops_with():
    # A project with two databases read "The database is unavailable" and could not tell
    # which one.
    from django.db import OperationalError

    from django_posixcron.management.common import refused

    away = OperationalError("connection refused")
    assert refused("is unavailable", away) == "The database is unavailable: connection refused"
    assert refused("is unavailable", away, using="sched") == (
        "The database 'sched' is unavailable: connection refused"
    )
    assert refused("is unavailable", ProgrammingError("denied"), "the check", "sched") == (
        "The database 'sched' refused the check: denied"
    )
