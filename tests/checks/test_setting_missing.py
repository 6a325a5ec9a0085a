"""posixcron.W004: settings without POSIXCRON at all, and runscheduler refusing to start."""

from __future__ import annotations

import io

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError

from django_posixcron.checks import W_NOT_SET
from django_posixcron.models import SchedulerProcess


def ours() -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks() if str(m.id).startswith("posixcron.")]


def test_no_setting_at_all_is_a_warning_that_says_what_to_set(settings):
    del settings.POSIXCRON
    [warning] = ours()
    assert warning.id == W_NOT_SET
    assert isinstance(warning, checks.Warning)
    assert warning.msg == "settings.POSIXCRON is not set: no task is declared."
    assert 'POSIXCRON = {"TASKS": {}}' in str(warning.hint)
    assert "retire every task" in str(warning.hint)


@pytest.mark.parametrize("value", [{"TASKS": {}}, {}])
def test_a_setting_that_declares_nothing_is_no_mistake(settings, value):
    settings.POSIXCRON = value
    assert ours() == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("args", [["--once"], ["--check"], []])
def test_runscheduler_refuses_to_start_without_the_setting(settings, args):
    del settings.POSIXCRON
    err = io.StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("runscheduler", *args, stdout=io.StringIO(), stderr=err)
    assert raised.value.returncode == 1
    assert str(raised.value).startswith(
        "settings.POSIXCRON is not set (posixcron.W004): runscheduler refuses to start"
    )
    assert "(posixcron.W004)" in err.getvalue()  # the check's warning, printed first
    assert not SchedulerProcess.objects.exists()
