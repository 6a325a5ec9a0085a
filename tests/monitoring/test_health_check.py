"""The django-health-check plugin, through django-health-check's own view."""

from __future__ import annotations

import datetime as dt

import pytest
from django.test import Client
from django.utils import timezone

from django_posixcron.models import RunStatus, Task
from tests.factories import SchedulerProcessFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)

CHECK = "SchedulerHealthCheck(database=None)"  # how the view names the check


def probe(fmt: str = "json") -> tuple[int, dict[str, str] | str]:
    response = Client().get("/health/", {"format": fmt})
    body = response.json() if fmt == "json" else response.content.decode()
    return response.status_code, body


def test_no_live_scheduler_is_unhealthy():
    SchedulerProcessFactory.create(last_heartbeat_at=timezone.now() - dt.timedelta(minutes=5))
    assert probe() == (500, {CHECK: "Unavailable: no live scheduler"})


def test_a_live_scheduler_and_tasks_on_time_is_healthy():
    SchedulerProcessFactory.create(last_heartbeat_at=timezone.now())
    TaskFactory.create(next_run_at=timezone.now() + dt.timedelta(minutes=5))
    assert probe() == (200, {CHECK: "OK"})


def test_an_overdue_task_is_unhealthy_past_the_poll_interval():
    SchedulerProcessFactory.create(last_heartbeat_at=timezone.now())
    TaskFactory.create(name="late", next_run_at=timezone.now() - dt.timedelta(minutes=2))
    assert probe() == (500, {CHECK: "Unavailable: 1 overdue task(s): late"})


def test_a_failing_task_is_reported_but_healthy():
    SchedulerProcessFactory.create(last_heartbeat_at=timezone.now())
    TaskFactory.create(name="broken", last_run_status=RunStatus.FAILED)
    TaskFactory.create(name="also-broken", last_run_status=RunStatus.LOST)
    assert probe() == (
        200,
        {f"{CHECK} failing, not judged unhealthy: also-broken, broken": "OK"},
    )
    status, html = probe("html")
    assert status == 200
    assert "failing, not judged unhealthy: also-broken, broken" in html


def test_a_database_without_the_apps_migrations_is_named_as_such(monkeypatch):
    # "The scheduler's database is unavailable" sent the operator to the database server
    # for a missed `migrate`.
    from django.db import ProgrammingError, connection
    from django.db.migrations.recorder import MigrationRecorder

    from django_posixcron.contrib import health_check

    def missing_table(using: str) -> dt.datetime:
        raise ProgrammingError('relation "django_posixcron_task" does not exist')

    monkeypatch.setattr(health_check, "database_now", missing_table)
    recorder = MigrationRecorder(connection)
    ours = [key for key in recorder.applied_migrations() if key[0] == "django_posixcron"]
    for app, name in ours:
        recorder.record_unapplied(app, name)
    try:
        status, body = probe()
    finally:
        for app, name in ours:
            recorder.record_applied(app, name)
    assert status == 500
    assert isinstance(body, dict)
    assert body[CHECK].startswith(
        "Unavailable: The database 'default' lacks django_posixcron migrations (0001_initial"
    )
    assert body[CHECK].endswith("run `manage.py migrate` first.")


def test_a_probe_run_inside_a_callers_transaction_leaves_it_open():
    # A project's TestCase calling the check directly: closing every connection of the
    # thread after the probe took the test's transaction with it ("the connection is closed").
    from django.db import connection, transaction
    from health_check.exceptions import ServiceUnavailable

    from django_posixcron.contrib.health_check import SchedulerHealthCheck

    with transaction.atomic():
        TaskFactory.create(name="made-by-the-test")
        with pytest.raises(ServiceUnavailable, match="no live scheduler"):
            SchedulerHealthCheck().run()
        assert connection.in_atomic_block
        assert Task.objects.filter(name="made-by-the-test").exists()
