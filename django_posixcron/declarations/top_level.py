"""``settings.POSIXCRON`` as a whole: its top-level keys, then each task."""

from __future__ import annotations

import contextlib
import contextvars
from collections.abc import Iterator, Mapping
from typing import Any

from django.conf import settings
from django.core.exceptions import ImproperlyConfigured

from django_posixcron.conf import (
    DEFAULT_CONCURRENCY,
    DEFAULT_FAILING_AFTER,
    DEFAULT_HISTORY_DAYS,
    DEFAULT_POLL_INTERVAL,
    MAX_HISTORY_DAYS,
    MAX_POLL_INTERVAL,
    MIN_POLL_INTERVAL,
    poll_interval_fault,
)
from django_posixcron.declarations.declaration import TaskDeclaration
from django_posixcron.declarations.handoff import enqueue
from django_posixcron.declarations.ids import (
    E_CONCURRENCY,
    E_FAILING_AFTER,
    E_HISTORY_DAYS,
    E_NOT_A_DICT,
    E_POLL_INTERVAL,
    E_TASKS_NOT_A_DICT,
    E_TIMEZONE,
    E_UNKNOWN_KEY,
    E_USE_TZ,
)
from django_posixcron.declarations.problems import Form, Invalid, KeyPath, Problem
from django_posixcron.declarations.table import Key, Report, Table
from django_posixcron.declarations.task import Fields, default_zone, task
from django_posixcron.declarations.values import positive_int

# What each fault of poll_interval_fault() reads as in the message of posixcron.E021.
_POLL_INTERVAL_FAULTS = {
    "not positive": (Form.EXPECTED, "a positive number of seconds"),
    "too large": (Form.TOO_LARGE, f"at most {MAX_POLL_INTERVAL:g} seconds (one day)"),
    "too small": (
        Form.TOO_SMALL,
        f"at least {MIN_POLL_INTERVAL:g} seconds (the scheduler would poll the database "
        "continuously)",
    ),
}


def poll_interval(value: object, path: KeyPath) -> float:
    """Return POLL_INTERVAL in seconds, within the bounds of conf.poll_interval_fault()."""
    fault = poll_interval_fault(value)
    if fault is None:
        assert isinstance(value, int | float)
        return float(value)
    form, expected = _POLL_INTERVAL_FAULTS[fault]
    hint = (
        f"Use e.g. {DEFAULT_POLL_INTERVAL:g} (the default): the longest a change made "
        "elsewhere waits to be seen."
    )
    raise Invalid(E_POLL_INTERVAL, form, expected, hint)


def tasks(value: object, path: KeyPath) -> Mapping[Any, Any]:
    """Return the dict of task name to task definition; each task is checked on its own."""
    if not isinstance(value, Mapping):
        raise Invalid(
            E_TASKS_NOT_A_DICT,
            Form.EXPECTED,
            "a dict of task name to task definition",
            'Declare tasks as {"my-task": {"schedule": "0 3 * * *", "callable": "..."}}.',
        )
    return value


SETTINGS = Table(
    what="setting",
    keys=(
        Key("TASKS", tasks, default={}),
        Key("POLL_INTERVAL", poll_interval, default=DEFAULT_POLL_INTERVAL),
        Key(
            "CONCURRENCY",
            positive_int(
                E_CONCURRENCY,
                f"Use e.g. {DEFAULT_CONCURRENCY} (the default): the number of runs executing "
                "at once in one process.",
            ),
            default=DEFAULT_CONCURRENCY,
        ),
        Key(
            "HISTORY_DAYS",
            positive_int(
                E_HISTORY_DAYS,
                f"Use e.g. {DEFAULT_HISTORY_DAYS} (the default): the number of days of run "
                "history kept.",
                most=MAX_HISTORY_DAYS,
            ),
            default=DEFAULT_HISTORY_DAYS,
        ),
        Key(
            "FAILING_AFTER",
            positive_int(
                E_FAILING_AFTER,
                f"Use e.g. {DEFAULT_FAILING_AFTER} (the default): the failed runs in a row "
                "that send task_failing.",
            ),
            default=DEFAULT_FAILING_AFTER,
        ),
        # The default of every task's "enqueue": False runs tasks inside the scheduler.
        Key("ENQUEUE", enqueue, default=False),
    ),
    rules=(),
    unknown_id=E_UNKNOWN_KEY,
)


