"""One entry of ``POSIXCRON['TASKS']``: its name, its table of keys and rules."""

from __future__ import annotations

import datetime as dt
import re
import zoneinfo
from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.utils import translation
from django.utils.functional import Promise

from django_posixcron.declarations.callables import callable_path, takes_kwargs
from django_posixcron.declarations.declaration import (
    DEFAULT_OVERLAP,
    DEFAULT_RETRY_DELAY,
    TaskDeclaration,
)
from django_posixcron.declarations.handoff import (
    INHERIT_LOCAL,
    enqueue,
    start_deadline,
    start_deadline_needs_enqueue,
    with_default_deadline,
)
from django_posixcron.declarations.ids import (
    E_BAD_NAME,
    E_DESCRIPTION,
    E_MISSING_KEY,
    E_OVERLAP,
    E_PAUSE_AFTER,
    E_RETRY_DELAY,
    E_TAKES_CONTEXT,
    E_TASK_NOT_A_DICT,
    E_TIMEOUT,
    E_TIMEZONE,
    E_UNKNOWN_TASK_KEY,
)
from django_posixcron.declarations.kwargs import kwargs
from django_posixcron.declarations.problems import Form, Invalid, KeyPath, did_you_mean, show
from django_posixcron.declarations.schedule import frequency_guard, schedule
from django_posixcron.declarations.table import Key, Report, Rule, Table
from django_posixcron.declarations.values import (
    NUL_DETAIL,
    SURROGATE_DETAIL,
    boolean,
    choice,
    delay,
    has_surrogate,
    optional,
    plain,
    positive_int,
)

NAME_MAX_LENGTH = 100  # Task.name max_length
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]*")


# Names the zone database of some hosts has that are not IANA zones but links to the host's
# own: each host would fire a task declared with them at its own idea of the hour.
HOST_ZONE_LINKS = frozenset({"localtime", "posixrules"})


# Directories of the zone database some hosts install beside the zones: "right/" zones count
# leap seconds (their hours are not the civil ones), "posix/" ones are copies. Neither is an
# IANA name, and another host may not have them or have them differ.
HOST_ZONE_VARIANTS = ("right/", "posix/")

# What an IANA zone name looks like ("Area/Location", capitalised as the database spells it):
# one this host cannot load may be newer than its zone database (a zone renamed or added),
# not a typo.
IANA_SHAPED = re.compile(
    r"(Africa|America|Antarctica|Arctic|Asia|Atlantic|Australia|Europe|Indian|Pacific|Etc)"
    r"(/[A-Z][A-Za-z0-9_+-]*)+"
)


def timezone(value: object, path: KeyPath) -> str:
    """Return the IANA name of a zone given by name or as a ZoneInfo."""
    given = value
    if isinstance(value, zoneinfo.ZoneInfo):
        if value.key is None:
            # ZoneInfo.from_file(): a file, not a name every process can look up.
            raise Invalid(
                E_TIMEZONE,
                Form.EXPECTED,
                "an IANA time zone name, not a zone read from a file",
                "Name the zone, such as 'Europe/Berlin' or 'UTC', or use ZoneInfo(name).",
                shown=given,
            )
        value = value.key
    if isinstance(value, str) and value in HOST_ZONE_LINKS:
        raise Invalid(
            E_TIMEZONE,
            Form.EXPECTED,
            "an IANA time zone name, not a link to this host's zone",
            "Name the zone itself, such as 'Europe/Berlin' or 'UTC': another host may link "
            f"{value!r} to another zone.",
            shown=value,
        )
    if isinstance(value, str) and value.startswith(HOST_ZONE_VARIANTS):
        zone = value.split("/", 1)[1]
        raise Invalid(
            E_TIMEZONE,
            Form.EXPECTED,
            "an IANA time zone name, not a variant from this host's zone files",
            f"Name the zone itself, such as {show(zone)}: the 'right/' and 'posix/' zones "
            "are not IANA names (the 'right/' ones count leap seconds, so their hours are not "
            "the civil ones), and other hosts may lack them.",
            shown=value,
        )
    if isinstance(value, str) and value:
        try:
            zoneinfo.ZoneInfo(value)
        except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
            pass
        else:
            return plain(value)
    newer = ""
    if isinstance(value, str) and IANA_SHAPED.fullmatch(value):
        newer = (
            f" If {value!r} is a zone newer than this host's time zone database, update it: "
            f"Python reads zones from {', '.join(zoneinfo.TZPATH) or 'no directory'}, then "
            "from the 'tzdata' package."
        )
    raise Invalid(
        E_TIMEZONE,
        Form.EXPECTED,
        "an IANA time zone name",
        f"{did_you_mean(value, zoneinfo.available_timezones() - HOST_ZONE_LINKS)}Use a name "
        f"such as 'Europe/Berlin' or 'UTC'; leave the key out to use settings.TIME_ZONE.{newer}",
        shown=value,
    )


