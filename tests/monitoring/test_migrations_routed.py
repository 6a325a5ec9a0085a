"""The app's migrations under routers that keep auth on another database."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

from tests.harness.processes import ROOT, only_on


def test_migrating_the_app_on_its_own_alias_leaves_auth_alone(tmp_path: Path) -> None:
    # 0009 grants resume_task to whoever held pause_task: on the app's alias, where the
    # routers keep no auth tables, it must not look for them ("no such table: auth_permission").
    only_on("sqlite", why="its own SQLite files, whatever the test database")
    (tmp_path / "routed_settings.py").write_text(
        textwrap.dedent(
            f"""
            SECRET_KEY = "routed"
            USE_TZ = True
            INSTALLED_APPS = [
                "django.contrib.auth", "django.contrib.contenttypes", "django_posixcron"
            ]
            DATABASES = {{
                "default": {{"ENGINE": "django.db.backends.sqlite3",
                            "NAME": "{tmp_path / "default.sqlite3"}"}},
                "cron": {{"ENGINE": "django.db.backends.sqlite3",
                         "NAME": "{tmp_path / "cron.sqlite3"}"}},
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
        )
    )
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(tmp_path), str(ROOT)]),
        "DJANGO_SETTINGS_MODULE": "routed_settings",
    }
    for alias in ("default", "cron"):
        result = subprocess.run(
            [sys.executable, "-m", "django", "migrate", "--database", alias, "--no-input"],
            env=env,
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, result.stdout + result.stderr
        assert "0009_resume_permission... OK" in result.stdout
