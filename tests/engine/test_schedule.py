"""Occurrences on the wall clock: the day rule, next_after, matches, min_interval, describe."""

from __future__ import annotations

import datetime as dt

import pytest

from django_posixcron.cron import CronExpression

NOW = dt.datetime(2026, 1, 15, 10, 20, 30)  # a Thursday


def upcoming(text: str, start: dt.datetime = NOW, count: int = 5) -> list[str]:
    expression = CronExpression(text)
    result = []
    for _ in range(count):
        start = expression.next_after(start)
        result.append(start.isoformat())
    return result


def test_next_after_is_strictly_after_and_drops_seconds():
    expression = CronExpression("* * * * *")
    assert expression.next_after(NOW) == dt.datetime(2026, 1, 15, 10, 21)
    on_the_minute = dt.datetime(2026, 1, 15, 10, 21)
    assert expression.next_after(on_the_minute) == dt.datetime(2026, 1, 15, 10, 22)


def test_weekdays_at_a_fixed_time():
    assert upcoming("15 3 * * 1-5") == [
        "2026-01-16T03:15:00",
        "2026-01-19T03:15:00",
        "2026-01-20T03:15:00",
        "2026-01-21T03:15:00",
        "2026-01-22T03:15:00",
    ]


def test_day_of_month_or_day_of_week_when_both_restricted():
    # "`0 0 1,15 * 1` fires on the 1st, the 15th and every Monday."
    assert upcoming("0 0 1,15 * 1", dt.datetime(2026, 1, 31), 6) == [
        "2026-02-01T00:00:00",
        "2026-02-02T00:00:00",
        "2026-02-09T00:00:00",
        "2026-02-15T00:00:00",
        "2026-02-16T00:00:00",
        "2026-02-23T00:00:00",
    ]


def test_only_the_restricted_day_field_counts_when_the_other_is_star():
    assert upcoming("0 0 13 * *", count=2) == ["2026-02-13T00:00:00", "2026-03-13T00:00:00"]
    assert upcoming("0 0 * * 5", count=2) == ["2026-01-16T00:00:00", "2026-01-23T00:00:00"]


def test_month_always_restricts():
    assert upcoming("0 0 13 3 5", count=4) == [
        "2026-03-06T00:00:00",
        "2026-03-13T00:00:00",
        "2026-03-20T00:00:00",
        "2026-03-27T00:00:00",
    ]


def test_leap_days_and_month_ends():
    assert upcoming("0 0 29 2 *", count=3) == [
        "2028-02-29T00:00:00",
        "2032-02-29T00:00:00",
        "2036-02-29T00:00:00",
    ]
    assert upcoming("0 0 29 2 *", dt.datetime(2096, 3, 1), 2) == [
        "2104-02-29T00:00:00",
        "2108-02-29T00:00:00",
    ]
    assert upcoming("0 0 31 * *", count=4) == [
        "2026-01-31T00:00:00",
        "2026-03-31T00:00:00",
        "2026-05-31T00:00:00",
        "2026-07-31T00:00:00",
    ]
    assert upcoming("59 23 31 12 *", count=2) == ["2026-12-31T23:59:00", "2027-12-31T23:59:00"]


def test_rollover_of_every_field_at_once():
    assert CronExpression("0 0 1 1 *").next_after(dt.datetime(2026, 12, 31, 23, 59, 59)) == (
        dt.datetime(2027, 1, 1)
    )


def test_end_of_the_calendar():
    expression = CronExpression("0 0 29 2 *")
    with pytest.raises(OverflowError, match="no occurrence before the year 10000"):
        expression.next_after(dt.datetime(9997, 1, 1))
    assert CronExpression("59 23 31 12 *").next_after(dt.datetime(9999, 12, 31)) == (
        dt.datetime(9999, 12, 31, 23, 59)
    )


def test_matches_naive_and_fixed_offset():
    expression = CronExpression("15 3 * * 1-5")
    assert expression.matches(dt.datetime(2026, 1, 16, 3, 15, 59))
    assert not expression.matches(dt.datetime(2026, 1, 17, 3, 15))  # Saturday
    assert not expression.matches(dt.datetime(2026, 1, 16, 3, 16))
    plus_two = dt.timezone(dt.timedelta(hours=2))
    assert expression.matches(dt.datetime(2026, 1, 16, 3, 15, tzinfo=plus_two))
    assert not expression.matches(
        dt.datetime(2026, 1, 16, 3, 15, tzinfo=dt.UTC).astimezone(plus_two)
    )


def test_fixed_offset_keeps_its_tzinfo():
    plus_two = dt.timezone(dt.timedelta(hours=2))
    found = CronExpression("15 3 * * *").next_after(dt.datetime(2026, 1, 16, tzinfo=plus_two))
    assert found.isoformat() == "2026-01-16T03:15:00+02:00"
    assert found.tzinfo is plus_two


