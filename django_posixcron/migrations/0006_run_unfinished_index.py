"""An index of the unfinished runs by task, on PostgreSQL and SQLite.

"Does this task have an unfinished run?" is asked of every task a claim locks (overlap=skip
waits for queued and running runs). Answered through the (status, process) index, PostgreSQL
combined it with the task's index in a bitmap scan, which reads every entry the status index
still holds for runs that were running and have since finished, until vacuum removes them: a
burst of 80,000 runs made each claim take 0.3 s instead of 1 ms. A partial index holds only
the unfinished runs, a few entries per task.

On PostgreSQL it is built CONCURRENTLY (so this migration is not atomic): schedulers of the
previous release keep writing runs while it is built. MariaDB has no partial indexes (a full
one would be the index migration 0005 dropped) and purges old row versions itself; nothing is
done there. The index is not part of the model's state for the same reason: declared on the
model, Django would make it a full index on MariaDB and warn (models.W037) at every migrate.
"""

from django.db import migrations

NAME = "posixcron_run_unfinished"


def create_index(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor not in ("postgresql", "sqlite"):
        return
    table = apps.get_model("django_posixcron", "Run")._meta.db_table
    qn = schema_editor.quote_name
    concurrently = "CONCURRENTLY " if connection.vendor == "postgresql" else ""
    if connection.vendor == "postgresql":
        # An interrupted concurrent build leaves an invalid index the planner never uses;
        # IF NOT EXISTS would keep it. Build it again.
        with connection.cursor() as cursor:
            cursor.execute(
                "SELECT NOT i.indisvalid FROM pg_index i JOIN pg_class c ON c.oid = i.indexrelid "
                "WHERE c.relname = %s AND pg_table_is_visible(c.oid)",
                [NAME],
            )
            row = cursor.fetchone()
        if row is not None and row[0]:
            schema_editor.execute(f"DROP INDEX CONCURRENTLY {qn(NAME)}")
    schema_editor.execute(
        f"CREATE INDEX {concurrently}IF NOT EXISTS {qn(NAME)} ON {qn(table)} ({qn('task_id')}) "
        f"WHERE {qn('status')} IN ('queued', 'running')"
    )


def drop_index(apps, schema_editor):
    connection = schema_editor.connection
    if connection.vendor not in ("postgresql", "sqlite"):
        return
    concurrently = "CONCURRENTLY " if connection.vendor == "postgresql" else ""
    schema_editor.execute(f"DROP INDEX {concurrently}IF EXISTS {schema_editor.quote_name(NAME)}")


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("django_posixcron", "0005_run_task_index"),
    ]

    operations = [
        migrations.RunPython(create_index, drop_index, elidable=False),
    ]
