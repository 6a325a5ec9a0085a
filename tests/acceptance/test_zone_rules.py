"""A zone's rules changing under a deployment: tzdata upgraded, or hosts with different tzdata.

Countries move or abolish DST at a few weeks' notice (Kazakhstan 2024, Mexico 2022, Egypt
2016 at three days'), and the new rules reach a fleet by an OS or ``tzdata`` update at some
point between two occurrences. A task's cursor is a UTC instant computed under the rules of
the process that wrote it; here the same zone name reads from TZif files written by the test,
first with the old rules, then with the new ones.
"""

from __future__ import annotations

import datetime as dt
import os
import struct
import zoneinfo
from collections.abc import Iterator
from pathlib import Path

import pytest

from django_posixcron import timing
from django_posixcron.models import Task
from django_posixcron.reconcile import reconcile
from tests.harness.world import HOUR, MINUTE, T0, hits, record, runs, task

pytestmark = pytest.mark.django_db(transaction=True)

ZONE = "Posixcron/Changing"
DAY = dt.timedelta(days=1)


def tzif(hours: int) -> bytes:
    """Return a TZif (version 2) file of a zone at UTC+`hours` all year, with no transitions."""
    name = f"+{hours:02d}".encode("ascii") + b"\0"
    counts = struct.pack(">6l", 0, 0, 0, 0, 1, len(name))  # isut, isstd, leap, time, type, char
    header = b"TZif2" + bytes(15) + counts
    data = struct.pack(">lBB", hours * 3600, 0, 0) + name
    footer = f"\n<+{hours:02d}>-{hours}\n".encode("ascii")
    return header + data + header + data + footer


@pytest.fixture
def zone_rules(tmp_path: Path) -> Iterator[object]:
    """Return a function that makes ZONE read as UTC+hours in this process from then on."""
    system_path = zoneinfo.TZPATH

    def use(hours: int) -> None:
        directory = tmp_path / f"utc{hours:+d}"
        (directory / ZONE).parent.mkdir(parents=True, exist_ok=True)
        (directory / ZONE).write_bytes(tzif(hours))
        # Ahead of the host's zone files, which stay there for every other zone.
        zoneinfo.reset_tzpath([str(directory), *system_path])
        zoneinfo.ZoneInfo.clear_cache()
        timing.zone.cache_clear()

    yield use
    zoneinfo.reset_tzpath()
    zoneinfo.ZoneInfo.clear_cache()
    timing.zone.cache_clear()


def test_a_restart_after_the_zone_loses_an_hour_fires_the_occurrence_on_time(world, zone_rules):
    """Old rules UTC+2, new rules UTC+1: 13:00 moves from 11:00 UTC to 12:00 UTC.

    The scheduler restarts with the new zone data before the occurrence: reconciling moves the
    cursor stored under the old rules to the occurrence's instant under the new ones, and it
    fires there, once.
    """
    zone_rules(2)
    world.settings({"daily": record("daily", "0 13 * * *", timezone=ZONE)})
    world.start(T0)  # 10:00 UTC, 12:00 in the zone
    assert task("daily").next_run_at == T0 + HOUR

    zone_rules(1)  # tzdata upgraded; the scheduler restarts with the same settings
    world.start(T0 + 30 * MINUTE)
    assert task("daily").next_run_at == T0 + 2 * HOUR
    world.tick(T0 + HOUR)
    assert runs("daily") == []

    world.tick(T0 + 2 * HOUR)
    assert runs("daily") == [("cron", "succeeded", T0 + 2 * HOUR)]
    assert task("daily").next_run_at == T0 + 2 * HOUR + DAY
    world.tick(T0 + 2 * HOUR + DAY)
    assert hits("daily") == 2


def test_a_restart_after_the_zone_gains_an_hour_fires_the_occurrence_on_time(world, zone_rules):
    """Old rules UTC+1, new rules UTC+2: the old cursor (12:00 UTC) reads 14:00 by the new
    rules; reconciling moves it to 13:00 (11:00 UTC), an hour earlier, and it fires there."""
    zone_rules(1)
    world.settings({"daily": record("daily", "0 13 * * *", timezone=ZONE)})
    world.start(T0)
    assert task("daily").next_run_at == T0 + 2 * HOUR

    zone_rules(2)
    world.start(T0 + 30 * MINUTE)
    assert task("daily").next_run_at == T0 + HOUR
    world.tick(T0 + HOUR)
    world.tick(T0 + 2 * HOUR)
    assert runs("daily") == [("cron", "succeeded", T0 + HOUR)]
    assert task("daily").next_run_at == T0 + HOUR + DAY


def test_a_restart_after_the_new_instant_has_passed_fires_the_occurrence_late_once(
    world, zone_rules
):
    """The zone gains an hour and the scheduler restarts between the occurrence's new instant
    (11:00 UTC) and its old one (12:00 UTC): the occurrence has not run, so it fires at once,
    late, and the schedule resumes tomorrow."""
    zone_rules(1)
    world.settings({"daily": record("daily", "0 13 * * *", timezone=ZONE)})
    world.start(T0)

    zone_rules(2)
    world.start(T0 + 90 * MINUTE)
    assert task("daily").next_run_at == T0 + HOUR
    world.tick(T0 + 90 * MINUTE)
    world.tick(T0 + 2 * HOUR)
    assert runs("daily") == [("cron", "succeeded", T0 + HOUR)]
    assert task("daily").next_run_at == T0 + HOUR + DAY


