"""Fixtures shared by every part of the suite."""

from __future__ import annotations

import datetime as dt
import os
from typing import Any

import pytest

UTC = dt.UTC

# The one harness, in layers: declaring tasks, Task rows with their declarations for ticks
# driven at explicit instants, a whole deployment reconciled from settings (World), and real
# runscheduler processes (Schedulers). Its fixtures are available to every test folder.
pytest_plugins = ["tests.harness.tasks", "tests.harness.world", "tests.harness.processes"]


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Skip the long multi-process tests where the full matrix already runs them elsewhere.

    `make test FULL=1` runs them in one Django version's suite per database, not in all three
    (POSIXCRON_SKIP_LONG names why in the others); a plain `make test` runs them.
    """
    reason = os.environ.get("POSIXCRON_SKIP_LONG")
    if not reason:
        return
    skip = pytest.mark.skip(reason=f"long multi-process test: {reason}")
    for item in items:
        if item.get_closest_marker("long"):
            item.add_marker(skip)


@pytest.fixture(autouse=True)
def _logging_errors_reported_afresh() -> None:
    """Each test sees the first logging error of each kind reported, whatever ran before."""
    from django_posixcron.log import _reports

    _reports.clear()


@pytest.fixture
def posixcron(settings):
    """Return a function that replaces settings.POSIXCRON for one test (defaults kept)."""

    def configure(tasks: dict[str, Any] | None = None, **top_level: object) -> dict[str, Any]:
        value = {"TASKS": tasks or {}, "POLL_INTERVAL": 1, **top_level}
        settings.POSIXCRON = value
        return value

    return configure


@pytest.fixture(autouse=True, scope="session")
def _database_features_known(django_db_setup: None, django_db_blocker: Any) -> None:
    """Ask the test database its features once, with database access allowed.

    From Django 6.1 the system checks (`manage.py check`, `checks.run_checks()`) check model
    fields against every connection, and on SQLite and MySQL `supports_json_field` is a query.
    Answered once here, it is cached, so a test of the checks needs no database of its own.
    """
    from django.db import connections

    with django_db_blocker.unblock():
        for connection in connections.all():
            assert connection.features.supports_json_field
