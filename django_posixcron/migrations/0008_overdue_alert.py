"""One row per overdue episode signalled, so a task whose row is locked is still signalled once.

The overdue alert was won by marking the task's row under its lock, skipping rows another
transaction held: a task held by a scheduler frozen in the middle of its claim, the case the
alert is for, was never signalled. DESIGN 7: "detected by a plain read, so a locked row is
still seen".
"""

import django.db.models.deletion
import django.utils.timezone
from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("django_posixcron", "0007_task_last_success_at"),
    ]

    operations = [
        migrations.CreateModel(
            name="OverdueAlert",
            fields=[
                (
                    "id",
                    models.BigAutoField(
                        auto_created=True, primary_key=True, serialize=False, verbose_name="ID"
                    ),
                ),
                ("due_at", models.DateTimeField(verbose_name="due at")),
                (
                    "signalled_at",
                    models.DateTimeField(
                        default=django.utils.timezone.now, verbose_name="signalled"
                    ),
                ),
                (
                    "task",
                    models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="django_posixcron.task",
                    ),
                ),
            ],
            options={
                "verbose_name": "overdue alert",
                "verbose_name_plural": "overdue alerts",
                "constraints": [
                    models.UniqueConstraint(
                        fields=("task", "due_at"), name="posixcron_overdue_once"
                    )
                ],
            },
        ),
    ]
