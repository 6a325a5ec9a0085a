"""Validators shared by several keys: durations, counts, choices, text the database stores."""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Callable, Sequence
from typing import Any, TypeGuard

from django_posixcron.declarations.problems import Form, Invalid, KeyPath, show
from django_posixcron.declarations.table import Validator

# The scheduler adds a delay to datetimes (started_at + timeout, finished_at + retry_delay) and
# the database stores it as an interval: 1e12 seconds overflows both. A year is longer than any
# sensible retry or run; a task that should wait longer is better paused.
MAX_DELAY = dt.timedelta(days=366)


def plain(text: str) -> str:
    """Return `text` as a plain str, as it is stored and hashed: str() of a (str, Enum)
    member is "Name.MEMBER", not its text."""
    return str.__str__(text)


def is_number(value: object) -> TypeGuard[int | float]:
    """Return whether value is an int or a float; bool is an int, but `True` is a typo."""
    return isinstance(value, int | float) and not isinstance(value, bool)


def as_delay(value: object) -> dt.timedelta | None:
    """Return value as a timedelta in (0, MAX_DELAY], or None when it is not one."""
    if isinstance(value, dt.timedelta):
        return value if dt.timedelta(0) < value <= MAX_DELAY else None
    if not is_number(value):
        return None
    # Compared as numbers before any conversion: timedelta(seconds=1e20) and float(10**400)
    # raise OverflowError. NaN fails `> 0`.
    if not 0 < value <= MAX_DELAY.total_seconds():
        return None
    delta = dt.timedelta(seconds=value)
    return delta if delta > dt.timedelta(0) else None  # 1e-7 s rounds to zero


def delay(id: str, hint: str, *, none_allowed: bool = False) -> Validator:
    """Return a validator of seconds (int or float) or a timedelta, up to MAX_DELAY."""

    def validate(value: object, path: KeyPath) -> dt.timedelta | None:
        if value is None and none_allowed:
            return None
        delta = as_delay(value)
        if delta is not None:
            return delta
        if _above(value, MAX_DELAY.total_seconds()):
            limit = f"at most {MAX_DELAY.days} days ({MAX_DELAY.total_seconds():.0f} seconds)"
            raise Invalid(id, Form.TOO_LARGE, limit, hint)
        if _above(value, 0):
            # Positive, but under the microsecond a timedelta (and the database) can hold.
            raise Invalid(id, Form.TOO_SMALL, "at least one microsecond (0.000001 seconds)", hint)
        what = "a positive number of seconds or a positive timedelta"
        raise Invalid(id, Form.EXPECTED, what, hint)

    return validate


def _above(value: object, limit: float) -> bool:
    """Return whether value is a number (or timedelta) above `limit` seconds, inf included."""
    if isinstance(value, dt.timedelta):
        return value.total_seconds() > limit
    return is_number(value) and value > limit


def positive_int(id: str, hint: str, *, most: int | None = None) -> Validator:
    """Return a validator of an int from 1 (to `most`, a number of days)."""

    def validate(value: object, path: KeyPath) -> int:
        if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
            raise Invalid(id, Form.EXPECTED, "a positive int", hint)
        if most is not None and value > most:
            raise Invalid(id, Form.TOO_LARGE, f"at most {most} ({most // 365} years)", hint)
        return value

    return validate


def optional(validate: Validator) -> Validator:
    """Return `validate` with None let through (the key's "not set")."""

    def validate_optional(value: object, path: KeyPath) -> Any:
        return None if value is None else validate(value, path)

    return validate_optional


def boolean(id: str, hint: str) -> Validator:
    """Return a validator of True or False (not 1, not "yes": a typo is not a choice)."""

    def validate(value: object, path: KeyPath) -> bool:
        if not isinstance(value, bool):
            raise Invalid(id, Form.EXPECTED, "True or False", hint)
        return value

    return validate


def choice(id: str, choices: Sequence[str], hint: str) -> Validator:
    """Return a validator of one of `choices`."""

    def validate(value: object, path: KeyPath) -> str:
        if value not in choices:
            what = " or ".join(show(option) for option in choices)
            raise Invalid(id, Form.EXPECTED, what, hint)
        # The choice itself: str() of a (str, Enum) member is "Overlap.SKIP", not "skip".
        return next(option for option in choices if option == value)

    return validate


def has_nul(value: Any) -> bool:
    """Return whether a str anywhere in `value` (keys included) holds a NUL character."""
    return _any_str(value, lambda text: "\x00" in text)


def has_surrogate(value: Any) -> bool:
    """Return whether a str anywhere in `value` (keys included) holds a lone surrogate."""
    return _any_str(value, lambda text: not text.isascii() and _SURROGATE.search(text) is not None)


def _any_str(value: Any, test: Callable[[str], bool]) -> bool:
    # A loop, not recursion: JSON as deep as json.dumps accepts must not overflow the stack.
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            if test(item):
                return True
        elif isinstance(item, dict):
            stack.extend(item)
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return False


def json_depth(value: Any) -> int:
    """Return how many containers (dicts, lists) deep `value` nests; 0 for a scalar."""
    deepest = 0
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if isinstance(item, dict):
            item = item.values()
        elif not isinstance(item, list):
            continue
        deepest = max(deepest, depth)
        stack.extend((child, depth + 1) for child in item)
    return deepest


_SURROGATE = re.compile("[\ud800-\udfff]")

# PostgreSQL refuses \u0000 in text and jsonb: reconciling would crash on it.
NUL_DETAIL = "holds a NUL character ('\\x00'), which the database cannot store"
# Half of a UTF-16 pair ('\ud800', as surrogateescape decoding leaves in a str): no encoding
# the database speaks can write it, and reconciling crashed with a UnicodeEncodeError.
SURROGATE_DETAIL = (
    "holds a lone surrogate (a character from '\\ud800' to '\\udfff'), which the database "
    "cannot store"
)
