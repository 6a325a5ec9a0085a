"""DST end to end: reconcile and tick minute by minute through Europe/Berlin's transitions."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from django_posixcron.models import Run
from tests.harness.world import MINUTE, record

pytestmark = pytest.mark.django_db(transaction=True)

UTC = dt.UTC


def utc(year: int, month: int, day: int, hour: int = 0, minute: int = 0) -> dt.datetime:
    return dt.datetime(year, month, day, hour, minute, tzinfo=UTC)


def drive(world: Any, start: dt.datetime, end: dt.datetime) -> list[tuple[str, str, str]]:
    """Tick every minute from start to end; return (task, scheduled_for, tick) of each start."""
    fired = []
    now = start
    while now <= end:
        result = world.tick(now, wait=False)
        for run in result.started:
            fired.append((run.task.name, run.scheduled_for.isoformat(), now.isoformat()))
        if result.started:
            assert world.scheduler.wait_idle(timeout=15)
        now += MINUTE
    return fired


def berlin(name: str, schedule: str) -> dict[str, Any]:
    return record(name, schedule, timezone="Europe/Berlin")


def minutes(name: str, hour: str, rng: range) -> list[tuple[str, str, str]]:
    return [(name, f"{hour}:{m:02d}:00+00:00", f"{hour}:{m:02d}:00+00:00") for m in rng]


def test_spring_forward_fixed_time_fires_once_after_the_gap(world):
    world.settings(
        {
            "half-two": berlin("half-two", "30 2 * * *"),
            "minutes-of-two": berlin("minutes-of-two", "* 2 * * *"),
        }
    )
    # 2026-03-29 in Berlin: 02:00 CET (01:00 UTC) jumps to 03:00 CEST.
    world.start(utc(2026, 3, 28, 23, 40))
    first = drive(world, utc(2026, 3, 28, 23, 40), utc(2026, 3, 29, 1, 40))
    # 02:30 does not exist that day: one firing at 03:00+02:00, the first instant after the
    # gap; "* 2 * * *" has no minute that day at all.
    assert first == [("half-two", "2026-03-29T01:00:00+00:00", "2026-03-29T01:00:00+00:00")]

    second = drive(world, utc(2026, 3, 29, 23, 50), utc(2026, 3, 30, 1, 10))
    assert sorted(second) == sorted(
        [
            *minutes("minutes-of-two", "2026-03-30T00", range(60)),
            ("half-two", "2026-03-30T00:30:00+00:00", "2026-03-30T00:30:00+00:00"),
        ]
    )
    assert Run.objects.filter(task__name="half-two", status="succeeded").count() == 2
    assert Run.objects.filter(task__name="minutes-of-two", status="succeeded").count() == 60


def test_fall_back_fixed_time_fires_once_and_hourly_fires_twice(world):
    world.settings(
        {
            "half-two": berlin("half-two", "30 2 * * *"),
            "hourly": berlin("hourly", "0 * * * *"),
        }
    )
    # 2026-10-25 in Berlin: 03:00 CEST (01:00 UTC) goes back to 02:00 CET.
    world.start(utc(2026, 10, 24, 21, 50))
    fired = drive(world, utc(2026, 10, 24, 21, 50), utc(2026, 10, 25, 2, 10))
    # 02:30 happens twice; it fires on the first pass only (02:30+02:00). "0 * * * *"
    # follows elapsed time: 02:00+02:00 (00:00 UTC) and again 02:00+01:00 (01:00 UTC).
    assert sorted(fired) == sorted(
        [
            ("half-two", "2026-10-25T00:30:00+00:00", "2026-10-25T00:30:00+00:00"),
            *[
                ("hourly", f"{day}T{h}:00:00+00:00", f"{day}T{h}:00:00+00:00")
                for day, h in [
                    ("2026-10-24", "22"),
                    ("2026-10-24", "23"),
                    ("2026-10-25", "00"),
                    ("2026-10-25", "01"),
                    ("2026-10-25", "02"),
                ]
            ],
        ]
    )
    later = drive(world, utc(2026, 10, 26, 1, 0), utc(2026, 10, 26, 1, 40))
    # The next day, 02:30 is 02:30+01:00. (hourly fires once for the gap, at 01:00.)
    assert ("half-two", "2026-10-26T01:30:00+00:00", "2026-10-26T01:30:00+00:00") in later
    assert [f for f in later if f[0] == "half-two"] == [
        ("half-two", "2026-10-26T01:30:00+00:00", "2026-10-26T01:30:00+00:00")
    ]
    assert Run.objects.filter(task__name="half-two").count() == 2
