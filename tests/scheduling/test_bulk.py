"""The set-based writes: every row gets its own values, other fields are left alone."""

from __future__ import annotations

import datetime as dt

import pytest

from django_posixcron.models import Run, RunStatus, Task
from django_posixcron.scheduling import bulk
from tests.factories import NOW, RunFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_update_many_writes_each_rows_values_nulls_included() -> None:
    tasks = TaskFactory.create_batch(3)
    later = NOW + dt.timedelta(minutes=7)
    # NULL first: a VALUES list typed from its first row would make the column text.
    rows = [
        (tasks[0].pk, None, ""),
        (tasks[1].pk, later, "failed"),
        (tasks[2].pk, NOW, "succeeded"),
    ]
    bulk.update_many(Task, ["retry_at", "last_run_status"], rows, "default")

    got = {t.pk: (t.retry_at, t.last_run_status) for t in Task.objects.all()}
    assert got == {pk: (retry_at, status) for pk, retry_at, status in rows}


def test_update_many_touches_only_the_fields_it_is_given() -> None:
    task = TaskFactory.create()
    # The admin pauses the task between the claim's read and its write.
    Task.objects.filter(pk=task.pk).update(paused=True)

    bulk.update_many(Task, ["retry_at"], [(task.pk, NOW)], "default")

    stored = Task.objects.get(pk=task.pk)
    assert (stored.paused, stored.retry_at) == (True, NOW)


def test_update_many_over_several_statements_and_durations() -> None:
    task = TaskFactory.create()
    runs = RunFactory.create_batch(bulk.CHUNK + 3, task=task, status=RunStatus.RUNNING)
    rows = [
        (run.pk, RunStatus.SUCCEEDED, dt.timedelta(seconds=i, microseconds=5))
        for i, run in enumerate(runs)
    ]
    bulk.update_many(Run, ["status", "duration"], rows, "default")

    got = dict(Run.objects.values_list("pk", "duration"))
    assert got == {pk: duration for pk, _, duration in rows}
    assert set(Run.objects.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}
