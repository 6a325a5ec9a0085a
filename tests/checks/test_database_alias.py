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


class Raising:
    """A router with a bug: it raises for every model."""

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        raise RuntimeError("router boom")

    db_for_read = db_for_write


class LazyImporting:
    """A router that imports fine, and imports a missing module inside db_for_write()."""

    def db_for_write(self, model: Any, **hints: Any) -> str | None:
        import tests.testapp.lazily_missing  # type: ignore[import-not-found]  # noqa: F401

        return None

    db_for_read = db_for_write


@pytest.mark.parametrize(
    ("routers", "found", "hint"),
    [
        ([Raising()], "RuntimeError: router boom", "Fix the router whose db_for_write() raised"),
        (
            ["tests.testapp.routers.NoSuchRouter"],
            "ImportError: Module ",
            "Check the import path of the DATABASE_ROUTERS entry "
            "'tests.testapp.routers.NoSuchRouter'.",
        ),
        (
            ["tests.testapp.no_such_module.Router"],
            "ModuleNotFoundError: No module named 'tests.testapp.no_such_module'",
            "Check the import path of the DATABASE_ROUTERS entry "
            "'tests.testapp.no_such_module.Router'.",
        ),
        (
            [LazyImporting()],
            "ModuleNotFoundError: No module named 'tests.testapp.lazily_missing'",
            "Fix the router whose db_for_write() raised",
        ),
    ],
    ids=["raises", "does-not-import", "no-such-module", "imports-inside"],
)
def test_routers_that_raise_are_a_check_error_not_a_traceback(monkeypatch, routers, found, hint):
    from django.db import router

    from django_posixcron import checks as posixcron_checks

    # As DATABASE_ROUTERS would give them: imported at their first use. Our checks alone:
    # Django 6.1's own model checks ask the routers too, and report such a router themselves.
    monkeypatch.setattr(router, "_routers", routers)
    router.__dict__.pop("routers", None)
    try:
        ours = [
            *posixcron_checks.check_database_alias(),
            *posixcron_checks.check_sqlite_transaction_mode(),
        ]
    finally:
        router.__dict__.pop("routers", None)
    [error] = ours
    assert error.id == "posixcron.E036"
    assert error.msg.startswith(f"DATABASE_ROUTERS raised {found}"), error.msg
    assert error.msg.endswith("choosing the database of django_posixcron's models.")
    assert (error.hint or "").startswith(hint), error.hint
    # The status command skips the system checks: it says the same in one line.
    router.__dict__.pop("routers", None)
    try:
        with pytest.raises(CommandError, match=f"^DATABASE_ROUTERS raised {found}"):
            call_command("schedulerstatus", stdout=io.StringIO(), stderr=io.StringIO())
    finally:
        router.__dict__.pop("routers", None)


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


class MigrateOnly:
    """A router written with allow_migrate() alone: the app's tables go to "cron", its
    models' reads and writes to "default"."""

    def allow_migrate(self, db: str, app_label: str, **hints: Any) -> bool | None:
        if app_label == "django_posixcron":
            return db == "cron"
        return None


def test_routers_keeping_the_app_off_the_alias_of_its_models_are_a_warning(settings):
    def routed_away() -> list[checks.CheckMessage]:
        return [m for m in checks.run_checks() if m.id == "posixcron.W005"]

    assert routed_away() == []
    settings.DATABASE_ROUTERS = [MigrateOnly()]

    (warning,) = routed_away()

    assert warning.level == checks.WARNING
    assert warning.msg == (
        "DATABASE_ROUTERS send django_posixcron's models to the database alias 'default' "
        "(db_for_read() and db_for_write()), but their allow_migrate() refuses the app there: "
        "`migrate` does not create its tables on 'default'."
    )
    assert "silence posixcron.W005" in (warning.hint or "")
