"""Definitions shared by many tasks are validated once per collection, with the same result.

Projects that declare thousands of tasks generate them, and most differ only by name: a
collection validates a definition of plain values once and reuses its fields. The property
that must hold: a task validated among others gives exactly what it gives validated alone.
"""

from __future__ import annotations

import datetime as dt
from typing import Any

import pytest

from django_posixcron.declarations import collect
from django_posixcron.declarations.task import memo_key

BASE = {"schedule": "0,30 * * * *", "callable": "tests.testapp.jobs.record"}
CONTEXT = "tests.testapp.jobs.record_context"
VARIANTS: list[dict[str, Any]] = [
    {},
    {"callable": CONTEXT, "takes_context": True},
    {"callable": CONTEXT, "takes_context": 1},  # equal to True, and refused
    {"callable": CONTEXT, "takes_context": "yes"},
    {"takes_context": True},  # record() takes no context
    {"retry_delay": 300},
    {"retry_delay": 300.0},
    {"retry_delay": True},
    {"retry_delay": dt.timedelta(minutes=5)},
    {"retry_delay": -1},
    {"kwargs": {}},
    {"kwargs": {"label": "x"}},  # not memoised: validated every time
    {"overlap": "allow"},
    {"overlap": "bogus"},
    {"timeout": None},
    {"timeout": 0},
    {"timeout": 10},
    {"description": "nightly"},
    {"description": "nul \x00"},
    {"pause_after_failures": 3},
    {"pause_after_failures": 0},
    {"pause_after_failures": True},
    {"enqueue": {}},
    {"schedule": "61 * * * *"},
    {"schedule": 5},
    {"callable": "tests.testapp.jobs.missing"},
    {"callable": "tests.testapp.jobs.record", "kwargs": {}, "takes_context": False},
    {"schedul": "0 * * * *"},
]


def _definitions() -> dict[str, Any]:
    tasks: dict[str, Any] = {}
    for i, variant in enumerate(VARIANTS):
        definition = {**BASE, **variant}
        for name in (f"t{i}-a", f"t{i}-b", f"Bad Name {i}", f"t{i}-c"):
            tasks[name] = dict(definition)  # equal dicts, distinct objects
    return tasks


def test_a_task_validated_among_others_gives_what_it_gives_alone(monkeypatch):
    from django_posixcron.declarations import task as task_module

    class Counting:
        def __init__(self, table: Any) -> None:
            self.table, self.calls = table, 0

        def validate(self, *args: Any) -> Any:
            self.calls += 1
            return self.table.validate(*args)

        def __getattr__(self, name: str) -> Any:
            return getattr(self.table, name)

    counting = Counting(task_module.TASK)
    monkeypatch.setattr(task_module, "TASK", counting)
    tasks = _definitions()
    together, problems = collect({"TASKS": tasks})
    calls = counting.calls
    alone_declarations: dict[str, Any] = {}
    alone_problems = []
    for name, definition in tasks.items():
        declarations, found = collect({"TASKS": {name: definition}})
        alone_declarations.update(declarations)
        alone_problems += found
    assert together == alone_declarations
    assert [d.definition_hash for d in together.values()] == [
        d.definition_hash for d in alone_declarations.values()
    ]
    assert problems == alone_problems
    assert len(together) > len(VARIANTS)  # most variants are valid, under three names each
    assert calls < len(tasks) * 3 // 4  # and were validated once, not per name
    # A refusal is there for every name, not only the first one validated.
    refused = {p.path for p in problems if "takes_context" in p.path}
    assert len(refused) == 2 * 4  # takes_context=1 and "yes", under each of four names


@pytest.mark.parametrize(
    ("first", "second"),
    [(True, 1), (300, 300.0), (0, False), ("1", 1)],
)
def test_values_equal_across_types_are_different_keys(first, second):
    assert memo_key({"x": first}) != memo_key({"x": second})


def test_only_plain_definitions_are_memoised():
    assert memo_key(BASE) is not None
    assert memo_key({**BASE, "kwargs": {}}) is not None
    assert memo_key({**BASE, "kwargs": {"a": 1}}) is None
    assert memo_key({**BASE, "schedule": ["0 * * * *"]}) is None
    odd_key: dict[Any, Any] = {**BASE, 5: "x"}
    assert memo_key(odd_key) is None
    odd_key = {**BASE, 5: {}}
    assert memo_key(odd_key) is None
    # Reported, not a TypeError from sorting an int key among str ones.
    _, problems = collect({"TASKS": {"a": odd_key, "b": dict(odd_key)}})
    assert [p.id for p in problems] == ["posixcron.E006", "posixcron.E006"]
    assert memo_key(list(BASE.items())) is None
