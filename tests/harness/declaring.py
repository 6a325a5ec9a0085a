"""Declaring tasks: settings entries and the validated declarations they become."""

from __future__ import annotations

import datetime as dt
from typing import Any

from django_posixcron.declarations import TaskDeclaration, collect

UTC = dt.UTC
NOW = dt.datetime(2086, 1, 7, 10, 0, tzinfo=UTC)  # a Monday


def declare(**tasks: dict[str, Any]) -> dict[str, TaskDeclaration]:
    """Return valid declarations for `tasks` (name -> definition), failing on any problem."""
    declarations, problems = collect({"TASKS": tasks, "POLL_INTERVAL": 1})
    assert problems == []
    return declarations


def task(schedule: str = "15 3 * * *", **options: Any) -> dict[str, Any]:
    return {"schedule": schedule, "callable": "tests.testapp.jobs.noop", **options}
