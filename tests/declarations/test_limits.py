"""Upper (and lower) bounds: values that pass a type check but overflow date arithmetic later."""

from __future__ import annotations

import argparse
import datetime as dt
import types
from typing import Any

import pytest

from django_posixcron.conf import get_settings
from django_posixcron.declarations import MAX_DELAY, collect
from django_posixcron.management.common import poll_interval
from django_posixcron.models import Task
from django_posixcron.reconcile import reconcile
from tests.harness.declaring import NOW, task

TASK = "settings.POSIXCRON['TASKS']['t']"
HUGE_INT = 10**400  # float(HUGE_INT) and math.isfinite(HUGE_INT) raise OverflowError
UNPRINTABLE_INT = 10**5000  # repr() raises ValueError past sys.get_int_max_str_digits()


def only_problem(raw: Any) -> tuple[str, str, str]:
    _, problems = collect(raw)
    assert len(problems) == 1, problems
    return problems[0].id, problems[0].msg, problems[0].hint


@pytest.mark.parametrize(
    ("key", "check_id", "hint"),
    [("retry_delay", "posixcron.E017", "300"), ("timeout", "posixcron.E018", "no timeout")],
)
@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (10**12, "1000000000000"),
        (1e20, "1e+20"),
        (1e300, "1e+300"),
        (float("inf"), "inf"),
        pytest.param(HUGE_INT, "1" + "0" * 99 + "... (401 characters)", id="10**400"),
        pytest.param(UNPRINTABLE_INT, "<int of 16610 bits>", id="10**5000"),
        (366 * 86400 + 1, "31622401"),
        (366 * 86400 + 0.5, "31622400.5"),
        (dt.timedelta.max, repr(dt.timedelta.max)),
        (MAX_DELAY + dt.timedelta(microseconds=1), "datetime.timedelta(days=366, microseconds=1)"),
    ],
)
def test_a_delay_past_366_days_is_too_large(key, check_id, hint, value, shown):
    check_id_, msg, hint_ = only_problem({"TASKS": {"t": task(**{key: value})}})
    assert check_id_ == check_id
    assert msg == (
        f"{TASK}['{key}'] is too large: expected at most 366 days (31622400 seconds) but got "
        f"{shown}."
    )
    assert hint in hint_


@pytest.mark.parametrize(
    "value", [-(10**12), -1e20, float("-inf"), pytest.param(-HUGE_INT, id="-10**400")]
)
def test_a_huge_negative_delay_is_not_positive_rather_than_too_large(value):
    check_id, msg, _ = only_problem({"TASKS": {"t": task(retry_delay=value)}})
    assert check_id == "posixcron.E017"
    assert "Expected a positive number of seconds or a positive timedelta" in msg
    assert "too large" not in msg


@pytest.mark.parametrize("value", [366 * 86400, 366 * 86400.0, MAX_DELAY])
def test_366_days_is_accepted_and_stored(value, db):
    declarations, problems = collect({"TASKS": {"t": task(retry_delay=value, timeout=value)}})
    assert problems == []
    declaration = declarations["t"]
    assert declaration.retry_delay == declaration.timeout == MAX_DELAY

    # The scheduler's arithmetic and the database's interval column take the largest value.
    reconcile(now=NOW, declarations=declarations)
    stored = Task.objects.get(name="t")
    assert stored.retry_delay == stored.timeout == MAX_DELAY


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (36501, "36501"),
        (1_000_000, "1000000"),
        (10**9, "1000000000"),
        pytest.param(HUGE_INT, "1" + "0" * 99 + "... (401 characters)", id="10**400"),
        pytest.param(UNPRINTABLE_INT, "<int of 16610 bits>", id="10**5000"),
    ],
)
def test_history_days_past_a_century_is_too_large(value, shown):
    # `now - timedelta(days=1_000_000)` overflowed on every tick.
    check_id, msg, hint = only_problem({"HISTORY_DAYS": value})
    assert check_id == "posixcron.E023"
    assert msg == (
        "settings.POSIXCRON['HISTORY_DAYS'] is too large: expected at most 36500 (100 years) but "
        f"got {shown}."
    )
    assert "30" in hint


