"""PostgreSQL restarted under running schedulers: they recover, nothing runs twice.

Restarting the server disturbs everyone using it, so this test runs only where
POSIXCRON_ALLOW_DB_RESTART=1 says the server is ours to restart (CI sets it).
"""

from __future__ import annotations

import datetime as dt
import functools
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from django.db import OperationalError, connection
from django.db.models import Count

from django_posixcron.models import Run, RunStatus, Task
from django_posixcron.scheduling.rules import BACKOFF_MAX
from tests.harness.processes import Child, Schedulers, only_on, record_task, task, utcnow
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]

TASKS = 20


def cluster() -> tuple[str, str]:
    """Return the (version, name) of the local PostgreSQL cluster pg_ctlcluster manages."""
    versions = sorted(p.name for p in Path("/etc/postgresql").glob("*") if p.is_dir())
    if not versions:
        pytest.skip("no local PostgreSQL cluster under /etc/postgresql to restart")
    return versions[-1], os.environ.get("POSIXCRON_PG_CLUSTER", "main")


def pg_ctl(action: str) -> None:
    version, name = cluster()
    subprocess.run(
        ["pg_ctlcluster", "--skip-systemctl-redirect", version, name, action],
        check=True,
        capture_output=True,
        timeout=60,
    )


def database_answers() -> bool:
    try:
        connection.close()
        connection.ensure_connection()
    except OperationalError:
        return False
    return True


def noticed_outage(child: Child) -> bool:
    return "database unavailable" in child.output()


def request_all(names: list[str], instant: dt.datetime) -> None:
    Task.objects.filter(name__in=names).update(run_requested_at=instant, due_at=instant)


def test_schedulers_survive_a_postgresql_restart_without_duplicates(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    only_on("postgresql")
    if os.environ.get("POSIXCRON_ALLOW_DB_RESTART") != "1":
        pytest.skip("restarts the shared PostgreSQL server; set POSIXCRON_ALLOW_DB_RESTART=1")
    if shutil.which("pg_ctlcluster") is None:
        pytest.skip("pg_ctlcluster is not installed here")

    names = [f"task-{i:02d}" for i in range(TASKS)]
    release, returned = tmp_path / "release", tmp_path / "returned"
    # A run that starts before the outage and ends during it, touching no database on the
    # way out: its outcome must be written once the database is back, not turned into `lost`.
    spanning = task(
        "tests.testapp.jobs.wait_for_file",
        kwargs={
            "path": str(release),
            "task_name": "spanning",
            "record_end": False,
            "done_path": str(returned),
        },
    )
    schedulers.configure(
        {**{name: record_task(name) for name in names}, "spanning": spanning}, CONCURRENCY=8
    )
    schedulers.start_live(2)
    Task.objects.get(name="spanning").request_run()
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="spanning").exists(),
        what="the run spanning the outage to start",
    )

    before = utcnow().replace(microsecond=0)
    request_all(names, before)
    schedulers.wait_for(
        lambda: Run.objects.filter(task__name__in=names, status="succeeded").count() == TASKS,
        what="the runs before the restart",
    )

    connection.close()
    pg_ctl("stop")
    try:
        # Both schedulers are now failing and backing off; give them a few attempts.
        for child in schedulers.children:
            schedulers.wait_for(
                functools.partial(noticed_outage, child),
                what=f"{child.label} to notice the outage",
            )
        release.touch()
        schedulers.wait_for(returned.exists, what="the spanning run to return")
    finally:
        pg_ctl("start")
    schedulers.wait_for(database_answers, what="PostgreSQL to accept connections again")

    after = utcnow().replace(microsecond=0) + dt.timedelta(seconds=1)
    request_all(names, after)
    schedulers.wait_for(
        lambda: Run.objects.filter(task__name__in=names, status="succeeded").count() == 2 * TASKS,
        timeout=60,
        what="the runs after the restart",
    )

    assert all(child.alive() for child in schedulers.children), schedulers.outputs()
    for child in schedulers.children:
        # The other scheduler may have run everything while this one still sleeps out its
        # back-off (up to BACKOFF_MAX): wait for its own recovery line, not just the rows.
        schedulers.wait_for(
            functools.partial(reconnected, child),
            timeout=BACKOFF_MAX + 20,
            what=f"{child.label} to reconnect",
        )
    schedulers.wait_for(
        lambda: Run.objects.filter(task__name="spanning", status=RunStatus.SUCCEEDED).exists(),
        what="the outcome of the run that ended during the outage",
    )
    assert Run.objects.filter(task__name="spanning").count() == 1
    ordinary = Run.objects.filter(task__name__in=names)
    assert dict(ordinary.values_list("task__name").annotate(n=Count("id"))) == dict.fromkeys(
        names, 2
    )
    hits = Hit.objects.filter(task_name__in=names).values_list("task_name").annotate(n=Count("id"))
    assert dict(hits) == dict.fromkeys(names, 2)
    assert set(ordinary.values_list("scheduled_for", flat=True)) == {before, after}


def reconnected(child: Child) -> bool:
    return "database reachable again" in child.output()
