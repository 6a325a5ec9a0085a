"""CronExpression: matching, next occurrence (with the Debian cron DST rule), shortest interval."""

from __future__ import annotations

import datetime as dt
from typing import Final

from django_posixcron.cron import dst
from django_posixcron.cron import fields as f
from django_posixcron.cron.canonical import canonical
from django_posixcron.cron.days import (
    MONTH_SHAPES,
    check_fires,
    day_masks,
    mask,
    month_shape,
    shortest_interval,
)

_ONE_MINUTE: Final = dt.timedelta(minutes=1)
_TICK: Final = dt.timedelta(microseconds=1)
_Datetime: Final = dt.datetime
_MAX_YEAR: Final = dt.MAXYEAR
# The one cache of parsed expressions (the scheduler, reconcile and the admin all parse through
# CronExpression): settings hold a few dozen, the admin a few more.
_CACHE_SIZE: Final = 2048
_CYCLE_DAYS: Final = 146097  # 400 Gregorian years, a whole number of weeks: the day pattern repeats
_CYCLE_YEARS: Final = 400

Wall = tuple[int, int, int, int, int]  # year, month, day, hour, minute


def _next_table(values: tuple[int, ...], size: int) -> tuple[int, ...]:
    """Return t where t[i] is the smallest value >= i, or -1; sized so t[size - 1] is -1."""
    table = [-1] * size
    start = 0
    for value in values:
        table[start : value + 1] = [value] * (value + 1 - start)
        start = value + 1
    return tuple(table)


