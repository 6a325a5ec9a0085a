"""tests.settings with the LOGGING many production projects have.

disable_existing_loggers True (logging.config.dictConfig's own default), one handler on the
root logger, and nothing said of django_posixcron: its records reach the root's handler.
"""

from tests.settings import *  # noqa: F403

LOGGING = {
    "version": 1,
    "disable_existing_loggers": True,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "root": {"handlers": ["console"], "level": "INFO"},
}
