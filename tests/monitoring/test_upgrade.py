"""Upgrading to the counters: posixcron_runs_total starts from the history already there."""

from __future__ import annotations

import datetime as dt

import pytest
from django.db import connection
from django.db.migrations.executor import MigrationExecutor

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("django_posixcron", "0001_initial")]
AFTER = [("django_posixcron", "0002_observability")]


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