def _inherited_enqueue(scope: Mapping[str, Any]) -> object:
    """The top-level ENQUEUE, validated: an Enqueue, or INHERIT_LOCAL for None."""
    inherited = scope["ENQUEUE"]
    return INHERIT_LOCAL if inherited is None else inherited


def default_zone() -> str:
    """Return settings.TIME_ZONE, the zone of a task without its own; KeyError if invalid.

    An invalid one is reported once, naming settings.TIME_ZONE (top_level.py), not once per
    task at a ``timezone`` key the user left out.
    """
    try:
        return timezone(settings.TIME_ZONE, KeyPath("settings.TIME_ZONE"))
    except Invalid:
        raise KeyError("TIME_ZONE") from None


def description(value: object, path: KeyPath) -> str:
    """Return the description as the str every process stores and hashes alike."""
    if isinstance(value, Promise):
        # gettext_lazy(...): stored as text in settings.LANGUAGE_CODE, whatever language is
        # active when the checks run (a request, a command), so that every process computes
        # the same definition and hash; untranslated, it hashes as the plain str.
        with translation.override(settings.LANGUAGE_CODE):
            value = str(value)
    if not isinstance(value, str):
        hint = "Describe the task in a sentence, or leave the key out."
        raise Invalid(E_DESCRIPTION, Form.EXPECTED_TYPED, "a str", hint)
    if "\x00" in value:
        hint = "Remove the NUL character from the description."
        raise Invalid(E_DESCRIPTION, Form.GOT, NUL_DETAIL, hint, shown=value)
    if has_surrogate(value):
        hint = "Write the description as valid Unicode text."
        raise Invalid(E_DESCRIPTION, Form.GOT, SURROGATE_DETAIL, hint, shown=value)
    return plain(value)


# In the order the hint for an unknown key lists them. The rules run once the keys they need
# are valid, so a rule across keys sees only values that passed their own validator.
TASK = Table(
    what="task",
    keys=(
        Key("schedule", schedule, example='"15 3 * * *"'),
        Key(
            "callable",
            callable_path,
            example='"myapp.jobs.nightly_report"',
            attribute="callable_path",
        ),
        Key(
            "retry_delay",
            delay(E_RETRY_DELAY, "Use e.g. 300 for five minutes."),
            default=DEFAULT_RETRY_DELAY,
        ),
        Key("kwargs", kwargs, default={}),
        Key("timezone", timezone, default_from=lambda _: default_zone()),
        Key(
            "overlap",
            choice(
                E_OVERLAP,
                ("skip", "allow"),
                "'skip' (the default) records a skipped run while the previous one still "
                "runs; 'allow' starts another one.",
            ),
            default=DEFAULT_OVERLAP,
        ),
        Key(
            "timeout",
            delay(
                E_TIMEOUT,
                "Use e.g. 600 for ten minutes, or leave the key out for no timeout.",
                none_allowed=True,
            ),
            default=None,
        ),
        Key("description", description, default=""),
        Key(
            "takes_context",
            boolean(
                E_TAKES_CONTEXT,
                "True passes a django_posixcron.context.RunContext as the callable's first "
                "argument.",
            ),
            default=False,
        ),
        Key(
            "pause_after_failures",
            optional(
                positive_int(
                    E_PAUSE_AFTER,
                    "Use e.g. 5 to pause the task after its fifth failure in a row, or leave "
                    "the key out never to pause it.",
                )
            ),
            default=None,
        ),
        # Hand runs to a Django Tasks backend: the top-level ENQUEUE unless the task says.
        Key("enqueue", enqueue, default_from=_inherited_enqueue),
        Key("start_deadline", start_deadline, default=None),
    ),
    rules=(
        Rule(on="schedule", needs=("schedule", "POLL_INTERVAL"), check=frequency_guard),
        Rule(
            on="start_deadline",
            needs=("start_deadline", "enqueue"),
            check=start_deadline_needs_enqueue,
        ),
        Rule(on="callable", needs=("callable", "kwargs", "takes_context"), check=takes_kwargs),
    ),
    unknown_id=E_UNKNOWN_TASK_KEY,
    missing_id=E_MISSING_KEY,
)


