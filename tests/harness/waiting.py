"""Waiting on a condition with a deadline: the suite's only way to wait, never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

from django_posixcron.db import app_alias, database_now

T = TypeVar("T")

POLL = 0.02


def wait_until(condition: Callable[[], T], timeout: float = 10, what: str = "the condition") -> T:
    """Poll `condition` until it is truthy and return its value; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(POLL)
    return value


def clear_of_a_minute_boundary(seconds: float = 10) -> None:
    """Wait until the database clock is at least `seconds` before its next minute.

    For a test whose runs of an every-minute task must all fall in one minute: claimed again
    once the minute turns, the task's next occurrence fires too (the product at work, not the
    scenario the test sets up), and a test started at hh:mm:59 saw one run more.
    """
    wait_until(
        lambda: database_now(app_alias()).second < 60 - seconds,
        timeout=seconds + 5,
        what=f"a database clock {seconds:g} s or more before the next minute",
    )
