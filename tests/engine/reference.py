"""A slow, obviously-correct reference: scan minute by minute, apply the spec sentence by sentence.

It shares no code with the engine: the fields come as sets from the test's own generator.
"""

from __future__ import annotations

import datetime as dt
from dataclasses import dataclass

UTC = dt.UTC
MINUTE = dt.timedelta(minutes=1)


@dataclass(frozen=True)
class Spec:
    """The five fields as sets; None stands for `*`."""

    minutes: frozenset[int] | None
    hours: frozenset[int] | None
    doms: frozenset[int] | None
    months: frozenset[int] | None
    dows: frozenset[int] | None

    @property
    def fixed(self) -> bool:
        # "Fixed-time schedules (neither the minute nor the hour field is `*`)"
        return self.minutes is not None and self.hours is not None

    def wall_matches(self, wall: dt.datetime) -> bool:
        if self.minutes is not None and wall.minute not in self.minutes:
            return False
        if self.hours is not None and wall.hour not in self.hours:
            return False
        # "Month always restricts."
        if self.months is not None and wall.month not in self.months:
            return False
        weekday = wall.isoweekday() % 7  # 0 = Sunday
        dom_ok = self.doms is None or wall.day in self.doms
        dow_ok = self.dows is None or weekday in self.dows
        # "When day-of-month and day-of-week are both restricted (neither is `*`) a day
        # matches if either matches; when one of them is `*`, only the other restricts."
        if self.doms is not None and self.dows is not None:
            return dom_ok or dow_ok
        return dom_ok and dow_ok


def floor_minute(value: dt.datetime) -> dt.datetime:
    return value.replace(second=0, microsecond=0)


def naive_next(spec: Spec, after: dt.datetime, limit: int) -> dt.datetime | None:
    """Return the first matching wall minute after `after` within `limit` minutes, or None."""
    wall = floor_minute(after)
    for _ in range(limit):
        wall += MINUTE
        if spec.wall_matches(wall):
            return wall
    return None


def is_occurrence(
    spec: Spec, instant: dt.datetime, tz: dt.tzinfo, previous: dt.datetime | None = None
) -> bool:
    """Return whether the whole-minute UTC `instant` (aware) is an occurrence in `tz`.

    `previous` is the instant of the wall clock's previous whole minute; one minute earlier
    unless the zone's offsets have seconds (see `local_minutes`).
    """
    # fromutc always works out the fold; astimezone() keeps a stale fold when zones match.
    instant = instant.astimezone(UTC).replace(fold=0)
    local = tz.fromutc(instant.replace(tzinfo=tz))
    wall = local.replace(tzinfo=None)
    if not spec.fixed:
        # "Schedules with `*` in the minute or hour field follow elapsed time: wall-clock
        # minutes that do not exist are skipped, repeated ones fire again."
        return spec.wall_matches(wall)
    # "an occurrence in a repeated (fall-back) hour fires once, at its first instance"
    if local.fold == 1:
        return False
    if spec.wall_matches(wall):
        return True
    # "an occurrence skipped by a spring-forward gap fires once at the first instant after
    # the gap": this minute is that instant if the wall clock jumped forward into it.
    before = instant - MINUTE if previous is None else previous.astimezone(UTC)
    skipped = tz.fromutc(before.replace(tzinfo=tz)).replace(tzinfo=None) + MINUTE
    while skipped < wall:
        if spec.wall_matches(skipped):
            return True
        skipped += MINUTE
    return False


def zoned_next(spec: Spec, after: dt.datetime, limit: int) -> dt.datetime | None:
    """Return the first occurrence after aware `after` within `limit` minutes, in its zone."""
    tz = after.tzinfo
    assert tz is not None
    instant = floor_minute(after.astimezone(UTC)).replace(fold=0)
    for _ in range(limit):
        instant += MINUTE
        if is_occurrence(spec, instant, tz):
            return tz.fromutc(instant.replace(tzinfo=tz))
    return None


def local_minutes(tz: dt.tzinfo, start: dt.datetime, end: dt.datetime) -> list[dt.datetime]:
    """Return the UTC instants in [start, end] at which `tz`'s wall clock shows a whole minute.

    Second by second, so it also holds for offsets with seconds (local mean time before about
    1900), whose whole wall-clock minutes are not whole UTC minutes.
    """
    found = []
    instant = start.astimezone(UTC).replace(microsecond=0)
    while instant <= end:
        if tz.fromutc(instant.replace(tzinfo=tz)).second == 0:
            found.append(instant)
        instant += dt.timedelta(seconds=1)
    return found
