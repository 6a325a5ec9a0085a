"""DATABASE_ROUTERS and --database: every query of the app goes to the app's alias.

"Every query of the app, in the scheduler, the admin and the commands, goes to the alias the
project's DATABASE_ROUTERS choose for the app's models (`default` without routers);
`runscheduler --database ALIAS` and `schedulerstatus --database ALIAS` override it."
Here "default" is a database without this app's tables, so a query sent there fails.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from django.db import connection

from django_posixcron.models import Run, RunStatus, Task
from tests.harness.processes import Schedulers, record_task, task
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def empty_database(tmp_path: Path) -> str:
    """Name a database on the same server that has none of this app's tables."""
    return {
        "postgresql": "postgres",
        "mysql": "mysql",
    }.get(connection.vendor, str(tmp_path / "empty.sqlite3"))


@pytest.mark.parametrize("routed", [True, False], ids=["router", "--database"])
def test_the_scheduler_and_status_use_the_apps_alias(
    schedulers: Schedulers, tmp_path: Path, routed: bool
) -> None:
    """Item 4: the tick errored forever on PostgreSQL and outcomes failed on SQLite."""
    # The job's own queries follow the project's routers: without one, it must not query.
    job = record_task("routed") if routed else task("tests.testapp.jobs.noop")
    schedulers.configure(
        {"routed": job},
        extra={"EMPTY_DB_NAME": empty_database(tmp_path), "ROUTER": routed},
    )
    alias = [] if routed else ["--database", "cron"]
    # Reconcile, so the request below has its row; nothing is due yet.
    first = schedulers.run("--once", *alias)
    assert first.returncode == 0, first.stdout + first.stderr
    Task.objects.get(name="routed").request_run()

    result = schedulers.run("--once", *alias)
    assert result.returncode == 0, result.stdout + result.stderr
    run = Run.objects.get()
    assert run.status == RunStatus.SUCCEEDED, result.stderr
    assert Hit.objects.filter(task_name="routed").count() == (1 if routed else 0)
    assert "Ran 1 task(s)" in result.stdout

    status = schedulers.manage("schedulerstatus", "--json", *alias)
    assert status.returncode == 1, status.stderr  # no live scheduler: --once processes stop
    report = json.loads(status.stdout)
    assert report["problems"] == ["no live scheduler"]
    assert report["active"] == 1


def test_a_cron_task_advances_its_cursor_on_the_apps_alias(
    schedulers: Schedulers, tmp_path: Path
) -> None:
    """django-q2/django-q2#293: with the ORM broker on another alias, a schedule's next run
    was never written, and the task ran again at every pass."""
    schedulers.configure(
        {"minutely": record_task("minutely", "* * * * *")},
        extra={"EMPTY_DB_NAME": empty_database(tmp_path), "ROUTER": True},
    )
    # "* * * * *" matches the current minute: the first start fires it.
    first = schedulers.run("--once")
    assert first.returncode == 0, first.stdout + first.stderr
    (run,) = Run.objects.all()
    assert (run.trigger, run.status) == ("cron", RunStatus.SUCCEEDED)
    cursor = Task.objects.get(name="minutely").next_run_at
    assert cursor is not None
    assert cursor > run.scheduled_for

    second = schedulers.run("--once")
    assert second.returncode == 0, second.stdout + second.stderr
    # Only a minute the cursor had reached may fire now (the clock may have passed one).
    later = Run.objects.exclude(pk=run.pk)
    assert all(r.scheduled_for >= cursor for r in later), list(later.values("scheduled_for"))
    assert Hit.objects.filter(task_name="minutely").count() == Run.objects.count() <= 2
