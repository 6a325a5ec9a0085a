"""posixcron.W003: kwargs (or a context) for a callable whose signature cannot be read."""

from __future__ import annotations

import inspect
import time
from pathlib import Path

import pytest
from django.core import checks

CALLABLE = "settings.POSIXCRON['TASKS']['t']['callable']"
HINT = (
    "Builtins often take their arguments by position only, which kwargs cannot give. Check "
    "the documentation of {}, or declare a Python function that calls it."
)


def posixcron_messages() -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks() if (m.id or "").startswith("posixcron.")]


def job(**extra: object) -> dict[str, object]:
    return {"schedule": "0 3 * * *", **extra}


def test_kwargs_that_cannot_be_checked_are_a_warning_naming_the_task(posixcron):
    path = "tests.testapp.jobs.no_signature"
    posixcron({"t": job(callable=path, kwargs={"secs": 1})})
    [warning] = posixcron_messages()
    assert isinstance(warning, checks.Warning)
    assert warning.id == "posixcron.W003"
    assert warning.msg == (
        f"{CALLABLE} = {path!r} has no signature the checks can read (a builtin, say): the call "
        "with the kwargs {'secs': 1} cannot be checked against it, and if it does not fit, "
        "every run fails with TypeError."
    )
    assert warning.hint == HINT.format(path)


def test_a_context_that_cannot_be_checked_is_a_warning(posixcron):
    posixcron({"t": job(callable="tests.testapp.jobs.no_signature", takes_context=True)})
    [warning] = posixcron_messages()
    assert warning.id == "posixcron.W003"
    assert "the call with a RunContext cannot be checked" in warning.msg


def test_a_call_without_arguments_is_not_warned_about(posixcron):
    posixcron({"t": job(callable="tests.testapp.jobs.no_signature")})
    assert posixcron_messages() == []


def test_a_readable_signature_is_not_warned_about(posixcron):
    posixcron({"t": job(callable="tests.testapp.jobs.record", kwargs={"label": "x"})})
    assert posixcron_messages() == []


def _has_signature(func: object) -> bool:
    try:
        inspect.signature(func)  # type: ignore[arg-type]
    except ValueError:
        return False
    return True


@pytest.mark.skipif(_has_signature(time.sleep), reason="this Python reads time.sleep's signature")
def test_time_sleep_with_kwargs_is_warned_about(posixcron):
    # time.sleep(secs=1) raises TypeError: it takes its argument by position only.
    posixcron({"t": job(callable="time.sleep", kwargs={"secs": 1})})
    [warning] = posixcron_messages()
    assert warning.id == "posixcron.W003"
    assert warning.hint == HINT.format("time.sleep")


def test_the_warning_is_documented():
    text = (Path(__file__).parents[2] / "docs" / "settings.rst").read_text("utf-8")
    assert "posixcron.W003" in text
