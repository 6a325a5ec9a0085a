"""Settings with a second alias, SQLite without IMMEDIATE transactions, for --database."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

# The routers' alias starts its transactions DEFERRED too: `--database lite` is not about it.
DATABASES["default"] = {**DATABASES["default"], "OPTIONS": {}}
DATABASES["lite"] = {
    "ENGINE": "django.db.backends.sqlite3",
    "NAME": os.environ.get("POSIXCRON_LITE_DB", "lite.sqlite3"),
}
POSIXCRON = {"TASKS": {"noop": {"schedule": "0 4 * * *", "callable": "tests.testapp.jobs.noop"}}}
