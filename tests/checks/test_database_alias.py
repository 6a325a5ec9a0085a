"""An alias settings.DATABASES lacks, from the routers or --database, is a one-line error."""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.core import checks
from django.core.management import call_command
from django.core.management.base import CommandError
from health_check.exceptions import ServiceUnavailable

from django_posixcron.contrib.health_check import SchedulerHealthCheck
from tests.harness.declaring import task


class ToNowhere:
    """Send this app's models to an alias the project forgot to define."""

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        return "nowhere" if model._meta.app_label == "django_posixcron" else None

    db_for_read = db_for_write


def alias_errors() -> list[checks.CheckMessage]:
    return [m for m in checks.run_checks() if m.id == "posixcron.E036"]


def test_routers_to_an_undefined_alias_fail_the_checks(settings):
    assert alias_errors() == []
    settings.DATABASE_ROUTERS = [ToNowhere()]

    (error,) = alias_errors()

    assert error.msg == (
        "DATABASE_ROUTERS send django_posixcron's models to the database alias 'nowhere', which "
        "settings.DATABASES does not define (it defines 'default')."
    )
    assert error.level == checks.ERROR


@pytest.mark.parametrize(
    "command",
    [
        ["schedulerstatus"],
        ["runscheduler", "--once"],
        ["runscheduler", "--check"],
    ],
)
def test_an_undefined_database_option_is_a_command_error(command, posixcron):
    posixcron({"nightly": task("0 3 * * *")})

    with pytest.raises(CommandError) as excinfo:
        call_command(*command, "--database", "nosuch", stdout=io.StringIO(), stderr=io.StringIO())

    assert str(excinfo.value) == (
        "The database alias 'nosuch' is not in settings.DATABASES (it defines 'default')."
    )


def test_the_health_check_names_an_undefined_alias():
    check = SchedulerHealthCheck(database="nosuch")

    with pytest.raises(ServiceUnavailable, match="The database alias 'nosuch' is not in settings"):
        check.run()
