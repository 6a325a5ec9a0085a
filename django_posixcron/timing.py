"""Where a task's cron cursor goes: the engine's occurrences, as UTC instants."""

from __future__ import annotations

import datetime as dt
from functools import lru_cache
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from django_posixcron.cron import CronExpression

UTC = dt.UTC
_TICK = dt.timedelta(microseconds=1)
_MINUTE = dt.timedelta(minutes=1)


def require_aware(value: object, what: str = "now") -> None:
    """Raise TypeError unless `value` is an aware datetime: an instant of the API's callers
    (tests drive the scheduler at one) is compared with the stored UTC instants."""
    if not isinstance(value, dt.datetime) or value.utcoffset() is None:
        raise TypeError(f"{what} must be an aware datetime, got {value!r}")


def expression(schedule: str) -> CronExpression:
    """Return the parsed expression: the engine's own cache answers repeated questions."""
    return CronExpression(schedule)


@lru_cache(maxsize=512)
def zone(name: str) -> ZoneInfo:
    """Return the zone `name`; raise ZoneInfoNotFoundError or ValueError if none loads."""
    try:
        return ZoneInfo(name)
    except OSError as exc:
        # ZoneInfo raises IsADirectoryError for a directory of the zone files ('Europe'):
        # a name that loads no zone all the same, which callers catch as ZoneInfo's own.
        raise ZoneInfoNotFoundError(name) from exc


def in_zone(instant: dt.datetime, tz: str) -> dt.datetime:
    """Return the aware `instant` as the wall time of zone `tz`, `fold` set.

    Through the zone's own fromutc() rather than astimezone(): freezegun's datetime (what
    timezone.now() returns in a project's tests under freeze_time) rebuilds astimezone()'s
    result without its `fold`, so the second pass of a repeated hour read as the first, an
    hour earlier, and a task created then got a cursor in the past (it fired at once).
    """
    local = zone(tz)
    return local.fromutc(instant.astimezone(UTC).replace(tzinfo=local))


def next_occurrence(schedule: str, tz: str, after: dt.datetime) -> dt.datetime:
    """Return the first occurrence strictly after `after` (aware), as a UTC instant."""
    local = in_zone(after, tz)
    return expression(schedule).next_after(local).astimezone(UTC)


def served_occurrence(schedule: str, tz: str, cursor: dt.datetime) -> dt.datetime:
    """Return the occurrence a stored cursor stands for under this process's zone rules.

    A cursor is an occurrence when it is written, but under the zone's rules of the process
    that wrote it: after a tzdata update (a country moving or abolishing DST), or from a host
    whose tzdata differs, the same wall-clock occurrence falls at another instant here.
    Firing the stored instant and then moving to "the first occurrence after now" would fire
    that occurrence a second time at its new instant (a daily 09:00 at 08:00 and at 09:00).
    A cursor that is not an occurrence here stands for the nearest one (the earlier on a
    tie, which has passed by the time the cursor is due): zone rules move offsets by an hour
    or so, far less than the time between two occurrences of the schedule.
    """
    at_or_after = next_occurrence(schedule, tz, cursor - _TICK)
    if at_or_after == cursor:
        return cursor
    distance = at_or_after - cursor
    earlier = next_occurrence(schedule, tz, cursor - distance - _TICK)
    if earlier >= cursor:
        return at_or_after
    # `earlier` is the first occurrence of the window, not the nearest (a 09:00 for a cursor
    # that stands for 13:00): halve the window to the last one before the cursor. Occurrences
    # are whole minutes of the wall clock, at least a minute apart.
    low, high = earlier, cursor  # an occurrence at or after low before the cursor, none after high
    while high - low > _MINUTE:
        middle = low + (high - low) / 2
        if next_occurrence(schedule, tz, middle - _TICK) < cursor:
            low = middle
        else:
            high = middle
    return next_occurrence(schedule, tz, low - _TICK)


def first_cursor(schedule: str, tz: str, now: dt.datetime) -> dt.datetime:
    """Return the cursor of a new (or rescheduled) task, as a UTC instant.

    "A new task, or one whose schedule or zone changed, fires immediately only if the current
    minute matches its expression; otherwise its first run is its next occurrence."
    The current minute is asked of the engine as "the first occurrence at or after the start
    of this minute", so the DST rule applies exactly as it does to every later occurrence.
    """
    minute_start = now.astimezone(UTC).replace(second=0, microsecond=0)
    return next_occurrence(schedule, tz, minute_start - _TICK)


def occurrences(schedule: str, tz: str, after: dt.datetime, count: int) -> list[dt.datetime]:
    """Return the next `count` occurrences strictly after `after`, as aware datetimes in `tz`."""
    result: list[dt.datetime] = []
    current = in_zone(after, tz)
    expr = expression(schedule)
    for _ in range(count):
        current = expr.next_after(current)
        result.append(current)
    return result
