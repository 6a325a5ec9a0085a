"""The engine's edges: years 1 and 9999, offsets with seconds, min_interval on DST days, meaning."""

from __future__ import annotations

import datetime as dt
import itertools
from functools import cache
from zoneinfo import ZoneInfo

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from django_posixcron.cron import CronExpression, CronSyntaxError
from tests.engine.reference import UTC, Spec, is_occurrence, local_minutes
from tests.engine.test_properties import (
    BOUNDS,
    DENSE,
    PROPERTY,
    ZONES,
    expressions,
    reference_values,
    transitions,
)

# -- years 1 and 9999 -----------------------------------------------------------------------

NO_MORE = r"^no occurrence before the year 10000$"


def aware(text: str, zone: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).replace(tzinfo=ZoneInfo(zone))


@pytest.mark.parametrize(
    ("text", "zone", "start", "expected"),
    [
        # West of Greenwich the last evening of 9999 is past datetime.max in UTC, yet its wall
        # times exist: they are answered, not an OverflowError from the arithmetic.
        ("* * * * *", "America/New_York", "9999-12-31T20:00", "9999-12-31T20:01:00-05:00"),
        ("59 23 * * *", "America/New_York", "9999-12-31T12:00", "9999-12-31T23:59:00-05:00"),
        ("0 * * * *", "Pacific/Pago_Pago", "9999-12-31T22:30", "9999-12-31T23:00:00-11:00"),
        # East of Greenwich the first morning of year 1 is before datetime.min in UTC.
        ("* * * * *", "Asia/Tokyo", "0001-01-01T00:00", "0001-01-01T00:01:00+09:18:59"),
        ("* * * * *", "Europe/Berlin", "0001-01-01T00:00", "0001-01-01T00:01:00+00:53:28"),
        ("30 2 1 1 *", "Asia/Tokyo", "0001-01-01T00:00", "0001-01-01T02:30:00+09:18:59"),
        # The DST rule holds in 9999 too (zoneinfo's yearly rule).
        ("30 2 * * *", "Europe/Berlin", "9999-03-27T12:00", "9999-03-28T03:00:00+02:00"),
        ("0 * * * *", "Europe/Berlin", "9999-10-31T02:30", "9999-10-31T02:00:00+01:00"),
    ],
)
def test_next_after_near_the_ends_of_the_calendar(text, zone, start, expected):
    when = aware(start, zone)
    found = CronExpression(text).next_after(when)
    assert found.isoformat() == expected
    assert found.tzinfo is when.tzinfo
    assert CronExpression(text).matches(found)


@pytest.mark.parametrize(
    "when",
    [
        dt.datetime.max.replace(tzinfo=ZoneInfo("America/New_York")),
        dt.datetime.max.replace(tzinfo=ZoneInfo("Asia/Tokyo")),
        dt.datetime.max.replace(tzinfo=ZoneInfo("UTC")),
        dt.datetime.max.replace(tzinfo=dt.UTC),
        dt.datetime.max,
        aware("9999-12-31T23:59", "America/New_York"),
    ],
)
def test_past_the_last_occurrence_is_a_clear_overflow(when):
    with pytest.raises(OverflowError, match=NO_MORE):
        CronExpression("* * * * *").next_after(when)


def test_a_rare_schedule_runs_out_before_the_year_10000():
    with pytest.raises(OverflowError, match=NO_MORE):
        CronExpression("0 0 29 2 *").next_after(aware("9997-01-01T00:00", "America/New_York"))


@pytest.mark.parametrize(
    ("text", "when", "expected"),
    [
        ("* * * * *", dt.datetime.max.replace(tzinfo=ZoneInfo("America/New_York")), True),
        ("0 * * * *", dt.datetime.max.replace(tzinfo=ZoneInfo("America/New_York")), False),
        ("* * * * *", dt.datetime.min.replace(tzinfo=ZoneInfo("Asia/Tokyo")), True),
        ("1 * * * *", dt.datetime.min.replace(tzinfo=ZoneInfo("Asia/Tokyo")), False),
        ("0 0 1 1 *", dt.datetime.min.replace(tzinfo=ZoneInfo("UTC")), True),
    ],
)
def test_matches_near_the_ends_of_the_calendar(text, when, expected):
    assert CronExpression(text).matches(when) is expected


