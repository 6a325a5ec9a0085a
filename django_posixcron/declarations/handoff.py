"""The hand-off keys: a task's ``enqueue`` (default: top-level ``ENQUEUE``), ``start_deadline``.

DESIGN section 6, settled details: ``True`` means the Django Tasks defaults, a dict names any
of ``backend``, ``queue_name``, ``priority``; a task's own ``enqueue`` replaces ``ENQUEUE``
whole, and ``False`` opts it out. ``start_deadline`` (seconds, at least 10, default 300) is valid
only on a task that is handed off. Whether the backend exists and supports the options is the
framework's to say: handoff/checks.py.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from typing import Any

from django_posixcron.declarations.declaration import (
    DEFAULT_START_DEADLINE,
    MIN_START_DEADLINE,
    Enqueue,
)
from django_posixcron.declarations.ids import E_ENQUEUE, E_START_DEADLINE
from django_posixcron.declarations.problems import (
    Form,
    Invalid,
    KeyPath,
    closest,
    did_you_mean,
    show,
)
from django_posixcron.declarations.values import delay, is_number

ENQUEUE_KEYS = ("backend", "queue_name", "priority")
# Django Tasks' own bounds (TASK_MIN_PRIORITY, TASK_MAX_PRIORITY).
MIN_PRIORITY, MAX_PRIORITY = -100, 100

_ENQUEUE_HINT = (
    'Use True (the Django Tasks defaults), False, or a dict such as {"backend": "default", '
    '"queue_name": "cron", "priority": 0}.'
)


# What a task without its own "enqueue" inherits when ENQUEUE runs tasks in the scheduler.
INHERIT_LOCAL: object = object()


def enqueue(value: object, path: KeyPath) -> Enqueue | None:
    """Return where runs are handed off, or None for "run inside the scheduler".

    ``None`` is not a value a user may give: a task's ``"enqueue": None`` reads as "inherit
    ENQUEUE" as well as "opt out", so it is refused with the other wrong values. (A task
    without the key inherits the top-level value, passed here already validated.)
    """
    if value is False or value is INHERIT_LOCAL:
        return None
    if isinstance(value, Enqueue):  # the top-level ENQUEUE, already checked, as a default
        return value
    if value is None:
        top_level = path.key == "ENQUEUE"
        raise Invalid(
            E_ENQUEUE,
            Form.EXPECTED,
            "True, False or a dict",
            "Leave the key out (or say False) to run tasks inside the scheduler, or say True "
            "to hand them to the Django Tasks defaults."
            if top_level
            else "Leave the key out to follow ENQUEUE, or say False to run the task inside the "
            "scheduler.",
        )
    if value is True:
        return Enqueue()
    if not isinstance(value, Mapping):
        raise Invalid(E_ENQUEUE, Form.EXPECTED, "True, False or a dict", _ENQUEUE_HINT)
    # Every mistake of the dict at once, in one message: a user fixing an unknown key should
    # not learn of a bad priority only at the next check.
    details: list[str] = []
    hints: list[str] = []
    unknown = [key for key in value if key not in ENQUEUE_KEYS]
    if unknown:
        keys = ", ".join(show(key) for key in unknown)
        details.append(
            f"has unknown keys {keys}" if len(unknown) > 1 else f"has an unknown key {keys}"
        )
        if len(unknown) == 1:
            suggestions = did_you_mean(unknown[0], ENQUEUE_KEYS)
        else:
            suggestions = "".join(
                f"For {show(key)}, did you mean {close!r}? "
                for key in unknown
                if (close := closest(key, ENQUEUE_KEYS))
            )
        hints.append(f"{suggestions}Known keys: {', '.join(ENQUEUE_KEYS)}.")
    options: dict[str, Any] = {}
    for key in ("backend", "queue_name"):
        if key in value:
            given = value[key]
            if not isinstance(given, str) or not given or "\x00" in given:
                details.append(f"needs {key!r} to be a non-empty str")
                hints.append(
                    f"Name the Django Tasks {key.replace('_name', '')} alias, e.g. 'default'."
                )
            else:
                options[key] = given
    if "priority" in value:
        priority = value["priority"]
        if not (is_number(priority) and isinstance(priority, int)) or not (
            MIN_PRIORITY <= priority <= MAX_PRIORITY
        ):
            details.append(f"needs 'priority' to be an int from {MIN_PRIORITY} to {MAX_PRIORITY}")
            hints.append("Use e.g. 0, the Django Tasks default priority.")
        else:
            options["priority"] = priority
    if details:
        raise Invalid(E_ENQUEUE, Form.GOT, "; ".join(details), " ".join(hints))
    return Enqueue(**options)


_deadline = delay(
    E_START_DEADLINE,
    f"Use e.g. {DEFAULT_START_DEADLINE.total_seconds():.0f} (the default): how long a queued "
    "run may wait for a worker before it is marked lost and retried.",
    none_allowed=True,
)


def start_deadline(value: object, path: KeyPath) -> dt.timedelta | None:
    """Return the start deadline given, None when left out (the default applies)."""
    try:
        deadline: dt.timedelta | None = _deadline(value, path)
    except Invalid as invalid:
        # Zero, negative or under a microsecond: the minimum to name is MIN_START_DEADLINE.
        if invalid.form is Form.TOO_LARGE or not (
            isinstance(value, dt.timedelta) or (is_number(value) and value == value)  # not NaN
        ):
            raise
        deadline = dt.timedelta(0)
    if deadline is not None and deadline < MIN_START_DEADLINE:
        hint = (
            "A worker needs time to pick a run up; use at least "
            f"{MIN_START_DEADLINE.total_seconds():.0f} seconds."
        )
        raise Invalid(
            E_START_DEADLINE,
            Form.TOO_SMALL,
            f"at least {MIN_START_DEADLINE.total_seconds():.0f} seconds",
            hint,
        )
    return deadline


def start_deadline_needs_enqueue(values: Mapping[str, Any]) -> None:
    """Rule: ``start_deadline`` on a task that runs inside the scheduler is a mistake."""
    if values["start_deadline"] is not None and values["enqueue"] is None:
        hint = (
            'Hand the task off with "enqueue": True (or set POSIXCRON["ENQUEUE"]), or remove '
            "start_deadline: a task run inside the scheduler is never queued."
        )
        raise Invalid(
            E_START_DEADLINE,
            Form.GOT,
            "is set, but the task is not handed to a Tasks backend",
            hint,
        )


def with_default_deadline(deadline: dt.timedelta | None) -> dt.timedelta:
    return DEFAULT_START_DEADLINE if deadline is None else deadline
