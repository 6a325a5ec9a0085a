"""DATABASES[alias]["TIME_ZONE"] on MySQL/MariaDB: Django stores datetimes there as that zone's
wall-clock times, so the database's clock must be read in that zone too, or every due time
is judged hours off. The server needs its time zone tables for it; without them the
scheduler refuses to start, saying so."""

from __future__ import annotations

import contextlib
import datetime as dt
import logging
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections

from django_posixcron.db import DatabaseNow, database_now, mysql_stored_zone
from django_posixcron.models import Run, SchedulerProcess
from tests.harness.world import record

pytestmark = pytest.mark.django_db(transaction=True)

ZONE = "Europe/Berlin"


def _forget_zone() -> None:
    connection.close()
    for cached in ("timezone", "timezone_name"):  # on the wrapper, not its thread's proxy
        connections["default"].__dict__.pop(cached, None)


@contextlib.contextmanager
def stored_in(zone: str) -> Iterator[bool]:
    """Store this connection's datetimes in `zone`; say whether the server can convert."""
    if connection.vendor != "mysql":
        pytest.skip("a database TIME_ZONE changes what is stored only on MySQL/MariaDB")
    before = connection.settings_dict.get("TIME_ZONE")
    connection.settings_dict["TIME_ZONE"] = zone
    _forget_zone()
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT CONVERT_TZ(UTC_TIMESTAMP(), '+00:00', %s)", [zone])
            (converted,) = cursor.fetchone()
        yield converted is not None
    finally:
        connection.settings_dict["TIME_ZONE"] = before
        _forget_zone()


@pytest.fixture
def stored_in_berlin() -> Iterator[bool]:
    with stored_in(ZONE) as convertible:
        yield convertible


def test_a_database_time_zone_is_honoured_or_refused_at_start_up(
    stored_in_berlin, tasks, make_scheduler, posixcron
):
    if not stored_in_berlin:
        posixcron({"due": record("due", "0 * * * *")})
        with pytest.raises(CommandError) as refused:
            call_command("runscheduler", "--once")
        assert "DATABASES['default']['TIME_ZONE'] is 'Europe/Berlin'" in str(refused.value)
        assert "time zone tables" in str(refused.value)
        return
    now = database_now("default")
    task = tasks("due", next_run_at=now - dt.timedelta(minutes=1))
    later = tasks("later", next_run_at=now + dt.timedelta(minutes=30))
    scheduler = make_scheduler()

    result = scheduler.tick()  # by the database's clock, as the loop ticks
    assert scheduler.wait_idle(10)

    assert Run.objects.filter(task=task).count() == 1
    assert not Run.objects.filter(task=later).exists()
    assert result.now is not None
    assert abs(result.now - now) < dt.timedelta(minutes=1)
    beat = SchedulerProcess.objects.get(pk=scheduler.process.pk).last_heartbeat_at
    assert abs(beat - database_now("default")) < dt.timedelta(minutes=1)


@pytest.mark.parametrize("zone", ["Etc/UTC", "GMT", "Zulu"])
def test_utc_under_another_name_is_read_as_utc(zone, tasks, make_scheduler, posixcron):
    # Such a zone needs no conversion, so no time zone tables: a server without them (the
    # default install) was refused at start-up for a zone that is UTC.
    with stored_in(zone):
        assert mysql_stored_zone(connection) is None
        sql, _ = DatabaseNow().as_mysql(None, connection)
        assert "CONVERT_TZ" not in sql
        posixcron({"due": record("due", "0 * * * *")})
        call_command("runscheduler", "--once")  # not refused
        now = database_now("default")
        task = tasks("now-due", next_run_at=now - dt.timedelta(minutes=1))
        scheduler = make_scheduler()
        scheduler.tick()
        assert scheduler.wait_idle(10)
        assert Run.objects.filter(task=task).count() == 1


@pytest.mark.parametrize(("zone", "warned"), [(ZONE, True), ("Asia/Kolkata", False)])
def test_a_database_zone_with_summer_time_is_warned_of_at_start_up(zone, warned, caplog, posixcron):
    # Its wall-clock times repeat in the hour the clocks go back: Django reads a stored
    # time of that hour as the first of the two instants, and occurrences can be missed.
    caplog.set_level(logging.WARNING, logger="django_posixcron")
    with stored_in(zone) as convertible:
        if not convertible:
            pytest.skip("the server has no time zone tables")
        posixcron({"due": record("due", "0 * * * *")})
        call_command("runscheduler", "--once")
    lines = [r.getMessage() for r in caplog.records if "summer time" in r.getMessage()]
    if not warned:
        assert lines == []
        return
    assert len(lines) == 1
    assert f"DATABASES['default']['TIME_ZONE'] is '{zone}'" in lines[0]
    assert "Route django_posixcron to a database alias without TIME_ZONE" in lines[0]