_FROM_SETTINGS: Any = object()

Collected = tuple[dict[str, TaskDeclaration], list[Problem]]
_once: contextvars.ContextVar[list[Collected] | None] = contextvars.ContextVar(
    "posixcron_collected_once", default=None
)


@contextlib.contextmanager
def collected_once() -> Iterator[None]:
    """Within the block, collecting from settings validates them once and then reuses that.

    ``runscheduler`` runs the system checks (which collect) and then needs the declarations:
    with 100,000 tasks, validating them twice would double its start-up. Nothing within the
    block may change the settings.
    """
    token = _once.set([])
    try:
        yield
    finally:
        _once.reset(token)


def collect(raw: object = _FROM_SETTINGS) -> Collected:
    """Validate ``settings.POSIXCRON`` (or `raw`); return the valid tasks and every problem."""
    if raw is _FROM_SETTINGS:
        memo = _once.get()
        if memo is None:
            return _collect(getattr(settings, "POSIXCRON", {}))
        if not memo:
            memo.append(_collect(getattr(settings, "POSIXCRON", {})))
        declarations, problems = memo[0]
        return dict(declarations), list(problems)
    return _collect(raw)


def _collect(raw: object) -> Collected:
    report = Report()
    use_tz = getattr(settings, "USE_TZ", False)
    if not use_tz:
        hint = "Set USE_TZ = True: cursors and run times are stored as UTC instants."
        detail = "django-posixcron requires USE_TZ = True."
        report.add(KeyPath("settings.USE_TZ"), use_tz, Invalid(E_USE_TZ, Form.IS, detail, hint))
    root = KeyPath()
    if not isinstance(raw, Mapping):
        hint = 'Set POSIXCRON = {"TASKS": {...}} in your settings.'
        report.add(root, raw, Invalid(E_NOT_A_DICT, Form.EXPECTED, "a dict", hint))
        return {}, report.problems
    top, _ = SETTINGS.validate(raw, root, report)
    declarations = {}
    memo: dict[tuple[Any, ...], Fields] = {}
    zoneless = False
    for name, definition in top.get("TASKS", {}).items():
        declaration = task(name, definition, root / "TASKS" / name, top, report, memo)
        if declaration is not None:
            declarations[declaration.name] = declaration
        zoneless = zoneless or (isinstance(definition, Mapping) and "timezone" not in definition)
    if zoneless:
        _check_default_zone(report)
    return declarations, report.problems


def _check_default_zone(report: Report) -> None:
    """Report settings.TIME_ZONE once if it is not a zone: tasks without their own use it."""
    value = getattr(settings, "TIME_ZONE", None)
    try:
        default_zone()
    except KeyError:
        hint = (
            "Set TIME_ZONE to an IANA name such as 'Europe/Berlin' or 'UTC', or give each task "
            "its own 'timezone'."
        )
        detail = "an IANA time zone name, the zone of every task without its own 'timezone'"
        report.add(
            KeyPath("settings.TIME_ZONE"), value, Invalid(E_TIMEZONE, Form.EXPECTED, detail, hint)
        )


def describe_problems(problems: list[Problem]) -> str:
    """Return the problems as lines of text, each with its id and hint."""
    return "\n".join(f"- ({p.id}) {p.msg} HINT: {p.hint}" for p in problems)


def load_declarations() -> dict[str, TaskDeclaration]:
    """Return the declared tasks; raise ImproperlyConfigured listing every problem."""
    declarations, problems = collect()
    if problems:
        raise ImproperlyConfigured(
            f"settings.POSIXCRON has {len(problems)} problem(s):\n{describe_problems(problems)}"
        )
    return declarations
