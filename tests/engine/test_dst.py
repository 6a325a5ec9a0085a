"""Daylight saving time: Debian cron's rule, checked as .isoformat() strings (offsets included)."""

from __future__ import annotations

import datetime as dt
import itertools
from zoneinfo import ZoneInfo

import pytest

from django_posixcron.cron import CronExpression


def upcoming(text: str, zone: str, start: str, count: int) -> list[str]:
    tz = ZoneInfo(zone)
    current = dt.datetime.fromisoformat(start).replace(tzinfo=tz)
    expression = CronExpression(text)
    result = []
    for _ in range(count):
        current = expression.next_after(current)
        assert current.tzinfo is tz
        result.append(current.isoformat())
    return result


CASES = [
    # Europe/Berlin, 2026-03-29: 02:00 CET -> 03:00 CEST.
    # A fixed-time occurrence in the gap fires once, at the first instant after it.
    ("30 2 * * *", "Europe/Berlin", "2026-03-28T12:00", [
        "2026-03-29T03:00:00+02:00", "2026-03-30T02:30:00+02:00"]),
    # Both 02:00 and 02:30 collapse into that one instant.
    ("0,30 2 * * *", "Europe/Berlin", "2026-03-28T12:00", [
        "2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00"]),
    ("0 2,3 * * *", "Europe/Berlin", "2026-03-28T12:00", [
        "2026-03-29T03:00:00+02:00", "2026-03-30T02:00:00+02:00"]),
    # Elapsed-time schedules skip minutes that do not exist: nothing on the 29th.
    ("* 2 * * *", "Europe/Berlin", "2026-03-29T00:00", ["2026-03-30T02:00:00+02:00"]),
    ("0 * * * *", "Europe/Berlin", "2026-03-29T00:30", [
        "2026-03-29T01:00:00+01:00", "2026-03-29T03:00:00+02:00", "2026-03-29T04:00:00+02:00"]),
    ("30 * * * *", "Europe/Berlin", "2026-03-29T01:00", [
        "2026-03-29T01:30:00+01:00", "2026-03-29T03:30:00+02:00"]),
    # Europe/Berlin, 2026-10-25: 03:00 CEST -> 02:00 CET; 02:00-02:59 happens twice.
    # A fixed-time occurrence in the repeated hour fires once, on its first pass.
    ("30 2 * * *", "Europe/Berlin", "2026-10-24T12:00", [
        "2026-10-25T02:30:00+02:00", "2026-10-26T02:30:00+01:00"]),
    ("15,45 2 * * *", "Europe/Berlin", "2026-10-25T00:00", [
        "2026-10-25T02:15:00+02:00", "2026-10-25T02:45:00+02:00", "2026-10-26T02:15:00+01:00"]),
    # Elapsed-time schedules fire again on the second pass.
    ("0 * * * *", "Europe/Berlin", "2026-10-25T00:30", [
        "2026-10-25T01:00:00+02:00", "2026-10-25T02:00:00+02:00", "2026-10-25T02:00:00+01:00",
        "2026-10-25T03:00:00+01:00"]),
    ("59 * * * *", "Europe/Berlin", "2026-10-25T02:00", [
        "2026-10-25T02:59:00+02:00", "2026-10-25T02:59:00+01:00", "2026-10-25T03:59:00+01:00"]),
    # Australia/Lord_Howe shifts by 30 minutes: 02:00 -> 02:30 on 2026-10-04 ...
    ("0 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00", [
        "2026-10-04T02:30:00+11:00", "2026-10-05T02:00:00+11:00"]),
    ("45 2 * * *", "Australia/Lord_Howe", "2026-10-03T12:00", [
        "2026-10-04T02:45:00+11:00", "2026-10-05T02:45:00+11:00"]),
    ("15 * * * *", "Australia/Lord_Howe", "2026-10-04T01:00", [
        "2026-10-04T01:15:00+10:30", "2026-10-04T03:15:00+11:00"]),
    # ... and 02:00 -> 01:30 on 2026-04-05 (01:30-01:59 twice).
    ("40 1 * * *", "Australia/Lord_Howe", "2026-04-04T12:00", [
        "2026-04-05T01:40:00+11:00", "2026-04-06T01:40:00+10:30"]),
    ("40 * * * *", "Australia/Lord_Howe", "2026-04-05T01:00", [
        "2026-04-05T01:40:00+11:00", "2026-04-05T01:40:00+10:30", "2026-04-05T02:40:00+10:30"]),
    ("20 * * * *", "Australia/Lord_Howe", "2026-04-05T01:00", [
        "2026-04-05T01:20:00+11:00", "2026-04-05T02:20:00+10:30"]),
    # Pacific/Chatham (+12:45 / +13:45): 02:45 -> 03:45 on 2026-09-27 ...
    ("0 3 * * *", "Pacific/Chatham", "2026-09-26T12:00", [
        "2026-09-27T03:45:00+13:45", "2026-09-28T03:00:00+13:45"]),
    ("0 * * * *", "Pacific/Chatham", "2026-09-27T01:30", [
        "2026-09-27T02:00:00+12:45", "2026-09-27T04:00:00+13:45"]),
    # ... and 03:45 -> 02:45 on 2026-04-05.
    ("0 3 * * *", "Pacific/Chatham", "2026-04-04T12:00", [
        "2026-04-05T03:00:00+13:45", "2026-04-06T03:00:00+12:45"]),
    ("0 * * * *", "Pacific/Chatham", "2026-04-05T01:30", [
        "2026-04-05T02:00:00+13:45", "2026-04-05T03:00:00+13:45", "2026-04-05T03:00:00+12:45",
        "2026-04-05T04:00:00+12:45"]),
    # Asia/Kolkata: a half-hour offset and no DST.
    ("15 3 * * 1-5", "Asia/Kolkata", "2026-01-15T12:00", [
        "2026-01-16T03:15:00+05:30", "2026-01-19T03:15:00+05:30"]),
    # America/Havana changes at midnight: 00:00 -> 01:00 on 2026-03-08 ...
    ("0 0 * * *", "America/Havana", "2026-03-07T12:00", [
        "2026-03-08T01:00:00-04:00", "2026-03-09T00:00:00-04:00"]),
    ("0 * * * *", "America/Havana", "2026-03-07T22:30", [
        "2026-03-07T23:00:00-05:00", "2026-03-08T01:00:00-04:00"]),
    # ... and 01:00 -> 00:00 on 2026-11-01.
    ("30 0 * * *", "America/Havana", "2026-10-31T12:00", [
        "2026-11-01T00:30:00-04:00", "2026-11-02T00:30:00-05:00"]),
    ("30 * * * *", "America/Havana", "2026-10-31T23:45", [
        "2026-11-01T00:30:00-04:00", "2026-11-01T00:30:00-05:00", "2026-11-01T01:30:00-05:00"]),
    # America/Santiago: 24:00 -> 01:00 on 2026-09-06 (Sunday) ...
    ("30 0 * * *", "America/Santiago", "2026-09-05T12:00", [
        "2026-09-06T01:00:00-03:00", "2026-09-07T00:30:00-03:00"]),
    ("0 0 * * 0", "America/Santiago", "2026-09-05T12:00", [
        "2026-09-06T01:00:00-03:00", "2026-09-13T00:00:00-03:00"]),
    # ... and 24:00 -> 23:00 on 2026-04-04 (Saturday 23:00-23:59 twice).
    ("30 23 * * *", "America/Santiago", "2026-04-04T12:00", [
        "2026-04-04T23:30:00-03:00", "2026-04-05T23:30:00-04:00"]),
    ("0 * * * *", "America/Santiago", "2026-04-04T21:30", [
        "2026-04-04T22:00:00-03:00", "2026-04-04T23:00:00-03:00", "2026-04-04T23:00:00-04:00",
        "2026-04-05T00:00:00-04:00"]),
    # Pacific/Apia skipped 2011-12-30 whole (-10:00 -> +14:00): the rule has no size limit,
    # the day's fixed-time occurrences collapse into one run at the next midnight ...
    ("0 12 * * *", "Pacific/Apia", "2011-12-29T13:00", [
        "2011-12-31T00:00:00+14:00", "2011-12-31T12:00:00+14:00"]),
    ("0 9,17 * * *", "Pacific/Apia", "2011-12-29T12:00", [
        "2011-12-29T17:00:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T09:00:00+14:00"]),
    ("0 12 30 12 *", "Pacific/Apia", "2011-06-01T00:00", [
        "2011-12-31T00:00:00+14:00", "2012-12-30T12:00:00+14:00"]),
    # ... and elapsed-time schedules skip it.
    ("0 * * * *", "Pacific/Apia", "2011-12-29T22:30", [
        "2011-12-29T23:00:00-10:00", "2011-12-31T00:00:00+14:00", "2011-12-31T01:00:00+14:00"]),
    ("* 12 * * *", "Pacific/Apia", "2011-12-29T13:00", ["2011-12-31T12:00:00+14:00"]),
]  # fmt: skip


