"""kwargs must come back from the database exactly as declared: str keys at every depth."""

from __future__ import annotations

import datetime
from typing import Any

import pytest

from django_posixcron.declarations import collect
from django_posixcron.models import Task
from django_posixcron.reconcile import reconcile
from tests.harness.declaring import task

KWARGS = "settings.POSIXCRON['TASKS']['t']['kwargs']"
HINT = (
    "Use only str, int, float (finite), bool, None, lists and dicts with str keys: the "
    "arguments are stored in the database."
)


def only_problem(kwargs: Any) -> tuple[str, str, str]:
    definition = task(callable="tests.testapp.jobs.record", kwargs=kwargs)
    _, problems = collect({"TASKS": {"t": definition}})
    assert len(problems) == 1, problems
    return problems[0].id, problems[0].msg, problems[0].hint


@pytest.mark.parametrize(
    ("kwargs", "key_path", "key"),
    [
        # json.dumps would store these as {"1": "x"}, {"true": "x"}, {"null": "x"}: silently.
        ({"label": {1: "x"}}, "['label'][1]", "int 1"),
        ({"label": {True: "x"}}, "['label'][True]", "bool True"),
        ({"label": {None: "x"}}, "['label'][None]", "NoneType None"),
        ({"label": {1.5: "x"}}, "['label'][1.5]", "float 1.5"),
        # Mixed keys: sort_keys used to fail with "'<' not supported between instances".
        ({"label": {"a": 1, 2: "b"}}, "['label'][2]", "int 2"),
        # Refused by json.dumps, but with a message that did not say where.
        ({"label": {("a", "b"): 1}}, "['label'][('a', 'b')]", "tuple ('a', 'b')"),
        # At any depth, inside lists and tuples too.
        ({"label": [{"ok": 1}, {"deep": {7: 0}}]}, "['label'][1]['deep'][7]", "int 7"),
        ({"label": ({"x": {8: 0}},)}, "['label'][0]['x'][8]", "int 8"),
    ],
)
def test_a_nested_non_str_key_is_named_with_its_path(kwargs, key_path, key):
    check_id, msg, hint = only_problem(kwargs)
    assert check_id == "posixcron.E015"
    assert msg == (
        f"{KWARGS} is not JSON-serialisable as declared: the key at {KWARGS}{key_path} is {key}, "
        f"not a str (JSON would turn it into a str or refuse it). Got {kwargs!r}."
    )
    assert hint == HINT


def test_str_keys_at_every_depth_are_accepted():
    kwargs = {"label": {"a": [{"b": {"c": None}}], "d": ("e", {"f": 1})}}
    declarations, problems = collect(
        {"TASKS": {"t": task(callable="tests.testapp.jobs.record", kwargs=kwargs)}}
    )
    assert problems == []
    assert declarations["t"].kwargs == {"label": {"a": [{"b": {"c": None}}], "d": ["e", {"f": 1}]}}


def test_a_shared_container_is_fine_and_a_cycle_is_still_reported():
    shared = {"x": 1}
    _, problems = collect(
        {
            "TASKS": {
                "t": task(callable="tests.testapp.jobs.record", kwargs={"label": [shared, shared]})
            }
        }
    )
    assert problems == []

    cycle: dict[str, Any] = {}
    cycle["self"] = cycle
    check_id, msg, _ = only_problem({"label": cycle})
    assert check_id == "posixcron.E015"
    assert msg == (
        f"{KWARGS} is not JSON-serialisable: Circular reference detected. Got "
        "{'label': {'self': {...}}}."
    )


@pytest.mark.parametrize("container", [list, dict])
def test_absurdly_deep_kwargs_are_reported_not_raised(container):
    deep: Any = 0
    for _ in range(100_000):
        deep = [deep] if container is list else {"a": deep}
    check_id, msg, hint = only_problem({"label": deep})
    assert check_id == "posixcron.E015"
    assert msg.startswith(f"{KWARGS} is nested too deeply to be stored. Got {{'label': ")
    assert len(msg) < 500  # a shortened repr: the full one cannot even be built
    assert hint == HINT


def test_deeply_nested_kwargs_that_are_not_a_dict_are_reported_not_raised():
    deep: Any = 0
    for _ in range(100_000):
        deep = [deep]
    definition = task(callable="tests.testapp.jobs.record", kwargs=deep)
    _, problems = collect({"TASKS": {"t": definition}})
    [problem] = problems
    assert problem.id == "posixcron.E014"
    assert problem.msg.startswith(f"{KWARGS} is misconfigured. Expected a dict with str keys")


def nested(levels: int) -> dict[str, Any]:
    """kwargs whose dicts and lists nest `levels` deep, the kwargs dict included."""
    value: Any = "leaf"
    for level in range(levels - 1):
        value = [value] if level % 2 else {"a": value}
    return {"label": value}


