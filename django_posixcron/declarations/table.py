"""A dict of settings checked against a table: one row per key, then the rules across keys."""

from __future__ import annotations

import dataclasses
import datetime as dt
from collections.abc import Callable, Mapping
from typing import Any

from django_posixcron.declarations.ids import E_UNCHECKABLE
from django_posixcron.declarations.problems import (
    Form,
    Invalid,
    KeyPath,
    Problem,
    did_you_mean,
    problem,
)


def uncheckable(error: Exception) -> Invalid:
    """The problem for a value whose own code raised while a check looked at it: a property
    of the callable, a lazy description, a mapping's ``__getitem__``. A system check must
    name the value, not end ``manage.py check`` with a traceback from inside it."""
    try:
        text = str(error)
    except Exception:
        text = "(an exception that cannot be shown)"
    if len(text) > 200:
        text = f"{text[:180]}... ({len(text)} characters)"
    return Invalid(
        E_UNCHECKABLE,
        Form.GOT,
        f"could not be checked: looking at it raised {type(error).__name__}: {text}",
        "The value's own code raised while the checks read it; declare a plain value (a "
        "function, a str, a dict) or fix the code that raised.",
    )


# Validate one declared (or default) value at a path; return it normalised or raise Invalid.
Validator = Callable[[Any, KeyPath], Any]

_NO_DEFAULT: Any = object()
# What a validated constant default may be to be kept and shared between tables' values.
IMMUTABLE = (type(None), bool, int, float, str, dt.timedelta)


@dataclasses.dataclass(frozen=True)
class Key:
    """One key: its validator, and its default or how to find it.

    A default goes through the validator too: ``settings.TIME_ZONE``, the default zone, can be
    as wrong as a declared one.
    """

    name: str
    validate: Validator
    default: object = _NO_DEFAULT
    # A default read elsewhere (another setting), given the table's valid values so far and
    # those of the enclosing table (a task sees the top-level keys). A KeyError says that the
    # value it reads is invalid: the key is left out, as invalid, without a problem of its own.
    default_from: Callable[[Mapping[str, Any]], object] | None = None
    # A required key's example value, for the hint when it is missing.
    example: str | None = None
    # The TaskDeclaration field, when it is not named like the key.
    attribute: str | None = None

    def __post_init__(self) -> None:
        given = [self.default is not _NO_DEFAULT, self.default_from is not None, self.example]
        if sum(bool(g) for g in given) != 1:
            raise TypeError(f"Key {self.name!r}: give one of default, default_from or example")

    @property
    def required(self) -> bool:
        return self.example is not None


@dataclasses.dataclass(frozen=True)
class Rule:
    """A rule across keys, checked once every key it `needs` is valid.

    `check` gets the valid values (the enclosing table's too) and raises Invalid; the
    problem names the key `on`, one of the `needs`, with its declared value.
    """

    on: str
    needs: tuple[str, ...]
    check: Callable[[Mapping[str, Any]], None]
    needed: frozenset[str] = dataclasses.field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "needed", frozenset(self.needs))
        if self.on not in self.needs:
            raise TypeError(f"Rule on {self.on!r}: it must need {self.on!r}")


class Report:
    """The problems found so far, in the order `manage.py check` lists them."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []

    def add(self, path: KeyPath, value: object, invalid: Invalid) -> None:
        self.problems.append(problem(path, value, invalid))


@dataclasses.dataclass(frozen=True)
class Table:
    """The keys of one dict of settings, in the order the hints list them, and its rules."""

    what: str  # "task": "every task needs ..."
    keys: tuple[Key, ...]
    rules: tuple[Rule, ...]
    unknown_id: str
    missing_id: str | None = None

    # Derived once: a table checks every task of a project that may declare 100,000.
    names: tuple[str, ...] = dataclasses.field(init=False, repr=False, compare=False)
    required: tuple[Key, ...] = dataclasses.field(init=False, repr=False, compare=False)

    needs: str = dataclasses.field(init=False, repr=False, compare=False)
    # Constant defaults that validate to an immutable value, validated once.
    _defaults: dict[str, Any] = dataclasses.field(
        init=False, repr=False, compare=False, default_factory=dict
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "names", tuple(key.name for key in self.keys))
        object.__setattr__(self, "required", tuple(key for key in self.keys if key.required))
        object.__setattr__(self, "needs", " and ".join(f"a {k.name!r}" for k in self.required))

    def validate(
        self,
        raw: Mapping[Any, Any],
        path: KeyPath,
        report: Report,
        outer: Mapping[str, Any] | None = None,
    ) -> tuple[dict[str, Any], bool]:
        """Check `raw`; return its valid values and whether all of it is valid.

        `outer` holds the valid values of the enclosing table, for defaults and rules (a
        task's frequency guard needs the top-level POLL_INTERVAL).
        """
        before = len(report.problems)
        self._check_names(raw, path, report)
        values: dict[str, Any] = {}
        # The valid values, over the enclosing table's: what defaults and rules read.
        scope = dict(outer or {})
        defaults = self._defaults
        for key in self.keys:
            name = key.name
            if name in raw:
                value = raw[name]
            elif name in defaults:
                values[name] = scope[name] = defaults[name]
                continue
            elif key.example is not None:  # required, and reported missing
                continue
            elif key.default_from is None:
                value = key.default
                try:
                    valid = key.validate(value, path / name)
                except Invalid as invalid:
                    report.add(path / name, value, invalid)
                    continue
                if isinstance(valid, IMMUTABLE):
                    defaults[name] = valid
                values[name] = scope[name] = valid
                continue
            else:
                try:
                    value = key.default_from(scope)
                except KeyError:
                    continue  # it reads a setting that is invalid, and reported
            at = path / name
            try:
                values[name] = scope[name] = key.validate(value, at)
            except Invalid as invalid:
                report.add(at, value, invalid)
            except Exception as error:
                report.add(at, value, uncheckable(error))
        for rule in self.rules:
            if scope.keys() >= rule.needed:
                try:
                    rule.check(scope)
                except Exception as error:
                    broken = error if isinstance(error, Invalid) else uncheckable(error)
                    report.add(path / rule.on, raw.get(rule.on, values[rule.on]), broken)
                    # The rules after this one see it as invalid (or as the enclosing value).
                    del values[rule.on]
                    del scope[rule.on]
                    if outer is not None and rule.on in outer:
                        scope[rule.on] = outer[rule.on]
        complete = len(values) == len(self.keys)
        return values, complete and len(report.problems) == before

    def _check_names(self, raw: Mapping[Any, Any], path: KeyPath, report: Report) -> None:
        """Report the unknown keys, then the missing required ones."""
        known = self.names
        for name in raw:
            if name not in known:
                hint = f"{did_you_mean(name, known)}Known keys: {', '.join(known)}."
                report.add(path / name, name, Invalid(self.unknown_id, Form.UNKNOWN_KEY, "", hint))
        for key in self.required:
            if key.name not in raw:
                assert self.missing_id is not None
                detail = f"every {self.what} needs {self.needs}."
                hint = f'Add e.g. "{key.name}": {key.example}'
                missing = Invalid(self.missing_id, Form.MISSING_KEY, detail, hint)
                report.add(path / key.name, None, missing)