def test_a_process_running_since_before_the_update_fires_the_old_cursor_once(world, zone_rules):
    """A cursor stored under the old rules and claimed by a process with the new ones, which
    did not reconcile it (it was running already: a fleet's other host): it fires at the
    stored instant, and the occurrence it stands for does not fire again at its new one."""
    zone_rules(2)
    world.settings({"daily": record("daily", "0 13 * * *", timezone=ZONE)})
    world.start(T0)
    assert task("daily").next_run_at == T0 + HOUR

    zone_rules(1)
    world.start(T0 + 30 * MINUTE, reconciling=False)
    world.tick(T0 + HOUR)
    assert runs("daily") == [("cron", "succeeded", T0 + HOUR)]

    world.tick(T0 + 2 * HOUR)  # 13:00 under the new rules: the occurrence already ran
    assert hits("daily") == 1
    assert task("daily").next_run_at == T0 + 2 * HOUR + DAY
    world.tick(T0 + 2 * HOUR + DAY)
    assert hits("daily") == 2


def test_hosts_with_different_tzdata_fire_each_occurrence_once(world, zone_rules):
    """A fleet whose hosts read the zone as UTC+2 (old tzdata) and UTC+1 (new), taking turns:
    each writes the cursor by its own rules, and the other fires it as the occurrence it is.

    The world's schedulers share this process's zone files, so the turns are sequential
    claims on one database, as two long-running hosts' would be (neither restarts).
    """
    world.settings({"daily": record("daily", "0 13 * * *", timezone=ZONE)})
    zone_rules(2)
    world.start(T0)
    world.tick(T0 + HOUR)  # day 1, 13:00 at UTC+2; the cursor: day 2, 11:00 UTC

    zone_rules(1)
    world.start(T0 + 2 * HOUR, reconciling=False)  # reads the same cursor
    world.tick(T0 + HOUR + DAY)  # day 2: fires the old host's cursor
    world.tick(T0 + 2 * HOUR + DAY)  # day 2, 13:00 at UTC+1: already served

    zone_rules(2)
    world.start(T0 + 3 * HOUR + DAY, reconciling=False)
    world.tick(T0 + HOUR + 2 * DAY)  # day 3, 11:00 UTC: the cursor the new host wrote is 12:00
    world.tick(T0 + 2 * HOUR + 2 * DAY)  # fires day 3's occurrence, late by the new rules
    world.tick(T0 + HOUR + 3 * DAY)

    assert [scheduled for _, _, scheduled in runs("daily")] == [
        T0 + HOUR,
        T0 + HOUR + DAY,
        T0 + 2 * HOUR + 2 * DAY,
        T0 + HOUR + 3 * DAY,
    ]
    assert hits("daily") == 4


def test_hosts_restarting_with_different_tzdata_fire_each_occurrence_once(world, zone_rules):
    """The same fleet, each host restarting before its turn: each moves the cursor to its own
    rules' instant of the occurrence, which then fires once, on time by the host that fires it.
    """
    world.settings({"daily": record("daily", "0 13 * * *", timezone=ZONE)})
    zone_rules(2)
    world.start(T0)
    world.tick(T0 + HOUR)  # day 1, 13:00 at UTC+2 (11:00 UTC)

    zone_rules(1)
    world.start(T0 + 2 * HOUR)  # moves day 2's cursor from 11:00 to 12:00 UTC
    world.tick(T0 + HOUR + DAY)
    world.tick(T0 + 2 * HOUR + DAY)

    zone_rules(2)
    world.start(T0 + 3 * HOUR + DAY)  # and day 3's back from 12:00 to 11:00 UTC
    world.tick(T0 + HOUR + 2 * DAY)
    world.tick(T0 + 2 * HOUR + 2 * DAY)

    assert [scheduled for _, _, scheduled in runs("daily")] == [
        T0 + HOUR,
        T0 + 2 * HOUR + DAY,
        T0 + HOUR + 2 * DAY,
    ]
    assert hits("daily") == 3


def test_check_reports_a_cursor_the_new_rules_would_move(world, zone_rules):
    """`runscheduler --check` (a plan against settings alone) shows the move before a restart
    makes it, and a restart logs it as an update of the task."""
    zone_rules(2)
    world.settings({"daily": record("daily", "0 13 * * *", timezone=ZONE)})
    world.start(T0)

    zone_rules(1)
    pending = reconcile(now=T0 + 30 * MINUTE, check_only=True)
    assert [change.task.name for change in pending.update] == ["daily"]
    line = pending.update[0].line_for(pending=True)
    assert "next run 2086-01-07T12:00:00+01:00 -> 2086-01-07T13:00:00+01:00" in line
    assert f"the rules of {ZONE} on this host" in line
    assert task("daily").next_run_at == T0 + HOUR  # a plan writes nothing

    done = reconcile(now=T0 + 30 * MINUTE)
    assert done.counts()["updated"] == 1
    assert task("daily").next_run_at == T0 + 2 * HOUR
    assert reconcile(now=T0 + 30 * MINUTE, check_only=True).is_empty


