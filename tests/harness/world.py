"""Acceptance harness: settings in, reconcile and tick at explicit instants, rows out.

Everything goes through the public surface a user touches: ``settings.POSIXCRON``, the
reconciliation that ``runscheduler`` performs at start-up, ``Scheduler.tick(now)`` and the
rows in ``Task``, ``Run`` and the task code's own ``Hit`` table.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any

import pytest

from django_posixcron.models import Run, Task
from django_posixcron.reconcile import reconcile
from django_posixcron.scheduler import Scheduler, TickResult
from tests.testapp.jobs import GATES
from tests.testapp.models import Hit

UTC = dt.UTC
MINUTE = dt.timedelta(minutes=1)
HOUR = dt.timedelta(hours=1)
# A Monday, far from any DST transition and in the future of every test machine. 2086 has
# 2030's calendar, as 2085 and 2087 have 2029's and 2031's (no leap year among them), so
# every weekday and DST date the tests name stays where it was.
T0 = dt.datetime(2086, 1, 7, 10, 0, tzinfo=UTC)


def record(name: str, schedule: str, **extra: Any) -> dict[str, Any]:
    """Return a TASKS entry whose callable writes one Hit row labelled with `name`."""
    return {
        "schedule": schedule,
        "callable": "tests.testapp.jobs.record",
        "kwargs": {"task_name": name},
        "retry_delay": 300,
        **extra,
    }


def hits(name: str) -> int:
    return Hit.objects.filter(task_name=name).count()


def runs(name: str) -> list[tuple[str, str, dt.datetime]]:
    """Return (trigger, status, scheduled_for) of the task's runs, oldest first."""
    return list(
        Run.objects.filter(task__name=name)
        .order_by("scheduled_for", "pk")
        .values_list("trigger", "status", "scheduled_for")
    )


def task(name: str) -> Task:
    return Task.objects.get(name=name)


class World:
    """One deployment: its settings, its scheduler processes, driven at explicit instants."""

    def __init__(self, configure: Any) -> None:
        self._configure = configure
        self.schedulers: list[Scheduler] = []
        self.scheduler: Scheduler | None = None

    def settings(self, tasks: dict[str, Any], **top_level: Any) -> None:
        top_level.setdefault("HISTORY_DAYS", 36500)
        self._configure(tasks, **top_level)

    def start(self, now: dt.datetime, *, reconciling: bool = True, **options: Any) -> Scheduler:
        """Do what `runscheduler` does at start-up at `now`: reconcile, then a new Scheduler.

        Without `reconciling`, the Scheduler goes on from the rows as they are: a process that
        has been running all along (in a fleet, the turn of another host's long-lived process).
        """
        if self.scheduler is not None:
            self.stop()
        if reconciling:
            reconcile(now=now)
        options.setdefault("grace", 5)
        self.scheduler = Scheduler(**options)
        self.schedulers.append(self.scheduler)
        return self.scheduler

    def tick(self, now: dt.datetime, *, wait: bool = True) -> TickResult:
        assert self.scheduler is not None, "start() first"
        result = self.scheduler.tick(now)
        if wait:
            assert self.scheduler.wait_idle(timeout=15), "a run did not finish"
        return result

    def stop(self) -> None:
        assert self.scheduler is not None
        self.scheduler.shutdown()
        self.scheduler = None


@pytest.fixture
def world(posixcron: Any) -> Iterator[World]:
    w = World(posixcron)
    yield w
    for gate in GATES.values():
        gate.set()
    problems: list[str] = []
    for scheduler in w.schedulers:
        # Every scheduler is stopped even when one fails to; then the failures are reported,
        # since a run that never finished or a shutdown that raised is a bug to see.
        try:
            if not scheduler.wait_idle(timeout=15):
                problems.append(f"{scheduler!r}: a run was still going after 15 s")
            if scheduler.process is not None and not scheduler.stopping:
                scheduler.shutdown()
        except Exception as exc:
            problems.append(f"{scheduler!r}: {type(exc).__name__}: {exc}")
    GATES.clear()
    if problems:
        pytest.fail("teardown of the world fixture failed:\n" + "\n".join(problems))