def test_history_days_of_a_century_is_accepted():
    assert collect({"HISTORY_DAYS": 36500}) == ({}, [])


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (86401, "86401"),
        (1e12, "1000000000000.0"),
        (float("inf"), "inf"),
        pytest.param(HUGE_INT, "1" + "0" * 99 + "... (401 characters)", id="10**400"),
        pytest.param(UNPRINTABLE_INT, "<int of 16610 bits>", id="10**5000"),
    ],
)
def test_poll_interval_past_a_day_is_too_large(value, shown):
    # 10**400 used to make the check itself raise OverflowError (math.isfinite).
    check_id, msg, hint = only_problem({"POLL_INTERVAL": value})
    assert check_id == "posixcron.E021"
    assert msg == (
        "settings.POSIXCRON['POLL_INTERVAL'] is too large: expected at most 86400 seconds (one "
        f"day) but got {shown}."
    )
    assert "10" in hint


@pytest.mark.parametrize(("value", "shown"), [(0.009, "0.009"), (1e-300, "1e-300")])
def test_poll_interval_under_10_ms_is_too_small(value, shown):
    check_id, msg, _ = only_problem({"POLL_INTERVAL": value})
    assert check_id == "posixcron.E021"
    assert msg == (
        "settings.POSIXCRON['POLL_INTERVAL'] is too small: expected at least 0.01 seconds (the "
        f"scheduler would poll the database continuously) but got {shown}."
    )


@pytest.mark.parametrize("value", [0.01, 0.5, 86400, 86400.0])
def test_poll_interval_bounds_are_inclusive(value):
    assert collect({"POLL_INTERVAL": value}) == ({}, [])


@pytest.mark.parametrize("value", [float("nan"), pytest.param(-HUGE_INT, id="-10**400"), 0])
def test_poll_interval_not_positive_keeps_its_message(value):
    check_id, msg, _ = only_problem({"POLL_INTERVAL": value})
    assert check_id == "posixcron.E021"
    assert "Expected a positive number of seconds" in msg


def test_concurrency_huge_int_is_reported_not_raised():
    assert collect({"CONCURRENCY": 10**5}) == ({}, [])
    check_id, msg, _ = only_problem({"CONCURRENCY": -UNPRINTABLE_INT})
    assert check_id == "posixcron.E022"
    assert "Expected a positive int but got <int of 16610 bits>." in msg


class TestPollIntervalOption:
    """runscheduler --poll-interval takes the setting's bounds: it overrides the setting."""

    @pytest.mark.parametrize("value", ["0.01", "10", "86400"])
    def test_accepted(self, value):
        assert poll_interval(value) == float(value)

    @pytest.mark.parametrize(
        ("value", "message"),
        [
            ("1e12", "must be at most 86400 seconds (one day), got '1e12'"),
            ("inf", "must be at most 86400 seconds (one day), got 'inf'"),
            ("0.001", "must be at least 0.01 seconds, got '0.001'"),
            ("0", "must be a positive number of seconds, got '0'"),
            ("nan", "must be a positive number of seconds, got 'nan'"),
            ("soon", "expected a number of seconds, got 'soon'"),
        ],
    )
    def test_refused(self, value, message):
        with pytest.raises(argparse.ArgumentTypeError) as excinfo:
            poll_interval(value)
        assert str(excinfo.value) == message


class TestConfAcceptsAnyMapping:
    """conf.get_settings() reads what the checks accept (any Mapping), not only a dict."""

    def test_mapping_proxy(self, settings):
        settings.POSIXCRON = types.MappingProxyType(
            {"TASKS": {}, "POLL_INTERVAL": 5, "CONCURRENCY": 2, "HISTORY_DAYS": 7}
        )
        assert collect() == ({}, [])
        conf = get_settings()
        assert (conf.poll_interval, conf.concurrency, conf.history_days) == (5, 2, 7)

    def test_not_a_mapping_falls_back_to_the_defaults(self, settings):
        settings.POSIXCRON = ["not", "a", "dict"]
        conf = get_settings()
        assert (conf.poll_interval, conf.concurrency, conf.history_days) == (10.0, 4, 30)
