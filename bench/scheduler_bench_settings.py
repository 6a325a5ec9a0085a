"""Settings for bench/scheduler_bench.py and the runscheduler processes it starts."""

import os

from tests.settings import *  # noqa: F403
from tests.settings import DATABASES

# Its own scratch database, so it never collides with the test suite or another benchmark.
if DATABASES["default"]["ENGINE"] == "django.db.backends.sqlite3":
    # A file, so the runscheduler processes share it.
    DATABASES["default"]["TEST"] = {
        "NAME": os.environ.get("BENCH_SQLITE_FILE", "/tmp/test_bench_scheduler.sqlite3")
    }
else:
    # test_<name of the URL's database>: two benches on one server need two names.
    DATABASES["default"].setdefault("TEST", {})["NAME"] = (
        f"test_{DATABASES['default']['NAME'] or 'bench_scheduler'}"
    )
if os.environ.get("BENCH_DB_NAME"):
    DATABASES["default"]["NAME"] = os.environ["BENCH_DB_NAME"]

_NOOP = int(os.environ.get("BENCH_NOOP_TASKS", "10000"))
_STAMP = int(os.environ.get("BENCH_STAMP_TASKS", "120"))

POSIXCRON = {
    "TASKS": {
        **{
            # Yearly: never due on its own; the benchmark makes tasks due with run requests.
            f"noop-{i:06d}": {
                "schedule": "0 0 1 1 *",
                "callable": "tests.testapp.jobs.noop",
                "retry_delay": 300,
            }
            for i in range(_NOOP)
        },
        **{
            f"stamp-{i:03d}": {
                "schedule": "0 0 1 1 *",
                "callable": "bench.scheduler_bench.stamp",
                "kwargs": {"name": f"stamp-{i:03d}"},
                "retry_delay": 300,
            }
            for i in range(_STAMP)
        },
    },
    "POLL_INTERVAL": 1,
    "CONCURRENCY": int(os.environ.get("BENCH_CONCURRENCY", "16")),
    "HISTORY_DAYS": 30,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {"timed": {"format": "%(asctime)s %(process)d %(levelname)s %(message)s"}},
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "timed"}},
    # Per-run log lines would measure the terminal, not the scheduler; INFO is for diagnosis.
    "loggers": {
        "django_posixcron": {
            "handlers": ["console"],
            "level": os.environ.get("BENCH_LOG_LEVEL", "WARNING"),
        }
    },
}
