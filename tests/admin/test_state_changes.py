"""Pause, resume and run now as queryset methods: counts, and only their own fields."""

from __future__ import annotations

import datetime as dt

import pytest
from django.utils import timezone

from django_posixcron.models import Run, RunStatus, Task, Trigger
from tests.admin.conftest import make_task

pytestmark = pytest.mark.django_db


def test_pause_and_resume_count_only_the_tasks_they_change():
    a, b = make_task(name="a"), make_task(name="b", paused=True)
    assert Task.objects.all().pause() == 1
    assert Task.objects.all().pause() == 0
    assert set(Task.objects.values_list("paused", flat=True)) == {True}
    assert Task.objects.filter(pk=a.pk).resume() == 1
    assert Task.objects.all().resume() == 1
    b.refresh_from_db()
    assert not b.paused


def test_pausing_a_stale_instance_keeps_what_the_scheduler_wrote_meanwhile():
    task = make_task()
    stale = Task.objects.get(pk=task.pk)
    finished = timezone.now()
    # An outcome recorded after the admin loaded the row.
    Task.objects.filter(pk=task.pk).update(
        last_run_status=RunStatus.FAILED,
        last_run_started_at=finished,
        last_run_finished_at=finished,
        retry_at=finished + dt.timedelta(minutes=5),
    )
    stale.pause()
    stale.resume()
    stale.pause()
    task.refresh_from_db()
    assert task.paused
    assert task.last_run_status == RunStatus.FAILED
    assert task.retry_at == finished + dt.timedelta(minutes=5)


def test_request_run_pulls_due_at_forward_but_never_back():
    now = timezone.now()
    later = make_task(name="later", next_run_at=now + dt.timedelta(hours=1))
    sooner = make_task(name="sooner", next_run_at=now - dt.timedelta(minutes=5))
    assert Task.objects.filter(pk__in=[later.pk, sooner.pk]).request_run(now) == 2
    later.refresh_from_db()
    sooner.refresh_from_db()
    assert (later.run_requested_at, later.due_at) == (now, now)
    assert (sooner.run_requested_at, sooner.due_at) == (now, now - dt.timedelta(minutes=5))


def test_request_run_on_an_instance_mirrors_the_row():
    task = make_task(next_run_at=timezone.now() + dt.timedelta(hours=1))
    task.request_run()
    assert task.run_requested_at is not None
    stored = Task.objects.get(pk=task.pk)
    assert (stored.run_requested_at, stored.due_at) == (task.run_requested_at, task.due_at)


def test_asking_twice_for_a_run_changes_nothing_the_second_time():
    now = timezone.now()
    task = make_task(next_run_at=now + dt.timedelta(hours=1))
    tasks = Task.objects.filter(pk=task.pk)
    assert tasks.request_run(now) == 1
    assert tasks.request_run(now + dt.timedelta(seconds=5)) == 0  # the first one is pending
    assert Task.objects.get(pk=task.pk).run_requested_at == now
    assert task.request_run(now + dt.timedelta(seconds=9)) is False
    fresh = Task.objects.get(pk=task.pk)
    fresh.run_requested_at = None
    fresh.save()  # a scheduler claimed it, say
    assert fresh.request_run(now + dt.timedelta(seconds=10)) is True


def test_a_request_stamped_a_moment_later_is_the_same_pending_run():
    # Two operators at once: the one whose clock reading came first updates last. Its
    # request is the one already pending, not a change.
    now = timezone.now()
    task = make_task(next_run_at=now + dt.timedelta(hours=1))
    assert Task.objects.filter(pk=task.pk).request_run(now + dt.timedelta(microseconds=5)) == 1
    assert Task.objects.filter(pk=task.pk).request_run(now) == 0
    assert task.request_run(now) is False
    stored = Task.objects.get(pk=task.pk)
    assert stored.run_requested_at == stored.due_at == now + dt.timedelta(microseconds=5)


@pytest.mark.parametrize("first", ["pause", "resume"])
def test_a_save_after_pause_or_resume_writes_the_change_back(first):
    # The instance methods write the row: a later save() that sets the field back must see
    # it as a change, not as the value it loaded.
    task = make_task(paused=first == "resume")
    getattr(task, first)()
    task.paused = not task.paused
    task.save()
    assert Task.objects.get(pk=task.pk).paused == task.paused


def test_a_save_after_request_run_writes_a_cleared_request():
    task = make_task(next_run_at=timezone.now() + dt.timedelta(hours=1))
    task.request_run()
    task.run_requested_at = None
    task.save()
    assert Task.objects.get(pk=task.pk).run_requested_at is None


@pytest.mark.parametrize("now", [dt.date(2026, 11, 27), dt.datetime(2026, 11, 27, 6, 0), "now"])
@pytest.mark.parametrize("method", ["pause", "resume", "request_run"])
def test_an_instant_that_is_not_an_aware_datetime_is_refused(method, now):
    task = make_task(paused=method == "resume")
    for target in (Task.objects.filter(pk=task.pk), task):
        with pytest.raises(TypeError, match="now must be an aware datetime"):
            getattr(target, method)(now=now)
    task.refresh_from_db()
    assert (task.paused, task.run_requested_at) == (method == "resume", None)


@pytest.mark.parametrize("method", ["pause", "resume", "request_run"])
def test_an_unsaved_task_says_so(method):
    with pytest.raises(ValueError, match="Task 'draft' is not saved"):
        getattr(Task(name="draft"), method)()


def test_overdue_refuses_a_slack_or_an_instant_of_another_kind():
    with pytest.raises(TypeError, match=r"slack must be a datetime\.timedelta, got 60"):
        Task.objects.overdue(slack=60)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="now must be an aware datetime"):
        Task.objects.overdue(now=dt.datetime(2026, 11, 27, 6, 0))
    assert list(Task.objects.overdue(slack=dt.timedelta(seconds=60))) == []


def test_a_cursor_set_as_a_string_is_saved_as_the_instant_it_stands_for():
    # Django's DateTimeField takes an ISO string; due_at, computed from the cursors at save,
    # took it for a column name (FieldError).
    task = make_task(next_run_at=timezone.now() + dt.timedelta(hours=1))
    task.next_run_at = "2030-02-01T00:00:00+00:00"
    task.save()
    task.refresh_from_db()
    expected = dt.datetime(2030, 2, 1, tzinfo=dt.UTC)
    assert (task.next_run_at, task.due_at) == (expected, expected)


def test_request_run_leaves_retired_tasks_alone():
    declared, retired = make_task(name="declared"), make_task(name="retired", declared=False)
    assert Task.objects.all().request_run() == 1
    assert retired.request_run() is False
    rows = dict(Task.objects.values_list("name", "run_requested_at"))
    assert rows["retired"] is None
    assert rows["declared"] is not None
    assert declared.request_run() is False  # pending already


def test_a_request_at_an_instant_whose_manual_run_is_recorded_is_not_taken():
    # A test's fixed instant given twice: the second request was taken (True) and then
    # dropped by the claim as an occurrence already fired, without a run.
    task = make_task()
    at = timezone.now()
    Run.objects.create(
        task=task, trigger=Trigger.MANUAL, status=RunStatus.SUCCEEDED, scheduled_for=at
    )
    assert task.request_run(at) is False
    assert Task.objects.filter(pk=task.pk).request_run(at) == 0
    assert task.request_run(at + dt.timedelta(microseconds=1)) is True
