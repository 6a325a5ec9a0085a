# factory-boy declarations are untyped; the model fields they fill are checked by Django.
# mypy: disable-error-code="no-untyped-call"
"""factory-boy factories for Task, Run and SchedulerProcess."""

from __future__ import annotations

import datetime as dt
from typing import Any

from factory.declarations import LazyAttribute, LazyFunction, Sequence, SubFactory
from factory.django import DjangoModelFactory

from django_posixcron.declarations import TaskDeclaration
from django_posixcron.models import (
    UNFINISHED_STATUSES,
    Run,
    RunStatus,
    SchedulerProcess,
    Task,
    Trigger,
)

UTC = dt.UTC
NOW = dt.datetime(2086, 1, 7, 10, 0, tzinfo=UTC)  # a Monday
DECLARED = dt.datetime(2020, 1, 1, tzinfo=UTC)


def declaration_of(task: Any) -> TaskDeclaration:
    """Return the declaration a Task row (or a factory's stub of one) was reconciled from."""
    return TaskDeclaration(
        name=task.name,
        schedule=task.schedule,
        callable_path=task.callable_path,
        kwargs=dict(task.kwargs),
        timezone=task.timezone,
        retry_delay=task.retry_delay,
        overlap=task.overlap,
        timeout=task.timeout,
        description=task.description,
    )


class TaskFactory(DjangoModelFactory[Task]):
    """A declared, active task firing hourly; next_run_at and due_at follow NOW by default."""

    class Meta:
        model = Task

    name = Sequence(lambda n: f"task-{n}")
    schedule = "0 * * * *"
    callable_path = "tests.testapp.jobs.noop"
    kwargs = LazyFunction(dict)
    timezone = "UTC"
    retry_delay = dt.timedelta(minutes=5)
    overlap = "skip"
    timeout = None
    description = ""
    # The hash reconciling would store, so a scheduler declaring the same task claims it.
    definition_hash = LazyAttribute(lambda o: declaration_of(o).definition_hash)
    declared = True
    paused = False
    next_run_at = NOW + dt.timedelta(hours=1)
    retry_at = None
    run_requested_at = None
    due_at = LazyAttribute(
        lambda o: min(
            (i for i in (o.next_run_at, o.retry_at, o.run_requested_at) if i is not None),
            default=None,
        )
    )
    # Declared (and last changed) long before any instant the tests use: a task changed or
    # resumed within the poll interval is not overdue yet (Task.objects.overdue()).
    created_at = DECLARED
    updated_at = DECLARED


class SchedulerProcessFactory(DjangoModelFactory[SchedulerProcess]):
    class Meta:
        model = SchedulerProcess

    hostname = "test-host"
    pid = Sequence(lambda n: 10_000 + n)
    started_at = NOW
    last_heartbeat_at = NOW
    stopped_at = None
    version = "test"


class RunFactory(DjangoModelFactory[Run]):
    """A succeeded cron run of a fresh task, one hour apart per sequence number."""

    class Meta:
        model = Run

    task = SubFactory(TaskFactory)
    trigger = Trigger.CRON
    status = RunStatus.SUCCEEDED
    scheduled_for = Sequence(lambda n: NOW - dt.timedelta(hours=n + 1))
    started_at = LazyAttribute(lambda o: o.scheduled_for)
    finished_at = LazyAttribute(
        lambda o: (
            None if o.status in UNFINISHED_STATUSES else o.scheduled_for + dt.timedelta(seconds=1)
        )
    )
    duration = LazyAttribute(
        lambda o: (
            None if o.finished_at is None or o.started_at is None else o.finished_at - o.started_at
        )
    )
    error = ""
    traceback = ""
    process = None
    process_label = LazyAttribute(lambda o: o.process.label if o.process else "")
