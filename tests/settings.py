"""Settings for the test suite: SQLite by default, any database through DATABASE_URL."""

from pathlib import Path

import environ

BASE_DIR = Path(__file__).resolve().parent
env = environ.Env()

SECRET_KEY = "django-posixcron-tests-not-secret"
DEBUG = False
USE_TZ = True
TIME_ZONE = "UTC"
ALLOWED_HOSTS = ["*"]

DATABASES = {"default": env.db("DATABASE_URL", default="sqlite:///:memory:")}
_db = DATABASES["default"]
if _db["ENGINE"] == "django.db.backends.sqlite3":
    # Several scheduler processes share one SQLite file in the process tests: BEGIN IMMEDIATE
    # takes the write lock up front, and the timeout lets the other process wait for it.
    _db.setdefault("OPTIONS", {}).update({"transaction_mode": "IMMEDIATE", "timeout": 20})
    if _db["NAME"] in ("", ":memory:"):
        # A file, not memory, so that runscheduler subprocesses see the same database.
        _db["TEST"] = {
            "NAME": env.str(
                "POSIXCRON_SQLITE_TEST_DB", default=str(BASE_DIR.parent / ".test-db.sqlite3")
            )
        }
elif _db["ENGINE"] == "django.db.backends.mysql":
    _db.setdefault("OPTIONS", {}).setdefault("charset", "utf8mb4")
    _db.setdefault("TEST", {}).update({"CHARSET": "utf8mb4", "COLLATION": "utf8mb4_unicode_ci"})

try:
    import django.tasks  # noqa: F401  (Django 6: built in, not an app)

    TASKS_APPS: list[str] = []
except ImportError:
    TASKS_APPS = ["django_tasks"]  # the backport, on Django 5.2

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "django_posixcron",
    "tests.testapp",
    # The plugin's tests go through django-health-check's own view and template.
    "health_check",
    # The hand-off to Django Tasks (DESIGN section 6): django-tasks-db's backend and
    # db_worker, and django-tasks-rq's through django-rq.
    *TASKS_APPS,
    "django_tasks_db",
    "django_rq",
    "django_tasks_rq",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "tests.urls"
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

PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]

# "default" stores jobs in the test database itself (the enqueue commits with the claim); "rq"
# sends them to the Redis on localhost. Each database's suite runs beside the others in CI,
# so each uses a Redis database of its own.
_REDIS_DB = env.int(
    "POSIXCRON_REDIS_DB",
    default={"django.db.backends.postgresql": 2, "django.db.backends.mysql": 3}.get(
        _db["ENGINE"], 1
    ),
)
TASKS = {
    "default": {"BACKEND": "django_tasks_db.DatabaseBackend", "QUEUES": ["default", "cron"]},
    "rq": {"BACKEND": "django_tasks_rq.RQBackend", "QUEUES": ["default"]},
}
RQ_QUEUES = {
    "default": {
        "HOST": env.str("POSIXCRON_REDIS_HOST", default="127.0.0.1"),
        "PORT": env.int("POSIXCRON_REDIS_PORT", default=6379),
        "DB": _REDIS_DB,
    }
}

POSIXCRON = {
    "TASKS": {},
    "POLL_INTERVAL": 1,
}

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {"django_posixcron": {"handlers": ["console"], "level": "INFO"}},
}
