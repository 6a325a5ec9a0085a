"""The POLL_INTERVAL bounds and the frequency guard: one function each, for every caller."""

from __future__ import annotations

import argparse
import datetime as dt

import pytest

from django_posixcron.conf import poll_interval_fault, poll_interval_or_default
from django_posixcron.declarations import collect, too_frequent
from django_posixcron.management.common import poll_interval
from tests.harness.declaring import task

HUGE_INT = 10**400  # float(HUGE_INT) raises OverflowError


@pytest.mark.parametrize(
    ("value", "fault"),
    [
        (0.01, None),
        (10, None),
        (86400, None),
        (86400.0, None),
        (0, "not positive"),
        (-1, "not positive"),
        (float("nan"), "not positive"),
        (True, "not positive"),
        ("10", "not positive"),
        (None, "not positive"),
        (-HUGE_INT, "not positive"),
        (86400.001, "too large"),
        (float("inf"), "too large"),
        (HUGE_INT, "too large"),
        (0.0099, "too small"),
        (1e-300, "too small"),
    ],
)
def test_poll_interval_fault(value, fault):
    assert poll_interval_fault(value) == fault


@pytest.mark.parametrize("value", [0.01, 0.5, 60, 86400, 86401, 0.001, 0, float("nan"), 1e12])
def test_the_setting_the_option_and_the_fallback_agree(value, settings):
    setting_refused = bool(collect({"POLL_INTERVAL": value})[1])
    try:
        poll_interval(repr(value))
    except argparse.ArgumentTypeError:
        option_refused = True
    else:
        option_refused = False
    settings.POSIXCRON = {"POLL_INTERVAL": value}
    fallback = poll_interval_or_default() != value
    assert setting_refused == option_refused == fallback


@pytest.mark.parametrize(
    ("schedule", "poll", "found"),
    [
        ("* * * * *", 60, None),
        ("* * * * *", 60.5, dt.timedelta(minutes=1)),
        ("0 * * * *", 3600, None),
        ("0 * * * *", 3601, dt.timedelta(hours=1)),
        ("0,1 3 * * *", 61, dt.timedelta(minutes=1)),
        ("0 0 * * *", 86400, None),
    ],
)
def test_too_frequent(schedule, poll, found):
    assert too_frequent(schedule, poll) == found


@pytest.mark.parametrize("poll", [59, 60, 61, 3600, 3601])
def test_the_guard_on_the_setting_is_too_frequent(poll):
    for schedule in ("* * * * *", "0 * * * *", "0,1 3 * * *", "0 0 * * *"):
        problems = collect({"TASKS": {"t": task(schedule)}, "POLL_INTERVAL": poll})[1]
        refused = [p.id for p in problems] == ["posixcron.E024"]
        assert refused == (too_frequent(schedule, poll) is not None), (schedule, poll)
