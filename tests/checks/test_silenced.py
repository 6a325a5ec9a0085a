"""posixcron errors cannot be silenced: runscheduler refuses them with a clean CommandError."""

from __future__ import annotations

import io

import django
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError

from django_posixcron.models import SchedulerProcess, Task
from tests.harness.declaring import task
from tests.harness.processes import runscheduler_with

PROBLEM = (
    "- (posixcron.E024) settings.POSIXCRON['TASKS']['every-minute']['schedule'] = '* * * * *' can "
    "fire every minute, more often than settings.POSIXCRON['POLL_INTERVAL'] (120 s). HINT: Lower "
    "POLL_INTERVAL to at most the schedule's shortest interval, or schedule the task less often."
)


@pytest.fixture
def silenced(settings, posixcron):
    settings.SILENCED_SYSTEM_CHECKS = ["posixcron.E024"]
    posixcron({"every-minute": task("* * * * *")}, POLL_INTERVAL=120)


def test_manage_py_check_honours_silencing(silenced):
    call_command("check", stdout=io.StringIO(), stderr=io.StringIO())


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("args", [["--once"], ["--check"], []])
def test_runscheduler_refuses_silenced_errors_with_a_command_error(silenced, args):
    with pytest.raises(CommandError) as excinfo:
        call_command("runscheduler", *args, stdout=io.StringIO(), stderr=io.StringIO())
    error = excinfo.value
    assert not isinstance(error, SystemCheckError)
    assert error.returncode == 1
    assert str(error) == (
        "settings.POSIXCRON has 1 problem(s) (posixcron.E024). posixcron.E0NN errors cannot be "
        "silenced: SILENCED_SYSTEM_CHECKS hides them from `manage.py check`, but a task with an "
        f"error cannot be scheduled. Fix them:\n{PROBLEM}"
    )
    assert not Task.objects.exists()
    assert not SchedulerProcess.objects.exists()


def test_manage_py_runscheduler_prints_it_without_a_traceback():
    proc = runscheduler_with("tests.checks.silenced_settings", "--once")
    assert proc.returncode == 1
    assert "Traceback" not in proc.stderr
    assert "ImproperlyConfigured" not in proc.stderr
    assert proc.stderr.startswith("CommandError: settings.POSIXCRON has 1 problem(s)")
    assert "posixcron.E0NN errors cannot be silenced" in proc.stderr
    assert PROBLEM in proc.stderr


@pytest.mark.django_db(transaction=True)
def test_silenced_hand_off_errors_are_refused_too(settings, posixcron):
    # A Dummy backend stores jobs and never runs them: every handed-off run would end lost.
    framework = "django.tasks" if django.VERSION >= (6, 0) else "django_tasks"
    settings.TASKS = {"default": {"BACKEND": f"{framework}.backends.dummy.DummyBackend"}}
    settings.SILENCED_SYSTEM_CHECKS = ["posixcron.E034"]
    posixcron({"export": {**task("0 3 * * *"), "enqueue": True}})
    call_command("check", stdout=io.StringIO(), stderr=io.StringIO())

    with pytest.raises(CommandError) as excinfo:
        call_command("runscheduler", "--once", stdout=io.StringIO(), stderr=io.StringIO())

    message = str(excinfo.value)
    assert message.startswith("settings.POSIXCRON has 1 problem(s) (posixcron.E034).")
    assert "- (posixcron.E034) settings.POSIXCRON['TASKS']['export']['enqueue'] names" in message
    assert "DummyBackend" in message
    assert not Task.objects.exists()