Fields = dict[str, Any]

# Values a task's definition may hold and still be looked up in the memo of one collection:
# immutable, and equal only to values of their own type once the type is part of the key
# (True == 1 and 300 == 300.0, but `takes_context=1` must still be refused).
_MEMO_TYPES = frozenset({str, int, float, bool, type(None), dt.timedelta})


def memo_key(definition: object) -> tuple[Any, ...] | None:
    """Return what identifies a definition's validated fields, or None if it cannot be said.

    Projects that declare thousands of tasks generate them: most share every key but their
    name. A definition of plain values (kwargs empty) validates to the same fields whatever
    the task's name, within one collection (the top-level keys it reads are the same).
    """
    if type(definition) is not dict:
        return None
    items = []
    for key, value in definition.items():
        if type(key) is not str:
            return None  # reported as it is by the table, and no key to sort among the rest
        kind = type(value)
        if kind is dict and not value:
            value = ()  # an empty kwargs (or enqueue) dict; its kind keeps it apart
        elif kind not in _MEMO_TYPES:
            return None
        items.append((key, kind, value))
    return tuple(sorted(items, key=lambda item: item[0]))


def task(
    name: object,
    definition: object,
    path: KeyPath,
    top: Mapping[str, Any],
    report: Report,
    memo: dict[tuple[Any, ...], Fields] | None = None,
) -> TaskDeclaration | None:
    """Return the declaration of one task, or None after reporting its problems.

    With a `memo` (one collection's), a definition already validated without problems under
    another name is not validated again: its fields are reused, only the name is checked.
    """
    named = _valid_name(name, path, report)
    if not isinstance(definition, Mapping):
        hint = 'Declare the task as {"schedule": "0 3 * * *", "callable": "app.jobs.func"}.'
        report.add(path, definition, Invalid(E_TASK_NOT_A_DICT, Form.EXPECTED, "a dict", hint))
        return None
    key = memo_key(definition) if memo is not None else None
    if key is not None and memo is not None and key in memo:
        if not named:
            return None
        assert isinstance(name, str)
        return TaskDeclaration(name=name, **memo[key])
    problems = len(report.problems)
    values, valid = TASK.validate(definition, path, report, top)
    if not valid:
        return None
    fields = {key.attribute or key.name: values[key.name] for key in TASK.keys}
    fields["start_deadline"] = with_default_deadline(fields["start_deadline"])
    if key is not None and memo is not None and len(report.problems) == problems:
        memo[key] = fields
    if not named:
        return None
    assert isinstance(name, str)
    return TaskDeclaration(name=name, **fields)


def _valid_name(name: object, path: KeyPath, report: Report) -> bool:
    if isinstance(name, str) and len(name) <= NAME_MAX_LENGTH and NAME_RE.fullmatch(name):
        return True
    detail = (
        "Expected a slug: lowercase letters, digits, '_', '.' and '-', starting with a letter "
        f"or digit, at most {NAME_MAX_LENGTH} characters."
    )
    hint = (
        "Rename the task, e.g. 'nightly-report'. The name is the task's identity in the database."
    )
    report.add(path, name, Invalid(E_BAD_NAME, Form.NAME, detail, hint))
    return False