class CronExpression:
    """A strict POSIX cron expression (five fields), parsed once and immutable.

    Two expressions are equal, hash equal and have the same ``str()`` exactly when they fire at
    the same instants: ``str()`` is the canonical spelling (``cron/canonical.py``).
    """

    __slots__ = (
        "_day_masks",
        "_dom_star",
        "_dow_star",
        "_first_hour",
        "_first_minute",
        "_fixed",
        "_hour_mask",
        "_hours",
        "_min_interval",
        "_minute_mask",
        "_minutes",
        "_month_mask",
        "_next_hour",
        "_next_minute",
        "_next_month",
        "_text",
        "_values",
    )

    _text: str
    _values: tuple[tuple[int, ...] | None, ...]
    _minutes: tuple[int, ...]
    _hours: tuple[int, ...]
    _minute_mask: int
    _hour_mask: int
    _month_mask: int
    _dom_star: bool
    _dow_star: bool
    _fixed: bool
    _first_minute: int
    _first_hour: int
    _next_minute: tuple[int, ...]
    _next_hour: tuple[int, ...]
    _next_month: tuple[int, ...]
    _day_masks: tuple[int, ...]
    _min_interval: dt.timedelta | None

    _cache: dict[str, CronExpression] = {}

    def __new__(cls, expression: str) -> CronExpression:
        if not isinstance(expression, str):
            # Before the cache lookup: a list would fail there as "unhashable".
            raise TypeError(f"a cron expression is a str, not {type(expression).__name__}")
        cached = cls._cache.get(expression) if cls is CronExpression else None
        if cached is not None:
            return cached
        self = super().__new__(cls)
        self._parse(expression)
        if cls is CronExpression:
            if len(cls._cache) >= _CACHE_SIZE:
                cls._cache.clear()
            cls._cache[expression] = self
        return self

    def _parse(self, expression: str) -> None:
        texts = f.split_fields(expression)
        values = tuple(
            f.parse_field(field, text) for field, text in zip(f.FIELDS, texts, strict=True)
        )
        if values[2] is not None and values[4] is None:
            check_fires(values[2], values[3] or tuple(range(1, 13)), texts[2])
        # Equal meaning, equal text: equality, hashing and str() all follow the canonical form.
        values = canonical(values)
        minutes, hours, doms, months, dows = values
        self._values = values
        self._text = " ".join("*" if vals is None else f.render(vals) for vals in values)
        self._minutes = minutes if minutes is not None else tuple(range(60))
        self._hours = hours if hours is not None else tuple(range(24))
        all_months = months if months is not None else tuple(range(1, 13))
        self._minute_mask = mask(self._minutes)
        self._hour_mask = mask(self._hours)
        self._month_mask = mask(all_months)
        self._dom_star = doms is None
        self._dow_star = dows is None
        # "Fixed-time schedules (neither the minute nor the hour field is `*`) follow the wall
        # clock" -- a literal `*`, as in Debian cron: `0-59` is a fixed-time field.
        self._fixed = minutes is not None and hours is not None
        self._first_minute = self._minutes[0]
        self._first_hour = self._hours[0]
        self._next_minute = _next_table(self._minutes, 61)
        self._next_hour = _next_table(self._hours, 25)
        self._next_month = _next_table(all_months, 14)
        self._min_interval = None
        self._day_masks = day_masks(doms, dows)

    # -- identity -------------------------------------------------------------------------

    def __str__(self) -> str:
        return self._text

    def __repr__(self) -> str:
        return f"CronExpression({self._text!r})"

    def __eq__(self, other: object) -> bool:
        if isinstance(other, CronExpression):
            return self._text == other._text
        return NotImplemented

    def __hash__(self) -> int:
        return hash(self._text)

    def __reduce__(self) -> tuple[type[CronExpression], tuple[str]]:
        return (type(self), (self._text,))

    def __copy__(self) -> CronExpression:
        return self

    def __deepcopy__(self, memo: object) -> CronExpression:
        return self

    # -- wall clock ------------------------------------------------------------------------

    def _day_matches(self, year: int, month: int, day: int) -> bool:
        return bool(self._day_masks[month_shape(year, month)] >> day & 1)

    def _wall_matches(self, year: int, month: int, day: int, hour: int, minute: int) -> bool:
        return bool(
            self._minute_mask >> minute & 1
            and self._hour_mask >> hour & 1
            and self._month_mask >> month & 1
            and self._day_masks[month_shape(year, month)] >> day & 1
        )

    def _at_or_after(self, year: int, month: int, day: int, hour: int, minute: int) -> Wall:
        """Return the first matching wall-clock minute at or after the given one.

        Works like an odometer: each field jumps straight to its next allowed value, and a
        field that runs out rolls the next larger one over. `minute` may be 60 and `hour` 24.
        """
        next_minute = self._next_minute
        next_hour = self._next_hour
        next_month = self._next_month
        day_masks = self._day_masks
        first_minute = self._first_minute
        first_hour = self._first_hour
        while True:
            allowed_month = next_month[month]
            if allowed_month != month:
                if allowed_month < 0:
                    year += 1
                    if year > _MAX_YEAR:
                        raise OverflowError("no occurrence before the year 10000")
                    allowed_month = next_month[1]
                month = allowed_month
                day, hour, minute = 1, first_hour, first_minute
            shape = MONTH_SHAPES.get(year * 12 + month)
            if shape is None:
                shape = month_shape(year, month)
            days = day_masks[shape] >> day
            if not days:
                month += 1
                day, hour, minute = 1, first_hour, first_minute
                continue
            skip = (days & -days).bit_length() - 1
            if skip:
                day += skip
                hour, minute = first_hour, first_minute
            allowed_hour = next_hour[hour]
            if allowed_hour != hour:
                if allowed_hour < 0:
                    day += 1
                    hour, minute = first_hour, first_minute
                    continue
                hour, minute = allowed_hour, first_minute
            allowed_minute = next_minute[minute]
            if allowed_minute < 0:
                hour += 1
                minute = first_minute
                continue
            return year, month, day, hour, allowed_minute

    # -- public API ------------------------------------------------------------------------

    def matches(self, when: dt.datetime) -> bool:
        """Return whether the minute containing `when` is an occurrence.

        A naive datetime is a wall-clock time. An aware one is judged in its own zone with
        the DST rule, so it matches exactly when ``next_after`` would return its minute.
        """
        try:
            tz = when.tzinfo
        except AttributeError:
            raise _not_a_datetime("matches", when) from None
        offset = None if tz is None or type(tz) is dt.timezone else tz.utcoffset(when)
        if offset is None or tz is None:
            return self._wall_matches(when.year, when.month, when.day, when.hour, when.minute)
        try:
            return self._matches_zoned(when, tz, offset)
        except OverflowError:
            moved = _shift(when, _inward(when))
            return self._matches_zoned(moved, tz, _offset_at(moved, tz, offset))

    def _matches_zoned(self, when: dt.datetime, tz: dt.tzinfo, offset: dt.timedelta) -> bool:
        start = _Datetime(when.year, when.month, when.day, when.hour, when.minute, 0, 0, tz)
        start_utc = start - offset
        before = tz.fromutc(start_utc - _TICK)
        found = self._next_zoned(before, tz, _offset_at(before, tz, offset))
        return _instant(found) == start_utc

    def next_after(self, when: dt.datetime) -> dt.datetime:
        """Return the first occurrence strictly after `when`.

        Naive in, naive out (wall clock); aware in, aware out in the same tzinfo, following
        Debian cron across DST changes. Raises OverflowError when that occurrence would be
        past the year 9999.
        """
        try:
            tz = when.tzinfo
        except AttributeError:
            raise _not_a_datetime("next_after", when) from None
        if tz is not None and type(tz) is not dt.timezone:
            offset = tz.utcoffset(when)
            if offset is not None:
                try:
                    if when.fold:
                        return self._next_aware(when, tz, offset)
                    return self._next_zoned(when, tz, offset)
                except OverflowError:
                    years = _inward(when)
                    moved = _shift(when, years)
                    answer = self._next_aware(moved, tz, _offset_at(moved, tz, offset))
                    return _shift(answer, -years)
        found = self._at_or_after(when.year, when.month, when.day, when.hour, when.minute + 1)
        if tz is None:
            return _Datetime(*found)
        return _Datetime(*found, 0, 0, tz)

    def _next_aware(self, when: dt.datetime, tz: dt.tzinfo, offset: dt.timedelta) -> dt.datetime:
        if when.fold:
            # A wall time in a spring-forward gap with fold=1 names the instant *before* the
            # gap (Python reads it with the later offset): search from that instant's own
            # wall time, not from fields that are past it.
            when = tz.fromutc(when - offset)
            offset = _offset_at(when, tz, offset)
        return self._next_zoned(when, tz, offset)

    def _next_zoned(self, when: dt.datetime, tz: dt.tzinfo, offset: dt.timedelta) -> dt.datetime:
        """Return the first occurrence strictly after `when`, in a zone that may shift.

        As cronsim does: walk the matching wall-clock minutes, and place each on the timeline
        with the DST rule (``dst.fire_times``); the first that lands after `when` is the
        answer. The walk goes forward on the wall clock, so it cannot see one case: from the
        first pass of a repeated hour, the second pass of minutes already behind `when`.

        Instants are written as UTC wall times that keep `tz` attached (``local - offset``):
        Python compares datetimes of one tzinfo on their fields, which is then exactly the
        order of instants, while comparing the local times themselves would be wrong across
        a DST change.
        """
        after = when - offset
        fixed = self._fixed
        year, month, day, hour, minute = when.year, when.month, when.day, when.hour, when.minute
        repeat = None
        if not fixed and not when.fold:
            other = tz.utcoffset(_Datetime(year, month, day, hour, minute, 0, 0, tz, fold=1))
            if other is not None and other < offset:
                repeat = offset - other  # `when` is on the first pass of a repeated hour
        while True:
            year, month, day, hour, minute = self._at_or_after(year, month, day, hour, minute + 1)
            candidate = _Datetime(year, month, day, hour, minute, 0, 0, tz)
            # Fast path, nearly always taken: the wall time exists once, at `when`'s offset.
            probe = tz.fromutc(candidate - offset)
            if not probe.fold and probe == candidate:
                found = candidate
                break
            later = [time for time in dst.fire_times(candidate, fixed) if _instant(time) > after]
            if later:
                found = later[0]
                break
        if repeat is not None:
            again = self._second_pass(when, repeat, tz)
            if again is not None and _instant(again) < _instant(found):
                return again
        if fixed and (when.second or when.microsecond):
            start = _Datetime(when.year, when.month, when.day, when.hour, when.minute, 0, 0, tz)
            # One look-up, nearly always equal: `when`'s own minute began at its offset. (On a
            # whole minute, `when` is that beginning: nothing skipped behind it fires later.)
            if tz.utcoffset(start) != offset:
                late = self._skipped_behind(start, after)
                if late is not None and _instant(late) < _instant(found):
                    return late
        return found

    def _skipped_behind(self, start: dt.datetime, after: dt.datetime) -> dt.datetime | None:
        """Return when an occurrence skipped by a gap that ends inside the minute `start`
        fires, if that is after `after` (UTC wall time, as in ``_next_zoned``).

        Such a gap ends between two whole minutes (local mean time, before about 1940), and
        its occurrences fire at the next whole minute: after an instant inside the minute of
        the gap's end, although their own wall minutes are not after that instant's.
        """
        if not dst.skipped(start):
            return None
        tz = start.tzinfo
        assert tz is not None
        jump = tz.utcoffset(start.replace(fold=1)) - tz.utcoffset(start)  # type: ignore[operator]
        first = start.replace(tzinfo=None) - jump
        wall: Wall = (first.year, first.month, first.day, first.hour, first.minute)
        limit: Wall = (start.year, start.month, start.day, start.hour, start.minute)
        while True:
            wall = self._at_or_after(*wall)
            if wall > limit:
                return None
            for time in dst.fire_times(_Datetime(*wall, 0, 0, tz), fixed=True):
                if _instant(time) > after:
                    return time
            wall = (wall[0], wall[1], wall[2], wall[3], wall[4] + 1)

    def _second_pass(
        self, when: dt.datetime, repeat: dt.timedelta, tz: dt.tzinfo
    ) -> dt.datetime | None:
        """Return the first second-pass occurrence of the repeated hour `when` is in, if any.

        `when` is on the first pass, and the clock goes back by `repeat`. An elapsed-time
        schedule fires again on the second pass ("repeated ones fire again"), even at wall
        times not after `when`'s own.
        """
        year, month, day, hour, minute = when.year, when.month, when.day, when.hour, when.minute
        start = _Datetime(year, month, day, hour, minute) - repeat
        wall: Wall = (start.year, start.month, start.day, start.hour, start.minute)
        limit = (year, month, day, hour, minute)
        while True:
            wall = self._at_or_after(*wall)
            if wall > limit:
                return None
            times = dst.fire_times(_Datetime(*wall, 0, 0, tz), fixed=False)
            if len(times) == 2:
                return times[1]
            wall = (wall[0], wall[1], wall[2], wall[3], wall[4] + 1)

    @property
    def min_interval(self) -> dt.timedelta:
        """Return the shortest wall-clock gap between two consecutive occurrences.

        It holds in real time too wherever the offset does not change; across a DST change two
        runs can be closer (docs/semantics.rst, "The shortest interval").
        """
        if self._min_interval is None:
            self._min_interval = shortest_interval(
                self._hours, self._minutes, self._day_masks, self._month_mask
            )
        return self._min_interval

    def describe(self) -> str:
        """Return the schedule in plain English, e.g. "At 03:15, Monday through Friday"."""
        from django_posixcron.cron.describe import describe

        return describe(self._values)


