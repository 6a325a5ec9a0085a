"""The data model users and outside tools query: names, stored words, the unique constraint."""

from __future__ import annotations

import datetime as dt

import pytest
from django.apps import apps
from django.db import IntegrityError, connection, models, transaction

from django_posixcron.models import Run, Task
from tests.harness.world import T0, record

pytestmark = pytest.mark.django_db(transaction=True)


def test_models_live_under_the_app_label_with_the_contract_fields():
    task_model = apps.get_model("django_posixcron", "Task")
    run_model = apps.get_model("django_posixcron", "Run")
    assert task_model is Task
    assert run_model is Run
    for name in ("name", "paused", "next_run_at", "retry_at", "due_at", "declared"):
        task_model._meta.get_field(name)
    for name in ("task", "trigger", "status", "scheduled_for"):
        run_model._meta.get_field(name)
    assert run_model._meta.get_field("task").related_model is Task


def test_statuses_and_triggers_are_the_lowercase_words_of_the_design():
    statuses = {value for value, _ in Run._meta.get_field("status").choices or ()}
    triggers = {value for value, _ in Run._meta.get_field("trigger").choices or ()}
    assert statuses == {
        "queued",
        "running",
        "succeeded",
        "failed",
        "skipped",
        "lost",
        "interrupted",
        "timed_out",
    }
    assert triggers == {"cron", "retry", "manual"}


def test_run_is_unique_per_task_trigger_and_scheduled_for():
    unique = [
        c
        for c in Run._meta.constraints
        if isinstance(c, models.UniqueConstraint) and c.condition is None
    ]
    assert sorted(unique[0].fields) == ["scheduled_for", "task", "trigger"]


def test_a_second_run_of_the_same_occurrence_is_refused_by_the_database(world):
    world.settings({"hourly": record("hourly", "0 * * * *")})
    world.start(T0)
    world.tick(T0)
    task = Task.objects.get(name="hourly")
    with pytest.raises(IntegrityError), transaction.atomic():
        Run.objects.create(task=task, trigger="cron", status="running", scheduled_for=T0)
    # A retry or manual run at the same instant is a different occurrence.
    Run.objects.create(task=task, trigger="manual", status="succeeded", scheduled_for=T0)


def test_rows_store_plain_lowercase_words_that_sql_can_filter_on(world):
    world.settings(
        {
            "ok": record("ok", "0 * * * *"),
            "bad": {
                "schedule": "0 * * * *",
                "callable": "tests.testapp.jobs.fail",
                "retry_delay": 60,
            },
        }
    )
    world.start(T0)
    world.tick(T0)
    q = connection.ops.quote_name
    sql = (
        f"SELECT t.{q('name')}, r.{q('trigger')}, r.{q('status')} "
        f"FROM {q(Run._meta.db_table)} r JOIN {q(Task._meta.db_table)} t "
        f"ON t.{q('id')} = r.{q('task_id')} ORDER BY t.{q('name')}"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql)
        rows = [tuple(row) for row in cursor.fetchall()]
    assert rows == [("bad", "cron", "failed"), ("ok", "cron", "succeeded")]
    ok = Task.objects.get(name="ok")
    assert ok.next_run_at == T0 + dt.timedelta(hours=1)
    assert ok.paused is False
    assert ok.declared is True


def test_querysets_are_named_after_states(posixcron):
    from django.utils import timezone

    from django_posixcron.reconcile import reconcile

    posixcron(
        {name: record(name, "0 0 1 1 *") for name in ("due-now", "later", "held", "gone", "broken")}
    )
    reconcile(now=T0)
    now = timezone.now()
    Task.objects.filter(name__in=["due-now", "held"]).update(
        due_at=now - dt.timedelta(hours=1), updated_at=now - dt.timedelta(hours=1)
    )
    Task.objects.filter(name="held").update(paused=True)
    Task.objects.filter(name="broken").update(
        last_run_status="timed_out",
        last_run_started_at=now - dt.timedelta(hours=2),
        last_run_finished_at=now - dt.timedelta(hours=1),
    )
    # A run started since the last one finished: what the claim leaves until the outcome.
    Task.objects.filter(name="later").update(
        last_run_status="succeeded",
        last_run_started_at=now - dt.timedelta(minutes=1),
        last_run_finished_at=now - dt.timedelta(days=1),
    )
    posixcron({name: record(name, "0 0 1 1 *") for name in ("due-now", "later", "held", "broken")})
    reconcile(now=T0)

    def names(queryset: models.QuerySet[Task]) -> set[str]:
        return set(queryset.values_list("name", flat=True))

    assert names(Task.objects.due()) == {"due-now"}
    assert names(Task.objects.due(now - dt.timedelta(days=1))) == set()
    assert names(Task.objects.overdue(slack=dt.timedelta(minutes=5))) == {"due-now"}
    assert names(Task.objects.paused()) == {"held"}
    assert names(Task.objects.retired()) == {"gone"}
    assert names(Task.objects.failing()) == {"broken"}
    assert names(Task.objects.active()) == {"due-now", "later", "broken"}
    assert names(Task.objects.running()) == {"later"}
    assert Task.objects.get(name="later").is_running
    assert not Task.objects.get(name="broken").is_running
