"""Settings for the example project, read from the environment with django-environ.

DATABASE_URL  default: the SQLite file example_project/db.sqlite3
SECRET_KEY    default: a development key, with a warning on stderr (never deploy it)
DEBUG         default: on
TIME_ZONE     default: UTC; the zone of every task that does not name its own
EXAMPLE_PROJECT_WORKER  set by demo.py --worker: declares "on-a-worker", handed to db_worker
"""

import sys
from pathlib import Path
from typing import Any

import environ

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

DEVELOPMENT_SECRET_KEY = "django-posixcron-example-development-only"
SECRET_KEY = env.str("SECRET_KEY", default="")
if not SECRET_KEY:
    SECRET_KEY = DEVELOPMENT_SECRET_KEY
    # demo.py says it once for all the processes it starts.
    if not env.bool("EXAMPLE_PROJECT_DEV_KEY_WARNED", default=False):
        print(
            "example_project: WARNING: SECRET_KEY is not set; using the development key. "
            "Never deploy this project like that.",
            file=sys.stderr,
        )

DEBUG = env.bool("DEBUG", default=True)
ALLOWED_HOSTS = env.list("ALLOWED_HOSTS", default=["localhost", "127.0.0.1", "[::1]"])
USE_TZ = True
TIME_ZONE = env.str("TIME_ZONE", default="UTC")

DATABASES = {"default": env.db("DATABASE_URL", default=f"sqlite:///{BASE_DIR / 'db.sqlite3'}")}
_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # The web server and the scheduler write to the same file: BEGIN IMMEDIATE takes the write
    # lock up front, and the timeout lets one wait for the other instead of failing.
    _db.setdefault("OPTIONS", {}).update({"transaction_mode": "IMMEDIATE", "timeout": 20})
elif _db["ENGINE"] == "django.db.backends.mysql":
    _db.setdefault("OPTIONS", {}).setdefault("charset", "utf8mb4")

try:
    import django.tasks  # noqa: F401  (Django 6: built in)

    TASKS_APPS: list[str] = []
except ImportError:
    TASKS_APPS = ["django_tasks"]

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_posixcron",
    "example_project.demo_jobs",
    # Django Tasks, for the task handed to a worker: django-tasks-db stores its jobs in this
    # database and `manage.py db_worker` runs them. On Django 5.2 the backport is an app too.
    *TASKS_APPS,
    "django_tasks_db",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
]

ROOT_URLCONF = "example_project.urls"
STATIC_URL = "/static/"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ]
        },
    }
]

TASKS = {"default": {"BACKEND": "django_tasks_db.DatabaseBackend"}}

POSIXCRON: dict[str, Any] = {
    "TASKS": {
        "hello": {
            "schedule": "* * * * *",
            "callable": "example_project.demo_jobs.jobs.hello",
            "retry_delay": 30,
            "description": "Say hello every minute; always succeeds",
        },
        "flaky": {
            "schedule": "* * * * *",
            "callable": "example_project.demo_jobs.jobs.flaky",
            "retry_delay": 20,
            "description": "Fail on odd minutes, succeed on the retry 20 seconds later",
        },
        "kolkata-hourly": {
            "schedule": "0 * * * *",
            "callable": "example_project.demo_jobs.jobs.hello",
            "kwargs": {"greeting": "Namaste"},
            "timezone": "Asia/Kolkata",
            "retry_delay": 300,
            "description": "On the hour in Kolkata: half past the hour in UTC",
        },
        "morning-report": {
            "schedule": "30 6 * * 1-5",
            "callable": "example_project.demo_jobs.jobs.report",
            "retry_delay": 600,
            "timeout": 300,
            "description": "Log yesterday's heartbeat count at 06:30 on weekdays",
        },
        "heartbeat": {
            "schedule": "* * * * *",
            "callable": "example_project.demo_jobs.jobs.heartbeat",
            "retry_delay": 20,
            "description": "Write a row to the heartbeat table",
        },
        "prune-heartbeats": {
            # POSIX has no */10: the minutes are listed.
            "schedule": "0,10,20,30,40,50 * * * *",
            "callable": "example_project.demo_jobs.jobs.prune_heartbeats",
            "kwargs": {"keep_minutes": 60},
            "retry_delay": 60,
            "overlap": "skip",
            "description": "Delete heartbeats older than an hour",
        },
    },
    # (the task handed to a worker is added below when demo.py starts one)
    # At most as long as the shortest schedule interval (one minute); short, so that pausing
    # a task in the admin shows up in the scheduler within seconds.
    "POLL_INTERVAL": 5,
    "CONCURRENCY": 4,
    "HISTORY_DAYS": 7,
}

if env.bool("EXAMPLE_PROJECT_WORKER", default=False):
    POSIXCRON["TASKS"]["on-a-worker"] = {
        "schedule": "* * * * *",
        "callable": "example_project.demo_jobs.jobs.on_a_worker",
        "retry_delay": 30,
        # Handed to the Django Tasks backend "default"; db_worker runs it.
        "enqueue": True,
        "start_deadline": 60,
        "description": "Every minute, on the db_worker that demo.py --worker starts",
    }

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "formatters": {
        "plain": {"format": "%(asctime)s %(levelname)-7s %(name)s: %(message)s"},
    },
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": "plain"}},
    "loggers": {
        "django_posixcron": {"handlers": ["console"], "level": "INFO"},
        "example_project": {"handlers": ["console"], "level": "INFO"},
    },
}
