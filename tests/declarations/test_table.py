"""The table of keys: a key is one row and its validator; rules across keys; every message."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from django_posixcron.declarations import collect
from django_posixcron.declarations.problems import Form, Invalid, KeyPath, problem
from django_posixcron.declarations.table import Key, Report, Rule, Table
from django_posixcron.declarations.task import TASK
from django_posixcron.declarations.values import positive_int
from tests.harness.declaring import task

TASK_PATH = KeyPath() / "TASKS" / "t"
UNPRINTABLE_INT = 10**5000  # repr() raises ValueError past sys.get_int_max_str_digits()


def deeply_nested(depth: int = 100_000) -> list[Any]:
    """Return a list whose repr() raises RecursionError."""
    outer: list[Any] = []
    inner = outer
    for _ in range(depth):
        inner.append([])
        inner = inner[0]
    return outer


def check(
    table: Table, definition: dict[str, Any], outer: dict[str, Any] | None = None
) -> tuple[dict[str, Any], bool, list[tuple[str, str, str, str]]]:
    report = Report()
    top = outer or {"POLL_INTERVAL": 1.0, "ENQUEUE": None}
    values, valid = table.validate(definition, TASK_PATH, report, top)
    return values, valid, [(p.id, p.msg, p.hint, p.path) for p in report.problems]


class TestAddingAKey:
    """What the module docstring promises: a new key is one row and its validator."""

    table = dataclasses.replace(
        TASK,
        keys=(
            *TASK.keys,
            Key(
                "notify_after_failures",
                positive_int("posixcron.E999", "Use e.g. 3 to notify after three failures."),
                default=1,
            ),
        ),
    )

    def test_its_mistakes_are_reported_with_path_value_and_hint(self):
        _, valid, problems = check(self.table, task(notify_after_failures=0))
        assert not valid
        assert problems == [
            (
                "posixcron.E999",
                "settings.POSIXCRON['TASKS']['t']['notify_after_failures'] is misconfigured. "
                "Expected a positive int but got 0.",
                "Use e.g. 3 to notify after three failures.",
                "settings.POSIXCRON['TASKS']['t']['notify_after_failures']",
            )
        ]

    def test_its_value_and_default(self):
        values, valid, problems = check(self.table, task(notify_after_failures=5))
        assert (valid, problems, values["notify_after_failures"]) == (True, [], 5)
        values, _, _ = check(self.table, task())
        assert values["notify_after_failures"] == 1

    def test_the_unknown_key_hint_lists_it(self):
        _, _, [(check_id, msg, hint, path)] = check(self.table, task(notify_after_failure=5))
        assert check_id == "posixcron.E006"
        assert msg == "settings.POSIXCRON['TASKS']['t'] has an unknown key 'notify_after_failure'."
        assert path == "settings.POSIXCRON['TASKS']['t']['notify_after_failure']"
        assert hint.startswith("Did you mean 'notify_after_failures'? Known keys: schedule, ")
        assert hint.endswith(
            ", pause_after_failures, enqueue, start_deadline, notify_after_failures."
        )

    def test_a_default_read_from_the_enclosing_table(self):
        table = dataclasses.replace(
            TASK,
            keys=(
                *[k for k in TASK.keys if k.name != "enqueue"],
                Key("enqueue", lambda v, path: v, default_from=lambda s: s["ENQ"]),
            ),
            rules=(),
        )
        values, valid, _ = check(table, task(), {"POLL_INTERVAL": 1.0, "ENQ": "from-top"})
        assert (valid, values["enqueue"]) == (True, "from-top")
        values, _, _ = check(table, task(enqueue="own"), {"POLL_INTERVAL": 1.0, "ENQ": "top"})
        assert values["enqueue"] == "own"
        # ENQ invalid (reported at the top level): the task is invalid, without a problem.
        values, valid, problems = check(table, task(), {"POLL_INTERVAL": 1.0})
        assert (valid, problems, "enqueue" in values) == (False, [], False)


@pytest.mark.parametrize(
    "options",
    [{}, {"default": 1, "default_from": lambda s: 1}, {"default": 1, "example": '"x"'}],
    ids=["none", "default+default_from", "default+example"],
)
def test_a_key_has_exactly_one_of_default_default_from_or_example(options):
    with pytest.raises(TypeError, match="give one of default, default_from or example"):
        Key("k", lambda v, path: v, **options)


def test_a_rule_names_a_key_it_needs():
    with pytest.raises(TypeError, match="it must need 'callable'"):
        Rule(on="callable", needs=("kwargs",), check=lambda values: None)


class TestRules:
    def test_a_rule_waits_for_every_key_it_needs(self):
        # No frequency guard without a valid POLL_INTERVAL, no signature check without kwargs.
        problems = collect({"TASKS": {"t": task("* * * * *")}, "POLL_INTERVAL": -1})[1]
        assert [p.id for p in problems] == ["posixcron.E021"]
        problems = collect({"TASKS": {"t": task(kwargs={1: "x"})}})[1]
        assert [p.id for p in problems] == ["posixcron.E014"]

    def test_a_key_that_fails_a_rule_is_invalid_for_the_rules_after_it(self):
        seen: list[Any] = []
        table = dataclasses.replace(
            TASK, rules=(*TASK.rules, Rule("schedule", ("schedule",), seen.append))
        )
        _, valid, problems = check(table, task("* * * * *"), {"POLL_INTERVAL": 120.0})
        assert not valid
        assert [p[0] for p in problems] == ["posixcron.E024"]
        assert seen == []
        check(table, task("0 * * * *"), {"POLL_INTERVAL": 120.0})
        assert [values["schedule"] for values in seen] == ["0 * * * *"]

    def test_rule_errors_follow_the_errors_of_single_keys(self):
        definition = task("* * * * *", overlap="never", timeout=-1)
        problems = collect({"TASKS": {"t": definition}, "POLL_INTERVAL": 120})[1]
        assert [p.id for p in problems] == ["posixcron.E019", "posixcron.E018", "posixcron.E024"]

    def test_the_problem_of_a_rule_shows_the_declared_value(self):
        # Not the normalised schedule: the user looks for what they wrote.
        [problem_] = collect({"TASKS": {"t": task("*  * * * *")}, "POLL_INTERVAL": 120})[1]
        assert problem_.msg.startswith(f"{TASK_PATH}['schedule'] = '*  * * * *' can fire every")


@pytest.mark.parametrize(
    ("raw", "check_id", "message"),
    [
        (
            UNPRINTABLE_INT,
            "posixcron.E001",
            "settings.POSIXCRON is misconfigured. Expected a dict but got <int of 16610 bits>.",
        ),
        (
            {"TASKS": {"t": UNPRINTABLE_INT}},
            "posixcron.E005",
            f"{TASK_PATH} is misconfigured. Expected a dict but got <int of 16610 bits>.",
        ),
        (
            {"TASKS": {"t": {**task(), "schedule": UNPRINTABLE_INT}}},
            "posixcron.E008",
            f"{TASK_PATH}['schedule'] is misconfigured. Expected a cron expression as a str but "
            "got <int of 16610 bits>.",
        ),
        (
            {"TASKS": {"t": task(callable=UNPRINTABLE_INT)}},
            "posixcron.E010",
            f"{TASK_PATH}['callable'] is misconfigured. Expected a dotted path to a callable as a "
            "str but got <int of 16610 bits>.",
        ),
        (
            {"TASKS": {"t": task(overlap=UNPRINTABLE_INT)}},
            "posixcron.E019",
            f"{TASK_PATH}['overlap'] is misconfigured. Expected 'skip' or 'allow' but got <int "
            "of 16610 bits>.",
        ),
        (
            {"TASKS": {"t": {**task(), "schedule": deeply_nested()}}},
            "posixcron.E008",
            f"{TASK_PATH}['schedule'] is misconfigured. Expected a cron expression as a str but "
            "got [[[[[[[...]]]]]]].",
        ),
    ],
    ids=["E001", "E005", "E008", "E010", "E019", "E008-nested"],
)
def test_a_value_that_cannot_be_shown_is_reported_not_raised(raw, check_id, message):
    # These used to make the check itself raise (ValueError, RecursionError) from repr().
    [found] = collect(raw)[1]
    assert (found.id, found.msg) == (check_id, message)


@pytest.mark.parametrize(
    ("form", "detail", "message"),
    [
        (Form.EXPECTED, "a str", "P['k'] is misconfigured. Expected a str but got {'a': 1}."),
        (
            Form.EXPECTED_TYPED,
            "a str",
            "P['k'] is misconfigured. Expected a str but got dict {'a': 1}.",
        ),
        (Form.TOO_LARGE, "at most 1", "P['k'] is too large: expected at most 1 but got {'a': 1}."),
        (
            Form.TOO_SMALL,
            "at least 9",
            "P['k'] is too small: expected at least 9 but got {'a': 1}.",
        ),
        (Form.ASSIGNED, "is odd.", "P['k'] = {'a': 1} is odd."),
        (Form.GOT, "is odd", "P['k'] is odd. Got {'a': 1}."),
        (Form.IN, "is odd: x", "P['k'] is odd: x (in {'a': 1})."),
        (Form.IS, "needs 2.", "P['k'] is {'a': 1}; needs 2."),
        (Form.UNKNOWN_KEY, "", "P has an unknown key 'k'."),
        (Form.MISSING_KEY, "needs it.", "P has no 'k'; needs it."),
    ],
)
def test_each_form_names_the_path_and_the_value(form, detail, message):
    path = KeyPath("P") / "k"
    built = problem(path, {"a": 1}, Invalid("posixcron.E000", form, detail, "Do this."))
    assert (built.id, built.msg, built.hint, built.path) == (
        "posixcron.E000",
        message,
        "Do this.",
        "P['k']",
    )
    assert built.value == {"a": 1}
