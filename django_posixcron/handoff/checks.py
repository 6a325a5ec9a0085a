"""System checks of the hand-off: the backend each handed-off task names, and its options.

"System checks: unknown backend alias, the Dummy backend (runs would never execute), options
the backend does not support, the backport missing on Django 5.2 are errors; the Immediate
backend is a warning (runs would execute inside the scheduler's claim)." The keys' own shape
is checked with every other key (declarations/handoff.py); what the project's Tasks backends
make of them is checked here. One message per place the settings say it (a task's own
``enqueue``, or the top-level ``ENQUEUE`` many tasks inherit), not one per task.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from django.conf import settings
from django.core import checks

from django_posixcron.declarations import TaskDeclaration
from django_posixcron.declarations.declaration import Enqueue
from django_posixcron.declarations.handoff import enqueue as parse_enqueue
from django_posixcron.declarations.ids import (
    E_DUMMY_BACKEND,
    E_TASKS_MISSING,
    E_UNKNOWN_BACKEND,
    E_UNSUPPORTED_OPTION,
)
from django_posixcron.declarations.problems import Invalid, KeyPath, did_you_mean
from django_posixcron.handoff import framework

W_IMMEDIATE_BACKEND = "posixcron.W002"


def handoff_messages(declarations: Mapping[str, TaskDeclaration]) -> list[checks.CheckMessage]:
    """Return the problems of every place a handed-off task's backend is named."""
    places = _places(declarations)
    if not places:
        return []  # nothing handed off: no Tasks framework needed
    try:
        tasks = framework.framework()
    except framework.TasksUnavailable as exc:
        path = next(iter(places))
        return [
            checks.Error(
                f"{path} hands runs to Django Tasks, but neither django.tasks (Django 6) nor the "
                "django_tasks backport is installed.",
                hint=f"{exc}. Or remove 'enqueue' to run the task inside the scheduler.",
                id=E_TASKS_MISSING,
            )
        ]
    messages: list[checks.CheckMessage] = []
    for path, (enqueue, names) in places.items():
        messages += _check_place(tasks, path, enqueue, names)
    return messages


def _places(
    declarations: Mapping[str, TaskDeclaration],
) -> dict[str, tuple[Enqueue, list[str]]]:
    """Return {settings path: (its Enqueue, the tasks it applies to)}."""
    raw = getattr(settings, "POSIXCRON", {})
    raw_tasks = raw.get("TASKS", {}) if isinstance(raw, Mapping) else {}
    if not isinstance(raw_tasks, Mapping):
        raw_tasks = {}  # TASKS itself is wrong: E003 says so
    root = KeyPath()
    places: dict[str, tuple[Enqueue, list[str]]] = {}
    for name, declaration in declarations.items():
        if declaration.enqueue is None:
            continue
        own = isinstance(raw_tasks.get(name), Mapping) and "enqueue" in raw_tasks[name]
        path = str(root / "TASKS" / name / "enqueue" if own else root / "ENQUEUE")
        places.setdefault(path, (declaration.enqueue, []))[1].append(name)
    # A task with a mistake of its own (a callable that does not import) is no declaration,
    # but the backend it names is checked too: "check lists every mistake at once", not the
    # backend's only after the callable is fixed.
    for name, value in raw_tasks.items():
        if name in declarations or not isinstance(value, Mapping):
            continue
        own = "enqueue" in value
        key = root / "TASKS" / str(name) / "enqueue" if own else root / "ENQUEUE"
        given = value["enqueue"] if own else raw.get("ENQUEUE", False)
        try:
            handed = parse_enqueue(given, key)
        except Invalid:
            continue  # the key's own error is reported with the task's others
        if handed is not None:
            places.setdefault(str(key), (handed, []))[1].append(str(name))
    return places


