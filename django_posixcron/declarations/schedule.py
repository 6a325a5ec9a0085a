"""The schedule key, and the frequency guard between a schedule and POLL_INTERVAL."""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from django_posixcron.cron import CronExpression, CronSyntaxError
from django_posixcron.declarations.ids import E_CRON_SYNTAX, E_FREQUENCY, E_SCHEDULE_TYPE
from django_posixcron.declarations.problems import ROOT, Form, Invalid, KeyPath, show


def schedule(value: object, path: KeyPath) -> str:
    """Return the cron expression normalised, so spacing changes are not definition changes."""
    if not isinstance(value, str):
        hint = 'Use five POSIX fields, e.g. "15 3 * * 1-5".'
        raise Invalid(E_SCHEDULE_TYPE, Form.EXPECTED, "a cron expression as a str", hint)
    try:
        expression = CronExpression(value)
    except CronSyntaxError as error:
        raise Invalid(
            E_CRON_SYNTAX,
            Form.IN,
            f"is not a valid POSIX cron expression: {error}",
            f"Fix the {error.field} field, {show(error.token)}: {error.reason}. Five fields: "
            "minute hour day-of-month month day-of-week, numbers, ranges and lists only.",
        ) from None
    return str(expression)


def too_frequent(schedule: str, poll_interval: float) -> dt.timedelta | None:
    """Return the schedule's shortest interval when it is below `poll_interval`, else None.

    The frequency guard, for the setting (posixcron.E024) and ``runscheduler --poll-interval``
    alike. DESIGN: "a schedule whose shortest interval is below POLL_INTERVAL" is an error; an
    occurrence could come and go between two polls.
    """
    shortest = CronExpression(schedule).min_interval
    return shortest if shortest.total_seconds() < poll_interval else None


def frequency_guard(values: Mapping[str, Any]) -> None:
    """Refuse a schedule that can fire more often than POLL_INTERVAL."""
    poll_interval = values["POLL_INTERVAL"]
    shortest = too_frequent(values["schedule"], poll_interval)
    if shortest is not None:
        raise Invalid(
            E_FREQUENCY,
            Form.ASSIGNED,
            f"can fire every {_human(shortest)}, more often than {ROOT}['POLL_INTERVAL'] "
            f"({poll_interval:g} s).",
            "Lower POLL_INTERVAL to at most the schedule's shortest interval, or schedule the "
            "task less often.",
        )


def _human(delta: dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return "hour" if hours == 1 else f"{hours} hours"
    if seconds % 60 == 0:
        minutes = seconds // 60
        return "minute" if minutes == 1 else f"{minutes} minutes"
    return f"{seconds} seconds"