def test_a_restart_moves_every_task_of_the_zone_and_only_those(world, zone_rules):
    """Tasks sharing a schedule share a cursor: each one moves, tasks of other zones and
    tasks whose cursor is still an occurrence (hourly: whole-hour offsets keep minute 0)
    stay, and a row whose schedule was edited by hand is rewritten from settings as before."""
    zone_rules(2)
    daily = {f"daily-{i}": record(f"daily-{i}", "0 13 * * *", timezone=ZONE) for i in range(3)}
    world.settings(
        {
            **daily,
            "evening": record("evening", "30 19 * * *", timezone=ZONE),
            "hourly": record("hourly", "0 * * * *", timezone=ZONE),
            "utc": record("utc", "0 13 * * *", timezone="UTC"),
            "edited": record("edited", "0 13 * * *", timezone=ZONE),
        }
    )
    world.start(T0)
    before = {t.name: t.next_run_at for t in Task.objects.all()}
    Task.objects.filter(name="edited").update(schedule="61 * * * *")

    zone_rules(1)
    done = reconcile(now=T0 + 30 * MINUTE)

    after = {t.name: t.next_run_at for t in Task.objects.all()}
    moved = {name for name in after if after[name] != before[name]}
    assert moved == {*daily, "evening", "edited"}
    assert {after[name] for name in daily} == {T0 + 2 * HOUR}
    evening = before["evening"]
    assert evening is not None
    assert after["evening"] == evening + HOUR
    assert after["edited"] == T0 + 2 * HOUR
    assert Task.objects.get(name="edited").schedule == "0 13 * * *"
    assert done.counts()["updated"] == 5
    assert reconcile(now=T0 + 30 * MINUTE).is_empty


@pytest.mark.processes
def test_runscheduler_with_updated_zone_data_moves_the_cursor(schedulers, tmp_path, monkeypatch):
    """Real processes, each reading the zone from PYTHONTZPATH: one with the old zone data
    stores the cursor; with the new data, `--check` reports the move and exits 1, and the next
    start makes it and logs it."""
    system_path = [p for p in zoneinfo.TZPATH if Path(p).is_dir()]
    schedulers.configure({"new-year": record("new-year", "0 13 1 1 *", timezone=ZONE)})

    def zone_data(hours: int) -> None:
        directory = tmp_path / f"utc{hours:+d}"
        (directory / ZONE).parent.mkdir(parents=True, exist_ok=True)
        (directory / ZONE).write_bytes(tzif(hours))
        monkeypatch.setenv("PYTHONTZPATH", os.pathsep.join([str(directory), *system_path]))

    zone_data(2)
    first = schedulers.run("--once")
    assert first.returncode == 0, first.stdout + first.stderr
    stored = Task.objects.get(name="new-year").next_run_at
    assert stored is not None
    assert (stored.month, stored.day, stored.hour, stored.minute) == (1, 1, 11, 0)

    zone_data(1)
    check = schedulers.run("--check")
    assert check.returncode == 1, check.stdout + check.stderr
    assert "changed task 'new-year': next run " in check.stdout
    assert f"the rules of {ZONE} on this host" in check.stdout
    assert Task.objects.get(name="new-year").next_run_at == stored

    second = schedulers.run("--once")
    assert second.returncode == 0, second.stdout + second.stderr
    assert "task_updated" in second.stdout + second.stderr
    assert Task.objects.get(name="new-year").next_run_at == stored + HOUR
    assert not runs("new-year")


def test_a_restart_moves_the_cursor_to_the_nearest_occurrence_not_an_earlier_one(world, zone_rules):
    """Twice a day, 09:00 and 13:00; the zone gains an hour after 09:00 has run (08:00 UTC).
    The cursor (13:00 old, 12:00 UTC) reads 14:00 by the new rules: it stands for 13:00
    (11:00 UTC), the nearest occurrence, not for 09:00 (07:00 UTC), the first of the day,
    which would fire 09:00 a second time at start-up."""
    zone_rules(1)
    world.settings({"twice": record("twice", "0 9,13 * * *", timezone=ZONE)})
    world.start(T0 - 3 * HOUR)  # 07:00 UTC, 08:00 in the zone
    world.tick(T0 - 2 * HOUR)  # 09:00 in the zone
    assert hits("twice") == 1
    assert task("twice").next_run_at == T0 + 2 * HOUR

    zone_rules(2)
    world.start(T0)
    assert task("twice").next_run_at == T0 + HOUR
    world.tick(T0)
    assert hits("twice") == 1
    world.tick(T0 + HOUR)
    assert runs("twice")[-1] == ("cron", "succeeded", T0 + HOUR)
    assert hits("twice") == 2