END_ZONES = ("America/New_York", "Asia/Tokyo", "Europe/Berlin", "Pacific/Kiritimati", "UTC")
ends = st.one_of(
    st.datetimes(dt.datetime(1, 1, 1), dt.datetime(1, 1, 3)),
    st.datetimes(dt.datetime(9999, 12, 20), dt.datetime(9999, 12, 31, 23, 58)),
)


@PROPERTY
@given(expressions(), ends, st.sampled_from(END_ZONES))
def test_near_the_ends_an_unchanging_offset_is_the_wall_clock(case, wall, zone):
    """No zone changes its offset in these days, so aware answers are naive ones, attached."""
    expression, _ = case
    tz = ZoneInfo(zone)
    try:
        naive = expression.next_after(wall)
    except OverflowError:
        with pytest.raises(OverflowError, match=NO_MORE):
            expression.next_after(wall.replace(tzinfo=tz))
        return
    assert expression.next_after(wall.replace(tzinfo=tz)) == naive.replace(tzinfo=tz)
    assert expression.matches(wall.replace(tzinfo=tz)) == expression.matches(wall)


# -- offsets with seconds: local mean time ----------------------------------------------------

LMT_CASES = [
    # Europe/Amsterdam, 1937-07-01: +01:19:32 -> +01:20, the wall clock skips 00:00:00-00:00:27.
    # 00:00 does not exist as a whole minute: a fixed-time job fires at the next one.
    ("0 0 * * *", "Europe/Amsterdam", "1937-06-30T12:00", "1937-07-01T00:01:00+01:20"),
    ("* * * * *", "Europe/Amsterdam", "1937-06-30T23:58", "1937-06-30T23:59:00+01:19:32"),
    ("* 0 * * *", "Europe/Amsterdam", "1937-06-30T23:59", "1937-07-01T00:01:00+01:20"),
    # Africa/Monrovia, 1972-01-07: -00:44:30 -> +00:00, 00:00:00 jumps to 00:44:30.
    ("30 0 * * *", "Africa/Monrovia", "1972-01-06T12:00", "1972-01-07T00:45:00+00:00"),
    ("* 0 * * *", "Africa/Monrovia", "1972-01-06T23:59", "1972-01-07T00:45:00+00:00"),
    # Africa/Monrovia, 1919-03-01: -00:43:08 -> -00:44:30, 23:58:38-23:59:59 happens twice.
    ("59 23 * * *", "Africa/Monrovia", "1919-02-28T23:00", "1919-02-28T23:59:00-00:43:08"),
    ("59 23 * * *", "Africa/Monrovia", "1919-02-28T23:59:30", "1919-03-01T23:59:00-00:44:30"),
]


@pytest.mark.parametrize(("text", "zone", "start", "expected"), LMT_CASES)
def test_offsets_with_seconds_fire_on_whole_wall_clock_minutes(text, zone, start, expected):
    found = CronExpression(text).next_after(aware(start, zone))
    assert found.isoformat() == expected
    assert (found.second, found.microsecond) == (0, 0)


def test_an_elapsed_time_schedule_fires_twice_in_a_repeated_lmt_minute():
    expression = CronExpression("59 * * * *")
    first = expression.next_after(aware("1919-02-28T23:30", "Africa/Monrovia"))
    second = expression.next_after(first)
    assert (first.isoformat(), second.isoformat()) == (
        "1919-02-28T23:59:00-00:43:08",
        "1919-02-28T23:59:00-00:44:30",
    )
    assert second.astimezone(UTC) - first.astimezone(UTC) == dt.timedelta(minutes=1, seconds=22)


LMT_TRANSITIONS = [
    ("Europe/Amsterdam", dt.datetime(1937, 6, 30, 22, 40, 28, tzinfo=UTC)),
    ("Africa/Monrovia", dt.datetime(1972, 1, 7, 0, 44, 30, tzinfo=UTC)),
    ("Africa/Monrovia", dt.datetime(1919, 3, 1, 0, 43, 8, tzinfo=UTC)),
]


@cache
def whole_minutes(zone: str, near: dt.datetime) -> list[dt.datetime]:
    return local_minutes(ZoneInfo(zone), near - dt.timedelta(hours=2), near + dt.timedelta(hours=2))


