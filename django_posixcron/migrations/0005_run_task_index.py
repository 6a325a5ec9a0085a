"""Drop the run table's index on task_id alone: two indexes leading with the task serve it.

Django's own AlterField would drop and re-add the foreign key on PostgreSQL and MariaDB (a
scan of the whole run history under a lock that stops every scheduler's writes; a table
copy on MariaDB) and rebuild the table on SQLite. Only the index goes here, by name as the
database reports it; MariaDB has none to drop (InnoDB's foreign key uses the unique
constraint's index, and Django creates none of its own there).
"""

import django.db.models.deletion
from django.db import migrations, models


# 0006's partial index of unfinished runs is on task_id alone too, and introspection does not
# report its WHERE: on a database migrated past 0006 (`sqlmigrate` on staging) it must not be
# taken for the index this migration drops.
UNFINISHED_INDEX = "posixcron_run_unfinished"


def _task_only_indexes(schema_editor, table):
    connection = schema_editor.connection
    with connection.cursor() as cursor:
        constraints = connection.introspection.get_constraints(cursor, table)
    return [
        name
        for name, info in constraints.items()
        if info["index"]
        and not info["unique"]
        and not info["primary_key"]
        and info["columns"] == ["task_id"]
        and name != UNFINISHED_INDEX
    ]


def drop_task_index(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        return
    table = apps.get_model("django_posixcron", "Run")._meta.db_table
    for name in _task_only_indexes(schema_editor, table):
        schema_editor.execute(f"DROP INDEX {schema_editor.quote_name(name)}")


def create_task_index(apps, schema_editor):
    if schema_editor.connection.vendor == "mysql":
        return
    Run = apps.get_model("django_posixcron", "Run")
    table = Run._meta.db_table
    if _task_only_indexes(schema_editor, table):
        return
    name = schema_editor._create_index_name(table, ["task_id"])
    qn = schema_editor.quote_name
    schema_editor.execute(f"CREATE INDEX {qn(name)} ON {qn(table)} ({qn('task_id')})")


class Migration(migrations.Migration):
    dependencies = [
        ("django_posixcron", "0004_handoff"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.AlterField(
                    model_name="run",
                    name="task",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to="django_posixcron.task",
                        verbose_name="task",
                    ),
                ),
            ],
            database_operations=[
                migrations.RunPython(drop_task_index, create_task_index, elidable=False),
            ],
        ),
    ]
