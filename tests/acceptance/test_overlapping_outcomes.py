"""With overlap "allow", an older run can finish after a newer one: its outcome is its own.

The 10:00 run is still going when the 11:00 run fails. The 10:00 success, recorded later,
says nothing about 11:00: the retry the 11:00 failure earned stays pending ("every failure
is visible and retried"), the failure streak goes on, and the task's last run stays the
failed one. Only the last success moves. A 10:00 failure recorded later does not take the
task's one retry over either: the 11:00 failure is the one retried, and the streak counts
both.
"""

from __future__ import annotations

from typing import Any

import pytest

from django_posixcron.models import Run
from django_posixcron.signals import task_failing
from tests.harness.waiting import wait_until
from tests.harness.world import HOUR, MINUTE, T0, task
from tests.testapp.jobs import gate

pytestmark = pytest.mark.django_db(transaction=True)

SECOND = MINUTE / 60


def declare(world: Any, gate_name: str, *, then_fail: bool = False, **top_level: Any) -> None:
    world.settings(
        {
            "hourly": {
                "schedule": "0 * * * *",
                "callable": "tests.testapp.jobs.block_hour_else_fail",
                "kwargs": {"gate_name": gate_name, "block_hour": 10, "then_fail": then_fail},
                "takes_context": True,
                "overlap": "allow",
                "retry_delay": 300,
            }
        },
        **top_level,
    )


def test_an_older_success_keeps_the_newer_failures_retry(world):
    declare(world, "older-success", FAILING_AFTER=1)
    sent = []

    def on_failing(sender, task, failures, paused, **kwargs):
        sent.append(failures)

    task_failing.connect(on_failing)
    try:
        scheduler = world.start(T0 - MINUTE)
        world.tick(T0, wait=False)  # 10:00 starts and waits for its gate
        world.tick(T0 + HOUR, wait=False)  # 11:00 runs beside it and fails
        wait_until(lambda: scheduler.unrecorded == 1, what="the 11:00 failure")
        world.tick(T0 + HOUR + SECOND, wait=False)  # records it
        failed = task("hourly")
        assert failed.retry_at is not None
        assert failed.consecutive_failures == 1
        assert sent == [1]

        gate("older-success").set()
        assert scheduler.wait_idle(timeout=15)  # records the 10:00 success

        row = task("hourly")
        assert row.retry_at == failed.retry_at
        assert row.due_at == failed.retry_at
        assert row.consecutive_failures == 1
        assert row.last_run_status == "failed"
        assert row.last_run_finished_at == failed.last_run_finished_at
        older = Run.objects.get(trigger="cron", occurrence=T0)
        assert older.status == "succeeded"
        assert row.last_success_at == older.finished_at

        # The retry fires, as attempt 2 of 11:00; its failure goes on with the same episode.
        world.tick(failed.retry_at)
        retry = Run.objects.get(trigger="retry")
        assert (retry.occurrence, retry.attempt, retry.status) == (T0 + HOUR, 2, "failed")
        assert task("hourly").consecutive_failures == 2
        assert sent == [1]
    finally:
        task_failing.disconnect(on_failing)


def test_a_success_of_a_newer_occurrence_ends_the_episode(world):
    world.settings(
        {
            "hourly": {
                "schedule": "0 * * * *",
                "callable": "tests.testapp.jobs.block_hour_else_fail",
                "kwargs": {"gate_name": "newer-success", "block_hour": 11},
                "takes_context": True,
                "overlap": "allow",
                "retry_delay": 300,
            }
        }
    )
    world.start(T0 - MINUTE)
    gate("newer-success").set()
    world.tick(T0)  # 10:00 fails at once: a retry of 10:00
    assert task("hourly").retry_occurrence == T0
    world.tick(T0 + HOUR)  # 11:00 consumes the retry and succeeds
    row = task("hourly")
    assert (row.retry_at, row.consecutive_failures, row.last_run_status) == (None, 0, "succeeded")


def test_an_older_failure_keeps_the_newer_failures_retry(world):
    declare(world, "older-failure", then_fail=True)
    scheduler = world.start(T0 - MINUTE)
    world.tick(T0, wait=False)  # 10:00 starts and waits for its gate
    world.tick(T0 + HOUR, wait=False)  # 11:00 runs beside it and fails
    wait_until(lambda: scheduler.unrecorded == 1, what="the 11:00 failure")
    world.tick(T0 + HOUR + SECOND, wait=False)  # records it
    failed = task("hourly")
    assert (failed.retry_occurrence, failed.retry_attempt) == (T0 + HOUR, 1)

    gate("older-failure").set()
    assert scheduler.wait_idle(timeout=15)  # records the 10:00 failure

    older = Run.objects.get(trigger="cron", occurrence=T0)
    assert older.status == "failed"
    row = task("hourly")
    assert (row.retry_at, row.retry_occurrence, row.retry_attempt) == (
        failed.retry_at,
        T0 + HOUR,
        1,
    )
    assert row.due_at == failed.retry_at
    assert row.consecutive_failures == 2
    assert (row.last_run_status, row.last_run_finished_at) == (
        "failed",
        failed.last_run_finished_at,
    )

    # The retry fires as attempt 2 of 11:00.
    world.tick(failed.retry_at)
    retry = Run.objects.get(trigger="retry")
    assert (retry.occurrence, retry.attempt, retry.status) == (T0 + HOUR, 2, "failed")
