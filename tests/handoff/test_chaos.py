"""Chaos across the hand-off: schedulers and workers killed with SIGKILL for minutes.

"No occurrence runs twice, none goes missing unless recorded lost and retried, nothing stays
queued or running forever." Every minute, each task's occurrence is claimed by one of two
schedulers and handed to django-tasks-db workers (and RQ workers when Redis answers); every
few seconds one of those processes is killed and replaced. The task code writes a row when it
starts and when it ends, so the test sees executions, not only Run rows.
"""

from __future__ import annotations

import datetime as dt
import os
import random
import signal
import time
from collections import Counter, defaultdict

import pytest
from django.db.models import Q

from django_posixcron.models import Run, RunStatus, Task
from tests.harness.processes import task, utcnow
from tests.testapp.models import Hit

pytestmark = [
    pytest.mark.processes,
    pytest.mark.slow,
    pytest.mark.long,
    pytest.mark.django_db(transaction=True),
]

CHAOS_SECONDS = float(os.environ.get("POSIXCRON_CHAOS_SECONDS", 150))
KILL_EVERY = 6.0


def chaos_task(**extra: object) -> dict[str, object]:
    return task(
        "tests.testapp.jobs.chaos_step",
        schedule="* * * * *",
        takes_context=True,
        kwargs={"seconds": 2.0},
        retry_delay=1,
        start_deadline=10,
        **extra,
    )


def _redis_answers() -> bool:
    try:
        import django_rq

        connection = django_rq.get_connection("default")
        connection.ping()
        connection.flushdb()
    except Exception:
        return False
    return True


def test_no_occurrence_runs_twice_or_goes_missing_while_schedulers_and_workers_are_killed(
    schedulers,
):
    rq = _redis_answers() or bool(os.environ.get("CI"))
    tasks = {f"db-{i}": chaos_task(enqueue=True) for i in range(4)}
    if rq:
        tasks |= {f"rq-{i}": chaos_task(enqueue={"backend": "rq"}) for i in range(2)}
    schedulers.configure(tasks)
    pool = {
        "scheduler": schedulers.start_live(2),
        "db": [schedulers.start_worker(), schedulers.start_worker()],
        "rq": [schedulers.start_worker("rq")] if rq else [],
    }
    rng = random.Random(20261124)
    began = utcnow()
    end = time.monotonic() + CHAOS_SECONDS
    killed = Counter[str]()
    while time.monotonic() < end:
        time.sleep(KILL_EVERY * rng.uniform(0.5, 1.5))
        kind = rng.choice([k for k, children in pool.items() if children])
        victim = rng.choice(pool[kind])
        schedulers.expect_exit(victim)
        victim.signal(signal.SIGKILL)
        victim.wait()
        killed[kind] += 1
        pool[kind].remove(victim)
        pool[kind].append(
            schedulers.start(*victim.args)
            if kind == "scheduler"
            else schedulers.start_worker("rq" if kind == "rq" else "default")
        )
    stopped = utcnow()

    # Calm: nobody is killed any more. Every run of the chaos's occurrences ends (lost ones
    # are retried) and nothing stays queued or running: the stale limit (30 s) plus a retry
    # bound the wait. Then the tasks are paused and the runs started meanwhile finish.
    unfinished = [RunStatus.QUEUED, RunStatus.RUNNING]
    schedulers.wait_for(
        lambda: (
            not Run.objects.filter(occurrence__lte=stopped, status__in=unfinished).exists()
            and not Task.objects.filter(
                retry_occurrence__lte=stopped, retry_at__isnull=False
            ).exists()
        ),
        timeout=180,
        what="every run of the chaos to end and every retry of it to run",
    )
    Task.objects.update(paused=True)
    schedulers.wait_for(
        lambda: not Run.objects.filter(status__in=unfinished).exists(),
        timeout=60,
        what="the runs started since to end",
    )
    assert sum(killed.values()) >= CHAOS_SECONDS / KILL_EVERY / 2, killed

    runs = list(Run.objects.select_related("task").order_by("pk"))
    starts = Counter[int]()
    ends = Counter[int]()
    for label in Hit.objects.filter(task_name__startswith="chaos:").values_list("label", flat=True):
        kind, run_id, _ = label.split("|")
        (starts if kind == "start" else ends)[int(run_id)] += 1
    by_pk = {run.pk: run for run in runs}

    # A run executes at most once: a duplicate delivery runs nothing.
    assert max(starts.values()) == 1, [pk for pk, n in starts.items() if n > 1]
    # Only a run a worker took ever executed, and one that ran to its end and was not killed
    # has its real outcome.
    for pk in starts:
        assert by_pk[pk].status != RunStatus.QUEUED
        assert by_pk[pk].started_at is not None
    # No occurrence succeeded twice; an occurrence run again was first recorded lost
    # (or failed) and retried.
    executions = defaultdict(list)
    for run in runs:
        if run.status != RunStatus.SKIPPED:
            executions[(run.task.name, run.occurrence)].append(run)
    for (name, occurrence), attempts in executions.items():
        succeeded = [r for r in attempts if r.status == RunStatus.SUCCEEDED]
        assert len(succeeded) <= 1, (name, occurrence, attempts)
        for earlier in attempts[:-1]:
            assert earlier.status in (RunStatus.LOST, RunStatus.FAILED), (name, earlier)
        assert [r.attempt for r in attempts] == list(range(1, len(attempts) + 1)), attempts
    # None goes missing: each minute that began during the chaos has its cron run for every
    # task (a scheduler was alive throughout: one is killed at a time, and replaced).
    minute = dt.timedelta(minutes=1)
    boundary = (began + dt.timedelta(seconds=5) + minute).replace(second=0, microsecond=0)
    minutes = []
    while boundary <= stopped - dt.timedelta(seconds=5):
        minutes.append(boundary)
        boundary += minute
    assert minutes, "the chaos did not span a minute boundary"
    for name in tasks:
        fired = set(
            Run.objects.filter(task__name=name, trigger="cron").values_list(
                "scheduled_for", flat=True
            )
        )
        missing = [m for m in minutes if m not in fired]
        assert not missing, (name, missing, schedulers.outputs())
    # Everything is accounted for: lost runs are said so, with why.
    for run in Run.objects.filter(status=RunStatus.LOST):
        assert run.error.startswith("Lost: "), run.error
    assert not Run.objects.filter(Q(status=RunStatus.SUCCEEDED) & Q(started_at=None)).exists()