@pytest.mark.parametrize("text", [*DENSE, "0,1,58,59 23,0 * * *", "44,45 * * * *"])
@pytest.mark.parametrize(("zone", "near"), LMT_TRANSITIONS)
def test_walk_across_lmt_transitions(text, zone, near):
    """Chain next_after across a transition by seconds and compare with a second-by-second scan."""
    spec = Spec(*map(reference_values, text.split(), *zip(*BOUNDS, strict=True)))
    walk_across(CronExpression(text), spec, zone, near)


@settings(max_examples=30, deadline=None, derandomize=True)
@given(expressions(), st.sampled_from(LMT_TRANSITIONS))
def test_walk_random_expressions_across_lmt_transitions(case, transition):
    walk_across(*case, *transition)


@pytest.mark.parametrize(
    "text", ["0 0 * * *", "5 0 * * *", "0,1 0 * * *", "44,45 0 * * *", "* 0 * * *"]
)
@pytest.mark.parametrize(("zone", "near"), LMT_TRANSITIONS)
def test_from_any_instant_near_a_transition_by_seconds(text, zone, near):
    """From every second around a transition that ends between two minutes: the first
    occurrence after it, and matches() on the minutes, as the reference scan says.

    A fixed-time occurrence skipped by the gap fires at the next whole minute; asked from an
    instant between the gap's end and that minute, next_after skipped it (1937-07-01 00:00:38
    in Amsterdam gave the next day, not 00:01), and matches() of that minute was False.
    """
    tz = ZoneInfo(zone)
    expression = CronExpression(text)
    spec = Spec(*map(reference_values, text.split(), *zip(*BOUNDS, strict=True)))
    minutes = whole_minutes(zone, near)
    occurrences = [
        instant
        for previous, instant in itertools.pairwise(minutes)
        if is_occurrence(spec, instant, tz, previous)
    ]
    start = near - dt.timedelta(minutes=2)
    for second in range(0, 5 * 60, 7):
        when = (start + dt.timedelta(seconds=second)).astimezone(tz)
        expected = next((o for o in occurrences if o > when), None)
        if expected is None:
            continue
        assert expression.next_after(when).astimezone(UTC) == expected, when.isoformat()
    for instant in minutes:
        if abs(instant - near) <= dt.timedelta(minutes=3):
            local = instant.astimezone(tz)
            assert expression.matches(local) == (instant in occurrences), local.isoformat()


def walk_across(expression: CronExpression, spec: Spec, zone: str, near: dt.datetime) -> None:
    tz = ZoneInfo(zone)
    minutes = whole_minutes(zone, near)
    expected = [
        tz.fromutc(instant.replace(tzinfo=tz)).isoformat()
        for previous, instant in itertools.pairwise(minutes)
        if is_occurrence(spec, instant, tz, previous)
    ]
    found = []
    current = minutes[0].astimezone(tz)
    while True:
        current = expression.next_after(current)
        if current.astimezone(UTC) > minutes[-1]:
            break
        found.append(current.isoformat())
    assert found == expected


# -- min_interval is the wall clock's; real gaps are shorter only across an offset change ---


def test_min_interval_is_measured_on_the_wall_clock():
    # Australia/Lord_Howe goes back 30 minutes: `40 * * * *` runs at 01:40+11:00 and again at
    # 01:40+10:30, half an hour apart, though its min_interval is an hour.
    expression = CronExpression("40 * * * *")
    assert expression.min_interval == dt.timedelta(hours=1)
    first = expression.next_after(aware("2026-04-05T01:00", "Australia/Lord_Howe"))
    second = expression.next_after(first)
    assert second.astimezone(UTC) - first.astimezone(UTC) == dt.timedelta(minutes=30)
    # A fixed-time job pulled to the end of a spring-forward gap: 03:00+02:00, then 03:30.
    expression = CronExpression("30 2,3 * * *")
    first = expression.next_after(aware("2026-03-29T00:00", "Europe/Berlin"))
    second = expression.next_after(first)
    assert [first.isoformat(), second.isoformat()] == [
        "2026-03-29T03:00:00+02:00",
        "2026-03-29T03:30:00+02:00",
    ]
    assert expression.min_interval == dt.timedelta(hours=1)


