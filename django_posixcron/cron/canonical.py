"""One spelling per schedule: the field values that mean the same occurrences, made unique.

Two expressions are equal exactly when they fire at the same instants in every zone, and then
they have the same canonical values (and so the same ``str()``). What may be rewritten:

- a full minute or hour range is ``*`` when the schedule already follows elapsed time (the
  other of the two fields is ``*``); in a fixed-time schedule ``0-59`` stays, since a literal
  ``*`` there would change the DST rule;
- day-of-month keeps only days that some selected month has; when it then covers every day,
  or day-of-week covers the whole week, every day matches ("a day matches if either matches"),
  so both become ``*``;
- a month in which a day-of-month-only schedule never fires is dropped; the months are ``*``
  when they are all twelve, or every month that has one of the days (``0 0 31 * *``).

A full day-of-month or day-of-week range is never just ``*`` on its own: ``0 0 1-31 * 1``
fires every day, ``0 0 * * 1`` only on Mondays.
"""

from __future__ import annotations

from django_posixcron.cron.fields import DAY_OF_WEEK, HOUR, MINUTE

Values = tuple[int, ...] | None
_LONGEST = (0, 31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)  # days in month, leap year
_ALL_MONTHS = tuple(range(1, 13))


def _full(values: Values, low: int, high: int) -> bool:
    return values is not None and len(values) == high - low + 1


def canonical(values: tuple[Values, ...]) -> tuple[Values, ...]:
    """Return the canonical field values (None for `*`) of parsed, firing field values."""
    minutes, hours, doms, months, dows = values
    if minutes is None or hours is None:
        if _full(minutes, MINUTE.low, MINUTE.high):
            minutes = None
        if _full(hours, HOUR.low, HOUR.high):
            hours = None
    selected = months if months is not None else _ALL_MONTHS
    longest = max(_LONGEST[month] for month in selected)
    if doms is not None:
        doms = tuple(day for day in doms if day <= longest) or None
    every_day = (doms is not None and len(doms) == longest) or _full(
        dows, DAY_OF_WEEK.low, DAY_OF_WEEK.high
    )
    if every_day:
        doms = dows = None
    elif doms is not None and dows is None:
        first = doms[0]
        selected = tuple(month for month in selected if first <= _LONGEST[month])
        if selected == tuple(month for month in _ALL_MONTHS if first <= _LONGEST[month]):
            selected = _ALL_MONTHS  # `0 0 31 * *` rather than `0 0 31 1,3,5,7,8,10,12 *`
    months = None if selected == _ALL_MONTHS else selected
    return minutes, hours, doms, months, dows
