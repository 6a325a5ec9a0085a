"""Waiting on a condition with a deadline: the suite's only way to wait, never a bare sleep."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")

POLL = 0.02


def wait_until(condition: Callable[[], T], timeout: float = 10, what: str = "the condition") -> T:
    """Poll `condition` until it is truthy and return its value; fail after `timeout` s."""
    deadline = time.monotonic() + timeout
    while not (value := condition()):
        assert time.monotonic() < deadline, f"timed out after {timeout} s waiting for {what}"
        time.sleep(POLL)
    return value
