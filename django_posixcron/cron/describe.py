"""Plain-English descriptions of parsed expressions, for the admin and the docs."""

from __future__ import annotations

from django_posixcron.cron.fields import DAY_NAMES, MONTH_NAMES

Values = tuple[int, ...] | None
_MOST_TIMES = 6  # beyond this many times of day, "At 09:00, 10:00, ..." stops being readable


def _runs(values: tuple[int, ...]) -> list[tuple[int, int]]:
    runs: list[tuple[int, int]] = []
    for value in values:
        if runs and runs[-1][1] == value - 1:
            runs[-1] = (runs[-1][0], value)
        else:
            runs.append((value, value))
    return runs


def _join(parts: list[str], last: str = "and") -> str:
    if len(parts) == 1:
        return parts[0]
    return ", ".join(parts[:-1]) + f" {last} " + parts[-1]


def _phrase(values: tuple[int, ...], name: object = str) -> str:
    """Return "1, 3 and 5 through 9" for (1, 3, 5, 6, 7, 8, 9)."""
    spell = name if callable(name) else str
    parts = []
    for low, high in _runs(values):
        if high - low >= 2:
            parts.append(f"{spell(low)} through {spell(high)}")
        elif high == low + 1:
            parts.extend((spell(low), spell(high)))
        else:
            parts.append(spell(low))
    return _join(parts)


def _month(number: int) -> str:
    return MONTH_NAMES[number - 1]


def _weekday(number: int) -> str:
    return DAY_NAMES[number]


def _time_phrase(minutes: Values, hours: Values) -> str:
    if minutes is None and hours is None:
        return "Every minute"
    if minutes is None:
        assert hours is not None
        if len(hours) == 1:
            return f"Every minute from {hours[0]:02d}:00 through {hours[0]:02d}:59"
        return f"Every minute of hours {_phrase(hours)}"
    plural = "minute" if len(minutes) == 1 else "minutes"
    if hours is None:
        return f"At {plural} {_phrase(minutes)} of every hour"
    if len(minutes) * len(hours) <= _MOST_TIMES:
        times = [f"{hour:02d}:{minute:02d}" for hour in hours for minute in minutes]
        return "At " + _join(times)
    hour_word = "hour" if len(hours) == 1 else "hours"
    return f"At {plural} {_phrase(minutes)} of {hour_word} {_phrase(hours)}"


def _day_phrase(doms: Values, months: Values, dows: Values) -> str:
    parts: list[str] = []
    # "On February 29" only when no weekday is an alternative: "on February 29 or on Monday"
    # would read as every Monday of the year, but the month restricts the Mondays too.
    single_date = doms is not None and months is not None and len(doms) == len(months) == 1
    if single_date and dows is None:
        assert doms is not None
        assert months is not None
        date = f"on {_month(months[0])} {doms[0]}"
        months = None
    else:
        date = ""
        if doms is not None:
            noun = "day" if len(doms) == 1 else "days"
            date = f"on {noun} {_phrase(doms)} of the month"
    weekdays = ""
    if dows is not None:
        runs = _runs(dows)
        spelled = _phrase(dows, _weekday)
        single_range = len(runs) == 1 and runs[0][1] - runs[0][0] >= 2
        weekdays = spelled if single_range and not date else f"on {spelled}"
    if date and weekdays:
        # "When day-of-month and day-of-week are both restricted a day matches if either
        # matches" -- say "or", since reading it as "and" is the classic mistake.
        parts.append(f"{date} or {weekdays}")
    elif date or weekdays:
        parts.append(date or weekdays)
    if months is not None:
        parts.append(f"only in {_phrase(months, _month)}")
    return ", ".join(parts)


def describe(values: tuple[Values, ...]) -> str:
    """Return plain English for the parsed field values (None for `*`)."""
    minutes, hours, doms, months, dows = values
    days = _day_phrase(doms, months, dows)
    time = _time_phrase(minutes, hours)
    return f"{time}, {days}" if days else time
