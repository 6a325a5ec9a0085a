"""Every kind of bad settings: a system check error with the path, the value and a hint."""

from __future__ import annotations

import datetime as dt
import io
import re
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError, SystemCheckError

from django_posixcron.models import SchedulerProcess, Task

T = "settings.POSIXCRON['TASKS']"


def good(**extra: Any) -> dict[str, Any]:
    return {
        "schedule": "15 3 * * 1-5",
        "callable": "tests.testapp.jobs.record",
        "retry_delay": 300,
        **extra,
    }


# (settings.POSIXCRON, path named in the message, value shown in the message, hint snippet)
CASES = [
    (["not", "a", "dict"], "settings.POSIXCRON", "['not', 'a', 'dict']", ""),
    ({"TASKS": {}, "POLL_INTERVALL": 5}, "settings.POSIXCRON", "'POLL_INTERVALL'", "POLL_INTERVAL"),
    ({"TASKS": []}, "settings.POSIXCRON['TASKS']", "[]", ""),
    ({"TASKS": {"Nightly Report": good()}}, f"{T}['Nightly Report']", "'Nightly Report'", ""),
    ({"TASKS": {"x" * 101: good()}}, "settings.POSIXCRON['TASKS']", "x" * 101, ""),
    ({"TASKS": {"r": {**good(), "schedul": "0 3 * * *"}}}, f"{T}['r']", "'schedul'", "schedule"),
    ({"TASKS": {"r": {"callable": "tests.testapp.jobs.noop"}}}, f"{T}['r']", "'schedule'", ""),
    ({"TASKS": {"r": {"schedule": "0 3 * * *"}}}, f"{T}['r']", "'callable'", ""),
    ({"TASKS": {"r": good(schedule="*/15 * * * *")}}, f"{T}['r']['schedule']", "'*/15", "minute"),
    ({"TASKS": {"r": good(schedule="0 3 * * mon")}}, f"{T}['r']['schedule']", "mon", "day-of-week"),
    ({"TASKS": {"r": good(schedule="@daily")}}, f"{T}['r']['schedule']", "@daily", ""),
    (
        {"TASKS": {"r": good(schedule="0 3 * * 7")}},
        f"{T}['r']['schedule']",
        "'0 3 * * 7'",
        "day-of-week",
    ),
    ({"TASKS": {"r": good(schedule="0 22-2 * * *")}}, f"{T}['r']['schedule']", "22-2", "hour"),
    ({"TASKS": {"r": good(schedule="0 3 * *")}}, f"{T}['r']['schedule']", "'0 3 * *'", ""),
    ({"TASKS": {"r": good(schedule="0 0 30 2 *")}}, f"{T}['r']['schedule']", "'0 0 30 2 *'", ""),
    ({"TASKS": {"r": good(schedule="0 3 ? * *")}}, f"{T}['r']['schedule']", "?", ""),
    ({"TASKS": {"r": good(schedule="0 \uff13 * * *")}}, f"{T}['r']['schedule']", "\uff13", ""),
    ({"TASKS": {"r": good(schedule=315)}}, f"{T}['r']['schedule']", "315", ""),
    (
        {"TASKS": {"r": good(callable="tests.testapp.jobs.nope")}},
        f"{T}['r']['callable']",
        "'tests.testapp.jobs.nope'",
        "",
    ),
    (
        {"TASKS": {"r": good(callable="no_such_module.jobs.run")}},
        f"{T}['r']['callable']",
        "'no_such_module.jobs.run'",
        "",
    ),
    (
        {"TASKS": {"r": good(callable="tests.testapp.jobs.NOT_CALLABLE")}},
        f"{T}['r']['callable']",
        "NOT_CALLABLE",
        "",
    ),
    (
        {"TASKS": {"r": good(callable=print)}},
        f"{T}['r']['callable']",
        "<built-in function print>",
        "",
    ),
    (
        {"TASKS": {"r": good(kwargs={"when": dt.date(2086, 1, 1)})}},
        f"{T}['r']['kwargs']",
        "datetime.date(2086, 1, 1)",
        "",
    ),
    ({"TASKS": {"r": good(kwargs={"colour": "red"})}}, f"{T}['r']['callable']", "'colour'", ""),
    (
        {"TASKS": {"r": good(callable="tests.testapp.jobs.coroutine_job")}},
        f"{T}['r']['callable']",
        "coroutine_job",
        "async_to_sync",
    ),
    (
        {"TASKS": {"r": good(callable="tests.testapp.jobs.generator_job")}},
        f"{T}['r']['callable']",
        "generator_job",
        "",
    ),
    (
        {"TASKS": {"r": good(kwargs={"label": "a\x00b"})}},
        f"{T}['r']['kwargs']",
        "'a\\x00b'",
        "NUL",
    ),
    ({"TASKS": {"r": good(description="a\x00")}}, f"{T}['r']['description']", "'a\\x00'", "NUL"),
    (
        {"TASKS": {"r": good(timezone="Europe/Berln")}},
        f"{T}['r']['timezone']",
        "'Europe/Berln'",
        "Europe/Berlin",
    ),
    ({"TASKS": {"r": good(retry_delay=-5)}}, f"{T}['r']['retry_delay']", "-5", ""),
    ({"TASKS": {"r": good(retry_delay="300")}}, f"{T}['r']['retry_delay']", "'300'", ""),
    (
        {"TASKS": {"r": good(retry_delay=dt.timedelta(seconds=-1))}},
        f"{T}['r']['retry_delay']",
        "timedelta",
        "",
    ),
    ({"TASKS": {"r": good(timeout=0)}}, f"{T}['r']['timeout']", "0", ""),
    ({"TASKS": {"r": good(timeout="ten minutes")}}, f"{T}['r']['timeout']", "'ten minutes'", ""),
    ({"TASKS": {"r": good(overlap="queue")}}, f"{T}['r']['overlap']", "'queue'", "skip"),
    ({"TASKS": {}, "POLL_INTERVAL": 0}, "settings.POSIXCRON['POLL_INTERVAL']", "0", ""),
    ({"TASKS": {}, "POLL_INTERVAL": "10"}, "settings.POSIXCRON['POLL_INTERVAL']", "'10'", ""),
    ({"TASKS": {}, "CONCURRENCY": 0}, "settings.POSIXCRON['CONCURRENCY']", "0", ""),
    ({"TASKS": {}, "HISTORY_DAYS": -1}, "settings.POSIXCRON['HISTORY_DAYS']", "-1", ""),
    (
        {"TASKS": {"r": good(schedule="0,1 * * * *")}, "POLL_INTERVAL": 120},
        f"{T}['r']['schedule']",
        "'0,1 * * * *'",
        "POLL_INTERVAL",
    ),
]


