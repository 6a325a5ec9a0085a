"""Settings problems, and the one place their messages are built.

A validator raises ``Invalid`` (the check id, the shape of the message, what was expected and
a hint); ``problem()`` adds the settings path and the offending value. No message is written
out anywhere else, so every error reads the same way: the path, the value's repr, what was
expected, and how to fix it (STYLE: "Settings errors give the path, the value's repr and what
was expected, with a stable id and a hint").
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import functools
import reprlib
from collections.abc import Callable, Iterable
from typing import Any, NamedTuple

ROOT = "settings.POSIXCRON"


@dataclasses.dataclass(frozen=True)
class Problem:
    """One mistake in the settings, ready to become a system check error."""

    id: str
    msg: str
    hint: str
    path: str
    value: Any = None


class KeyPath(NamedTuple):
    """Where a value sits in the settings: ``settings.POSIXCRON['TASKS']['name']``.

    A tuple: validating 100,000 tasks builds over a million of these.
    """

    root: str = ROOT
    keys: tuple[object, ...] = ()

    def __truediv__(self, key: object) -> KeyPath:
        return _path((self.root, (*self.keys, key)))

    def __str__(self) -> str:
        return self.root + "".join(f"[{show(key)}]" for key in self.keys)

    @property
    def parent(self) -> KeyPath:
        return _path((self.root, self.keys[:-1]))

    @property
    def key(self) -> object:
        return self.keys[-1] if self.keys else self.root


# Build one without NamedTuple's keyword-argument __new__.
_path: Callable[[tuple[str, tuple[object, ...]]], KeyPath] = functools.partial(
    tuple.__new__, KeyPath
)


class Form(enum.Enum):
    """The shapes of a message; ``problem()`` fills in the path, the value and the detail."""

    EXPECTED = "{path} is misconfigured. Expected {detail} but got {value}."
    EXPECTED_TYPED = "{path} is misconfigured. Expected {detail} but got {type} {value}."
    TOO_LARGE = "{path} is too large: expected {detail} but got {value}."
    TOO_SMALL = "{path} is too small: expected {detail} but got {value}."
    ASSIGNED = "{path} = {value} {detail}"
    GOT = "{path} {detail}. Got {value}."
    IN = "{path} {detail} (in {value})."
    IS = "{path} is {value}; {detail}"
    NAME = "{path}: the task name {value} is not a valid name. {detail}"
    UNKNOWN_KEY = "{parent} has an unknown key {key}."
    MISSING_KEY = "{parent} has no {key}; {detail}"


_DECLARED: Any = object()


class Invalid(Exception):
    """A value breaks a rule: raised by a validator, turned into a Problem by ``problem()``."""

    def __init__(
        self, id: str, form: Form, detail: str, hint: str, *, shown: object = _DECLARED
    ) -> None:
        super().__init__(id, detail)
        self.id = id
        self.form = form
        self.detail = detail
        self.hint = hint
        # What the message shows, when it is not the declared value itself (a lazy
        # description is shown as the text it translates to).
        self.shown = shown


def problem(path: KeyPath, value: object, invalid: Invalid) -> Problem:
    """Return the Problem for `invalid`, raised for `value` at `path`."""
    shown = value if invalid.shown is _DECLARED else invalid.shown
    msg = invalid.form.value.format(
        path=path,
        parent=path.parent,
        key=show(path.key),
        value=show(shown),
        type=type(shown).__name__,
        detail=invalid.detail,
    )
    return Problem(id=invalid.id, msg=msg, hint=invalid.hint, path=str(path), value=shown)


# The longest repr a message quotes whole: every valid task name (at most 100 characters)
# fits; a longer value is cut, with its length, so that a 10,000-character mistake is named
# in a line an operator can read.
SHOWN = 120


def show(value: object) -> str:
    """Return repr(value), cut when it is longer than SHOWN, or a shortened stand-in when
    the full one cannot be built."""
    text = _repr(value)
    if len(text) <= SHOWN:
        return text
    return f"{text[:100]}... ({len(text)} characters)"


def _repr(value: object) -> str:
    try:
        return repr(value)
    except Exception:
        # A ValueError for an int past sys.get_int_max_str_digits(), a RecursionError for
        # absurdly nested containers: the check must report the mistake, not crash on it.
        if isinstance(value, int):
            return f"<int of {value.bit_length()} bits>"
        try:
            return reprlib.repr(value)
        except Exception:
            return f"<{type(value).__name__} that cannot be shown>"


def closest(word: object, choices: Iterable[str]) -> str | None:
    """Return the choice that `word` most likely misspells, if any."""
    if not isinstance(word, str):
        return None
    # Case first: difflib scores 'tasks' against 'TASKS' as entirely different strings.
    folded = {choice.casefold(): choice for choice in sorted(choices)}
    same = folded.get(word.casefold())
    if same is not None:
        return same
    close = difflib.get_close_matches(word.casefold(), folded, n=1, cutoff=0.6)
    return folded[close[0]] if close else None


def did_you_mean(word: object, choices: Iterable[str]) -> str:
    """Return "Did you mean 'X'? " for a near miss of one of `choices`, else ""."""
    close = closest(word, choices)
    return f"Did you mean {close!r}? " if close else ""
