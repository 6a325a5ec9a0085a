"""Users with each permission set, and Task/Run rows made directly."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from django_posixcron.models import UNFINISHED_STATUSES, Run, RunStatus, Task, Trigger
from tests.factories import TaskFactory


def make_task(**fields: Any) -> Task:
    """Create a Task row due in a few minutes, with the definition hash reconciling stores."""
    defaults: dict[str, Any] = {
        "schedule": "15 3 * * 1-5",
        "callable_path": "tests.testapp.jobs.succeed",
        "timezone": "Europe/Berlin",
        "next_run_at": timezone.now() + dt.timedelta(minutes=3, seconds=30),
        "created_at": timezone.now() - dt.timedelta(days=1),
        "updated_at": timezone.now() - dt.timedelta(days=1),
    }
    defaults.update(fields)
    return TaskFactory.create(**defaults)


def make_run(task: Task, **fields: Any) -> Run:
    """Create a Run row, and mirror it in the task's last-run summary like the scheduler."""
    started = fields.pop("started_at", timezone.now() - dt.timedelta(minutes=10))
    status = fields.pop("status", RunStatus.SUCCEEDED)
    duration = fields.pop("duration", dt.timedelta(seconds=2))
    defaults: dict[str, Any] = {
        "trigger": Trigger.CRON,
        "scheduled_for": started,
        "started_at": started,
        "finished_at": None if status in UNFINISHED_STATUSES else started + duration,
        "duration": None if status in UNFINISHED_STATUSES else duration,
        "status": status,
        "process_label": "web-1:4242",
    }
    defaults.update(fields)
    run = Run.objects.create(task=task, **defaults)
    Task.objects.filter(pk=task.pk).update(
        last_run_status=run.status,
        last_run_started_at=run.started_at,
        last_run_finished_at=run.finished_at,
    )
    return run


def _staff(username: str, *codenames: str) -> User:
    user = User.objects.create_user(username, password="pw", is_staff=True)
    perms = Permission.objects.filter(
        content_type__app_label="django_posixcron", codename__in=codenames
    )
    assert perms.count() == len(codenames), codenames
    user.user_permissions.set(perms)
    return user


VIEW = ("view_task", "view_run")


@pytest.fixture
def superuser(db: None) -> User:
    return User.objects.create_superuser("root", "root@example.com", "pw")


@pytest.fixture
def viewer(db: None) -> User:
    """A staff user who can look but has none of the custom permissions."""
    return _staff("viewer", *VIEW)


@pytest.fixture
def operator(db: None) -> User:
    return _staff("operator", *VIEW, "pause_task", "resume_task", "run_task")


@pytest.fixture
def pauser(db: None) -> User:
    return _staff("pauser", *VIEW, "pause_task")


@pytest.fixture
def resumer(db: None) -> User:
    return _staff("resumer", *VIEW, "resume_task")


@pytest.fixture
def runner(db: None) -> User:
    return _staff("runner", *VIEW, "run_task")


@pytest.fixture
def deleter(db: None) -> User:
    return _staff("deleter", *VIEW, "delete_task", "delete_run")


@pytest.fixture
def bare_staff(db: None) -> User:
    """Staff, but no permission on this app at all."""
    return _staff("bare")


def client_for(user: User | None, **kwargs: Any) -> Client:
    client = Client(**kwargs)
    if user is not None:
        client.force_login(user)
    return client
