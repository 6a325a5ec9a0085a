"""Days: which days of a month match (the day rule), and the gaps between matching days."""

from __future__ import annotations

import calendar
import datetime as dt
import itertools
from typing import Final

from django_posixcron.cron import fields as f
from django_posixcron.cron.errors import CronSyntaxError

ONE_MINUTE: Final = dt.timedelta(minutes=1)
CYCLE_DAYS: Final = 146097  # 400 Gregorian years, a whole number of weeks: the day pattern repeats

# (year * 12 + month) -> index into a day-mask table: first weekday of the month * 4 + (days - 28)
MONTH_SHAPES: dict[int, int] = {}


def month_shape(year: int, month: int) -> int:
    key = year * 12 + month
    shape = MONTH_SHAPES.get(key)
    if shape is None:
        monday_based, length = calendar.monthrange(year, month)
        shape = (monday_based + 1) % 7 * 4 + (length - 28)
        MONTH_SHAPES[key] = shape
    return shape


def mask(values: tuple[int, ...]) -> int:
    bits = 0
    for value in values:
        bits |= 1 << value
    return bits


def day_masks(doms: tuple[int, ...] | None, dows: tuple[int, ...] | None) -> tuple[int, ...]:
    """Return the matching days (bit d = day d) for each month shape (first weekday, length).

    "Month always restricts. When day-of-month and day-of-week are both restricted (neither
    is `*`) a day matches if either matches; when one of them is `*`, only the other
    restricts."
    """
    masks: list[int] = []
    dom_mask = mask(doms) if doms is not None else 0
    week = mask(dows) if dows is not None else 0
    for first_weekday in range(7):
        # Day 1 falls on `first_weekday`: rotate the week so bit j is day j + 1's weekday,
        # then repeat it over five weeks.
        rotated = ((week >> first_weekday) | (week << (7 - first_weekday))) & 0x7F
        dow_mask = (rotated * 0x810204081) << 1  # 0x810204081 = bits 0, 7, 14, 21, 28
        for length in range(28, 32):
            in_month = (1 << (length + 1)) - 2
            if doms is None and dows is None:
                days = in_month
            elif doms is None:
                days = dow_mask
            elif dows is None:
                days = dom_mask
            else:
                days = dom_mask | dow_mask
            masks.append(days & in_month)
    return tuple(masks)


def check_fires(doms: tuple[int, ...], months: tuple[int, ...], text: str) -> None:
    longest = {2: 29, 4: 30, 6: 30, 9: 30, 11: 30}
    if any(doms[0] <= longest.get(month, 31) for month in months):
        return
    names = [f.MONTH_NAMES[month - 1] for month in months]
    listed = names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]
    days = [str(day) for day in doms]
    day_text = days[0] if len(days) == 1 else ", ".join(days[:-1]) + " or " + days[-1]
    verb = "has" if len(names) == 1 else "have"
    raise CronSyntaxError(
        f.DAY_OF_MONTH.name, text, f"never fires: {listed} {verb} no day {day_text}"
    )


def shortest_interval(
    hours: tuple[int, ...], minutes: tuple[int, ...], masks: tuple[int, ...], month_mask: int
) -> dt.timedelta:
    """Return the shortest wall-clock gap between two consecutive occurrences."""
    times = [hour * 60 + minute for hour in hours for minute in minutes]
    within = min((b - a for a, b in itertools.pairwise(times)), default=10**9)
    if within == 1:
        return ONE_MINUTE
    day_gap = _min_day_gap(masks, month_mask)
    return dt.timedelta(minutes=min(within, day_gap * 1440 - (times[-1] - times[0])))


def _min_day_gap(masks: tuple[int, ...], month_mask: int) -> int:
    """Return the fewest days between two consecutive matching days.

    The Gregorian calendar repeats every 400 years, weekdays included (146097 days is a
    whole number of weeks), so one cycle plus its wrap-around covers every case.
    """
    never = 10**9
    gaps: dict[int, tuple[int, int, int]] = {}
    for shape, days in enumerate(masks):
        if days:
            # The smallest distance between any two matching days is the smallest between
            # two consecutive ones.
            closest = next((g for g in range(1, 31) if days & (days >> g)), never)
            gaps[shape] = ((days & -days).bit_length() - 1, days.bit_length() - 1, closest)
    best = never
    previous: int | None = None
    first: int | None = None
    ordinal = dt.date(2000, 1, 1).toordinal()
    for year in range(2000, 2400):
        for month in range(1, 13):
            shape = month_shape(year, month)
            length = shape % 4 + 28
            if month_mask >> month & 1 and shape in gaps:
                low, high, closest = gaps[shape]
                best = min(best, closest)
                if previous is not None:
                    best = min(best, ordinal + low - previous)
                else:
                    first = ordinal + low
                previous = ordinal + high
                if best == 1:
                    return 1
            ordinal += length
    assert first is not None
    assert previous is not None
    return min(best, first + CYCLE_DAYS - previous)
