"""Start-up as a user sees it: first start, restarts, changed and removed declarations."""

from __future__ import annotations

import datetime as dt

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from django_posixcron.models import Run, Task
from django_posixcron.signals import task_failing
from tests.harness.world import HOUR, MINUTE, T0, hits, record, runs, task

pytestmark = pytest.mark.django_db(transaction=True)

SECOND = dt.timedelta(seconds=1)


def test_a_new_task_fires_at_once_only_when_the_current_minute_matches(world):
    now = T0 + 42 * SECOND  # 10:00:42, inside minute 10:00
    world.settings(
        {
            "matching": record("matching", "0 10 * * *"),
            "next-minute": record("next-minute", "1 10 * * *"),
            "last-minute": record("last-minute", "59 9 * * *"),
        }
    )
    world.start(now)
    world.tick(now)

    assert runs("matching") == [("cron", "succeeded", T0)]
    assert hits("matching") == 1
    assert runs("next-minute") == []
    assert task("next-minute").next_run_at == T0 + MINUTE
    # The minute that just ended is not made up: its first run is tomorrow's.
    assert runs("last-minute") == []
    assert task("last-minute").next_run_at == T0 + dt.timedelta(days=1) - MINUTE

    world.tick(T0 + MINUTE)
    assert runs("next-minute") == [("cron", "succeeded", T0 + MINUTE)]
    assert hits("matching") == 1


def test_a_task_declared_a_second_after_its_minute_waits_for_the_next_occurrence(world):
    world.settings({"daily": record("daily", "0 10 * * *")})
    world.start(T0 + MINUTE)
    world.tick(T0 + MINUTE)
    assert runs("daily") == []
    assert task("daily").next_run_at == T0 + dt.timedelta(days=1)


def test_a_restart_with_no_change_keeps_the_cursor_and_fires_once_for_the_gap(world):
    world.settings({"hourly": record("hourly", "0 * * * *")})
    world.start(T0 + 5 * MINUTE)
    assert task("hourly").next_run_at == T0 + HOUR

    # Down from 10:05 to 13:30: a restart keeps the 11:00 cursor, fires once, resumes.
    later = T0 + 3 * HOUR + 30 * MINUTE
    world.start(later)
    assert task("hourly").next_run_at == T0 + HOUR
    world.tick(later)
    world.tick(later + MINUTE)
    assert runs("hourly") == [("cron", "succeeded", T0 + HOUR)]
    assert hits("hourly") == 1
    assert task("hourly").next_run_at == T0 + 4 * HOUR

    world.tick(T0 + 4 * HOUR)
    assert [r[2] for r in runs("hourly")] == [T0 + HOUR, T0 + 4 * HOUR]


def test_a_schedule_change_resets_the_cursor_from_now(world):
    world.settings({"job": record("job", "0 * * * *")})
    world.start(T0 + 5 * MINUTE)
    assert task("job").next_run_at == T0 + HOUR

    # Spacing is not a change.
    world.settings({"job": record("job", "0  *\t* * *")})
    world.start(T0 + 10 * MINUTE)
    assert task("job").next_run_at == T0 + HOUR

    world.settings({"job": record("job", "20 * * * *")})
    world.start(T0 + 20 * MINUTE + 30 * SECOND)
    assert task("job").next_run_at == T0 + 20 * MINUTE
    world.tick(T0 + 20 * MINUTE + 30 * SECOND)
    assert runs("job") == [("cron", "succeeded", T0 + 20 * MINUTE)]

    world.settings({"job": record("job", "45 * * * *")})
    world.start(T0 + 30 * MINUTE)
    assert task("job").next_run_at == T0 + 45 * MINUTE


def test_a_zone_change_resets_the_cursor(world):
    world.settings({"nine": record("nine", "0 9 * * *")})
    world.start(T0)  # UTC: next 09:00 UTC is tomorrow
    assert task("nine").next_run_at == T0 + dt.timedelta(hours=23)

    # 10:00 UTC is 11:00 in Berlin (winter), 05:00 in New York.
    world.settings({"nine": record("nine", "0 9 * * *", timezone="America/New_York")})
    world.start(T0 + MINUTE)
    assert task("nine").next_run_at == T0 + 4 * HOUR


def test_changing_settings_time_zone_moves_tasks_that_use_the_default(world, settings):
    world.settings({"nine": record("nine", "0 9 * * *")})
    world.start(T0)
    settings.TIME_ZONE = "Asia/Tokyo"  # 10:00 UTC is 19:00 in Tokyo
    world.start(T0 + MINUTE)
    assert task("nine").timezone == "Asia/Tokyo"
    assert task("nine").next_run_at == dt.datetime(2086, 1, 8, 0, 0, tzinfo=dt.UTC)