@pytest.mark.parametrize(("text", "zone", "start", "expected"), CASES)
def test_dst_rule(text, zone, start, expected):
    assert upcoming(text, zone, start, len(expected)) == expected


def from_utc(text: str, zone: str) -> dt.datetime:
    return dt.datetime.fromisoformat(text).astimezone(ZoneInfo(zone))


def test_next_after_from_the_second_pass_of_a_repeated_hour():
    # 02:10+01:00 is after the first pass: a fixed-time job has already fired at 02:30+02:00.
    start = from_utc("2026-10-25T01:10:00+00:00", "Europe/Berlin")
    assert start.isoformat() == "2026-10-25T02:10:00+01:00"
    assert CronExpression("30 2 * * *").next_after(start).isoformat() == (
        "2026-10-26T02:30:00+01:00"
    )
    assert CronExpression("30 * * * *").next_after(start).isoformat() == (
        "2026-10-25T02:30:00+01:00"
    )
    # From the first pass at 02:40, an elapsed-time job comes back for 02:30 on the second.
    first_pass = from_utc("2026-10-25T00:40:00+00:00", "Europe/Berlin")
    assert CronExpression("30 * * * *").next_after(first_pass).isoformat() == (
        "2026-10-25T02:30:00+01:00"
    )
    assert CronExpression("30 2 * * *").next_after(first_pass).isoformat() == (
        "2026-10-26T02:30:00+01:00"
    )


