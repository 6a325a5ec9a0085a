"""Task rows with the declarations a scheduler holds for them, for ticks at explicit instants.

The rows carry the definition hash reconciling would store for those declarations, so the
scheduler claims them exactly as it claims reconciled tasks.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.db import OperationalError, connections

from django_posixcron.cron import CronExpression
from django_posixcron.declarations import TaskDeclaration
from django_posixcron.models import Run, RunStatus, Task
from django_posixcron.scheduler import Scheduler
from django_posixcron.scheduling.claim import Claimer
from django_posixcron.timing import first_cursor
from tests.factories import SchedulerProcessFactory
from tests.testapp import jobs

UTC = dt.UTC
T0 = dt.datetime(2086, 1, 7, 10, 0, tzinfo=UTC)  # a Monday


class Tasks:
    """Create Task rows and their declarations together."""

    def __init__(self) -> None:
        self.declarations: dict[str, TaskDeclaration] = {}

    def __call__(
        self,
        name: str = "record",
        *,
        schedule: str = "0 * * * *",
        callable_path: str = "tests.testapp.jobs.record",
        kwargs: dict[str, Any] | None = None,
        retry_delay: float = 300,
        overlap: str = "skip",
        timeout: float | None = None,
        timezone: str = "UTC",
        now: dt.datetime = T0,
        next_run_at: dt.datetime | None = None,
        takes_context: bool = False,
        **fields: Any,
    ) -> Task:
        declaration = TaskDeclaration(
            name=name,
            schedule=str(CronExpression(schedule)),
            callable_path=callable_path,
            kwargs=kwargs if kwargs is not None else {},
            retry_delay=dt.timedelta(seconds=retry_delay),
            overlap=overlap,
            timeout=None if timeout is None else dt.timedelta(seconds=timeout),
            timezone=timezone,
            takes_context=takes_context,
        )
        self.declarations[name] = declaration
        if next_run_at is None:
            next_run_at = first_cursor(schedule, timezone, now)
        task = Task(
            name=name,
            schedule=declaration.schedule,
            callable_path=callable_path,
            kwargs=declaration.kwargs,
            timezone=timezone,
            retry_delay=declaration.retry_delay,
            overlap=overlap,
            timeout=declaration.timeout,
            definition_hash=declaration.definition_hash,
            next_run_at=next_run_at,
            **fields,
        )
        task.due_at = task.compute_due_at()
        task.save()
        return task


@pytest.fixture
def tasks() -> Tasks:
    return Tasks()


@pytest.fixture
def make_scheduler(tasks: Tasks) -> Iterator[Callable[..., Scheduler]]:
    created: list[Scheduler] = []

    def make(**options: Any) -> Scheduler:
        options.setdefault("declarations", tasks.declarations)
        options.setdefault("poll_interval", 1)
        options.setdefault("concurrency", 4)
        options.setdefault("grace", 5)
        scheduler = Scheduler(**options)
        created.append(scheduler)
        return scheduler

    yield make
    for event in jobs.GATES.values():
        event.set()
    for scheduler in created:
        assert scheduler.wait_idle(timeout=10), "a run did not finish"
        scheduler.executor.close()
    jobs.GATES.clear()


@pytest.fixture
def gate(request: pytest.FixtureRequest) -> Any:
    """Return a fresh gate name and its event for tests.testapp.jobs.blocked."""
    name = request.node.nodeid
    jobs.GATES.pop(name, None)
    return name, jobs.gate(name)


def running_on_a_dead_process(task: Task, started: dt.datetime) -> Run:
    """A cron run of `task` at `started`, still running on a process silent since then."""
    dead = SchedulerProcessFactory.create(last_heartbeat_at=started)
    return Run.objects.create(
        task=task,
        trigger="cron",
        status=RunStatus.RUNNING,
        scheduled_for=started,
        started_at=started,
        process=dead,
        occurrence=started,
    )


@pytest.fixture
def lose_the_commits_reply(
    monkeypatch: pytest.MonkeyPatch,
) -> Iterator[Callable[..., None]]:
    """Return a function that makes the next claim's commit (on this thread's connection)
    end as a connection lost mid-way: after the server committed (`committed`), or before;
    `error` is what the scheduler then sees."""
    wrapper = connections["default"]
    claiming = Claimer._claim

    def arm(*, committed: bool, error: OperationalError | None = None) -> None:
        def claim(self: Claimer, *args: Any) -> Any:
            monkeypatch.setattr(Claimer, "_claim", claiming)  # this claim only
            wrapper.commit = commit  # type: ignore[method-assign]
            try:
                return claiming(self, *args)
            finally:
                wrapper.__dict__.pop("commit", None)

        def commit() -> None:
            del wrapper.commit  # the class's own again, for every later commit
            if committed:
                wrapper.commit()
            else:
                wrapper.rollback()
            raise error or OperationalError("server closed the connection unexpectedly")

        monkeypatch.setattr(Claimer, "_claim", claim)

    yield arm
    wrapper.__dict__.pop("commit", None)
