"""Upgrading to the counters: posixcron_runs_total starts from the history already there."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("django_posixcron", "0002_deployments")]
AFTER = [("django_posixcron", "0003_observability")]


def test_the_migration_counts_the_existing_finished_runs():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    try:
        old = executor.loader.project_state(BEFORE).apps
        task = old.get_model("django_posixcron", "Task").objects.create(
            name="old",
            schedule="0 * * * *",
            callable_path="tests.testapp.jobs.noop",
            timezone="UTC",
            retry_delay=dt.timedelta(minutes=5),
            definition_hash="x",
        )
        Run = old.get_model("django_posixcron", "Run")
        start = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
        for i, (status, trigger) in enumerate(
            [("succeeded", "cron")] * 3
            + [("failed", "cron"), ("failed", "retry"), ("running", "cron")]
        ):
            Run.objects.create(
                task=task,
                status=status,
                trigger=trigger,
                scheduled_for=start + dt.timedelta(hours=i),
            )
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())

    new = MigrationExecutor(connection).loader.project_state(AFTER).apps
    counts = {
        (c.task_name, c.trigger, c.status): c.count
        for c in new.get_model("django_posixcron", "RunCount").objects.all()
    }
    # A running run is counted when its outcome is written, not before.
    assert counts == {
        ("old", "cron", "succeeded"): 3,
        ("old", "cron", "failed"): 1,
        ("old", "retry", "failed"): 1,
    }


def test_a_scheduler_of_the_previous_release_can_still_write_rows():
    # The models as release 0001 knew them insert without the new columns, as an old
    # scheduler does while the new release's migration is already applied.
    old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
    task = old.get_model("django_posixcron", "Task").objects.create(
        name="old-code",
        schedule="0 * * * *",
        callable_path="tests.testapp.jobs.noop",
        timezone="UTC",
        retry_delay=dt.timedelta(minutes=5),
        definition_hash="x",
    )
    old.get_model("django_posixcron", "Run").objects.create(
        task=task,
        status="running",
        trigger="cron",
        scheduled_for=dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
    )

    from django_posixcron.models import Run, Task

    new_task = Task.objects.get(name="old-code")
    assert (new_task.consecutive_failures, new_task.failing_signalled) == (0, False)
    assert (new_task.retry_attempt, new_task.paused_reason) == (0, "")
    run = Run.objects.get(task=new_task)
    assert (run.attempt, run.occurrence) == (1, None)
