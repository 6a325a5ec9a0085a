"""Settings whose only posixcron error is silenced, for running `runscheduler` as a user would."""

from tests.settings import *  # noqa: F403

SILENCED_SYSTEM_CHECKS = ["posixcron.E024"]
POSIXCRON = {
    "TASKS": {
        "every-minute": {"schedule": "* * * * *", "callable": "tests.testapp.jobs.noop"},
    },
    "POLL_INTERVAL": 120,
}
