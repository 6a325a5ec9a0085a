"""The one typed, lazy accessor for ``settings.POSIXCRON``."""

from __future__ import annotations

import dataclasses
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.dispatch import receiver

DEFAULT_POLL_INTERVAL = 10.0
DEFAULT_CONCURRENCY = 4
DEFAULT_HISTORY_DAYS = 30
TOP_LEVEL_KEYS = ("TASKS", "POLL_INTERVAL", "CONCURRENCY", "HISTORY_DAYS")


@dataclasses.dataclass(frozen=True)
class PosixCronSettings:
    """``settings.POSIXCRON`` with defaults applied; values are not validated here.

    Validation is the system checks' job (``django_posixcron.checks``); code that runs after
    the checks passed may rely on the types below.
    """

    raw: Any
    tasks: Any
    poll_interval: float
    concurrency: int
    history_days: int


@cache
def get_settings() -> PosixCronSettings:
    """Return ``settings.POSIXCRON`` with defaults, read on first use and cached."""
    raw = getattr(settings, "POSIXCRON", {})
    source = raw if isinstance(raw, dict) else {}
    return PosixCronSettings(
        raw=raw,
        tasks=source.get("TASKS", {}),
        poll_interval=source.get("POLL_INTERVAL", DEFAULT_POLL_INTERVAL),
        concurrency=source.get("CONCURRENCY", DEFAULT_CONCURRENCY),
        history_days=source.get("HISTORY_DAYS", DEFAULT_HISTORY_DAYS),
    )


@receiver(setting_changed)
def _refresh(*, setting: str, **kwargs: object) -> None:
    if setting in ("POSIXCRON", "TIME_ZONE", "USE_TZ"):
        get_settings.cache_clear()