def _instant(value: dt.datetime) -> dt.datetime:
    offset = value.utcoffset()
    assert offset is not None
    return value - offset


def _inward(when: dt.datetime) -> int:
    """Return the years to move `when` away from the end of the calendar it is near."""
    return _CYCLE_YEARS if when.year < (dt.MINYEAR + dt.MAXYEAR) // 2 else -_CYCLE_YEARS


def _offset_at(when: dt.datetime, tz: dt.tzinfo, known: dt.timedelta) -> dt.timedelta:
    """Return `tz`'s offset at `when`, else the one `known`: +00:00 is an offset too (a
    plain ``or`` took it for none, and Atlantic/Azores' summer time for its winter's)."""
    offset = tz.utcoffset(when)
    return known if offset is None else offset


def _shift(when: dt.datetime, years: int) -> dt.datetime:
    """Return `when` moved by `years`, a multiple of 400: same date, weekday and leap day.

    Near years 1 and 9999 an instant (``local - offset``) can leave datetime's range while
    the wall time is fine. A zone's rules repeat there with the calendar: before its first
    transition it keeps one offset (local mean time), after its last one it follows a yearly
    rule of dates and weekdays (zoneinfo's POSIX TZ string). So the engine answers 400 years
    inward and moves the answer back.
    """
    year = when.year + years
    if year > dt.MAXYEAR:
        raise OverflowError("no occurrence before the year 10000")
    return when.replace(year=year)


def _not_a_datetime(method: str, when: object) -> TypeError:
    hint = " (a date has no time: use datetime.combine)" if isinstance(when, dt.date) else ""
    return TypeError(
        f"CronExpression.{method}() takes a datetime, not {type(when).__name__} {when!r}{hint}"
    )
