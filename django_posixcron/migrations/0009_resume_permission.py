"""Resume gets a permission of its own, ``resume_task``, apart from ``pause_task``.

DESIGN 7: "pause, resume and run-now actions guarded by their own permissions". An on-call
operator may stop a misbehaving task at night; starting it again can be someone else's call.

Nobody loses what they could do: every group and user that holds ``pause_task`` (which allowed
both until now) is granted ``resume_task`` too, on the database where the routers keep auth's
tables. Undoing the migration keeps those grants.
"""

from django.apps import apps as global_apps
from django.conf import settings
from django.contrib.auth.management import create_permissions
from django.core.exceptions import FieldDoesNotExist
from django.db import connections, migrations, router


def _has_table(alias, model):
    with connections[alias].cursor() as cursor:
        tables = connections[alias].introspection.table_names(cursor)
    return model._meta.db_table in tables


def grant_resume_to_pausers(apps, schema_editor):
    alias = schema_editor.connection.alias
    try:
        Permission = apps.get_model("auth", "Permission")
        Group = apps.get_model("auth", "Group")
    except LookupError:
        return  # django.contrib.auth is not installed (or not migrated yet): nobody to grant
    if not router.allow_migrate_model(alias, Permission):
        # The routers keep auth's tables on another database, where this migration does
        # not run (they keep this app off it): the grants are made there, from here.
        alias = router.db_for_write(Permission)
        if not router.allow_migrate_model(alias, Permission) or not _has_table(
            alias, Permission
        ):
            return  # auth is not migrated there yet: nobody holds pause_task
    # Permissions are created after `migrate`, by post_migrate; the grant needs the row now.
    # create_permissions() honours the routers and creates only what is missing.
    create_permissions(
        global_apps.get_app_config("django_posixcron"), verbosity=0, using=alias, apps=apps
    )
    found = {
        p.codename: p
        for p in Permission.objects.using(alias).filter(
            content_type__app_label="django_posixcron",
            codename__in=["pause_task", "resume_task"],
        )
    }
    pause, resume = found.get("pause_task"), found.get("resume_task")
    if pause is None or resume is None:
        return  # a fresh database, or auth routed elsewhere: nothing was granted before
    # create_permissions() leaves an existing row's name alone: the admin would go on showing
    # "Can pause and resume tasks" beside the new permission.
    Permission.objects.using(alias).filter(pk=pause.pk).update(name="Can pause tasks")
    through = Group.permissions.through
    through.objects.using(alias).bulk_create(
        [
            through(group_id=group_id, permission_id=resume.pk)
            for group_id in Group.objects.using(alias)
            .filter(permissions=pause)
            .exclude(permissions=resume)
            .values_list("pk", flat=True)
        ]
    )
    try:
        users = apps.get_model(settings.AUTH_USER_MODEL)
        field = users._meta.get_field("user_permissions")  # PermissionsMixin's
    except (LookupError, FieldDoesNotExist):
        return  # a custom user model without Django's permission fields
    through = field.remote_field.through
    user_column = f"{field.m2m_field_name()}_id"
    permission_column = f"{field.m2m_reverse_field_name()}_id"
    through.objects.using(alias).bulk_create(
        [
            through(**{user_column: user_id, permission_column: resume.pk})
            for user_id in users._default_manager.using(alias)
            .filter(user_permissions=pause)
            .exclude(user_permissions=resume)
            .values_list("pk", flat=True)
        ]
    )


class Migration(migrations.Migration):
    dependencies = [
        ("django_posixcron", "0008_overdue_alert"),
    ]

    operations = [
        migrations.AlterModelOptions(
            name="task",
            options={
                "ordering": ["name"],
                "permissions": [
                    ("pause_task", "Can pause tasks"),
                    ("resume_task", "Can resume tasks"),
                    ("run_task", "Can request an immediate run of a task"),
                ],
                "verbose_name": "task",
                "verbose_name_plural": "tasks",
            },
        ),
        migrations.RunPython(grant_resume_to_pausers, migrations.RunPython.noop, elidable=True),
    ]