def test_next_after_the_collapsed_instant_moves_on():
    berlin = ZoneInfo("Europe/Berlin")
    collapsed = dt.datetime(2026, 3, 29, 3, 0, tzinfo=berlin)
    assert CronExpression("0,30 2 * * *").next_after(collapsed).isoformat() == (
        "2026-03-30T02:00:00+02:00"
    )
    just_before = dt.datetime(2026, 3, 29, 1, 59, 59, 999999, tzinfo=berlin)
    assert CronExpression("0,30 2 * * *").next_after(just_before).isoformat() == (
        "2026-03-29T03:00:00+02:00"
    )


@pytest.mark.parametrize(
    ("text", "instant", "expected"),
    [
        ("30 2 * * *", "2026-03-29T01:00:00+00:00", True),  # 03:00+02:00, after the gap
        ("0 3 * * *", "2026-03-29T01:00:00+00:00", True),
        ("* 2 * * *", "2026-03-29T01:00:00+00:00", False),
        ("30 2 * * *", "2026-10-25T00:30:00+00:00", True),  # 02:30+02:00, first pass
        ("30 2 * * *", "2026-10-25T01:30:00+00:00", False),  # 02:30+01:00, second pass
        ("30 * * * *", "2026-10-25T01:30:00+00:00", True),
        ("30 2 * * *", "2026-10-25T01:30:59+00:00", False),
    ],
)
def test_matches_follows_the_same_rule(text, instant, expected):
    assert CronExpression(text).matches(from_utc(instant, "Europe/Berlin")) is expected


