"""System checks: every problem in ``settings.POSIXCRON`` as a ``posixcron.E0NN`` error."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import router
from django.utils.module_loading import import_string

if TYPE_CHECKING:
    from django_posixcron.declarations import TaskDeclaration

W_SQLITE_DEFERRED = "posixcron.W001"
W_NOT_SET = "posixcron.W004"
W_ROUTED_AWAY = "posixcron.W005"
E_UNKNOWN_ALIAS = "posixcron.E036"

NOT_SET = "settings.POSIXCRON is not set: no task is declared."
DECLARE = (
    'Declare the tasks in POSIXCRON = {"TASKS": {...}}, or set POSIXCRON = {"TASKS": {}} to '
    "declare none on purpose."
)
NOT_SET_HINT = (
    f"{DECLARE} runscheduler refuses to start without the setting: a settings module that "
    "lacks it (a misspelt name, the web's settings given to the scheduler) would otherwise "
    "retire every task in the database."
)


@checks.register()
def check_settings(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Return one error per problem in the settings, all at once."""
    from django_posixcron.declarations import collect

    declarations, problems = collect()
    # obj=None like Django's own settings checks: the message names the settings path itself.
    messages: list[checks.CheckMessage] = [
        checks.Error(p.msg, hint=p.hint, obj=None, id=p.id) for p in problems
    ]
    from django_posixcron.handoff.checks import handoff_messages

    # The backends the valid handed-off tasks name.
    messages += handoff_messages(declarations)
    return messages + unchecked_call_warnings(declarations)


def unchecked_call_warnings(
    declarations: Mapping[str, TaskDeclaration],
) -> list[checks.CheckMessage]:
    """Return posixcron.W003 for each valid task whose call no signature can check."""
    from django_posixcron.declarations.callables import unchecked_call
    from django_posixcron.declarations.problems import KeyPath, problem

    messages: list[checks.CheckMessage] = []
    for name, declaration in declarations.items():
        dotted = declaration.callable_path
        found = unchecked_call(dotted, declaration.kwargs, declaration.takes_context)
        if found is not None:
            p = problem(KeyPath() / "TASKS" / name / "callable", dotted, found)
            messages.append(checks.Warning(p.msg, hint=p.hint, obj=None, id=p.id))
    return messages


@checks.register()
def check_setting_is_set(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Warn when settings.POSIXCRON is missing altogether (an empty TASKS is no mistake)."""
    if hasattr(settings, "POSIXCRON"):
        return []
    return [checks.Warning(NOT_SET, hint=NOT_SET_HINT, obj=None, id=W_NOT_SET)]


@checks.register()
def check_database_alias(app_configs: Any = None, **kwargs: Any) -> list[checks.CheckMessage]:
    """Refuse routers that send the app's models to an alias settings.DATABASES lacks."""
    from django_posixcron.db import app_alias

    try:
        alias = app_alias()
    except ImproperlyConfigured as exc:  # an alias it lacks, or routers that raise
        if exc.__cause__ is not None:
            hint = _router_hint()
        else:
            hint = (
                "Make the router's db_for_write() for django_posixcron return an alias of "
                "settings.DATABASES."
            )
        return [checks.Error(str(exc), hint=hint, obj=None, id=E_UNKNOWN_ALIAS)]
    return _routed_away(alias)


def _router_hint() -> str:
    """The hint for routers that raised: the entry that does not import, if one does not (an
    ImportError from inside a router's db_for_write() is the router's code)."""
    # The entries the router was given (Django's ConnectionRouter keeps them), else settings.
    entries = getattr(router, "_routers", None) or getattr(settings, "DATABASE_ROUTERS", [])
    for entry in entries:
        if isinstance(entry, str):
            try:
                import_string(entry)
            except Exception:
                return f"Check the import path of the DATABASE_ROUTERS entry {entry!r}."
    return "Fix the router whose db_for_write() raised for django_posixcron's models."


def _routed_away(alias: str) -> list[checks.CheckMessage]:
    """Warn when the routers send the app's models to an alias where their allow_migrate()
    refuses the app: `migrate` never creates its tables there (a router written with
    allow_migrate() alone), and every page and command then meets "no such table"."""
    from django_posixcron.models import Task

    try:
        if router.allow_migrate_model(alias, Task):
            return []
    except Exception:
        return []  # a router that raises there: `migrate` says so itself
    message = (
        f"DATABASE_ROUTERS send django_posixcron's models to the database alias {alias!r} "
        "(db_for_read() and db_for_write()), but their allow_migrate() refuses the app "
        f"there: `migrate` does not create its tables on {alias!r}."
    )
    hint = (
        "Route the app's models (db_for_read() and db_for_write()) to the alias where "
        "allow_migrate() accepts them. If another alias of the same database has them, "
        "silence posixcron.W005."
    )
    return [checks.Warning(message, hint=hint, obj=None, id=W_ROUTED_AWAY)]


# The alias `runscheduler --database ALIAS` runs on, while its checks run: the one whose
# transactions matter to it, not the routers' choice.
_COMMAND_ALIAS: ContextVar[str | None] = ContextVar("posixcron_command_alias", default=None)


@contextlib.contextmanager
def judging_alias(alias: str | None) -> Iterator[None]:
    """Judge the database settings of `alias` (when given) in the checks run inside."""
    token = _COMMAND_ALIAS.set(alias)
    try:
        yield
    finally:
        _COMMAND_ALIAS.reset(token)


@checks.register()
def check_sqlite_transaction_mode(
    app_configs: Any = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Warn when the scheduler's SQLite database starts transactions DEFERRED."""
    from django_posixcron.models import Task

    alias = _COMMAND_ALIAS.get()
    if alias is None:
        try:
            alias = router.db_for_write(Task)
        except Exception:
            return []  # check_database_alias() reports routers that raise (app_alias())
    return sqlite_transaction_mode_warnings(alias, settings.DATABASES.get(alias, {}))


def sqlite_transaction_mode_warnings(
    alias: str, database: dict[str, Any]
) -> list[checks.CheckMessage]:
    """Return posixcron.W001 for one DATABASES entry, read from settings without connecting.

    A deferred transaction takes SQLite's write lock at its first write, so a scheduler's claim
    and another writer (a second scheduler, the admin) fail with "database is locked" instead
    of waiting their turn: the scheduler backs off as from an outage, nothing is lost or run
    twice, but every busy minute logs errors.
    """
    if not str(database.get("ENGINE", "")).endswith("sqlite3"):
        return []
    mode = (database.get("OPTIONS") or {}).get("transaction_mode")
    # EXCLUSIVE takes the write lock at BEGIN too (and in WAL mode is IMMEDIATE): writers wait.
    if str(mode).upper() in ("IMMEDIATE", "EXCLUSIVE"):
        return []
    path = f"settings.DATABASES[{alias!r}]['OPTIONS']['transaction_mode']"
    found = "is not set" if mode is None else f"is {mode!r}"
    return [
        checks.Warning(
            f"{path} {found}: django-posixcron on SQLite needs 'IMMEDIATE' (or 'EXCLUSIVE') "
            "transactions, or a scheduler and another writer (a second scheduler, the admin) "
            "collide with 'database is locked' errors.",
            hint=f'Add "OPTIONS": {{"transaction_mode": "IMMEDIATE"}} to '
            f"DATABASES[{alias!r}] (Django 5.1 or later), or use PostgreSQL for several "
            "schedulers.",
            obj=None,
            id=W_SQLITE_DEFERRED,
        )
    ]
