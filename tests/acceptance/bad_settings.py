"""Settings with mistakes, for running `django-admin runscheduler` as a user would."""

from tests.settings import *  # noqa: F403

POSIXCRON = {
    "TASKS": {
        "nightly-report": {
            "schedule": "15 3 * * mon-fri",
            "callable": "tests.testapp.jobs.record",
            "retry_delay": 300,
        },
        "cleanup": {"schedule": "0 4 * * *", "callable": "tests.testapp.jobs.missing"},
    },
    "POLL_INTERVAL": 10,
}
