"""On MariaDB and MySQL, the runs' (status, process) index becomes (status, task, process),
under the same name.

"Does this task have an unfinished run?" is asked of every task a claim locks (overlap=skip
waits for queued and running runs). PostgreSQL and SQLite answer it from migration 0006's
partial index. MariaDB has no partial indexes: through a task's index it read the task's
whole history (468,000 index entries for five busy tasks at 1.5 million runs), and through
(status, process) every unfinished run of the table, each looked up for its task (1 s a
claim of 100 tasks behind a backlog of 5,000 queued runs, measured). With the task second,
the answer is two short ranges, and the lost-run judging (running runs of given processes)
still reads the running runs alone, from the index.

The same name, so that the claim's index hint holds before and after this migration (a
scheduler of the previous release meanwhile), and the model's state does not change: Django
does not compare an index's columns with the database's. InnoDB builds it online.
"""

from django.db import migrations

NAME = "posixcron_run_status_proc"


def _rebuild(schema_editor, apps, columns):
    if schema_editor.connection.vendor != "mysql":
        return
    table = apps.get_model("django_posixcron", "Run")._meta.db_table
    qn = schema_editor.quote_name
    listed = ", ".join(qn(column) for column in columns)
    schema_editor.execute(
        f"ALTER TABLE {qn(table)} DROP INDEX {qn(NAME)}, ADD INDEX {qn(NAME)} ({listed})"
    )


def widen(apps, schema_editor):
    _rebuild(schema_editor, apps, ["status", "task_id", "process_id"])


def narrow(apps, schema_editor):
    _rebuild(schema_editor, apps, ["status", "process_id"])


class Migration(migrations.Migration):
    # DDL commits on MariaDB whatever the transaction says.
    atomic = False

    dependencies = [
        ("django_posixcron", "0010_task_last_duration_and_fire_lag"),
    ]

    operations = [
        migrations.RunPython(widen, narrow, elidable=False),
    ]
