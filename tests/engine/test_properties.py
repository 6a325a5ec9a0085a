"""The engine against the minute-scanning reference, on random expressions and instants."""

from __future__ import annotations

import datetime as dt
import itertools
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from django_posixcron.cron import CronExpression, CronSyntaxError
from tests.engine.reference import MINUTE, UTC, Spec, is_occurrence, naive_next, zoned_next

WINDOW = 2 * 24 * 60 + 120  # minutes the reference scans before giving up
PROPERTY = settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.too_slow],
)
ZONES = (
    "Europe/Berlin",
    "America/New_York",
    "Australia/Lord_Howe",
    "Pacific/Chatham",
    "Asia/Kolkata",
    "America/Havana",
    "America/Santiago",
    "Atlantic/Azores",  # summer time at +00:00: an offset that is falsy
)
BOUNDS = ((0, 59), (0, 23), (1, 31), (1, 12), (0, 6))


@st.composite
def fields(draw: st.DrawFn, low: int, high: int, star: float) -> tuple[str, frozenset[int] | None]:
    if draw(st.floats(0, 1)) < star:
        return "*", None
    elements: list[str] = []
    values: set[int] = set()
    for _ in range(draw(st.integers(1, 3))):
        a = draw(st.integers(low, high))
        if draw(st.booleans()):
            b = draw(st.integers(a, min(high, a + draw(st.integers(0, high - low)))))
            elements.append(f"{a}-{b}")
            values.update(range(a, b + 1))
        else:
            elements.append(str(a))
            values.add(a)
    return ",".join(elements), frozenset(values)


@st.composite
def expressions(draw: st.DrawFn) -> tuple[CronExpression, Spec]:
    stars = (0.3, 0.3, 0.6, 0.7, 0.6)
    drawn = [draw(fields(low, high, star)) for (low, high), star in zip(BOUNDS, stars, strict=True)]
    text = " ".join(part for part, _ in drawn)
    try:
        expression = CronExpression(text)
    except CronSyntaxError as error:
        if not error.reason.startswith("never fires"):
            raise
        assume(False)
    return expression, Spec(*(values for _, values in drawn))


naive_instants = st.datetimes(
    min_value=dt.datetime(1999, 1, 1), max_value=dt.datetime(2101, 12, 31)
)


@cache
def transitions(name: str) -> tuple[dt.datetime, ...]:
    """Return the UTC instants where `name` changes its offset, 2020-2030."""
    tz = ZoneInfo(name)
    found: list[dt.datetime] = []
    step = dt.timedelta(hours=1)
    instant = dt.datetime(2020, 1, 1, tzinfo=UTC)
    offset = instant.astimezone(tz).utcoffset()
    while instant.year < 2031:
        following = instant + step
        new_offset = following.astimezone(tz).utcoffset()
        if new_offset != offset:
            low, high = instant, following
            while high - low > MINUTE:
                middle = low + (high - low) / 2
                middle = middle.replace(second=0, microsecond=0)
                if middle.astimezone(tz).utcoffset() == offset:
                    low = middle
                else:
                    high = middle
            found.append(high)
            offset = new_offset
        instant = following
    return tuple(found) or (dt.datetime(2026, 3, 29, 1, tzinfo=UTC),)


@st.composite
def zoned_instants(draw: st.DrawFn) -> dt.datetime:
    tz = ZoneInfo(draw(st.sampled_from(ZONES)))
    near = draw(st.sampled_from(transitions(tz.key)))
    shift = dt.timedelta(
        minutes=draw(st.integers(-36 * 60, 36 * 60)),
        seconds=draw(st.sampled_from((0, 0, 0, 1, 30, 59))),
    )
    return (near + shift).astimezone(tz)


def check_zoned(expression: CronExpression, spec: Spec, start: dt.datetime) -> None:
    tz = start.tzinfo
    assert tz is not None
    found = expression.next_after(start)
    assert found.tzinfo is tz
    expected = zoned_next(spec, start, WINDOW)
    if expected is not None:
        assert found.isoformat() == expected.isoformat()
        assert found.fold == expected.fold
    else:
        assert found.astimezone(UTC) > start.astimezone(UTC) + WINDOW * MINUTE
        assert is_occurrence(spec, found.astimezone(UTC), tz)
    floor = start.astimezone(UTC).replace(second=0, microsecond=0)
    assert expression.matches(start) == is_occurrence(spec, floor, tz)