def test_aware_results_are_instants_not_wall_clock_arithmetic():
    """Chaining through a repeated hour must never go backwards in real time."""
    berlin = ZoneInfo("Europe/Berlin")
    expression = CronExpression("* * * * *")
    current = dt.datetime(2026, 10, 25, 1, 58, tzinfo=berlin)
    instants = []
    for _ in range(180):
        current = expression.next_after(current)
        instants.append(current.astimezone(dt.UTC))
    steps = {b - a for a, b in itertools.pairwise(instants)}
    assert steps == {dt.timedelta(minutes=1)}


@pytest.mark.parametrize(
    ("text", "zone", "wall", "expected"),
    [
        # 02:30 with fold=1 does not exist in Berlin on 2026-03-29: Python reads it with the
        # later offset, which makes it 01:30 CET, before the gap. "Strictly after" that instant.
        ("45 1 * * *", "Europe/Berlin", "2026-03-29T02:30", "2026-03-29T01:45:00+01:00"),
        ("* * * * *", "Europe/Berlin", "2026-03-29T02:30", "2026-03-29T01:31:00+01:00"),
        ("30 2 * * *", "Europe/Berlin", "2026-03-29T02:30", "2026-03-29T03:00:00+02:00"),
        ("0,40 1 * * *", "America/New_York", "2026-03-08T02:30", "2026-03-08T01:40:00-05:00"),
        ("50 23 * * *", "America/Havana", "2026-03-08T00:30", "2026-03-07T23:50:00-05:00"),
        ("* * * * *", "Australia/Lord_Howe", "2026-10-04T02:15", "2026-10-04T01:46:00+10:30"),
        # In a repeated hour fold=1 is the second pass, as ever.
        ("0 * * * *", "Europe/Berlin", "2026-10-25T02:30", "2026-10-25T03:00:00+01:00"),
    ],
)
def test_a_gap_time_with_fold_1_is_the_instant_before_the_gap(text, zone, wall, expected):
    tz = ZoneInfo(zone)
    when = dt.datetime.fromisoformat(wall).replace(tzinfo=tz, fold=1)
    found = CronExpression(text).next_after(when)
    assert found.isoformat() == expected
    assert found.tzinfo is tz
    # The same instant written canonically gives the same answer.
    canonical = when.astimezone(dt.UTC).astimezone(tz)
    assert CronExpression(text).next_after(canonical) == found


def test_matches_in_a_zone_whose_summer_offset_is_zero():
    # Atlantic/Azores: -01:00 in winter, +00:00 in summer. An offset of zero is an offset:
    # read as "none", the search started an hour late and skipped the minute asked about.
    azores = ZoneInfo("Atlantic/Azores")
    # Spring forward on 2026-03-29: 00:00-01:00 does not exist; 00:30 (fold=0) names 01:30+00:00.
    in_gap = dt.datetime(2026, 3, 29, 0, 30, tzinfo=azores)
    assert CronExpression("* * * * *").matches(in_gap)
    assert CronExpression("5 1 * * *").matches(dt.datetime(2026, 3, 29, 0, 5, tzinfo=azores))
    # Fall back on 2026-10-25: 00:00-01:00 happens twice; 00:00-01:00 (fold=1) is 01:00 UTC.
    second_pass = dt.datetime(2026, 10, 25, 0, 0, fold=1, tzinfo=azores)
    assert CronExpression("0 * * * *").matches(second_pass)
    found = CronExpression("0 * * * *").next_after(dt.datetime(2026, 10, 24, 23, 30, tzinfo=azores))
    assert (found.isoformat(), found.fold) == ("2026-10-25T00:00:00+00:00", 0)
    assert CronExpression("0 * * * *").matches(found)
