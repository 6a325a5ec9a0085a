"""The duration and fire lag of each task's latest finished run, kept on the task.

``posixcron_last_run_duration_seconds`` and ``posixcron_fire_lag_seconds`` were read from the
run history only, so a task that runs less often than ``HISTORY_DAYS`` (a monthly task with
the default 30 days), or whose runs were deleted, lost both series until its next run. The
metrics still read the history while it holds a run of the task, and these columns once it
does not. They are filled from the runs the history holds; outcomes keep them from then on.
Nullable, as 0007's column: schedulers of the previous release, still running while this
migration is applied, keep inserting tasks and recording outcomes (which do not update them).
"""

from django.db import migrations, models
from django.db.models import DurationField, ExpressionWrapper, F, OuterRef

from django_posixcron.db import ByTaskIndex


def fill_from_history(apps, schema_editor):
    alias = schema_editor.connection.alias
    task = apps.get_model("django_posixcron", "Task")
    run = apps.get_model("django_posixcron", "Run")
    lag = ExpressionWrapper(F("started_at") - F("scheduled_for"), output_field=DurationField())
    latest = (
        run.objects.using(alias)
        .filter(task=OuterRef("pk"), duration__isnull=False, started_at__isnull=False)
        .exclude(status="skipped")
        .order_by("-scheduled_for")
    )
    # Through the (task, -scheduled_for) index by name on MariaDB: it sorted each task's
    # whole history otherwise (80 s for 1.5 million runs, claims starved meanwhile).
    task.objects.using(alias).update(
        last_duration=ByTaskIndex(latest.values("duration")[:1]),
        last_fire_lag=ByTaskIndex(latest.annotate(lag=lag).values("lag")[:1]),
    )


class Migration(migrations.Migration):
    dependencies = [
        ("django_posixcron", "0009_resume_permission"),
    ]

    operations = [
        migrations.AddField(
            model_name="task",
            name="last_duration",
            field=models.DurationField(blank=True, null=True, verbose_name="last duration"),
        ),
        migrations.AddField(
            model_name="task",
            name="last_fire_lag",
            field=models.DurationField(blank=True, null=True, verbose_name="last fire lag"),
        ),
        migrations.RunPython(fill_from_history, migrations.RunPython.noop, elidable=True),
    ]
