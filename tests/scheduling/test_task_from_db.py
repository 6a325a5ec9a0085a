"""Tasks read from the database are built without the model constructor (the claim reads
thousands a second): the same instances Django's from_db() builds, deferred fields included."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.models import Model
from django.test.utils import CaptureQueriesContext

from django_posixcron.models import Task
from tests.factories import NOW, TaskFactory
from tests.harness.signals import post_init_seen

pytestmark = pytest.mark.django_db


@pytest.fixture(params=["nobody listening", "a post_init receiver"])
def initialised(request: pytest.FixtureRequest) -> Iterator[list[Task]]:
    """The tasks a post_init receiver for Task was sent, when the test has one."""
    yield from post_init_seen(request, Task)


def constructed(task: Task) -> Task:
    """The task as Django's own Model.from_db() builds it from the same row."""
    names = [f.attname for f in Task._meta.concrete_fields if f.attname in vars(task)]
    build: Any = Model.from_db.__func__  # type: ignore[attr-defined]
    built: Task = build(Task, task._state.db, names, [vars(task)[n] for n in names])
    return built


def test_a_task_read_is_the_task_the_constructor_builds(initialised: list[Task]) -> None:
    TaskFactory.create(name="read", next_run_at=NOW, kwargs={"a": [1, 2]})
    initialised.clear()

    task = Task.objects.get(name="read")

    expected = constructed(task)
    assert vars(task).keys() - {"_loaded"} == vars(expected).keys()
    for field in Task._meta.concrete_fields:
        assert getattr(task, field.attname) == getattr(expected, field.attname), field.name
    assert (task._state.adding, task._state.db) == (False, "default")
    # A receiver of post_init for tasks is sent every task read.
    assert initialised[:1] == ([task] if initialised else [])


def test_fields_not_read_are_deferred_and_loaded_on_access(initialised: list[Task]) -> None:
    TaskFactory.create(name="partial", description="the text", next_run_at=NOW)

    task = Task.objects.defer("description").get(name="partial")

    assert task.get_deferred_fields() == {"description"}
    with CaptureQueriesContext(connection) as captured:
        assert task.description == "the text"
    assert len(captured.captured_queries) == 1
    # A deferred field loaded later is what save() compares against: nothing changed.
    assert task.changed_fields() == []
    task.paused = True
    assert task.changed_fields() == ["paused"]


def test_a_queryset_read_skips_the_constructor_on_every_django(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Django 6.1 passes fetch_mode= to from_db() on every QuerySet read: the fast path must
    # still be taken, and the queryset's fetch mode kept on the instance as Django keeps it.
    TaskFactory.create(name="fast", next_run_at=NOW)
    calls: list[Task] = []
    original = Task.__init__

    def counting_init(self: Task, *args: Any, **kwargs: Any) -> None:
        calls.append(self)
        original(self, *args, **kwargs)

    monkeypatch.setattr(Task, "__init__", counting_init)

    task = Task.objects.get(name="fast")

    assert calls == []
    assert (task._state.adding, task._state.db) == (False, "default")
    fetch_mode = getattr(Task.objects.all(), "_fetch_mode", None)
    if fetch_mode is not None:  # Django 6.1+
        assert task._state.fetch_mode is fetch_mode
