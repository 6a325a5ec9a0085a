"""posixcron.W001: SQLite without IMMEDIATE transactions, read from settings alone."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from django_posixcron.checks import check_sqlite_transaction_mode, sqlite_transaction_mode_warnings


def entry(engine: str, options: dict[str, Any] | None) -> dict[str, Any]:
    database: dict[str, Any] = {"ENGINE": engine, "NAME": "db.sqlite3"}
    if options is not None:
        database["OPTIONS"] = options
    return database


@pytest.mark.parametrize(
    ("options", "found"),
    [
        (None, "is not set"),
        ({}, "is not set"),
        ({"transaction_mode": "DEFERRED"}, "is 'DEFERRED'"),
        ({"transaction_mode": "deferred", "timeout": 20}, "is 'deferred'"),
    ],
)
def test_sqlite_without_immediate_is_a_warning_that_says_what_to_set(options, found):
    [warning] = sqlite_transaction_mode_warnings(
        "default", entry("django.db.backends.sqlite3", options)
    )
    assert warning.id == "posixcron.W001"
    assert warning.msg.startswith(
        f"settings.DATABASES['default']['OPTIONS']['transaction_mode'] {found}: "
    )
    assert "'database is locked'" in warning.msg
    assert warning.hint is not None
    assert '"OPTIONS": {"transaction_mode": "IMMEDIATE"}' in warning.hint


@pytest.mark.parametrize(
    ("engine", "options"),
    [
        ("django.db.backends.sqlite3", {"transaction_mode": "IMMEDIATE"}),
        ("django.db.backends.sqlite3", {"transaction_mode": "immediate", "timeout": 5}),
        # The write lock at BEGIN as well (readers wait for it too, outside WAL mode).
        ("django.db.backends.sqlite3", {"transaction_mode": "EXCLUSIVE"}),
        ("django.db.backends.postgresql", None),
        ("django.db.backends.mysql", {"charset": "utf8mb4"}),
    ],
)
def test_no_warning_where_transactions_wait_for_each_other(engine, options):
    assert sqlite_transaction_mode_warnings("default", entry(engine, options)) == []


def test_the_registered_check_reads_the_database_tasks_are_written_to():
    # The test settings set IMMEDIATE on SQLite (and other engines need nothing).
    assert check_sqlite_transaction_mode() == []


def test_the_warning_is_documented():
    text = (Path(__file__).parents[2] / "docs" / "settings.rst").read_text("utf-8")
    assert "posixcron.W001" in text


def test_runscheduler_warns_for_the_alias_database_names(tmp_path, monkeypatch):
    # The checks judge the alias the routers choose; `--database lite` ran the scheduler on a
    # deferred SQLite database without a word.
    from tests.harness.processes import runscheduler_with

    monkeypatch.setenv("POSIXCRON_LITE_DB", str(tmp_path / "lite.sqlite3"))
    proc = runscheduler_with("tests.checks.second_sqlite_settings", "--database", "lite", "--check")
    assert (
        "(posixcron.W001) settings.DATABASES['lite']['OPTIONS']['transaction_mode'] "
        "is not set" in proc.stderr
    )
    # Not the routers' alias, which this process does not use.
    assert "DATABASES['default']" not in proc.stderr
    # The database named has no tables: the usual answer follows the warning.
    assert "lacks django_posixcron migrations" in proc.stderr
