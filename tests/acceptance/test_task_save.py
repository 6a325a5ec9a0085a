"""A user's own `task.save()` writes what they changed, never the scheduler's state back.

Users reach for the ORM: ``task = Task.objects.get(name=...); task.paused = True;
task.save()`` in a shell, a view or a data migration. The scheduler meanwhile records runs,
retries and cursors on the same row from other processes. A save() of an instance loaded
before those writes must not undo them: a cleared retry is a failure never retried, and a
cursor moved back is an occurrence offered again.
"""

from __future__ import annotations

import datetime as dt

import pytest
from django.db.models.signals import post_save
from django.utils import timezone

from django_posixcron.models import Task
from django_posixcron.signals import run_finished, task_failing
from tests.harness.world import HOUR, MINUTE, T0, record, runs, task

pytestmark = pytest.mark.django_db(transaction=True)

FAILING = {"schedule": "0 * * * *", "callable": "tests.testapp.jobs.fail", "retry_delay": 300}


def test_pausing_a_stale_instance_keeps_the_retry_and_the_cursor(world):
    world.settings({"flaky": FAILING})
    world.start(T0 - MINUTE)
    stale = task("flaky")  # loaded before the run: no retry, cursor at T0
    world.tick(T0)  # fails: a retry 5 minutes later, the cursor at T0 + 1 h

    stale.paused = True
    saved_at = timezone.now()
    stale.save()

    row = task("flaky")
    assert row.paused is True
    assert row.retry_at is not None
    assert T0 + 5 * MINUTE <= row.retry_at < T0 + 6 * MINUTE  # failure time + retry_delay
    assert row.next_run_at == T0 + HOUR
    assert row.due_at == row.retry_at
    assert row.last_run_status == "failed"
    assert row.consecutive_failures == 1
    assert row.updated_at >= saved_at  # the overdue clock restarts, as with pause()

    # Resumed through save() too: the retry the failure earned still fires.
    stale.paused = False
    stale.save()
    world.tick(T0 + 6 * MINUTE)
    assert [(trigger, status) for trigger, status, _ in runs("flaky")] == [
        ("cron", "failed"),
        ("retry", "failed"),
    ]


def test_a_resume_through_save_clears_why_the_task_was_paused(world):
    world.settings({"flaky": FAILING})
    world.start(T0 - MINUTE)
    Task.objects.filter(name="flaky").update(paused=True, paused_reason="3 failures in a row")
    row = task("flaky")
    row.paused = False
    row.save()
    assert task("flaky").paused_reason == ""


def test_moving_the_cursor_through_save_moves_due_at_with_it(world):
    world.settings({"flaky": FAILING})
    world.start(T0 - MINUTE)
    row = task("flaky")
    row.next_run_at = T0 + 3 * HOUR
    row.save()
    stored = task("flaky")
    assert (stored.next_run_at, stored.due_at) == (T0 + 3 * HOUR, T0 + 3 * HOUR)
    world.tick(T0)
    assert runs("flaky") == []


def test_moving_the_cursor_of_a_stale_instance_keeps_the_retry_due(world):
    # due_at was computed from the instance's own (stale) retry_at: a retry the scheduler
    # set after the instance was read was held back until the cursor's new time.
    world.settings({"flaky": FAILING})
    world.start(T0 - MINUTE)
    stale = task("flaky")  # loaded before the run: no retry
    world.tick(T0)  # fails: a retry 5 minutes later

    stale.next_run_at = T0 + 3 * HOUR
    stale.save()

    row = task("flaky")
    assert row.next_run_at == T0 + 3 * HOUR
    assert row.retry_at is not None
    assert T0 + 5 * MINUTE <= row.retry_at < T0 + 6 * MINUTE
    assert row.due_at == row.retry_at
    assert stale.due_at == row.retry_at  # the instance holds what the database computed
    world.tick(T0 + 6 * MINUTE)
    assert [(trigger, status) for trigger, status, _ in runs("flaky")] == [
        ("cron", "failed"),
        ("retry", "failed"),
    ]


def test_clearing_a_request_on_a_stale_instance_keeps_the_cursor_due(world):
    world.settings({"flaky": FAILING})
    world.start(T0 - MINUTE)
    Task.objects.filter(name="flaky").update(run_requested_at=T0 + 2 * HOUR)
    stale = task("flaky")
    Task.objects.filter(name="flaky").update(next_run_at=T0 + HOUR)  # moved meanwhile
    stale.run_requested_at = None
    stale.save()
    row = task("flaky")
    assert (row.run_requested_at, row.due_at) == (None, T0 + HOUR)


def test_a_save_that_changes_nothing_writes_nothing(world):
    world.settings({"flaky": FAILING})
    world.start(T0 - MINUTE)
    row = task("flaky")
    Task.objects.filter(name="flaky").update(description="changed elsewhere")
    saved = []

    def receiver(sender, **kwargs):
        saved.append(kwargs["instance"])

    post_save.connect(receiver, sender=Task)
    try:
        row.save()
    finally:
        post_save.disconnect(receiver, sender=Task)
    assert task("flaky").description == "changed elsewhere"
    assert saved == []