def posixcron_errors() -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks() if m.id and m.id.startswith("posixcron.")]


@pytest.mark.parametrize(("value", "path", "shown", "hint"), CASES, ids=lambda v: str(v)[:40])
def test_each_mistake_is_a_check_error_naming_path_value_and_hint(
    settings, value, path, shown, hint
):
    settings.POSIXCRON = value
    errors = posixcron_errors()
    assert errors, f"no check error for {value!r}"
    assert all(e.level == checks.ERROR for e in errors)
    assert all(re.fullmatch(r"posixcron\.E[0-9]{3}", e.id or "") for e in errors)
    message = " ".join(e.msg for e in errors)
    assert path in message
    assert shown in message
    assert all(e.hint for e in errors)
    if hint:
        assert hint in " ".join(e.hint or "" for e in errors)


def test_use_tz_off_is_a_check_error(settings):
    settings.USE_TZ = False
    settings.POSIXCRON = {"TASKS": {"r": good()}}
    errors = posixcron_errors()
    assert any("USE_TZ" in e.msg for e in errors)


def test_a_valid_declaration_raises_no_check_error(settings):
    settings.POSIXCRON = {
        "TASKS": {
            "nightly-report": good(
                kwargs={"label": "x"},
                timezone="Europe/Berlin",
                overlap="allow",
                timeout=600,
                description="Mail the nightly report",
                retry_delay=dt.timedelta(minutes=5),
            ),
            "a.b_c-9": good(schedule="0 0 1,15 * 1"),
        },
        "POLL_INTERVAL": 10,
        "CONCURRENCY": 4,
        "HISTORY_DAYS": 30,
    }
    assert posixcron_errors() == []


def test_check_command_lists_every_problem_at_once(settings):
    settings.POSIXCRON = {
        "TASKS": {
            "a": good(schedule="*/5 * * * *"),
            "b": good(timezone="Mars/Olympus"),
            "c": good(overlap="never"),
        }
    }
    with pytest.raises(SystemCheckError) as excinfo:
        call_command("check", stdout=io.StringIO(), stderr=io.StringIO())
    text = str(excinfo.value)
    for name in ("['a']['schedule']", "['b']['timezone']", "['c']['overlap']"):
        assert name in text
    assert "HINT" in text


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("args", [["--once"], ["--check"], []])
def test_runscheduler_refuses_to_start_on_check_errors(settings, args):
    settings.POSIXCRON = {"TASKS": {"r": good(schedule="0 3 * * sun")}}
    with pytest.raises(CommandError) as excinfo:
        call_command("runscheduler", *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert isinstance(excinfo.value, SystemCheckError)
    assert excinfo.value.returncode != 0
    assert "settings.POSIXCRON['TASKS']['r']['schedule']" in str(excinfo.value)
    assert "sun" in str(excinfo.value)
    assert not Task.objects.exists()
    assert not SchedulerProcess.objects.exists()