def test_other_definition_changes_keep_the_cursor(world):
    world.settings({"job": record("job", "0 * * * *")})
    world.start(T0 + 5 * MINUTE)
    world.settings({"job": record("job", "0 * * * *", retry_delay=60, description="new")})
    world.start(T0 + 2 * HOUR)
    job = task("job")
    assert job.next_run_at == T0 + HOUR
    assert job.description == "new"
    assert job.retry_delay == dt.timedelta(seconds=60)


def test_pause_survives_redeclaration_and_a_paused_task_never_fires(world):
    world.settings({"job": record("job", "0 * * * *")})
    world.start(T0)
    world.tick(T0)
    task("job").pause()

    world.settings({"job": record("job", "30 * * * *", description="changed")})
    world.start(T0 + MINUTE)
    assert task("job").paused is True
    for step in range(1, 6):
        world.tick(T0 + step * HOUR)
    assert hits("job") == 1

    # The documented resume rule: missed occurrences fire once, then the schedule resumes.
    task("job").resume()
    world.tick(T0 + 6 * HOUR)
    world.tick(T0 + 6 * HOUR + MINUTE)
    assert hits("job") == 2
    assert task("job").next_run_at == T0 + 6 * HOUR + 30 * MINUTE


def test_a_removed_task_is_retired_never_fires_and_returns_with_its_history(world):
    world.settings({"job": record("job", "0 * * * *"), "other": record("other", "0 * * * *")})
    world.start(T0)
    world.tick(T0)
    assert hits("job") == 1

    world.settings({"other": record("other", "0 * * * *")})
    world.start(T0 + MINUTE)
    job = task("job")
    assert job.declared is False
    assert Run.objects.filter(task=job).count() == 1
    for step in range(1, 4):
        world.tick(T0 + step * HOUR)
    assert hits("job") == 1
    assert hits("other") == 4

    # An old process that still declares it must not run it either.
    world.settings({"job": record("job", "0 * * * *"), "other": record("other", "0 * * * *")})
    from django_posixcron.scheduler import Scheduler

    old = Scheduler(grace=5)
    world.schedulers.append(old)
    old.tick(T0 + 4 * HOUR)
    assert old.wait_idle(timeout=15)
    assert hits("job") == 1

    # Declared again: same row, history kept, cursor from now, no burst of missed runs.
    world.start(T0 + 5 * HOUR + 10 * MINUTE)
    back = task("job")
    assert back.pk == job.pk
    assert back.declared is True
    assert back.next_run_at == T0 + 6 * HOUR
    assert Run.objects.filter(task=back).count() == 1
    world.tick(T0 + 5 * HOUR + 10 * MINUTE)
    assert hits("job") == 1
    world.tick(T0 + 6 * HOUR)
    assert hits("job") == 2


def test_runscheduler_check_reports_drift_and_changes_nothing(world, capsys):
    world.settings({"job": record("job", "0 * * * *")})
    with pytest.raises(CommandError) as excinfo:
        call_command("runscheduler", "--check")
    assert excinfo.value.returncode != 0
    assert not Task.objects.exists()
    assert "job" in capsys.readouterr().out

    world.start(T0)
    call_command("runscheduler", "--check")  # in sync: exit 0

    world.settings({})
    with pytest.raises(CommandError):
        call_command("runscheduler", "--check")
    assert task("job").declared is True


def test_a_restored_task_starts_a_new_failure_episode(world):
    failing = {"schedule": "0 * * * *", "callable": "tests.testapp.jobs.fail", "retry_delay": 60}
    keep = {"keep": record("keep", "0 3 * * *")}
    sent = []

    def on_failing(sender, task, failures, paused, **kwargs):
        sent.append((task.name, failures, paused))

    task_failing.connect(on_failing)
    try:
        world.settings({"flaky": failing, **keep}, FAILING_AFTER=2)
        world.start(T0 - MINUTE)
        world.tick(T0)
        world.tick(task("flaky").due_at)  # the retry fails: the second in a row
        assert sent == [("flaky", 2, False)]

        world.settings(keep, FAILING_AFTER=2)
        world.start(T0 + 10 * MINUTE)  # retired
        world.settings({"flaky": failing, **keep}, FAILING_AFTER=2)
        world.start(T0 + 5 * 24 * HOUR - MINUTE)  # restored five days later
        restored = task("flaky")
        assert (restored.consecutive_failures, restored.failing_signalled) == (0, False)
        world.tick(restored.due_at)
        assert task("flaky").consecutive_failures == 1
        world.tick(task("flaky").due_at)
        assert sent == [("flaky", 2, False), ("flaky", 2, False)]
    finally:
        task_failing.disconnect(on_failing)