def test_explicit_update_fields_are_obeyed_and_refresh_takes_a_new_baseline(world):
    world.settings({"flaky": FAILING})
    world.start(T0 - MINUTE)
    row = task("flaky")
    Task.objects.filter(name="flaky").update(description="changed elsewhere")
    # Asked for by name, an unchanged field is written.
    row.save(update_fields=["description"])
    assert task("flaky").description == ""

    # A field changed but left out of an explicit update_fields is still written later.
    row.paused = True
    row.save(update_fields=["description"])
    assert task("flaky").paused is False
    row.save()
    assert task("flaky").paused is True
    Task.objects.filter(name="flaky").update(paused=False)

    Task.objects.filter(name="flaky").update(description="again")
    row.refresh_from_db()
    row.paused = True
    row.save()
    assert task("flaky").description == "again"
    assert task("flaky").paused is True


def test_a_changed_field_of_a_partly_loaded_task_is_written(world):
    world.settings({"flaky": FAILING})
    world.start(T0 - MINUTE)
    row = Task.objects.only("name", "paused").get(name="flaky")
    row.paused = True
    row.save()
    stored = task("flaky")
    assert stored.paused is True
    assert stored.next_run_at == T0  # untouched
    # A field loaded later, on access, counts from the value it was loaded with.
    row = Task.objects.only("name").get(name="flaky")
    assert row.description == ""
    row.description = "now described"
    row.save()
    assert task("flaky").description == "now described"


# The instances the scheduler hands to signal receivers (run.task, task_failing's task) are the
# claim's own: the claim and the outcome wrote their cursors, retry and streak on them. A
# receiver's `task.paused = True; task.save()` wrote those back as the receiver's changes,
# clearing the retry the failure had just set up and moving the cursor back.


@pytest.fixture
def receive():
    """Connect receivers to signals for the length of the test."""
    connected = []

    def connect(signal, receiver):
        signal.connect(receiver, weak=False)
        connected.append((signal, receiver))

    yield connect
    for signal, receiver in connected:
        signal.disconnect(receiver)


def test_a_receiver_pausing_the_task_of_a_failed_run_keeps_its_retry(world, receive):
    world.settings({"flaky": {**FAILING, "schedule": "* * * * *"}})
    world.start(T0 - MINUTE)
    seen = []

    def pause_it(sender, run, **kwargs):
        if run.status == "failed" and run.trigger == "retry":
            seen.append((run.task.retry_at, run.task.consecutive_failures))
            run.task.paused = True
            run.task.save()

    receive(run_finished, pause_it)
    world.tick(T0)  # the occurrence fails: a retry 5 minutes later
    Task.objects.filter(name="flaky").update(next_run_at=T0 + HOUR, due_at=T0 + 5 * MINUTE)
    world.tick(T0 + 5 * MINUTE + dt.timedelta(seconds=30))  # the retry fails too

    row = task("flaky")
    assert row.paused is True
    assert row.consecutive_failures == 2
    assert row.retry_at is not None
    assert row.retry_at > T0 + 10 * MINUTE
    assert (row.next_run_at, row.due_at) == (T0 + HOUR, row.retry_at)
    # The receiver read the task as the outcome left it: the new retry, the streak of two.
    assert seen == [(row.retry_at, 2)]


def test_a_receiver_saving_the_task_of_a_run_does_not_move_the_cursor_back(world, receive):
    world.settings({"every": record("every", "* * * * *")})
    world.start(T0 - MINUTE)

    def describe_it(sender, run, **kwargs):
        run.task.paused = True
        run.task.paused_reason = "paused by a receiver"  # not read by the claim
        run.task.save()

    receive(run_finished, describe_it)
    world.tick(T0)
    row = task("every")
    assert (row.paused, row.paused_reason) == (True, "paused by a receiver")
    assert row.next_run_at == T0 + MINUTE
    assert row.last_run_status == "succeeded"
    assert row.last_run_started_at is not None


def test_a_task_failing_receiver_saving_its_task_keeps_the_streak(world, receive):
    world.settings({"flaky": {**FAILING, "schedule": "* * * * *"}}, FAILING_AFTER=1)
    world.start(T0 - MINUTE)
    got = []

    def note_it(sender, task, failures, paused, **kwargs):
        got.append((failures, task.consecutive_failures, task.retry_at is not None))
        task.description = "failing"
        task.save()

    receive(task_failing, note_it)
    world.tick(T0)
    row = task("flaky")
    assert got == [(1, 1, True)]
    assert row.description == "failing"
    assert row.consecutive_failures == 1
    assert row.failing_signalled is True
    assert row.retry_at is not None
    assert row.next_run_at == T0 + MINUTE


def test_a_receiver_rewording_an_automatic_pause_is_saved(world, receive):
    # paused_reason is left unread by the claim and written by the outcome's pause: a change
    # a receiver makes to it after is its own, and saved.
    world.settings(
        {"flaky": {**FAILING, "schedule": "* * * * *", "pause_after_failures": 1}},
    )
    world.start(T0 - MINUTE)

    def reword(sender, task, failures, paused, **kwargs):
        assert paused is True
        assert task.paused_reason.startswith("Paused automatically after 1 failed run")
        task.paused_reason = "Paused: the report server is down"
        task.save()

    receive(task_failing, reword)
    world.tick(T0)
    row = task("flaky")
    assert (row.paused, row.paused_reason) == (True, "Paused: the report server is down")
    assert row.retry_at is not None