# Closer in real time on some DST day of the test zones (Lord_Howe goes back 30 minutes).
CLOSE = ["40 * * * *", "30,59 * * * *", "30 2,3 * * *"]


@pytest.mark.parametrize("text", [*DENSE, *CLOSE, "0,45 * * * *", "15 1,2 * * *"])
def test_real_gaps_below_min_interval_straddle_an_offset_change(text):
    """Walk the transitions of 2025-2027 of every test zone: shorter gaps happen only there."""
    expression = CronExpression(text)
    shorter = 0
    for zone in ZONES:
        tz = ZoneInfo(zone)
        for near in transitions(zone):
            if not 2025 <= near.year <= 2027:
                continue
            current = expression.next_after((near - dt.timedelta(hours=3)).astimezone(tz))
            while current.astimezone(UTC) < near + dt.timedelta(hours=3):
                following = expression.next_after(current)
                gap = following.astimezone(UTC) - current.astimezone(UTC)
                if gap < expression.min_interval:
                    shorter += 1
                    # The offset just before the earlier run differs from the later run's.
                    before = (current.astimezone(UTC) - dt.timedelta(minutes=1)).astimezone(tz)
                    assert before.utcoffset() != following.utcoffset(), (zone, current, following)
                current = following
    assert shorter or text not in CLOSE


# -- equality follows the schedule's meaning ------------------------------------------------

TIMES = ["*", "0-59", "0", "0,1"], ["*", "0-23", "3"]
DAYS = ["*", "1-31", "1-30", "1-29", "31", "30", "29,30", "1"]
MONTHS = ["*", "1-12", "2", "2,4", "1,2", "4,5", "2-4"]
WEEKDAYS = ["*", "0-6", "1", "0-5"]


@cache
def matching_days(doms: str, months: str, dows: str) -> frozenset[dt.date]:
    """Return the matching dates of 2000-2027, a stretch that has every shape of every month."""
    values = (
        reference_values(part, *BOUNDS[index + 2])
        for index, part in enumerate((doms, months, dows))
    )
    spec = Spec(frozenset({0}), frozenset({0}), *values)
    day = dt.date(2000, 1, 1)
    found = set()
    while day.year < 2028:
        if spec.wall_matches(dt.datetime(day.year, day.month, day.day)):
            found.add(day)
        day += dt.timedelta(days=1)
    return frozenset(found)


def meaning(text: str) -> tuple[object, ...]:
    _, _, doms, months, dows = text.split()
    spec = Spec(*map(reference_values, text.split(), *zip(*BOUNDS, strict=True)))
    return (
        spec.fixed,
        spec.minutes or frozenset(range(60)),
        spec.hours or frozenset(range(24)),
        matching_days(doms, months, dows),
    )


def test_equal_exactly_when_the_occurrences_are_the_same():
    """Every combination of a small alphabet: equality, hash and str() follow the meaning."""
    by_meaning: dict[tuple[object, ...], set[str]] = {}
    by_text: dict[str, set[str]] = {}
    for fields in itertools.product(*TIMES, DAYS, MONTHS, WEEKDAYS):
        text = " ".join(fields)
        try:
            expression = CronExpression(text)
        except CronSyntaxError:
            assert not matching_days(*fields[2:])
            continue
        by_meaning.setdefault(meaning(text), set()).add(text)
        by_text.setdefault(str(expression), set()).add(text)
        assert CronExpression(str(expression)) == expression
        assert hash(CronExpression(str(expression))) == hash(expression)
    assert sorted(map(sorted, by_meaning.values())) == sorted(map(sorted, by_text.values()))


@pytest.mark.parametrize(
    ("value", "shown"),
    [
        (dt.date(2026, 1, 1), "not date datetime.date(2026, 1, 1) (a date has no time"),
        ("2026-01-01 03:00", "not str '2026-01-01 03:00'"),
        (None, "not NoneType None"),
    ],
)
def test_the_engine_says_it_takes_a_datetime(value, shown):
    expr = CronExpression("0 3 * * *")
    for method in ("next_after", "matches"):
        with pytest.raises(TypeError, match=rf"CronExpression\.{method}\(\) takes a datetime, "):
            getattr(expr, method)(value)
        with pytest.raises(TypeError) as raised:
            getattr(expr, method)(value)
        assert shown in str(raised.value)