@pytest.mark.django_db
def test_kwargs_as_deep_as_every_database_stores_are_stored_and_read_back():
    declarations, problems = collect(
        {"TASKS": {"t": task(callable="tests.testapp.jobs.record", kwargs=nested(31))}}
    )
    assert problems == []
    reconcile(declarations=declarations)
    assert Task.objects.get(name="t").kwargs == nested(31)


@pytest.mark.parametrize("levels", [32, 400])
def test_kwargs_deeper_than_mariadb_stores_are_refused_with_their_depth(levels):
    # MariaDB's JSON_VALID check refused the row: reconciling crashed with an IntegrityError
    # (and 400 levels crashed the check itself with a RecursionError).
    check_id, msg, hint = only_problem(nested(levels))
    assert check_id == "posixcron.E015"
    assert msg.startswith(
        f"{KWARGS} is nested {levels} dicts and lists deep (the kwargs dict counts as one); "
        "the database stores at most 31 (MariaDB's limit for JSON). Got {'label': "
    )
    assert hint.startswith("Flatten the arguments")


def test_kwargs_past_the_size_a_statement_may_carry_are_refused_with_their_size():
    # 20 MB of kwargs passed the checks; on MariaDB the reconcile's statement went past
    # max_allowed_packet, the server dropped the connection, and the scheduler waited for a
    # database that was there ("Server has gone away"), forever.
    check_id, msg, hint = only_problem({"blob": "x" * 70_000})
    assert check_id == "posixcron.E015"
    assert msg.startswith(
        f"{KWARGS} serialises to 70,012 bytes of JSON; at most 65,536 are stored (MariaDB "
        "and MySQL refuse larger statements by dropping the connection). Got {'blob': "
    )
    assert hint.startswith("Pass a reference instead")


@pytest.mark.django_db
def test_kwargs_at_the_size_limit_are_stored_as_declared():
    blob = "x" * (65_536 - len('{"label": ""}'))  # exactly the limit, as JSON
    declarations, problems = collect(
        {"TASKS": {"t": task(callable="tests.testapp.jobs.record", kwargs={"label": blob})}}
    )
    assert problems == []
    reconcile(declarations=declarations)
    assert Task.objects.get(name="t").kwargs == {"label": blob}


@pytest.mark.parametrize(
    ("kwargs", "where", "number"),
    [
        ({"n": 2**64}, "['n']", 2**64),
        ({"n": -(2**63) - 1}, "['n']", -(2**63) - 1),
        ({"ids": [1, {"big": 10**30}]}, "['ids'][1]['big']", 10**30),
    ],
)
def test_an_integer_mysql_would_round_is_refused_with_its_path(kwargs, where, number):
    # MySQL's JSON keeps 64-bit integers and rounds larger ones to a double: the admin showed
    # another number, and the stored definition differed from settings at every start.
    check_id, msg, hint = only_problem(kwargs)
    assert check_id == "posixcron.E015"
    assert msg == (
        f"{KWARGS} holds the integer {number} at {KWARGS}{where}, outside the 64-bit range "
        "MySQL's JSON stores exactly (it keeps a rounded float: the admin would show another "
        "number, and the stored definition would differ from settings at every start). "
        f"Got {kwargs!r}."
    )
    assert hint == "Pass such a number as a str, and convert it with int() in the task."


@pytest.mark.django_db
def test_integers_at_the_ends_of_the_range_are_stored_and_read_back_exactly():
    kwargs = {"least": -(2**63), "most": 2**64 - 1, "signed": 2**63 - 1, "flag": True, "x": 1.5}
    declarations, problems = collect(
        {"TASKS": {"t": task(callable="tests.testapp.jobs.takes_anything", kwargs=kwargs)}}
    )
    assert problems == []
    reconcile(declarations=declarations)
    assert Task.objects.get(name="t").kwargs == kwargs
    # Read back as declared: a second reconcile finds nothing to change.
    assert reconcile(declarations=declarations).unchanged == ["t"]


def test_a_huge_integer_is_shown_shortened():
    check_id, msg, _ = only_problem({"n": 10**4000})
    assert check_id == "posixcron.E015"
    assert msg.startswith(f"{KWARGS} holds the integer 1000000000")
    assert "... (4001 characters) at " in msg
    assert len(msg) < 1000


@pytest.mark.parametrize(
    ("label", "at", "what"),
    [
        ({"day": datetime.date(2024, 1, 1)}, "['label']['day']", "date datetime.date(2024, 1, 1)"),
        ([1, {"ids": {3}}], "['label'][1]['ids']", "set {3}"),
        ({"ratio": float("inf")}, "['label']['ratio']", "float inf"),
    ],
)
def test_a_value_json_refuses_is_named_by_its_path(label, at, what):
    # json.dumps says "Object of type date is not JSON serializable", not where.
    check_id, msg, _ = only_problem({"label": label})
    assert check_id == "posixcron.E015"
    assert f"(the value at {KWARGS}{at} is {what})" in msg, msg
