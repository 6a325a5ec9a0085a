"""Which Django Tasks framework is installed: ``django.tasks`` (Django 6) or the backport.

Imported only by the code of handed-off tasks, so a project that hands nothing off needs
neither.
"""

from __future__ import annotations

import dataclasses
import importlib
from functools import cache
from typing import Any

from django.conf import settings
from django.db import router

BUILT_IN = "django.tasks"
BACKPORT = "django_tasks"
DEFAULT_ALIAS = "default"
DEFAULT_QUEUE = "default"  # DEFAULT_TASK_QUEUE_NAME in both frameworks


class TasksUnavailable(ImportError):
    """Neither Django 6's ``django.tasks`` nor the ``django_tasks`` backport is importable."""


@dataclasses.dataclass(frozen=True)
class Framework:
    """The parts of a Tasks framework this app uses."""

    name: str  # "django.tasks" or "django_tasks"
    task: Any  # the @task decorator
    task_backends: Any
    InvalidTaskBackend: type[Exception]
    InvalidTask: type[Exception]
    DummyBackend: type
    ImmediateBackend: type


def _load(name: str) -> Framework:
    module = importlib.import_module(name)
    exceptions = importlib.import_module(f"{name}.exceptions")
    dummy = importlib.import_module(f"{name}.backends.dummy")
    immediate = importlib.import_module(f"{name}.backends.immediate")
    return Framework(
        name=name,
        task=module.task,
        task_backends=module.task_backends,
        # The backport names its exceptions with an "Error" suffix; Django 6 does not.
        InvalidTaskBackend=getattr(exceptions, "InvalidTaskBackend", None)
        or exceptions.InvalidTaskBackendError,
        InvalidTask=getattr(exceptions, "InvalidTask", None) or exceptions.InvalidTaskError,
        DummyBackend=dummy.DummyBackend,
        ImmediateBackend=immediate.ImmediateBackend,
    )


@cache
def framework() -> Framework:
    """Return Django 6's built-in Tasks framework, else the backport; raise TasksUnavailable."""
    for name in (BUILT_IN, BACKPORT):
        try:
            return _load(name)
        except ImportError:
            continue
    raise TasksUnavailable(
        "handing runs to workers needs Django Tasks: Django 6's django.tasks, or on Django 5.2 "
        "the backport (pip install 'django-posixcron[tasks]', which installs django-tasks)"
    )


def module_alias() -> str:
    """Return the backend alias the module-level Task is defined on.

    ``default`` when settings.TASKS has it (or is unset: the framework supplies it), else the
    first alias: defining a Task validates it against a backend, and a project may name none
    ``default``. Each enqueue picks its own backend with ``.using(backend=...)``.
    """
    configured = getattr(settings, "TASKS", None)
    if not configured or DEFAULT_ALIAS in configured:
        return DEFAULT_ALIAS
    return str(next(iter(configured)))


def module_queue() -> str:
    """Return the queue the module-level Task is defined on: the framework's default queue,
    unless the backend of module_alias() lists its queues without it (a backend kept for a
    "cron" queue, say): then the first it lists. Defining the Task validates its queue too, and
    each enqueue picks its own with ``.using(queue_name=...)``."""
    default = DEFAULT_QUEUE
    try:
        queues = getattr(backend(module_alias()), "queues", None)
    except Exception:
        return default  # defining the Task reports the backend itself
    if not queues or default in queues:
        return default
    return str(sorted(queues)[0])


def backend(alias: str) -> Any:
    """Return the backend instance of `alias`; raise the framework's InvalidTaskBackend."""
    return framework().task_backends[alias]


def stores_jobs_on(backend_instance: Any) -> str | None:
    """Return the database alias a backend stores its jobs on, when it is django-tasks-db's.

    "Same database: the backend is django-tasks-db's and the routers put its job model on
    the same alias as ours; then the enqueue commits or rolls back with the claim."
    """
    try:
        from django_tasks_db.backend import DatabaseBackend
        from django_tasks_db.models import DBTaskResult
    except ImportError:
        return None
    if not isinstance(backend_instance, DatabaseBackend):
        return None
    return router.db_for_write(DBTaskResult)
