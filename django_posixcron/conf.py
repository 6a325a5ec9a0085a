"""The one typed, lazy accessor for ``settings.POSIXCRON``, and the bounds of its scalars."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from functools import cache
from typing import Literal

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULT_POLL_INTERVAL = 10.0
DEFAULT_CONCURRENCY = 4
DEFAULT_HISTORY_DAYS = 30
# Three failures in a row: one is a blip, two a retry that failed too, three a pattern.
DEFAULT_FAILING_AFTER = 3
# Under 10 ms the loop would query the database continuously for no gain (a run starts at its
# due time anyway, not at the next poll). Past a day, a pause or a run-now made in the admin
# waits longer than anyone expects to be seen; and the sleep (threading's TIMEOUT_MAX) and the
# status and admin date arithmetic (now - a few polls) overflow long before 1e12 seconds.
MIN_POLL_INTERVAL = 0.01
MAX_POLL_INTERVAL = 86400.0
# A century of history: `now - timedelta(days=HISTORY_DAYS)` stays far from datetime.min.
MAX_HISTORY_DAYS = 36500

PollIntervalFault = Literal["not positive", "too large", "too small"]


def poll_interval_fault(value: object) -> PollIntervalFault | None:
    """Return which bound of POLL_INTERVAL `value` breaks, or None for a usable value.

    The one place of those bounds: the setting's check (posixcron.E021), the status command
    and the admin (poll_interval_or_default) and ``runscheduler --poll-interval`` all ask here.
    """
    # Compared as numbers, never converted first: float(10**400) and math.isfinite(10**400)
    # raise OverflowError. NaN fails `> 0`; bool is an int, but `True` seconds is a typo.
    if not (isinstance(value, int | float) and not isinstance(value, bool) and value > 0):
        return "not positive"
    if value > MAX_POLL_INTERVAL:
        return "too large"
    if value < MIN_POLL_INTERVAL:
        return "too small"
    return None


@dataclasses.dataclass(frozen=True)
class PosixCronSettings:
    """``settings.POSIXCRON`` with defaults applied; values are not validated here.

    Validation is the system checks' job (``django_posixcron.checks``); code that runs after
    the checks passed may rely on the types below.
    """

    poll_interval: float
    concurrency: int
    history_days: int
    failing_after: int = DEFAULT_FAILING_AFTER
    # Task name -> its "pause_after_failures", for the tasks that declare one.
    pause_after_failures: Mapping[str, int] = dataclasses.field(default_factory=dict)


@cache
def get_settings() -> PosixCronSettings:
    """Return ``settings.POSIXCRON`` with defaults, read on first use and cached."""
    raw = getattr(settings, "POSIXCRON", {})
    # Any Mapping, as the checks accept (declarations): a MappingProxyType or a custom
    # settings object must not silently fall back to the defaults here.
    source = raw if isinstance(raw, Mapping) else {}
    return PosixCronSettings(
        poll_interval=source.get("POLL_INTERVAL", DEFAULT_POLL_INTERVAL),
        concurrency=source.get("CONCURRENCY", DEFAULT_CONCURRENCY),
        history_days=source.get("HISTORY_DAYS", DEFAULT_HISTORY_DAYS),
        failing_after=source.get("FAILING_AFTER", DEFAULT_FAILING_AFTER),
        pause_after_failures=_pause_after_failures(source.get("TASKS")),
    )


def _pause_after_failures(tasks: object) -> dict[str, int]:
    if not isinstance(tasks, Mapping):
        return {}
    found = {}
    for name, definition in tasks.items():
        value = definition.get("pause_after_failures") if isinstance(definition, Mapping) else None
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            found[name] = value
    return found


def poll_interval_or_default() -> float:
    """Return POLL_INTERVAL, or its default where it is unusable.

    For the code that runs without the system checks (the status command, the admin): broken
    settings must not turn a health probe or an admin page into a traceback.
    """
    value = get_settings().poll_interval
    return DEFAULT_POLL_INTERVAL if poll_interval_fault(value) else float(value)


@receiver(setting_changed)
def _refresh(*, setting: str, **kwargs: object) -> None:
    if setting in ("POSIXCRON", "TIME_ZONE", "USE_TZ"):
        get_settings.cache_clear()
