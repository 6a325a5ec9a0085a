"""Fixtures shared by every part of the suite."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

UTC = dt.UTC


@pytest.fixture
def posixcron(settings):
    """Return a function that replaces settings.POSIXCRON for one test (defaults kept)."""

    def configure(tasks: dict[str, Any] | None = None, **top_level: object) -> dict[str, Any]:
        value = {"TASKS": tasks or {}, "POLL_INTERVAL": 1, **top_level}
        settings.POSIXCRON = value
        return value

    return configure
