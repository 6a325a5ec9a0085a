"""Settings for the runscheduler subprocesses that the process tests start.

Everything comes from tests.settings; the test writes the rest to a JSON file named by
POSIXCRON_PROC_CONFIG: the database name (the test database pytest-django created, so
parent and children share it), the POSIXCRON dict and, optionally, the LOGGING level.
"""

import json
import os
from typing import Any

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

with open(os.environ["POSIXCRON_PROC_CONFIG"], encoding="utf-8") as _file:
    _config = json.load(_file)

DATABASES["default"]["NAME"] = _config["DB_NAME"]
if "DB_PORT" in _config:  # through a relay the test can make stop answering (proxy.py)
    DATABASES["default"]["HOST"] = "127.0.0.1"
    DATABASES["default"]["PORT"] = _config["DB_PORT"]
POSIXCRON = _config["POSIXCRON"]
if _config.get("NO_POSIXCRON"):  # a settings module that lacks the setting altogether
    del POSIXCRON
if "DB_OPTIONS" in _config:  # a connection pool, say
    DATABASES["default"]["OPTIONS"] = {
        **DATABASES["default"].get("OPTIONS", {}),
        **_config["DB_OPTIONS"],
    }

if "TASKS_SETTING" in _config:  # the project's Django Tasks backends, replaced whole
    TASKS = _config["TASKS_SETTING"]

if "DB_SETTINGS" in _config:  # DISABLE_SERVER_SIDE_CURSORS behind PgBouncer, say
    DATABASES["default"].update(_config["DB_SETTINGS"])

if "EMPTY_DB_NAME" in _config:
    # The router configuration: "default" is a database without this app's tables, and the
    # test database is "cron", where CronRouter sends the app's models (unless ROUTER is off,
    # and --database names the alias instead).
    DATABASES["cron"] = dict(DATABASES["default"])
    DATABASES["default"] = {**DATABASES["default"], "NAME": _config["EMPTY_DB_NAME"]}
    if _config.get("ROUTER", True):
        DATABASE_ROUTERS = ["tests.testapp.routers.CronRouter"]

_handlers: dict[str, Any] = {
    "console": {"class": "logging.StreamHandler", "formatter": "timed"},
}
if _config.get("RAISING_HANDLER"):
    # A project's handler that raises where logging's own would call handleError(): a log
    # collector's handler with its collector down. First, so that no record reaches the
    # console.
    import logging as _logging

    class _CollectorDown(_logging.Handler):
        def emit(self, record: _logging.LogRecord) -> None:
            raise ConnectionRefusedError(111, "the log collector refused the connection")

    _handlers = {"collector": {"()": _CollectorDown}, **_handlers}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "timed": {"format": "%(asctime)s %(process)d %(levelname)s %(name)s %(message)s"},
    },
    "handlers": _handlers,
    "loggers": {"django_posixcron": {"handlers": list(_handlers), "level": "INFO"}},
}

if "HOST_CLOCK_FILE" in _config:
    # A host clock the test can step (as NTP does): seconds ahead of the real one, read from
    # a file at every call.
    import datetime as _dt
    from pathlib import Path as _Path

    from django.utils import timezone as _timezone

    _real_now = _timezone.now
    _clock_file = _Path(_config["HOST_CLOCK_FILE"])

    def _stepped_now() -> _dt.datetime:
        text = _clock_file.read_text().strip() if _clock_file.exists() else ""
        return _real_now() + _dt.timedelta(seconds=float(text or 0))

    _timezone.now = _stepped_now
