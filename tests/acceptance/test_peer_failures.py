"""Known failures of other schedulers, tried against this one (docs/comparison.rst lists them).

Each test states, in the user's terms, what a peer's issue tracker reports, and drives the
same scenario through settings, reconciliation and ticks at explicit instants.
"""

from __future__ import annotations

import datetime as dt
import threading

import pytest

from django_posixcron.models import Run, RunStatus
from django_posixcron.scheduler import Scheduler
from tests.harness.world import HOUR, MINUTE, T0, hits, record, runs, task
from tests.testapp.jobs import GATES

pytestmark = pytest.mark.django_db(transaction=True)

SECOND = dt.timedelta(seconds=1)
DAY = dt.timedelta(days=1)


def test_a_change_to_the_schedules_fires_no_occurrence_again(world):
    """celery/django-celery-beat#558 (and celery/celery#2531, django-celery-beat#683): after
    "Schedule changed", beat sent again tasks that had already run."""
    world.settings(
        {
            "every-minute": record("every-minute", "* * * * *"),
            "hourly": record("hourly", "0 * * * *"),
        }
    )
    world.start(T0 + 10 * SECOND)
    world.tick(T0 + 10 * SECOND)
    assert runs("every-minute") == runs("hourly") == [("cron", "succeeded", T0)]

    # In the same minute a deploy changes one schedule to another that also matches 10:00
    # (its cursor restarts from now, in a matching minute), and every process restarts.
    world.settings(
        {
            "every-minute": record("every-minute", "* * * * *"),
            "hourly": record("hourly", "0,30 * * * *", description="twice an hour"),
        }
    )
    world.start(T0 + 40 * SECOND)
    assert task("hourly").next_run_at == T0
    world.tick(T0 + 40 * SECOND)
    # Then someone pauses and resumes it in the admin.
    task("hourly").pause()
    task("hourly").resume()
    world.tick(T0 + 50 * SECOND)

    assert runs("every-minute") == runs("hourly") == [("cron", "succeeded", T0)]
    assert (hits("every-minute"), hits("hourly")) == (1, 1)
    assert task("hourly").next_run_at == T0 + 30 * MINUTE

    world.tick(T0 + MINUTE)
    assert [r[2] for r in runs("every-minute")] == [T0, T0 + MINUTE]
    assert hits("hourly") == 1
    world.tick(T0 + 30 * MINUTE)
    assert [r[2] for r in runs("hourly")] == [T0, T0 + 30 * MINUTE]


def test_a_daily_run_longer_than_a_day_runs_once_beside_another_scheduler(world):
    """Koed00/django-q#307: a daily task that ran for hours was started 5 to 20 times a day
    on two clusters; Tivix/django-cron#133 and #99: the same job ran in parallel."""
    GATES["report"] = threading.Event()
    world.settings(
        {"report": record("report", "0 10 * * *", callable="tests.testapp.jobs.wait_for_gate")}
    )
    first = world.start(T0)
    second = Scheduler(grace=5)
    world.schedulers.append(second)

    # Both processes tick every ten minutes for 26 hours while the 10:00 run goes on.
    now = T0
    while now <= T0 + DAY + 2 * HOUR:
        first.tick(now)
        second.tick(now)
        now += 10 * MINUTE

    assert runs("report") == [("cron", "running", T0), ("cron", "skipped", T0 + DAY)]
    assert hits("report") == 1
    assert not Run.objects.filter(status=RunStatus.LOST).exists()

    GATES["report"].set()
    assert first.wait_idle(timeout=15)
    assert second.wait_idle(timeout=15)
    assert [r[1] for r in runs("report")] == ["succeeded", "skipped"]
    assert task("report").retry_at is None
    second.tick(T0 + 2 * DAY)
    assert second.wait_idle(timeout=15)
    assert [r[1:] for r in runs("report")][-1] == ("succeeded", T0 + 2 * DAY)
    assert hits("report") == 2


def test_late_ticks_fire_each_occurrence_they_reach_once(world):
    """procrastinate-org/procrastinate#276: a periodic deferrer that woke up late skipped an
    occurrence."""
    world.settings({"minutely": record("minutely", "* * * * *")})
    world.start(T0)
    # Each tick comes late, from 1 to 59 seconds into its minute.
    for minute, late in enumerate([1, 59, 30, 45, 2]):
        world.tick(T0 + minute * MINUTE + late * SECOND)
    assert [r[2] for r in runs("minutely")] == [T0 + m * MINUTE for m in range(5)]

    # A tick later than the next occurrence too fires once for both (no make-up: the
    # documented rule), then the schedule goes on.
    world.tick(T0 + 6 * MINUTE + 5 * SECOND)
    assert [r[2] for r in runs("minutely")][5:] == [T0 + 5 * MINUTE]
    assert task("minutely").next_run_at == T0 + 7 * MINUTE
    world.tick(T0 + 7 * MINUTE)
    assert hits("minutely") == 7
