"""Two operators at once: History, log lines and messages follow what each request changed.

"A button that changes nothing (pausing a paused task, resuming an active one, asking again
for a run already requested) says so and records nothing": also when the other request
changed the row after this one read it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import User
from django.db import connections
from django.urls import reverse

from django_posixcron.models import Task, TaskQuerySet
from tests.admin.conftest import client_for, make_task
from tests.harness.processes import only_on

LIST = reverse("admin:django_posixcron_task_changelist")
ACTIONS = ("admin_pause", "admin_resume", "admin_run_now")


def action_url(task: Task, action: str) -> str:
    return reverse(f"admin:django_posixcron_task_{action}", args=[task.pk])


def logged(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if getattr(r, "action", "") in ACTIONS]


@pytest.fixture
def someone_else_first(monkeypatch: pytest.MonkeyPatch) -> None:
    """Make every pause, resume and run request meet the same change, made by another
    request after the admin read the rows and before its own UPDATE."""
    for name in ("pause", "resume", "request_run"):
        original: Callable[..., int] = getattr(TaskQuerySet, name)

        def racing(self: TaskQuerySet, now: Any = None, original: Any = original) -> int:
            rows = list(self.values_list("pk", flat=True))
            original(Task.objects.using(self.db).filter(pk__in=rows), now)
            return original(self, now)  # type: ignore[no-any-return]

        monkeypatch.setattr(TaskQuerySet, name, racing)


@pytest.mark.django_db
def test_the_buttons_record_nothing_a_concurrent_request_did(operator, someone_else_first, caplog):
    task = make_task(name="raced")
    client = client_for(operator)
    with caplog.at_level("INFO", logger="django_posixcron"):
        run = client.post(action_url(task, "run"), follow=True).content.decode()
        pause = client.post(action_url(task, "pause"), follow=True).content.decode()
        Task.objects.filter(pk=task.pk).update(paused=True)
        resume = client.post(action_url(task, "resume"), follow=True).content.decode()

    assert "A run of raced is already requested" in run
    assert "Requested a run" not in run
    assert "The task raced was already paused." in pause
    assert "The task raced was not paused." in resume
    assert not LogEntry.objects.exists()
    assert logged(caplog) == []


@pytest.mark.django_db
def test_the_actions_record_nothing_a_concurrent_request_did(operator, someone_else_first, caplog):
    a, b = make_task(name="a"), make_task(name="b")
    client = client_for(operator)
    selection = {"_selected_action": [a.pk, b.pk]}
    with caplog.at_level("INFO", logger="django_posixcron"):
        run = client.post(LIST, {"action": "run_selected", **selection}, follow=True)
        pause = client.post(LIST, {"action": "pause_selected", **selection}, follow=True)
        Task.objects.update(paused=True)
        resume = client.post(LIST, {"action": "resume_selected", **selection}, follow=True)

    assert "2 already had a run requested" in run.content.decode()
    assert "Requested a run of" not in run.content.decode()
    assert "2 were already paused." in pause.content.decode()
    assert "Paused " not in pause.content.decode()
    assert "2 were not paused." in resume.content.decode()
    assert "Resumed " not in resume.content.decode()
    assert not LogEntry.objects.exists()
    assert logged(caplog) == []


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("via", ["button", "action"])
def test_simultaneous_run_now_requests_record_one(operator, monkeypatch, caplog, via):
    """Several operators press Run now at once, each request on its own connection.

    A barrier holds every request between reading the task and its UPDATE, so all of them
    read "no run requested"; the database lets one UPDATE change the row.
    """
    only_on("postgresql", "mysql", why="concurrent writers on their own connections")
    racers = 4
    task = make_task(name="popular")
    barrier = threading.Barrier(racers, timeout=30)
    original = TaskQuerySet.request_run

    def after_everyone_read(self: TaskQuerySet, now: Any = None) -> int:
        barrier.wait()
        return original(self, now)

    monkeypatch.setattr(TaskQuerySet, "request_run", after_everyone_read)
    pages: list[str] = []
    errors: list[BaseException] = []

    def press(user: User) -> None:
        try:
            client = client_for(user)
            if via == "button":
                response = client.post(action_url(task, "run"), follow=True)
            else:
                form = {"action": "run_selected", "_selected_action": [task.pk]}
                response = client.post(LIST, form, follow=True)
            pages.append(response.content.decode())
        except BaseException as exc:
            errors.append(exc)
            barrier.abort()
        finally:
            connections.close_all()

    with caplog.at_level("INFO", logger="django_posixcron"):
        threads = [threading.Thread(target=press, args=(operator,)) for _ in range(racers)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
    assert not errors, errors

    assert list(LogEntry.objects.values_list("change_message", flat=True)) == ["Requested a run."]
    assert logged(caplog) == [f"Run requested from the admin task=popular user={operator}"]
    assert sum("Requested a run of" in page for page in pages) == 1
    already = "is already requested" if via == "button" else "1 already had a run requested"
    assert sum(already in page for page in pages) == racers - 1
