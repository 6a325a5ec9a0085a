"""The finish of each task's latest succeeded run, kept on the task.

``posixcron_last_success_timestamp_seconds`` was read from the run history, so pruning
(``HISTORY_DAYS``) or deleting runs made it vanish: for a task failing for longer than the
history is kept, the "no success for two hours" alert stopped firing when it mattered most.
The column is filled from the runs the history still holds; outcomes keep it from then on.
It is nullable, so schedulers of the previous release, still running while this migration is
applied (a rolling deploy), keep inserting tasks; their outcomes do not update it, the new
release's do.
"""

from django.db import migrations, models
from django.db.models import OuterRef, Subquery


def fill_from_history(apps, schema_editor):
    alias = schema_editor.connection.alias
    task = apps.get_model("django_posixcron", "Task")
    run = apps.get_model("django_posixcron", "Run")
    latest = (
        run.objects.using(alias)
        .filter(task=OuterRef("pk"), status="succeeded", finished_at__isnull=False)
        .order_by("-finished_at")
        .values("finished_at")[:1]
    )
    task.objects.using(alias).update(last_success_at=Subquery(latest))


class Migration(migrations.Migration):
    dependencies = [
        ("django_posixcron", "0006_run_unfinished_index"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="last_success_at",
            field=models.DateTimeField(blank=True, null=True, verbose_name="last success"),
        ),
        migrations.RunPython(fill_from_history, migrations.RunPython.noop, elidable=True),
    ]
