"""Enqueue ``execute_run`` for the runs a claim recorded as queued.

"Inside the claim transaction when the backend stores its jobs in the same database alias,
otherwise right after commit, keeping the backend's result id on the run." A run whose enqueue
fails is recorded failed (its retry rule applies); a scheduler that dies between the commit and
the enqueue leaves the run queued without a message, and its start_deadline makes it lost.
"""

from __future__ import annotations

import datetime as dt
import time
import traceback
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from django.db import transaction

from django_posixcron.db import app_alias
from django_posixcron.executors.base import describe_exception
from django_posixcron.handoff import framework
from django_posixcron.log import get_logger
from django_posixcron.models import Run, RunStatus
from django_posixcron.scheduling.bulk import update_many
from django_posixcron.scheduling.outcomes import Outcome, cap

if TYPE_CHECKING:
    from django_posixcron.declarations import TaskDeclaration

logger = get_logger("django_posixcron.scheduler.handoff")


def queue(run: Run, declaration: TaskDeclaration, now: dt.datetime) -> None:
    """Turn a claimed run into a queued one, handed to the declaration's backend."""
    assert declaration.enqueue is not None
    run.status = RunStatus.QUEUED
    run.started_at = None
    run.backend = declaration.enqueue.backend
    run.start_deadline_at = now + declaration.start_deadline


class Enqueuer:
    """Enqueue queued runs on their backends; remember which backends share our database."""

    def __init__(self, using: str) -> None:
        self.using = using
        # The worker finds the run where the routers put the app's models; a scheduler on
        # another alias (runscheduler --database) names its own.
        self._where: dict[str, str] = {} if using == app_alias() else {"database": using}
        self._tasks: dict[tuple[str, str, int], Any] = {}
        self._same_database: dict[str, bool] = {}

    def same_database(self, alias: str) -> bool:
        if alias not in self._same_database:
            try:
                jobs_on = framework.stores_jobs_on(framework.backend(alias))
            except Exception:
                jobs_on = None  # the enqueue after commit reports the problem on the run
            self._same_database[alias] = jobs_on == self.using
        return self._same_database[alias]

    def in_claim(self, runs: Iterable[tuple[Run, TaskDeclaration]]) -> list[Outcome]:
        """Enqueue, inside the claim's transaction, the runs whose backend shares our alias."""
        mine = [(r, d) for r, d in runs if r.status == RunStatus.QUEUED]
        return self._enqueue([(r, d) for r, d in mine if self.same_database(r.backend)], True)

    def after_commit(self, runs: Iterable[tuple[Run, TaskDeclaration]]) -> list[Outcome]:
        """Enqueue the queued runs the claim's transaction did not (other stores)."""
        rest = [
            (r, d)
            for r, d in runs
            if r.status == RunStatus.QUEUED
            and not r.result_id
            and not self.same_database(r.backend)
        ]
        return self._enqueue(rest, False)

    def _enqueue(
        self, runs: list[tuple[Run, TaskDeclaration]], in_transaction: bool
    ) -> list[Outcome]:
        """Enqueue each run; write the result ids; return failed outcomes to record."""
        failed, ids = [], []
        began = time.monotonic()
        for run, declaration in runs:
            try:
                if in_transaction:
                    # A savepoint: one refused enqueue must not roll back the whole claim.
                    with transaction.atomic(using=self.using):
                        result = self._task(declaration).enqueue(run.pk, **self._where)
                else:
                    result = self._task(declaration).enqueue(run.pk, **self._where)
            except Exception as exc:
                failed.append(self._refused(run, declaration, exc, time.monotonic() - began))
                continue
            run.result_id = str(result.id)[:255]
            ids.append((run.pk, run.result_id))
            logger.info(
                "run queued task=%s trigger=%s scheduled_for=%s run=%s backend=%s result=%s",
                run.task.name,
                run.trigger,
                run.scheduled_for.isoformat(),
                run.pk,
                run.backend,
                run.result_id,
                extra={"action": "run_queued", "task": run.task.name, "run_id": run.pk},
            )
        if ids:
            update_many(Run, ["result_id"], ids, self.using)
        return failed

    def _task(self, declaration: TaskDeclaration) -> Any:
        enqueue = declaration.enqueue
        assert enqueue is not None
        key = (enqueue.backend, enqueue.queue_name, enqueue.priority)
        if key not in self._tasks:
            from django_posixcron.tasks import execute_run

            self._tasks[key] = execute_run.using(
                backend=enqueue.backend, queue_name=enqueue.queue_name, priority=enqueue.priority
            )
        return self._tasks[key]

    def _refused(
        self, run: Run, declaration: TaskDeclaration, exc: Exception, after: float
    ) -> Outcome:
        """The failed outcome of a run its backend refused, `after` seconds into the
        enqueues that began with the claim: "retry_at = failure time + retry_delay", and a
        broker that takes 30 s to refuse must not leave the retry already due."""
        logger.error(
            "could not enqueue run %s of task %s on backend %s: %s",
            run.pk,
            run.task.name,
            run.backend,
            describe_exception(exc),
            extra={"action": "enqueue_failed", "task": run.task.name, "run_id": run.pk},
        )
        assert run.start_deadline_at is not None
        return Outcome(
            run,
            RunStatus.FAILED,
            # When it was queued (by the clock due-ness is judged by), plus the wait.
            run.start_deadline_at - declaration.start_deadline + dt.timedelta(seconds=after),
            cap(f"Could not enqueue the run on backend {run.backend!r}: {describe_exception(exc)}"),
            cap(traceback.format_exc(), keep_tail=True),
        )
