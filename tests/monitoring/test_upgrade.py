"""Upgrading: each migration keeps what the database holds (counts, last figures, grants)."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import DatabaseError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("django_posixcron", "0002_deployments")]
AFTER = [("django_posixcron", "0003_observability")]


@contextlib.contextmanager
def migrated_back_to(target: list[tuple[str, str]]) -> Iterator[Any]:
    """Migrate the test database back to `target`; yield the models as they were there, to
    write the rows an older release left; then migrate forward to the latest migration."""
    executor = MigrationExecutor(connection)
    executor.migrate(target)
    try:
        yield executor.loader.project_state(target).apps
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())


def old_task(apps: Any, name: str) -> Any:
    """Create the task `name` with the models of an older release (`apps`)."""
    return apps.get_model("django_posixcron", "Task").objects.create(
        name=name,
        schedule="0 * * * *",
        callable_path="tests.testapp.jobs.noop",
        timezone="UTC",
        retry_delay=dt.timedelta(minutes=5),
        definition_hash="x",
    )


def test_the_migration_counts_the_existing_finished_runs():
    with migrated_back_to(BEFORE) as old:
        task = old_task(old, "old")
        Run = old.get_model("django_posixcron", "Run")
        start = dt.datetime(2086, 1, 1, tzinfo=dt.UTC)
        for i, (status, trigger) in enumerate(
            [("succeeded", "cron")] * 3
            + [("failed", "cron"), ("failed", "retry"), ("running", "cron")]
        ):
            Run.objects.create(
                task=task,
                status=status,
                trigger=trigger,
                scheduled_for=start + dt.timedelta(hours=i),
            )

    new = MigrationExecutor(connection).loader.project_state(AFTER).apps
    counts = {
        (c.task_name, c.trigger, c.status): c.count
        for c in new.get_model("django_posixcron", "RunCount").objects.all()
    }
    # A running run is counted when its outcome is written, not before.
    assert counts == {
        ("old", "cron", "succeeded"): 3,
        ("old", "cron", "failed"): 1,
        ("old", "retry", "failed"): 1,
    }


def test_a_scheduler_of_the_previous_release_can_still_write_rows():
    # The models as release 0001 knew them insert without the new columns, as an old
    # scheduler does while the new release's migration is already applied.
    old = MigrationExecutor(connection).loader.project_state(BEFORE).apps
    task = old_task(old, "old-code")
    old.get_model("django_posixcron", "Run").objects.create(
        task=task,
        status="running",
        trigger="cron",
        scheduled_for=dt.datetime(2086, 1, 1, tzinfo=dt.UTC),
    )

    from django_posixcron.models import Run, Task

    new_task = Task.objects.get(name="old-code")
    assert (new_task.consecutive_failures, new_task.failing_signalled) == (0, False)
    assert (new_task.retry_attempt, new_task.paused_reason) == (0, "")
    run = Run.objects.get(task=new_task)
    assert (run.attempt, run.occurrence) == (1, None)


def _run_table_indexes() -> dict[str, Any]:
    with connection.cursor() as cursor:
        return connection.introspection.get_constraints(cursor, "django_posixcron_run")


def _task_only_indexes() -> list[str]:
    return [
        name
        for name, info in _run_table_indexes().items()
        if info["index"]
        and not info["unique"]
        and info["columns"] == ["task_id"]
        and name != "posixcron_run_unfinished"  # partial: only runs not finished (0006)
    ]


def test_dropping_the_runs_task_index_drops_only_that_index_and_can_be_undone():
    # 0005: the index on run.task_id alone goes (two indexes lead with the task already),
    # without Django's AlterField, which drops and re-adds the foreign key (a lock on the
    # whole history; a table copy on MariaDB) or rebuilds the table (SQLite).
    before = [("django_posixcron", "0004_handoff")]
    after = [("django_posixcron", "0005_run_task_index")]
    executor = MigrationExecutor(connection)
    try:
        executor.migrate(before)
        if connection.vendor != "mysql":
            # MariaDB never had one: InnoDB's foreign key uses the unique constraint's index.
            assert len(_task_only_indexes()) == 1
        executor = MigrationExecutor(connection)
        with CaptureQueriesContext(connection) as queries:
            executor.migrate(after)
        schema_changes = [
            q["sql"]
            for q in queries.captured_queries
            if q["sql"].lstrip().upper().startswith(("CREATE", "ALTER", "DROP"))
        ]
        assert _task_only_indexes() == []
        if connection.vendor == "mysql":
            assert schema_changes == []
        else:
            assert len(schema_changes) == 1
            assert schema_changes[0].startswith("DROP INDEX")
        indexes = _run_table_indexes()
        assert indexes["posixcron_run_once_per_occurrence"]["columns"][0] == "task_id"
        assert indexes["posixcron_run_task_sched"]["columns"][0] == "task_id"
        # The foreign key is still there.
        assert any(
            info["foreign_key"] == ("django_posixcron_task", "id")
            for info in indexes.values()
            if info["columns"] == ["task_id"]
        )

        executor = MigrationExecutor(connection)
        executor.migrate(before)
        if connection.vendor != "mysql":
            assert len(_task_only_indexes()) == 1
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert _task_only_indexes() == []


def test_sqlmigrate_of_the_task_index_migration_leaves_the_unfinished_index_alone():
    # A DBA reviews `sqlmigrate` on a database already migrated (staging): 0005 reads the
    # indexes on task_id alone as the database reports them, and 0006's partial index is one
    # of them. Counted as the task index, 0005 showed it dropped, and its undo showed
    # nothing to create.
    assert "posixcron_run_unfinished" in _run_table_indexes() or connection.vendor == "mysql"
    forwards, backwards = StringIO(), StringIO()
    call_command("sqlmigrate", "django_posixcron", "0005", stdout=forwards)
    call_command("sqlmigrate", "django_posixcron", "0005", "--backwards", stdout=backwards)
    assert "posixcron_run_unfinished" not in forwards.getvalue()
    if connection.vendor == "mysql":
        assert "CREATE INDEX" not in backwards.getvalue()
    else:
        assert "CREATE INDEX" in backwards.getvalue(), backwards.getvalue()
        assert "posixcron_run_unfinished" not in backwards.getvalue()


def test_unfinished_runs_of_a_task_have_an_index_of_their_own_and_it_can_be_undone():
    # 0006: "does this task have an unfinished run?" is asked of every task a claim locks.
    # Answered through the status index, PostgreSQL walked every entry a burst had left for
    # runs that were running and had since finished (a bitmap scan never prunes them): 0.3 s
    # a claim after 80,000 runs. A partial index holds only unfinished runs.
    if connection.vendor == "mysql":
        # No partial indexes on MariaDB; nothing is created (a full index would be the one
        # 0005 dropped).
        assert "posixcron_run_unfinished" not in _run_table_indexes()
        return
    assert _unfinished_index() == ["task_id"]
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("django_posixcron", "0005_run_task_index")])
        assert _unfinished_index() is None
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert _unfinished_index() == ["task_id"]


def _unfinished_index() -> list[str] | None:
    index = _run_table_indexes().get("posixcron_run_unfinished")
    if index is None:
        return None
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "SELECT indexdef FROM pg_indexes WHERE indexname = 'posixcron_run_unfinished'"
            )
        else:
            cursor.execute("SELECT sql FROM sqlite_master WHERE name = 'posixcron_run_unfinished'")
        (definition,) = cursor.fetchone()
    # Partial: only the runs that are queued or running.
    assert "WHERE" in definition.upper(), definition
    assert "'queued'" in definition, definition
    assert "'running'" in definition, definition
    columns: list[str] = index["columns"]
    return columns


def test_an_interrupted_concurrent_build_is_built_again():
    # CREATE INDEX CONCURRENTLY interrupted (a deploy killed mid-migrate) leaves an invalid
    # index, which the planner never uses; migrating again must not keep it.
    if connection.vendor != "postgresql":
        pytest.skip("only PostgreSQL builds the index concurrently")
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("django_posixcron", "0005_run_task_index")])
        with connection.cursor() as cursor:
            cursor.execute(
                "CREATE INDEX posixcron_run_unfinished ON django_posixcron_run (task_id) "
                "WHERE status IN ('queued', 'running')"
            )
            try:
                with transaction.atomic():
                    cursor.execute(
                        "UPDATE pg_index SET indisvalid = false "
                        "WHERE indexrelid = 'posixcron_run_unfinished'::regclass"
                    )
            except DatabaseError:
                pytest.skip("marking an index invalid needs a superuser")
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT i.indisvalid FROM pg_index i "
            "WHERE i.indexrelid = 'posixcron_run_unfinished'::regclass"
        )
        assert cursor.fetchone() == (True,)
    assert _unfinished_index() == ["task_id"]


def test_each_tasks_last_success_is_filled_from_the_history():
    before, after = (
        [("django_posixcron", "0006_run_unfinished_index")],
        [("django_posixcron", "0007_task_last_success_at")],
    )
    start = dt.datetime(2086, 1, 1, tzinfo=dt.UTC)
    with migrated_back_to(before) as old:
        Run = old.get_model("django_posixcron", "Run")
        for name, outcomes in (
            ("mixed", ["succeeded", "succeeded", "failed", "running"]),
            ("failing", ["failed", "timed_out"]),
            ("new", []),
        ):
            task = old_task(old, name)
            for i, status in enumerate(outcomes):
                at = start + dt.timedelta(hours=i)
                Run.objects.create(
                    task=task,
                    status=status,
                    trigger="cron",
                    scheduled_for=at,
                    started_at=at,
                    finished_at=None if status == "running" else at + dt.timedelta(seconds=3),
                )

    new = MigrationExecutor(connection).loader.project_state(after).apps
    filled = dict(
        new.get_model("django_posixcron", "Task").objects.values_list("name", "last_success_at")
    )
    assert filled == {
        "mixed": start + dt.timedelta(hours=1, seconds=3),  # the later of the two successes
        "failing": None,
        "new": None,
    }


def test_each_tasks_latest_duration_and_fire_lag_are_filled_from_the_history():
    before, after = (
        [("django_posixcron", "0009_resume_permission")],
        [("django_posixcron", "0010_task_last_duration_and_fire_lag")],
    )
    start = dt.datetime(2086, 1, 1, tzinfo=dt.UTC)
    second = dt.timedelta(seconds=1)
    with migrated_back_to(before) as old:
        Run = old.get_model("django_posixcron", "Run")
        # (status, seconds late, seconds long) by scheduled hour; the latest finished run
        # with a duration counts, not a later skipped, lost or running one.
        for name, runs in (
            ("mixed", [("succeeded", 1, 3), ("failed", 2, 7), ("lost", 4, None)]),
            ("busy", [("succeeded", 1, 5), ("skipped", None, None), ("running", 3, None)]),
            ("new", []),
        ):
            task = old_task(old, name)
            for i, (status, late, long) in enumerate(runs):
                at = start + dt.timedelta(hours=i)
                Run.objects.create(
                    task=task,
                    status=status,
                    trigger="cron",
                    scheduled_for=at,
                    started_at=None if late is None else at + late * second,
                    duration=None if long is None else long * second,
                    finished_at=None if status == "running" else at + 10 * second,
                )

    new = MigrationExecutor(connection).loader.project_state(after).apps
    filled = {
        name: (duration, lag)
        for name, duration, lag in new.get_model("django_posixcron", "Task").objects.values_list(
            "name", "last_duration", "last_fire_lag"
        )
    }
    assert filled == {
        "mixed": (7 * second, 2 * second),
        "busy": (5 * second, 1 * second),
        "new": (None, None),
    }


def test_whoever_could_pause_keeps_resume_after_the_upgrade():
    from django.contrib.auth.models import Group, Permission, User

    before = [("django_posixcron", "0008_overdue_alert")]
    with migrated_back_to(before):
        # As a database upgraded from 0008 has it: pause_task (then "pause and resume"), no
        # resume_task yet.
        Permission.objects.filter(codename="resume_task").delete()
        pause = Permission.objects.get(codename="pause_task")
        pause.name = "Can pause and resume tasks"
        pause.save()
        on_call = Group.objects.create(name="On call")
        on_call.permissions.add(pause)
        Group.objects.create(name="Viewers")
        alice = User.objects.create_user("alice")
        alice.user_permissions.add(pause)
        User.objects.create_user("bob")

    resume = Permission.objects.get(
        codename="resume_task", content_type__app_label="django_posixcron"
    )
    assert resume.name == "Can resume tasks"
    assert Permission.objects.get(codename="pause_task").name == "Can pause tasks"
    assert [g.name for g in resume.group_set.all()] == ["On call"]
    assert [u.username for u in resume.user_set.all()] == ["alice"]
    assert User.objects.get(username="alice").has_perm("django_posixcron.resume_task")
    assert not User.objects.get(username="bob").has_perm("django_posixcron.resume_task")


def _status_index() -> list[str]:
    return list(_run_table_indexes()["posixcron_run_status_proc"]["columns"])


def test_mariadb_finds_a_tasks_unfinished_runs_by_status_and_task_and_it_can_be_undone():
    # 0011: MariaDB has no partial index of the unfinished runs; through (status, process)
    # the claim read every unfinished run of the table for each task it locked (1 s a claim
    # behind a backlog of 5,000 queued runs). Same name, the task second: the claim's index
    # hint holds on either side of the migration.
    widened = ["status", "task_id", "process_id"]
    if connection.vendor != "mysql":
        assert _status_index() == ["status", "process_id"]
        return
    assert _status_index() == widened
    executor = MigrationExecutor(connection)
    try:
        executor.migrate([("django_posixcron", "0010_task_last_duration_and_fire_lag")])
        assert _status_index() == ["status", "process_id"]
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())
    assert _status_index() == widened
