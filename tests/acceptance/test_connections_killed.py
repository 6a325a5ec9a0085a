"""The server ends every connection of a running scheduler: it goes on, and runs nothing twice.

What a failover, a proxy restart, an idle timeout or an administrator's kill does to a long-
lived process. Other schedulers kept the dead connection and failed at every pass until
restarted: "connection already closed" (celery/django-celery-beat#158,
jcass77/django-apscheduler#140), "MySQL server has gone away" (jcass77/django-apscheduler#128,
#175). Unlike test_database_restart.py, the server stays up, so this runs wherever the suite
does.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import functools
import signal

import pytest
from django.db import DatabaseError, connection

from django_posixcron.db import database_now
from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task
from tests.harness.processes import Schedulers, only_on, record_task
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True), pytest.mark.long]


def other_sessions() -> list[int]:
    """Return the server's ids of every session on the test database but the test's own."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT pid FROM pg_stat_activity "
                "WHERE datname = current_database() AND pid <> pg_backend_pid()"
            )
        else:
            cursor.execute(
                "SELECT id FROM information_schema.processlist "
                "WHERE db = DATABASE() AND id <> CONNECTION_ID()"
            )
        return [row[0] for row in cursor.fetchall()]


def end_sessions(ids: list[int]) -> None:
    with connection.cursor() as cursor:
        for session in ids:
            if connection.vendor == "postgresql":
                cursor.execute("SELECT pg_terminate_backend(%s)", [session])
            else:
                # One that ended by itself meanwhile is an "Unknown thread id".
                with contextlib.suppress(DatabaseError):
                    cursor.execute(f"KILL {int(session)}")


def beat_since(pid: int, instant: dt.datetime) -> bool:
    return SchedulerProcess.objects.filter(pid=pid, last_heartbeat_at__gt=instant).exists()


@pytest.mark.parametrize("conn_max_age", [0, None], ids=["closed-between-ticks", "persistent"])
def test_a_scheduler_whose_connections_the_server_ends_goes_on(
    schedulers: Schedulers, conn_max_age: int | None
) -> None:
    only_on("postgresql", "mysql", why="a database server that can end a client's sessions")
    schedulers.configure(
        {"job": record_task("job")}, extra={"DB_SETTINGS": {"CONN_MAX_AGE": conn_max_age}}
    )
    (child,) = schedulers.start_live(1)
    job = Task.objects.get(name="job")

    def run_now_and_wait(count: int) -> None:
        job.request_run()
        schedulers.wait_for(
            lambda: Run.objects.filter(status=RunStatus.SUCCEEDED).count() == count,
            what=f"manual run {count} to succeed",
        )

    # A first run, so the loop, the heartbeat and a run's thread have all used a connection.
    run_now_and_wait(1)
    for attempt in (2, 3):
        schedulers.wait_for(other_sessions, what="the scheduler's sessions on the server")
        ended_at = database_now("default")
        end_sessions(other_sessions())
        # The heartbeat writes again (no peer may judge the process dead), and runs go on.
        schedulers.wait_for(
            functools.partial(beat_since, child.pid, ended_at),
            what="a heartbeat after the sessions were ended",
        )
        run_now_and_wait(attempt)

    assert Hit.objects.filter(task_name="job").count() == 3
    assert not Run.objects.exclude(status=RunStatus.SUCCEEDED).exists()
    status = schedulers.manage("schedulerstatus")
    assert status.returncode == 0, status.stdout + status.stderr
    schedulers.expect_exit(child)
    child.signal(signal.SIGTERM)
    assert child.wait() == 0, schedulers.outputs()
