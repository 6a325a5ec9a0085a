"""The app's migrations under routers that keep auth on another database."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.harness.processes import ROOT, only_on

SETTINGS = """
SECRET_KEY = "routed"
USE_TZ = True
INSTALLED_APPS = [
    "django.contrib.auth", "django.contrib.contenttypes", "django_posixcron"
]
DATABASES = {{
    "default": {{"ENGINE": "django.db.backends.sqlite3", "NAME": "{folder}/default.sqlite3"}},
    "cron": {{"ENGINE": "django.db.backends.sqlite3", "NAME": "{folder}/cron.sqlite3"}},
}}
POSIXCRON = {{"TASKS": {{}}}}

class Router:
    def _db(self, model, **hints):
        return "cron" if model._meta.app_label == "django_posixcron" else "default"
    db_for_read = db_for_write = _db
    def allow_migrate(self, db, app_label, **hints):
        return (db == "cron") == (app_label == "django_posixcron")

DATABASE_ROUTERS = ["routed_settings.Router"]
"""

# Run in the routed project: the rows of a release before 0009, where pause_task allowed
# both pause and resume, held by a user and a group (auth's tables are on "default").
OLD_GRANTS = """
import django
django.setup()
from django.contrib.auth.models import Group, Permission, User
pause = Permission.objects.get(codename="pause_task")
Permission.objects.filter(pk=pause.pk).update(name="Can pause and resume tasks")
Permission.objects.filter(codename="resume_task").delete()
User.objects.create(username="oncall").user_permissions.add(pause)
Group.objects.create(name="On call").permissions.add(pause)
"""

GRANTS = """
import django
django.setup()
from django.contrib.auth.models import Group, User
user, group = User.objects.get(username="oncall"), Group.objects.get(name="On call")
print(sorted(p.codename for p in user.user_permissions.all()))
print(sorted(p.codename for p in group.permissions.all()))
print(user.user_permissions.get(codename="pause_task").name)
"""


# A router that only keeps the app off "default", and sends its models nowhere else.
OFF_DEFAULT = """
class OffDefault:
    def allow_migrate(self, db, app_label, **hints):
        return False if app_label == "django_posixcron" and db == "default" else None

DATABASE_ROUTERS = ["routed_settings.OffDefault"]
"""


def project(tmp_path: Path, settings: str):  # type: ignore[no-untyped-def]
    """Return a runner of commands in a project of `settings` (its two SQLite files)."""
    only_on("sqlite", why="its own SQLite files, whatever the test database")
    (tmp_path / "routed_settings.py").write_text(textwrap.dedent(settings.format(folder=tmp_path)))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "routed_settings",
    }

    def run(*args: str, fails: bool = False) -> str:
        result = subprocess.run(
            [sys.executable, *args], env=env, capture_output=True, text=True, timeout=120
        )
        assert (result.returncode != 0) == fails, result.stdout + result.stderr
        return result.stdout + result.stderr if fails else result.stdout

    return run


@pytest.fixture
def routed(tmp_path: Path):  # type: ignore[no-untyped-def]
    """A project whose routers keep the app on "cron" and auth on "default"."""
    return project(tmp_path, SETTINGS)


def test_a_database_the_routers_keep_the_app_off_is_refused_with_the_reason(tmp_path) -> None:  # type: ignore[no-untyped-def]
    # allow_migrate() alone kept the app off "default": `migrate` recorded its migrations
    # there without making its tables, and every mode failed with "no such table", taken for
    # an outage (a long-running scheduler on SQLite retried it every 10 s, forever).
    settings = SETTINGS.split("class Router")[0] + OFF_DEFAULT
    run = project(tmp_path, settings)
    run("-m", "django", "migrate", "--no-input")
    for command in (["runscheduler", "--once"], ["runscheduler"], ["schedulerstatus"]):
        output = run("-m", "django", *command, fails=True)
        assert "The routers keep django_posixcron off the database 'default'" in output, output
        assert "Traceback" not in output


def test_migrating_the_app_on_its_own_alias_leaves_auth_alone(routed) -> None:  # type: ignore[no-untyped-def]
    # 0009 grants resume_task to whoever held pause_task: on the app's alias, where the
    # routers keep no auth tables, it must not look for them ("no such table: auth_permission").
    for alias in ("default", "cron"):
        output = routed("-m", "django", "migrate", "--database", alias, "--no-input")
        assert "0009_resume_permission... OK" in output


@pytest.mark.parametrize("cron_first", [False, True])
def test_upgrading_grants_resume_where_the_routers_keep_auth(routed, cron_first) -> None:  # type: ignore[no-untyped-def]
    # 0009 ran only where the routers allow the app (its own alias), found no auth tables
    # there and granted nothing: the users and groups that could pause and resume before the
    # upgrade could only pause after it.
    routed("-m", "django", "migrate", "--database", "default", "--no-input")
    routed("-m", "django", "migrate", "django_posixcron", "0008", "--database", "cron")
    routed("-c", OLD_GRANTS)
    steps = [["--database", "cron"], ["--database", "default"]]
    for step in steps if cron_first else steps[::-1]:
        routed("-m", "django", "migrate", *step, "--no-input")

    user, group, name = routed("-c", GRANTS).splitlines()
    assert user == group == "['pause_task', 'resume_task']"
    assert name == "Can pause tasks"
