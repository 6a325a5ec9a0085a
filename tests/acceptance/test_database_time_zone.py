"""DATABASES[alias]["TIME_ZONE"] on MySQL/MariaDB: Django stores datetimes there as that zone's
wall-clock times, so the database's clock must be read in that zone too, or every due time
is judged hours off. The server needs its time zone tables for it; without them the
scheduler refuses to start, saying so."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator

import pytest
from django.core.management import CommandError, call_command
from django.db import connection, connections

from django_posixcron.db import database_now
from django_posixcron.models import Run, SchedulerProcess
from tests.harness.world import record

pytestmark = pytest.mark.django_db(transaction=True)

ZONE = "Europe/Berlin"


def _forget_zone() -> None:
    connection.close()
    for cached in ("timezone", "timezone_name"):  # on the wrapper, not its thread's proxy
        connections["default"].__dict__.pop(cached, None)


@pytest.fixture
def stored_in_berlin() -> Iterator[bool]:
    """Store this connection's datetimes in Berlin time; say whether the server can convert."""
    if connection.vendor != "mysql":
        pytest.skip("a database TIME_ZONE changes what is stored only on MySQL/MariaDB")
    before = connection.settings_dict.get("TIME_ZONE")
    connection.settings_dict["TIME_ZONE"] = ZONE
    _forget_zone()
    with connection.cursor() as cursor:
        cursor.execute("SELECT CONVERT_TZ(UTC_TIMESTAMP(), '+00:00', %s)", [ZONE])
        (converted,) = cursor.fetchone()
    yield converted is not None
    connection.settings_dict["TIME_ZONE"] = before
    _forget_zone()


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