@PROPERTY
@given(expressions(), naive_instants)
def test_naive_next_after_and_matches(case, start):
    expression, spec = case
    found = expression.next_after(start)
    assert found.tzinfo is None
    expected = naive_next(spec, start, WINDOW)
    if expected is not None:
        assert found == expected
    else:
        assert found > start + WINDOW * MINUTE
        assert spec.wall_matches(found)
    assert expression.matches(start) == spec.wall_matches(start)


@PROPERTY
@given(expressions(), naive_instants)
def test_utc_next_after_and_matches(case, start):
    expression, spec = case
    check_zoned(expression, spec, start.replace(tzinfo=UTC))


@PROPERTY
@given(expressions(), naive_instants)
def test_zoneinfo_utc_next_after_and_matches(case, start):
    expression, spec = case
    check_zoned(expression, spec, start.replace(tzinfo=ZoneInfo("UTC")))


@PROPERTY
@given(expressions(), zoned_instants())
def test_zoned_next_after_and_matches_near_transitions(case, start):
    expression, spec = case
    check_zoned(expression, spec, start)


DENSE = ["* * * * *", "0 * * * *", "30 2 * * *", "0,30 2 * * *", "* 2 * * *", "0 0 * * *"]
DENSE += ["0-59 0-23 * * *", "15,45 * * * *", "0 23 * * *", "45 2,3 * * *", "* 0 * * *"]


@pytest.mark.parametrize("text", DENSE)
@pytest.mark.parametrize("zone", ZONES)
def test_walk_across_transitions(text, zone):
    """Chain next_after across each transition of 2025-2027 and compare with a full scan."""
    expression = CronExpression(text)
    values = (
        reference_values(part, low, high)
        for part, (low, high) in zip(text.split(), BOUNDS, strict=True)
    )
    spec = Spec(*values)
    tz = ZoneInfo(zone)
    for near in transitions(zone):
        if not 2025 <= near.year <= 2027:
            continue
        start = near - dt.timedelta(hours=6)
        end = near + dt.timedelta(hours=6)
        expected = []
        instant = start + MINUTE
        while instant <= end:
            if is_occurrence(spec, instant, tz):
                expected.append(tz.fromutc(instant.replace(tzinfo=tz)).isoformat())
            instant += MINUTE
        found = []
        current = start.astimezone(tz)
        while True:
            current = expression.next_after(current)
            if current.astimezone(UTC) > end:
                break
            found.append(current.isoformat())
        assert found == expected, (text, zone, near.isoformat())


def reference_values(part: str, low: int, high: int) -> frozenset[int] | None:
    if part == "*":
        return None
    values: set[int] = set()
    for element in part.split(","):
        first, _, last = element.partition("-")
        values.update(range(int(first), int(last or first) + 1))
    assert all(low <= value <= high for value in values)
    return frozenset(values)


@PROPERTY
@given(expressions(), naive_instants)
def test_no_two_consecutive_occurrences_are_closer_than_min_interval(case, start):
    expression, _ = case
    shortest = expression.min_interval
    current = expression.next_after(start)
    for _ in range(200):
        following = expression.next_after(current)
        assert following - current >= shortest
        current = following


def reference_min_interval(spec: Spec) -> dt.timedelta:
    """Walk every day of a 400-year cycle: it repeats, weekdays included."""
    first_day = dt.date(2000, 1, 1)
    matching = []
    for offset in range(146097):
        day = first_day + dt.timedelta(days=offset)
        if spec.months is not None and day.month not in spec.months:
            continue
        dom_ok = spec.doms is None or day.day in spec.doms
        dow_ok = spec.dows is None or day.isoweekday() % 7 in spec.dows
        both = spec.doms is not None and spec.dows is not None
        if (dom_ok or dow_ok) if both else (dom_ok and dow_ok):
            matching.append(offset)
    matching.append(matching[0] + 146097)
    day_gap = min(b - a for a, b in itertools.pairwise(matching))
    minutes = sorted(
        hour * 60 + minute
        for hour in (spec.hours if spec.hours is not None else range(24))
        for minute in (spec.minutes if spec.minutes is not None else range(60))
    )
    within = min((b - a for a, b in itertools.pairwise(minutes)), default=10**9)
    return dt.timedelta(minutes=min(within, day_gap * 1440 - (minutes[-1] - minutes[0])))


@settings(max_examples=20, deadline=None, derandomize=True)
@given(expressions())
def test_min_interval_matches_a_day_by_day_walk_of_the_cycle(case):
    expression, spec = case
    assert expression.min_interval == reference_min_interval(spec)