@pytest.mark.parametrize(
    ("text", "interval"),
    [
        ("* * * * *", dt.timedelta(minutes=1)),
        ("0,59 * * * *", dt.timedelta(minutes=1)),
        ("0 * * * *", dt.timedelta(hours=1)),
        ("0,30 * * * *", dt.timedelta(minutes=30)),
        ("5,10,15,20,25,30,35,40,45,50,55 * * * *", dt.timedelta(minutes=5)),
        ("0 9-17 * * 1-5", dt.timedelta(hours=1)),
        ("0 0,23 * * *", dt.timedelta(hours=1)),
        ("59 23 * * *", dt.timedelta(days=1)),
        ("0 23 * * 1", dt.timedelta(days=7)),
        ("30 2 * * 0", dt.timedelta(days=7)),
        ("15 3 * * 1-5", dt.timedelta(days=1)),
        ("0 0 1,15 * 1", dt.timedelta(days=1)),
        ("0 12 14 2 *", dt.timedelta(days=365)),
        ("0 0 29 2 *", dt.timedelta(days=1461)),
        ("59 23 31 12 *", dt.timedelta(days=365)),
        ("0 0 31 * *", dt.timedelta(days=31)),
        ("0 0 31 1,3 *", dt.timedelta(days=59)),
        ("0 0 30 1,3 *", dt.timedelta(days=59)),
        ("0 0 28,31 * *", dt.timedelta(days=3)),
        ("59 23 28 2 *", dt.timedelta(days=365)),
        ("0 0 29 2 0", dt.timedelta(days=1)),  # Sundays or leap days: 28 Feb (Sun) -> 29 Feb
        ("0,59 0,23 1 1 *", dt.timedelta(minutes=59)),
        ("0 0,23 1 1 *", dt.timedelta(hours=23)),
        ("0 0,23 1,2 1 *", dt.timedelta(hours=1)),
        ("59 23 1 * *", dt.timedelta(days=28)),
        ("0 0 1 3 *", dt.timedelta(days=365)),
        ("0 0 13 * 5", dt.timedelta(days=1)),
    ],
)
def test_min_interval(text, interval):
    assert CronExpression(text).min_interval == interval


def brute_min_interval(text: str, years: int) -> dt.timedelta:
    expression = CronExpression(text)
    previous = expression.next_after(dt.datetime(2000, 1, 1))
    best = dt.timedelta.max
    while previous.year < 2000 + years:
        following = expression.next_after(previous)
        best = min(best, following - previous)
        previous = following
    return best


@pytest.mark.parametrize(
    "text", ["0 0 31 * *", "30 2 * * 0", "0 12 14 2 *", "0 0 1,15 * 1", "0 0 13 * 5", "0 0 30 * 2"]
)
def test_min_interval_agrees_with_walking_a_whole_cycle(text):
    assert CronExpression(text).min_interval == brute_min_interval(text, 400)


@pytest.mark.parametrize(
    ("text", "description"),
    [
        ("15 3 * * 1-5", "At 03:15, Monday through Friday"),
        ("* * * * *", "Every minute"),
        ("0,30 * * * *", "At minutes 0 and 30 of every hour"),
        ("0 * * * *", "At minute 0 of every hour"),
        ("* 2 * * *", "Every minute from 02:00 through 02:59"),
        ("* 2,4 * * *", "Every minute of hours 2 and 4"),
        ("0 9-17 * * 1-5", "At minute 0 of hours 9 through 17, Monday through Friday"),
        ("0 0 1,15 * 1", "At 00:00, on days 1 and 15 of the month or on Monday"),
        ("0 12 14 2 *", "At 12:00, on February 14"),
        ("0 0 29 2 *", "At 00:00, on February 29"),
        ("30 2 * * 0", "At 02:30, on Sunday"),
        ("0 0 31 * *", "At 00:00, on day 31 of the month"),
        ("0 8,12,18 * * *", "At 08:00, 12:00 and 18:00"),
        ("0 0 1 1-3 *", "At 00:00, on day 1 of the month, only in January through March"),
        (
            "0 0 * 6,12 1,3,5",
            "At 00:00, on Monday, Wednesday and Friday, only in June and December",
        ),
        # The month restricts the weekday alternative too: not "on February 29 or on Monday".
        ("0 0 29 2 1", "At 00:00, on day 29 of the month or on Monday, only in February"),
        (
            "30 2 1 1 1-5",
            "At 02:30, on day 1 of the month or on Monday through Friday, only in January",
        ),
    ],
)
def test_describe(text, description):
    assert CronExpression(text).describe() == description
