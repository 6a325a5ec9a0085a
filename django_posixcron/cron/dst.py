"""Debian cron's daylight-saving rule: when a matching wall-clock minute fires in a zone.

cronsim does the fix-up for fixed-time schedules in a few lines (``while is_imaginary(result):
self.dt += 1 minute``, then ``fold=0``). ``fire_times`` is the same step with one branch per case,
each quoting its sentence of the rule (DESIGN, section 2), elapsed-time schedules included; the
expression's walk (``CronExpression._next_zoned``) calls it for every matching wall-clock minute
that does not simply exist once at the offset it started from.
"""

from __future__ import annotations

import datetime as dt
from typing import Final

_ONE_MINUTE: Final = dt.timedelta(minutes=1)


def fire_times(wall: dt.datetime, fixed: bool) -> tuple[dt.datetime, ...]:
    """Return when the matching wall-clock minute `wall` (aware, fold=0) fires, earliest first.

    `fixed` is true for a fixed-time schedule: "neither the minute nor the hour field is `*`".
    """
    tz = wall.tzinfo
    assert tz is not None
    twin = wall.replace(fold=1)
    first = tz.utcoffset(wall)
    second = tz.utcoffset(twin)
    assert first is not None
    assert second is not None
    if first == second:
        return (wall,)  # an ordinary minute: it happens once
    if first > second:
        # A minute repeated by a fall-back. Fixed-time: "an occurrence in a repeated
        # (fall-back) hour fires once, at its first instance". Elapsed-time: "repeated ones
        # fire again".
        return (wall,) if fixed else (wall, twin)
    # A minute skipped by a spring-forward gap. Fixed-time: "an occurrence skipped by a
    # spring-forward gap fires once at the first instant after the gap". Elapsed-time:
    # "wall-clock minutes that do not exist are skipped".
    return (after_the_gap(wall, second - first),) if fixed else ()


def skipped(wall: dt.datetime) -> bool:
    """Return whether the wall-clock time `wall` (aware) falls in a spring-forward gap."""
    tz = wall.tzinfo
    assert tz is not None
    before = tz.utcoffset(wall if not wall.fold else wall.replace(fold=0))
    after = tz.utcoffset(wall.replace(fold=1))
    assert before is not None
    assert after is not None
    return before < after


def after_the_gap(wall: dt.datetime, jump: dt.timedelta) -> dt.datetime:
    """Return the first whole wall-clock minute after the gap (of length `jump`) that skips `wall`.

    Occurrences are whole minutes of the wall clock, like every minute cron looks at. Where the
    offsets are whole minutes (every zone since the 1970s) that is the gap's end itself; where a
    gap ends between two minutes (local mean time before about 1900: Europe/Amsterdam jumped
    28 seconds in 1937) it is the minute after. `wall` plus the whole jump is past the gap, so
    the answer is found by halving that span.
    """
    # Nearly every gap ends on the hour or the half hour: try that first (two look-ups, not six).
    guess = wall + (30 - wall.minute % 30) * _ONE_MINUTE
    if not skipped(guess) and skipped(guess - _ONE_MINUTE):
        return guess
    low, high = 0, -(-jump // _ONE_MINUTE)
    while high - low > 1:
        middle = (low + high) // 2
        if skipped(wall + middle * _ONE_MINUTE):
            low = middle
        else:
            high = middle
    return wall + high * _ONE_MINUTE