def _check_place(
    tasks: framework.Framework, path: str, enqueue: Enqueue, names: list[str]
) -> list[checks.CheckMessage]:
    which = _which(names)
    alias = enqueue.backend
    try:
        backend = tasks.task_backends[alias]
    except tasks.InvalidTaskBackend as exc:
        defined = getattr(settings, "TASKS", None)
        configured = [framework.DEFAULT_ALIAS] if defined is None else list(defined)
        if alias in (defined or {}):
            # Defined, but its BACKEND path does not import: the framework raises the same
            # exception as for an alias it does not know.
            return [
                checks.Error(
                    f"{path} names the Tasks backend {alias!r} ({which}), which cannot be "
                    f"loaded: {exc}",
                    hint=f"Fix settings.TASKS[{alias!r}]['BACKEND']: a dotted path to a "
                    "Tasks backend class.",
                    id=E_UNKNOWN_BACKEND,
                )
            ]
        return [
            checks.Error(
                f"{path} names the Tasks backend {alias!r} ({which}), which settings.TASKS "
                f"does not define.",
                hint=(
                    f"{did_you_mean(alias, configured)}Backends defined: "
                    f"{', '.join(map(repr, configured))}."
                    if configured
                    else "settings.TASKS defines no backend: define one (e.g. TASKS = "
                    "{'default': {'BACKEND': 'django_tasks_db.DatabaseBackend'}}), or run the "
                    'task inside the scheduler ("enqueue": False).'
                ),
                id=E_UNKNOWN_BACKEND,
            )
        ]
    except Exception as exc:  # the backend's own constructor failed: say so, not a traceback
        return [
            checks.Error(
                f"{path} names the Tasks backend {alias!r} ({which}), which cannot be loaded: "
                f"{type(exc).__name__}: {exc}",
                hint="Fix its entry in settings.TASKS.",
                id=E_UNKNOWN_BACKEND,
            )
        ]
    if isinstance(backend, tasks.DummyBackend):
        return [
            checks.Error(
                f"{path} names the Tasks backend {alias!r} ({which}), a DummyBackend: it "
                "stores jobs and never executes them, so these runs would never run.",
                hint="Name a backend with workers (django-tasks-db, RQ, ...), or remove "
                "'enqueue' to run the task inside the scheduler.",
                id=E_DUMMY_BACKEND,
            )
        ]
    messages = _option_errors(path, which, alias, backend, enqueue)
    if isinstance(backend, tasks.ImmediateBackend):
        messages.append(
            checks.Warning(
                f"{path} names the Tasks backend {alias!r} ({which}), an ImmediateBackend: "
                "runs would execute inside the scheduler, in its claim, one at a time.",
                hint="Name a backend with workers, or remove 'enqueue': the scheduler's own "
                "executors run tasks concurrently and can time them out.",
                id=W_IMMEDIATE_BACKEND,
            )
        )
    return messages


def _option_errors(
    path: str, which: str, alias: str, backend: Any, enqueue: Enqueue
) -> list[checks.CheckMessage]:
    """Return errors for a priority or queue the backend does not support."""
    if enqueue.priority != 0 and not getattr(backend, "supports_priority", False):
        return [
            checks.Error(
                f"{path} asks for priority {enqueue.priority} ({which}), but the Tasks backend "
                f"{alias!r} ({type(backend).__name__}) does not support priorities.",
                hint="Remove 'priority' (or set it to 0), or name a backend that supports "
                "priorities.",
                id=E_UNSUPPORTED_OPTION,
            )
        ]
    queues = getattr(backend, "queues", None)
    if queues and enqueue.queue_name not in queues:
        return [
            checks.Error(
                f"{path} names the queue {enqueue.queue_name!r} ({which}), which the Tasks "
                f"backend {alias!r} does not have.",
                hint=f"{did_you_mean(enqueue.queue_name, sorted(queues))}Its queues "
                f"(settings.TASKS[{alias!r}]['QUEUES']): {', '.join(map(repr, sorted(queues)))}.",
                id=E_UNSUPPORTED_OPTION,
            )
        ]
    try:
        from django_posixcron.tasks import execute_run

        execute_run.using(backend=alias, queue_name=enqueue.queue_name, priority=enqueue.priority)
    except Exception as exc:  # the backend's own validation, whatever else it refuses
        return [
            checks.Error(
                f"{path}: the Tasks backend {alias!r} refuses the run's task ({which}): "
                f"{type(exc).__name__}: {exc}",
                hint="Change the 'enqueue' options, or the backend's entry in settings.TASKS.",
                id=E_UNSUPPORTED_OPTION,
            )
        ]
    return []


def _which(names: list[str]) -> str:
    shown = ", ".join(sorted(names)[:3])
    more = len(names) - 3
    if more > 0:
        shown += f" and {more} more"
    return f"task{'s' if len(names) > 1 else ''} {shown}"
