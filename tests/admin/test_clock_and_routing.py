"""The admin reads the scheduler's clock and the database the project's routers choose.

"Whether a task is due is judged by the database's clock where the backend has one";
"every query of the app, in the scheduler, the admin and the commands, goes to the alias the
project's DATABASE_ROUTERS choose for the app's models".
"""

from __future__ import annotations

import datetime as dt
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection, connections
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from django_posixcron.db import database_now
from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task
from tests.admin.conftest import client_for, make_run, make_task

TASKS = reverse("admin:django_posixcron_task_changelist")
RUNS = reverse("admin:django_posixcron_run_changelist")
SKEW = dt.timedelta(hours=1)

has_clock = pytest.mark.skipif(
    connection.vendor == "sqlite", reason="SQLite has no clock of its own: this host's is the one"
)


@pytest.fixture
def host_clock_ahead(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this host's clock run an hour ahead of the database server's."""
    real = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real() + SKEW)


def action_url(task: Task, action: str) -> str:
    return reverse(f"admin:django_posixcron_task_{action}", args=[task.pk])


@has_clock
@pytest.mark.django_db
def test_run_now_is_stamped_by_the_database_clock(operator, host_clock_ahead):
    button, action = make_task(name="button"), make_task(name="action")
    client = client_for(operator)
    before = database_now("default")
    client.post(action_url(button, "run"))
    client.post(TASKS, {"action": "run_selected", "_selected_action": [action.pk]})
    after = database_now("default")
    for task in Task.objects.all():
        assert task.run_requested_at is not None
        assert before <= task.run_requested_at <= after, task.name
        assert task.due_at == task.run_requested_at


@pytest.fixture
def host_clock_behind(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make this host's clock run an hour behind the database server's."""
    real = timezone.now
    monkeypatch.setattr(timezone, "now", lambda: real() - SKEW)


@has_clock
@pytest.mark.django_db
def test_pause_and_resume_are_stamped_by_the_database_clock(operator, host_clock_behind):
    # Resumed a day after its due time: not overdue until it had POLL_INTERVAL to be claimed,
    # by the database's clock. Stamped by a host an hour behind, it read overdue at once.
    due = database_now("default") - dt.timedelta(days=1)
    button, action = (make_task(name=n, paused=True, next_run_at=due) for n in ("b", "a"))
    client = client_for(operator)
    before = database_now("default")
    client.post(action_url(button, "resume"))
    client.post(TASKS, {"action": "resume_selected", "_selected_action": [action.pk]})
    after = database_now("default")
    for task in Task.objects.all():
        assert not task.paused
        assert before <= task.updated_at <= after, task.name
    assert not Task.objects.overdue(after, slack=dt.timedelta(seconds=10)).exists()
    client.post(TASKS, {"action": "pause_selected", "_selected_action": [action.pk]})
    action.refresh_from_db()
    assert action.paused
    assert after <= action.updated_at <= database_now("default")
    # The ORM idiom restarts the overdue clock by the same clock.
    button.refresh_from_db()
    button.paused = True
    before = database_now("default")
    button.save()
    button.refresh_from_db()
    assert before <= button.updated_at <= database_now("default")


@has_clock
@pytest.mark.django_db
def test_counts_liveness_and_relative_times_follow_the_database_clock(superuser, host_clock_ahead):
    now = database_now("default")
    SchedulerProcess.objects.create(hostname="sched-a", pid=1, last_heartbeat_at=now)
    task = make_task(name="soon", next_run_at=now + dt.timedelta(minutes=30, seconds=30))
    client = client_for(superuser)

    html = client.get(TASKS).content.decode()
    # By this host's clock the process would be dead and the task half an hour overdue.
    assert "sched-a:1" in html
    assert "0 overdue tasks" in html
    assert "in 30\xa0minutes" in html
    # " ago" with its space, as every past relative time is written ("%(delta)s ago"): the
    # bare letters turn up in the page's random CSRF token about once in 2,000 runs.
    assert " ago" not in html
    response = client.get(f"{TASKS}?health=overdue")
    assert list(response.context["cl"].result_list) == []
    page = client.get(reverse("admin:django_posixcron_task_change", args=[task.pk]))
    assert page.status_code == 200
    assert "in 30\xa0minutes" in page.content.decode()
    assert " ago" not in page.content.decode()


class AppRouter:
    """Send the app's models to one alias, everything else to the default."""

    def __init__(self, alias: str) -> None:
        self.alias = alias

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return self.alias if model._meta.app_label == "django_posixcron" else None

    db_for_write = db_for_read

    def allow_relation(self, obj1: Any, obj2: Any, **hints: Any) -> bool:
        return True


class ReplicaRouter(AppRouter):
    """Write the app's models to one alias and read them from the default (a replica's
    router): the app reads where it writes, so that a pause is seen at once."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return None

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return self.alias if model._meta.app_label == "django_posixcron" else None


class NamedReplicaRouter(ReplicaRouter):
    """A replica's router that names the replica for reads rather than leaving it to Django
    (which falls back on the database an instance came from)."""

    def db_for_read(self, model: Any, **hints: Any) -> str | None:
        return "default" if model._meta.app_label == "django_posixcron" else None


ALIAS = "posixcron"
APP_TABLE = re.compile(r"django_posixcron_(task|run|schedulerprocess)\b")


@pytest.fixture(params=[AppRouter, ReplicaRouter, NamedReplicaRouter])
def routed(request: Any, transactional_db: None, settings: Any) -> Iterator[None]:
    """Route the app to a second alias: a connection of its own to the test database."""
    connections.settings[ALIAS] = dict(connections["default"].settings_dict)
    # Opened here: once a test has started, Django's test case refuses to open connections
    # to aliases it was not told about, and this one did not exist then.
    connections[ALIAS].connect()
    settings.DATABASE_ROUTERS = [request.param(ALIAS)]
    try:
        yield
    finally:
        connections[ALIAS].close()
        del connections[ALIAS]
        del connections.settings[ALIAS]


def test_every_admin_query_of_the_app_goes_to_the_routed_alias(routed, django_user_model):
    user = django_user_model.objects.create_superuser("root", "root@example.com", "pw")
    task = make_task(name="nightly")
    retired = make_task(name="gone", declared=False)
    make_run(task, status=RunStatus.FAILED, error="boom")
    old = make_run(retired, scheduled_for=timezone.now() - dt.timedelta(days=3))
    dead = SchedulerProcess.objects.create(
        hostname="old", pid=2, last_heartbeat_at=timezone.now() - dt.timedelta(days=1)
    )
    client = client_for(user)
    pages = [
        TASKS,
        f"{TASKS}?health=overdue",
        f"{TASKS}?health=failing&state=active&last_run_status__exact=running",
        reverse("admin:django_posixcron_task_change", args=[task.pk]),
        RUNS,
        f"{RUNS}?scheduled_for__year={old.scheduled_for.year}&task={task.pk}",
        reverse("admin:django_posixcron_run_change", args=[old.pk]),
        reverse("admin:django_posixcron_schedulerprocess_changelist"),
        reverse("admin:django_posixcron_schedulerprocess_delete", args=[dead.pk]),
        reverse("admin:django_posixcron_task_delete", args=[retired.pk]),
    ]
    with (
        CaptureQueriesContext(connections["default"]) as on_default,
        CaptureQueriesContext(connections[ALIAS]) as on_alias,
    ):
        for url in pages:
            assert client.get(url).status_code == 200, url
        for action in ("pause", "resume", "run"):
            assert client.post(action_url(task, action)).status_code == 302
        for action in ("pause_selected", "resume_selected", "run_selected"):
            client.post(TASKS, {"action": action, "index": "0", "_selected_action": [task.pk]})
        selection = {"action": "delete_selected", "index": "0", "_selected_action": [old.pk]}
        assert client.post(RUNS, selection).status_code == 200
        assert client.post(RUNS, {**selection, "post": "yes"}).status_code == 302
    # Read at once: the next request empties the connections' query logs.
    default_sql = [q["sql"] for q in on_default.captured_queries]
    alias_sql = [q["sql"] for q in on_alias.captured_queries]

    # The app's tables (its app label also names content types, which live on the default).
    assert not [sql for sql in default_sql if APP_TABLE.search(sql)], default_sql
    assert not [sql for sql in default_sql if "_TIMESTAMP" in sql.upper()], default_sql
    assert any("django_posixcron_task" in sql for sql in alias_sql)
    assert not Run.objects.filter(pk=old.pk).exists()
    assert Task.objects.get(pk=task.pk).run_requested_at is not None
