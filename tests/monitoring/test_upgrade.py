"""Upgrading to the counters: posixcron_runs_total starts from the history already there."""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest
from django.db import DatabaseError, connection, transaction
from django.db.migrations.executor import MigrationExecutor
from django.test.utils import CaptureQueriesContext

pytestmark = pytest.mark.django_db(transaction=True)

BEFORE = [("django_posixcron", "0002_deployments")]
AFTER = [("django_posixcron", "0003_observability")]


def test_the_migration_counts_the_existing_finished_runs():
    executor = MigrationExecutor(connection)
    executor.migrate(BEFORE)
    try:
        old = executor.loader.project_state(BEFORE).apps
        task = old.get_model("django_posixcron", "Task").objects.create(
            name="old",
            schedule="0 * * * *",
            callable_path="tests.testapp.jobs.noop",
            timezone="UTC",
            retry_delay=dt.timedelta(minutes=5),
            definition_hash="x",
        )
        Run = old.get_model("django_posixcron", "Run")
        start = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
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
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())

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
    task = old.get_model("django_posixcron", "Task").objects.create(
        name="old-code",
        schedule="0 * * * *",
        callable_path="tests.testapp.jobs.noop",
        timezone="UTC",
        retry_delay=dt.timedelta(minutes=5),
        definition_hash="x",
    )
    old.get_model("django_posixcron", "Run").objects.create(
        task=task,
        status="running",
        trigger="cron",
        scheduled_for=dt.datetime(2030, 1, 1, tzinfo=dt.UTC),
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
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
        old = executor.loader.project_state(before).apps
        Task = old.get_model("django_posixcron", "Task")
        Run = old.get_model("django_posixcron", "Run")
        start = dt.datetime(2030, 1, 1, tzinfo=dt.UTC)
        for name, outcomes in (
            ("mixed", ["succeeded", "succeeded", "failed", "running"]),
            ("failing", ["failed", "timed_out"]),
            ("new", []),
        ):
            task = Task.objects.create(
                name=name,
                schedule="0 * * * *",
                callable_path="tests.testapp.jobs.noop",
                timezone="UTC",
                retry_delay=dt.timedelta(minutes=5),
                definition_hash="x",
            )
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
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())

    new = MigrationExecutor(connection).loader.project_state(after).apps
    filled = dict(
        new.get_model("django_posixcron", "Task").objects.values_list("name", "last_success_at")
    )
    assert filled == {
        "mixed": start + dt.timedelta(hours=1, seconds=3),  # the later of the two successes
        "failing": None,
        "new": None,
    }


def test_whoever_could_pause_keeps_resume_after_the_upgrade():
    from django.contrib.auth.models import Group, Permission, User

    before = [("django_posixcron", "0008_overdue_alert")]
    executor = MigrationExecutor(connection)
    executor.migrate(before)
    try:
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
    finally:
        executor = MigrationExecutor(connection)
        executor.loader.build_graph()
        executor.migrate(executor.loader.graph.leaf_nodes())

    resume = Permission.objects.get(
        codename="resume_task", content_type__app_label="django_posixcron"
    )
    assert resume.name == "Can resume tasks"
    assert Permission.objects.get(codename="pause_task").name == "Can pause tasks"
    assert [g.name for g in resume.group_set.all()] == ["On call"]
    assert [u.username for u in resume.user_set.all()] == ["alice"]
    assert User.objects.get(username="alice").has_perm("django_posixcron.resume_task")
    assert not User.objects.get(username="bob").has_perm("django_posixcron.resume_task")
