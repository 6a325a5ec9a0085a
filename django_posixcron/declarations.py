"""Turn ``settings.POSIXCRON`` into validated task declarations, or a list of problems.

Everything here is pure validation of settings: no database, nothing at import time. The
system checks (``django_posixcron.checks``) report the problems; the scheduler and
reconciliation use the declarations.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import difflib
import hashlib
import inspect
import json
import re
import reprlib
import zoneinfo
from collections.abc import Callable, Iterable, Mapping
from functools import cached_property
from typing import Any

from asgiref.sync import AsyncToSync
from asgiref.sync import iscoroutinefunction as is_async_function
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.utils import translation
from django.utils.functional import Promise
from django.utils.module_loading import import_string

from django_posixcron.conf import (
    DEFAULT_CONCURRENCY,
    DEFAULT_HISTORY_DAYS,
    DEFAULT_POLL_INTERVAL,
    MAX_HISTORY_DAYS,
    MAX_POLL_INTERVAL,
    MIN_POLL_INTERVAL,
    TOP_LEVEL_KEYS,
)
from django_posixcron.cron import CronExpression, CronSyntaxError

# A missing retry_delay still retries: five minutes is long enough for a flapping dependency
# to recover and short enough that a daily job is not silently skipped for a day.
DEFAULT_RETRY_DELAY = dt.timedelta(seconds=300)
# The scheduler adds a delay to datetimes (started_at + timeout, finished_at + retry_delay) and
# the database stores it as an interval: 1e12 seconds overflows both. A year is longer than any
# sensible retry or run; a task that should wait longer is better paused.
MAX_DELAY = dt.timedelta(days=366)
DEFAULT_OVERLAP = "skip"
OVERLAP_CHOICES = ("skip", "allow")
NAME_MAX_LENGTH = 100  # Task.name max_length
NAME_RE = re.compile(r"[a-z0-9][a-z0-9_.-]*")
REQUIRED_TASK_KEYS = ("schedule", "callable")
TASK_KEYS = (
    "schedule",
    "callable",
    "retry_delay",
    "kwargs",
    "timezone",
    "overlap",
    "timeout",
    "description",
)
ROOT = "settings.POSIXCRON"

# Stable ids: never renumber, only append (docs/settings.rst lists them).
E_NOT_A_DICT = "posixcron.E001"
E_UNKNOWN_KEY = "posixcron.E002"
E_TASKS_NOT_A_DICT = "posixcron.E003"
E_BAD_NAME = "posixcron.E004"
E_TASK_NOT_A_DICT = "posixcron.E005"
E_UNKNOWN_TASK_KEY = "posixcron.E006"
E_MISSING_KEY = "posixcron.E007"
E_SCHEDULE_TYPE = "posixcron.E008"
E_CRON_SYNTAX = "posixcron.E009"
E_CALLABLE_TYPE = "posixcron.E010"
E_CALLABLE_IMPORT = "posixcron.E011"
E_NOT_CALLABLE = "posixcron.E012"
E_SIGNATURE = "posixcron.E013"
E_KWARGS_TYPE = "posixcron.E014"
E_KWARGS_JSON = "posixcron.E015"
E_TIMEZONE = "posixcron.E016"
E_RETRY_DELAY = "posixcron.E017"
E_TIMEOUT = "posixcron.E018"
E_OVERLAP = "posixcron.E019"
E_DESCRIPTION = "posixcron.E020"
E_POLL_INTERVAL = "posixcron.E021"
E_CONCURRENCY = "posixcron.E022"
E_HISTORY_DAYS = "posixcron.E023"
E_FREQUENCY = "posixcron.E024"
E_USE_TZ = "posixcron.E025"
E_NOT_PLAIN_FUNCTION = "posixcron.E026"


@dataclasses.dataclass(frozen=True)
class Problem:
    """One mistake in the settings, ready to become a system check error."""

    id: str
    msg: str
    hint: str
    path: str
    value: Any = None


@dataclasses.dataclass(frozen=True)
class TaskDeclaration:
    """One task as settings declare it, normalised and validated."""

    name: str
    schedule: str  # normalised by the engine, so spacing changes are not definition changes
    callable_path: str
    kwargs: dict[str, Any]
    timezone: str
    retry_delay: dt.timedelta = DEFAULT_RETRY_DELAY
    overlap: str = DEFAULT_OVERLAP
    timeout: dt.timedelta | None = None
    description: str = ""

    def definition(self) -> dict[str, Any]:
        """Return the definition as plain JSON-able values, the input of the hash."""
        return {
            "name": self.name,
            "schedule": self.schedule,
            "callable": self.callable_path,
            "kwargs": self.kwargs,
            "timezone": self.timezone,
            "retry_delay_us": _microseconds(self.retry_delay),
            "overlap": self.overlap,
            "timeout_us": None if self.timeout is None else _microseconds(self.timeout),
            "description": self.description,
        }

    @cached_property
    def definition_hash(self) -> str:
        """Return a stable sha256 hex digest of the normalised definition."""
        text = json.dumps(
            self.definition(), sort_keys=True, separators=(",", ":"), ensure_ascii=True
        )
        return hashlib.sha256(text.encode("ascii")).hexdigest()

    def resolve(self) -> Callable[..., Any]:
        """Import the callable; settings name it, the database never does."""
        func: Callable[..., Any] = import_string(self.callable_path)
        return func


def _microseconds(delta: dt.timedelta) -> int:
    return (delta.days * 86400 + delta.seconds) * 1_000_000 + delta.microseconds


def _key(path: str, key: object) -> str:
    return f"{path}[{_repr(key)}]"


def _repr(value: object) -> str:
    """Return repr(value), or a shortened stand-in when the full one cannot be built."""
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


def _closest(word: str, choices: Iterable[str]) -> str | None:
    """Return the choice that `word` most likely misspells, if any."""
    # Case first: difflib scores 'tasks' against 'TASKS' as entirely different strings.
    folded = {choice.casefold(): choice for choice in sorted(choices)}
    same = folded.get(word.casefold())
    if same is not None:
        return same
    close = difflib.get_close_matches(word.casefold(), folded, n=1, cutoff=0.6)
    return folded[close[0]] if close else None


def _did_you_mean(key: object, allowed: tuple[str, ...]) -> str:
    close = _closest(key, allowed) if isinstance(key, str) else None
    return f"Did you mean {close!r}? " if close else ""


def _is_number(value: object) -> bool:
    # bool is an int subclass, but `True` seconds is a typo, not a duration.
    return isinstance(value, int | float) and not isinstance(value, bool)


def _duration(value: object) -> dt.timedelta | None:
    """Return value as a timedelta in (0, MAX_DELAY], or None when it is not one."""
    if isinstance(value, dt.timedelta):
        return value if dt.timedelta(0) < value <= MAX_DELAY else None
    if not _is_number(value):
        return None
    assert isinstance(value, int | float)
    # Compared as numbers before any conversion: timedelta(seconds=1e20) and float(10**400)
    # raise OverflowError. NaN fails `> 0`.
    if not 0 < value <= MAX_DELAY.total_seconds():
        return None
    delta = dt.timedelta(seconds=value)
    return delta if delta > dt.timedelta(0) else None  # 1e-7 s rounds to zero


def _too_large(value: object, limit: float) -> bool:
    """Return whether value is a number (or timedelta) above `limit` seconds, inf included."""
    if isinstance(value, dt.timedelta):
        return value.total_seconds() > limit
    return isinstance(value, int | float) and not isinstance(value, bool) and value > limit


class _Collector:
    def __init__(self, raw: object) -> None:
        self.raw = raw
        self.problems: list[Problem] = []
        self.declarations: dict[str, TaskDeclaration] = {}

    def add(self, id: str, path: str, value: object, msg: str, hint: str) -> None:
        self.problems.append(Problem(id=id, msg=msg, hint=hint, path=path, value=value))

    def run(self) -> None:
        if not getattr(settings, "USE_TZ", False):
            self.add(
                E_USE_TZ,
                "settings.USE_TZ",
                settings.USE_TZ,
                f"settings.USE_TZ is {settings.USE_TZ!r}; django-posixcron requires USE_TZ = True.",
                "Set USE_TZ = True: cursors and run times are stored as UTC instants.",
            )
        raw = self.raw
        if not isinstance(raw, Mapping):
            self.add(
                E_NOT_A_DICT,
                ROOT,
                raw,
                f"{ROOT} is misconfigured. Expected a dict but got {raw!r}.",
                'Set POSIXCRON = {"TASKS": {...}} in your settings.',
            )
            return
        for key in raw:
            if key not in TOP_LEVEL_KEYS:
                self.add(
                    E_UNKNOWN_KEY,
                    _key(ROOT, key),
                    key,
                    f"{ROOT} has an unknown key {key!r}.",
                    f"{_did_you_mean(key, TOP_LEVEL_KEYS)}Known keys: {', '.join(TOP_LEVEL_KEYS)}.",
                )
        poll_interval = self.top_level(raw)
        tasks = raw.get("TASKS", {})
        path = _key(ROOT, "TASKS")
        if not isinstance(tasks, Mapping):
            self.add(
                E_TASKS_NOT_A_DICT,
                path,
                tasks,
                f"{path} is misconfigured. Expected a dict of task name to task definition but "
                f"got {tasks!r}.",
                'Declare tasks as {"my-task": {"schedule": "0 3 * * *", "callable": "..."}}.',
            )
            return
        for name, definition in tasks.items():
            declaration = self.task(name, definition, poll_interval)
            if declaration is not None:
                self.declarations[declaration.name] = declaration

    def top_level(self, raw: Mapping[Any, Any]) -> float | None:
        """Check the scalar settings; return a usable POLL_INTERVAL for the frequency guard."""
        poll: float | None = DEFAULT_POLL_INTERVAL
        if "POLL_INTERVAL" in raw:
            value = raw["POLL_INTERVAL"]
            path = _key(ROOT, "POLL_INTERVAL")
            # Compared as numbers, never converted first: float(10**400) and
            # math.isfinite(10**400) raise OverflowError. NaN fails `> 0`.
            if not (_is_number(value) and value > 0):
                msg = (
                    f"{path} is misconfigured. Expected a positive number of seconds but got "
                    f"{_repr(value)}."
                )
            elif value > MAX_POLL_INTERVAL:
                msg = (
                    f"{path} is too large: expected at most {MAX_POLL_INTERVAL:g} seconds (one "
                    f"day) but got {_repr(value)}."
                )
            elif value < MIN_POLL_INTERVAL:
                msg = (
                    f"{path} is too small: expected at least {MIN_POLL_INTERVAL:g} seconds (the "
                    f"scheduler would poll the database continuously) but got {_repr(value)}."
                )
            else:
                msg = ""
                poll = float(value)
            if msg:
                poll = None
                self.add(
                    E_POLL_INTERVAL,
                    path,
                    value,
                    msg,
                    f"Use e.g. {DEFAULT_POLL_INTERVAL:g} (the default): the longest a change "
                    "made elsewhere waits to be seen.",
                )
        for key, default, most, what in (
            ("CONCURRENCY", DEFAULT_CONCURRENCY, None, "runs executing at once in one process"),
            ("HISTORY_DAYS", DEFAULT_HISTORY_DAYS, MAX_HISTORY_DAYS, "days of run history kept"),
        ):
            if key not in raw:
                continue
            value = raw[key]
            path = _key(ROOT, key)
            if not (isinstance(value, int) and not isinstance(value, bool) and value > 0):
                msg = f"{path} is misconfigured. Expected a positive int but got {_repr(value)}."
            elif most is not None and value > most:
                msg = (
                    f"{path} is too large: expected at most {most} ({most // 365} years) but got "
                    f"{_repr(value)}."
                )
            else:
                continue
            self.add(
                E_CONCURRENCY if key == "CONCURRENCY" else E_HISTORY_DAYS,
                path,
                value,
                msg,
                f"Use e.g. {default} (the default): the number of {what}.",
            )
        return poll

    def task(
        self, name: object, definition: object, poll_interval: float | None
    ) -> TaskDeclaration | None:
        path = _key(_key(ROOT, "TASKS"), name)
        ok = True
        if not (isinstance(name, str) and len(name) <= NAME_MAX_LENGTH and NAME_RE.fullmatch(name)):
            ok = False
            self.add(
                E_BAD_NAME,
                path,
                name,
                f"{path}: the task name {name!r} is not a valid name. Expected a slug: "
                f"lowercase letters, digits, '_', '.' and '-', starting with a letter or digit, "
                f"at most {NAME_MAX_LENGTH} characters.",
                "Rename the task, e.g. 'nightly-report'. The name is the task's identity in the "
                "database.",
            )
        if not isinstance(definition, Mapping):
            self.add(
                E_TASK_NOT_A_DICT,
                path,
                definition,
                f"{path} is misconfigured. Expected a dict but got {definition!r}.",
                'Declare the task as {"schedule": "0 3 * * *", "callable": "app.jobs.func"}.',
            )
            return None
        for key in definition:
            if key not in TASK_KEYS:
                ok = False
                self.add(
                    E_UNKNOWN_TASK_KEY,
                    _key(path, key),
                    key,
                    f"{path} has an unknown key {key!r}.",
                    f"{_did_you_mean(key, TASK_KEYS)}Known keys: {', '.join(TASK_KEYS)}.",
                )
        for key in REQUIRED_TASK_KEYS:
            if key not in definition:
                ok = False
                self.add(
                    E_MISSING_KEY,
                    _key(path, key),
                    None,
                    f"{path} has no {key!r}; every task needs a 'schedule' and a 'callable'.",
                    'Add e.g. "schedule": "15 3 * * *"'
                    if key == "schedule"
                    else 'Add e.g. "callable": "myapp.jobs.nightly_report"',
                )
        schedule = self.schedule(path, definition, poll_interval)
        kwargs = self.kwargs(path, definition)
        func_path = self.callable(path, definition, kwargs)
        timezone = self.timezone(path, definition)
        retry_delay = self.delay(path, definition, "retry_delay", DEFAULT_RETRY_DELAY)
        timeout = self.delay(path, definition, "timeout", None)
        overlap = definition.get("overlap", DEFAULT_OVERLAP)
        if overlap not in OVERLAP_CHOICES:
            ok = False
            self.add(
                E_OVERLAP,
                _key(path, "overlap"),
                overlap,
                f"{_key(path, 'overlap')} is misconfigured. Expected 'skip' or 'allow' but got "
                f"{overlap!r}.",
                "'skip' (the default) records a skipped run while the previous one still runs; "
                "'allow' starts another one.",
            )
        description = definition.get("description", "")
        if isinstance(description, Promise):
            # gettext_lazy(...): stored as text in settings.LANGUAGE_CODE, whatever language is
            # active when the checks run (a request, a command), so that every process computes
            # the same definition and hash; untranslated, it hashes as the plain str.
            with translation.override(settings.LANGUAGE_CODE):
                description = str(description)
        if isinstance(description, str) and "\x00" in description:
            ok = False
            self.add(
                E_DESCRIPTION,
                _key(path, "description"),
                description,
                f"{_key(path, 'description')} holds a NUL character ('\\x00'), which the "
                f"database cannot store. Got {description!r}.",
                "Remove the NUL character from the description.",
            )
        elif not isinstance(description, str):
            ok = False
            self.add(
                E_DESCRIPTION,
                _key(path, "description"),
                description,
                f"{_key(path, 'description')} is misconfigured. Expected a str but got "
                f"{type(description).__name__} {_repr(description)}.",
                "Describe the task in a sentence, or leave the key out.",
            )
        if (
            not ok
            or schedule is None
            or kwargs is None
            or func_path is None
            or timezone is None
            or retry_delay is False
            or timeout is False
        ):
            return None
        assert isinstance(name, str)
        assert isinstance(retry_delay, dt.timedelta)
        assert timeout is None or isinstance(timeout, dt.timedelta)
        return TaskDeclaration(
            name=name,
            schedule=schedule,
            callable_path=func_path,
            kwargs=kwargs,
            timezone=timezone,
            retry_delay=retry_delay,
            overlap=str(overlap),
            timeout=timeout,
            description=description,
        )

    def schedule(
        self, path: str, definition: Mapping[Any, Any], poll_interval: float | None
    ) -> str | None:
        if "schedule" not in definition:
            return None
        value = definition["schedule"]
        path = _key(path, "schedule")
        if not isinstance(value, str):
            self.add(
                E_SCHEDULE_TYPE,
                path,
                value,
                f"{path} is misconfigured. Expected a cron expression as a str but got {value!r}.",
                'Use five POSIX fields, e.g. "15 3 * * 1-5".',
            )
            return None
        try:
            expression = CronExpression(value)
        except CronSyntaxError as error:
            self.add(
                E_CRON_SYNTAX,
                path,
                value,
                f"{path} is not a valid POSIX cron expression: {error} (in {value!r}).",
                f"Fix the {error.field} field, {error.token!r}: {error.reason}. Five fields: "
                "minute hour day-of-month month day-of-week, numbers, ranges and lists only.",
            )
            return None
        if poll_interval is not None and expression.min_interval.total_seconds() < poll_interval:
            self.add(
                E_FREQUENCY,
                path,
                value,
                f"{path} = {value!r} can fire every {_human(expression.min_interval)}, more often "
                f"than {ROOT}['POLL_INTERVAL'] ({poll_interval:g} s).",
                "Lower POLL_INTERVAL to at most the schedule's shortest interval, or schedule "
                "the task less often.",
            )
            return None
        return str(expression)

    def kwargs(self, path: str, definition: Mapping[Any, Any]) -> dict[str, Any] | None:
        value = definition.get("kwargs", {})
        path = _key(path, "kwargs")
        if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
            self.add(
                E_KWARGS_TYPE,
                path,
                value,
                f"{path} is misconfigured. Expected a dict with str keys but got {_repr(value)}.",
                "The keyword arguments are passed as callable(**kwargs).",
            )
            return None
        try:
            # Walked before json.dumps, which turns int, float, bool and None keys into str
            # without a word (the task would get {'1': ...} for {1: ...}) and, with sort_keys,
            # fails on mixed keys with an unhelpful "'<' not supported".
            bad_key = _non_str_key(value, path, set())
            text = "" if bad_key else json.dumps(dict(value), allow_nan=False, sort_keys=True)
        except RecursionError:
            msg = f"{path} is nested too deeply to be stored. Got {_repr(value)}."
        except (TypeError, ValueError) as error:
            msg = f"{path} is not JSON-serialisable: {error}. Got {_repr(value)}."
        else:
            msg = ""
            if bad_key:
                key_path, key = bad_key
                msg = (
                    f"{path} is not JSON-serialisable as declared: the key at {key_path} is "
                    f"{type(key).__name__} {_repr(key)}, not a str (JSON would turn it into a str "
                    f"or refuse it). Got {_repr(value)}."
                )
        if msg:
            self.add(
                E_KWARGS_JSON,
                path,
                value,
                msg,
                "Use only str, int, float (finite), bool, None, lists and dicts with str keys: "
                "the arguments are stored in the database.",
            )
            return None
        # Round-trip so that what is hashed and compared equals what the JSONField gives back
        # (tuples become lists).
        normalised: dict[str, Any] = json.loads(text)
        if _has_nul(normalised):
            # Valid JSON, but PostgreSQL's jsonb refuses \u0000: reconciling would crash.
            self.add(
                E_KWARGS_JSON,
                path,
                value,
                f"{path} holds a NUL character ('\\x00'), which the database cannot store. "
                f"Got {value!r}.",
                "Remove the NUL character, or pass such data another way (e.g. base64).",
            )
            return None
        return normalised

    def callable(
        self, path: str, definition: Mapping[Any, Any], kwargs: dict[str, Any] | None
    ) -> str | None:
        if "callable" not in definition:
            return None
        value = definition["callable"]
        path = _key(path, "callable")
        if not isinstance(value, str) or "." not in value.strip(".") or value != value.strip():
            self.add(
                E_CALLABLE_TYPE,
                path,
                value,
                f"{path} is misconfigured. Expected a dotted path to a callable as a str but got "
                f"{value!r}.",
                'Use the import path of a function, e.g. "myapp.jobs.nightly_report".',
            )
            return None
        try:
            func = import_string(value)
        except Exception as error:
            # Any exception: a module that raises while importing is as broken as a missing one.
            self.add(
                E_CALLABLE_IMPORT,
                path,
                value,
                f"{path} = {value!r} cannot be imported: {type(error).__name__}: {error}",
                "Check the module path and the attribute name, and that the module imports "
                "cleanly.",
            )
            return None
        if not callable(func):
            self.add(
                E_NOT_CALLABLE,
                path,
                value,
                f"{path} = {value!r} is not callable (it is {type(func).__name__} {func!r}).",
                "Point it at a function or another callable.",
            )
            return None
        async_kind = _async_kind(func)
        if async_kind is not None:
            # Calling it only creates a coroutine: the run would "succeed" without running.
            # (executors.py refuses such a result too, for what no check can see.)
            what, wrapped = async_kind
            hint = (
                "Declare a plain function; it may call asgiref.sync.async_to_sync(your_coroutine)"
                "(**kwargs)."
            )
            if wrapped:
                hint += (
                    " If the wrapper does run the coroutine to completion, declare a plain "
                    "function (without functools.wraps) that calls it."
                )
            self.add(
                E_NOT_PLAIN_FUNCTION,
                path,
                value,
                f"{path} = {value!r} {what}.",
                hint,
            )
            return None
        if inspect.isgeneratorfunction(func):
            self.add(
                E_NOT_PLAIN_FUNCTION,
                path,
                value,
                f"{path} = {value!r} is a generator function; calling it does not run its body.",
                "Declare a plain function (no 'yield'), or one that consumes the generator.",
            )
            return None
        if kwargs is not None:
            try:
                signature = inspect.signature(func)
            except (TypeError, ValueError):
                signature = None  # some builtins have none: nothing to check against
            if signature is not None:
                try:
                    signature.bind(**kwargs)
                except TypeError as error:
                    self.add(
                        E_SIGNATURE,
                        path,
                        value,
                        f"{path} = {value!r} cannot be called with the declared kwargs "
                        f"{kwargs!r}: {error}.",
                        f"Make the kwargs match the signature {value.rsplit('.', 1)[-1]}"
                        f"{signature}.",
                    )
                    return None
        return value

    def timezone(self, path: str, definition: Mapping[Any, Any]) -> str | None:
        value = definition.get("timezone", settings.TIME_ZONE)
        if isinstance(value, zoneinfo.ZoneInfo):
            value = value.key
        path = _key(path, "timezone")
        if isinstance(value, str) and value:
            try:
                zoneinfo.ZoneInfo(value)
            except (zoneinfo.ZoneInfoNotFoundError, ValueError, OSError):
                pass
            else:
                return value
        close = _closest(value, zoneinfo.available_timezones()) if isinstance(value, str) else None
        suggestion = f"Did you mean {close!r}? " if close else ""
        self.add(
            E_TIMEZONE,
            path,
            value,
            f"{path} is misconfigured. Expected an IANA time zone name but got {_repr(value)}.",
            f"{suggestion}Use a name such as 'Europe/Berlin' or 'UTC'; leave the key out to use "
            "settings.TIME_ZONE.",
        )
        return None

    def delay(
        self, path: str, definition: Mapping[Any, Any], key: str, default: dt.timedelta | None
    ) -> dt.timedelta | bool | None:
        """Return the delay, its default, or False after recording a problem."""
        if key not in definition or (key == "timeout" and definition[key] is None):
            return default
        value = definition[key]
        delta = _duration(value)
        if delta is not None:
            return delta
        path = _key(path, key)
        if _too_large(value, MAX_DELAY.total_seconds()):
            msg = (
                f"{path} is too large: expected at most {MAX_DELAY.days} days "
                f"({MAX_DELAY.total_seconds():.0f} seconds) but got {_repr(value)}."
            )
        else:
            msg = (
                f"{path} is misconfigured. Expected a positive number of seconds or a positive "
                f"timedelta but got {_repr(value)}."
            )
        self.add(
            E_RETRY_DELAY if key == "retry_delay" else E_TIMEOUT,
            path,
            value,
            msg,
            "Use e.g. 300 for five minutes."
            if key == "retry_delay"
            else "Use e.g. 600 for ten minutes, or leave the key out for no timeout.",
        )
        return False


def _has_nul(value: object) -> bool:
    """Return whether a str anywhere in `value` (keys included) holds a NUL character."""
    if isinstance(value, str):
        return "\x00" in value
    if isinstance(value, dict):
        return any(_has_nul(k) or _has_nul(v) for k, v in value.items())
    if isinstance(value, list):
        return any(_has_nul(item) for item in value)
    return False


def _non_str_key(value: object, path: str, seen: set[int]) -> tuple[str, object] | None:
    """Return the path and the key of the first dict key in `value` that is not a str."""
    if isinstance(value, Mapping | list | tuple):
        if id(value) in seen:
            return None  # a cycle (json.dumps reports it), or a container already walked
        seen.add(id(value))
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return _key(path, key), key
            found = _non_str_key(item, _key(path, key), seen)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _non_str_key(item, _key(path, index), seen)
            if found is not None:
                return found
    return None


# Enough for any real decorator stack; stops a __wrapped__ chain that loops or never ends.
MAX_WRAPPED_LAYERS = 100


def _async_kind(func: object) -> tuple[str, bool] | None:
    """Say what in `func` is async (and whether behind a wrapper); None if nothing is."""
    layer = func
    for depth in range(MAX_WRAPPED_LAYERS):
        if isinstance(layer, AsyncToSync):
            return None  # async_to_sync(f) runs the coroutine to completion: the fix we advise
        # asgiref's test also sees sync_to_async(f) and markcoroutinefunction(f), which
        # inspect's does not on Python 3.11; an object's __call__ lives on its class.
        call = type(layer).__call__ if callable(layer) else None
        if is_async_function(layer) or inspect.isasyncgenfunction(layer):
            kind = "an async function"
        elif is_async_function(call) or inspect.isasyncgenfunction(call):
            kind = f"a callable object ({type(layer).__qualname__}) whose __call__ is async"
        else:
            try:
                layer = layer.__wrapped__  # type: ignore[attr-defined]
            except Exception:
                return None
            continue
        if depth == 0:
            return f"is {kind}; calling it does not run its body", False
        # A sync wrapper (functools.wraps, transaction.atomic, a logging decorator) around an
        # async function almost always returns the coroutine it created without awaiting it.
        name = getattr(layer, "__qualname__", None) or type(layer).__qualname__
        module = getattr(layer, "__module__", None)
        what = (
            f"wraps {kind}, {f'{module}.{name}' if module else name} (found through "
            "__wrapped__), without being async itself; calling it returns the coroutine without "
            "running it"
        )
        return what, True
    return None


def _human(delta: dt.timedelta) -> str:
    seconds = int(delta.total_seconds())
    if seconds % 3600 == 0:
        hours = seconds // 3600
        return "hour" if hours == 1 else f"{hours} hours"
    if seconds % 60 == 0:
        minutes = seconds // 60
        return "minute" if minutes == 1 else f"{minutes} minutes"
    return f"{seconds} seconds"


_FROM_SETTINGS: Any = object()


def collect(raw: object = _FROM_SETTINGS) -> tuple[dict[str, TaskDeclaration], list[Problem]]:
    """Validate ``settings.POSIXCRON`` (or `raw`); return the valid tasks and every problem."""
    if raw is _FROM_SETTINGS:
        raw = getattr(settings, "POSIXCRON", {})
    collector = _Collector(raw)
    collector.run()
    return collector.declarations, collector.problems


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
