"""Messages about the callable's path and signature that say what is wrong, where, and the fix."""

from __future__ import annotations

from typing import Any

import pytest

from django_posixcron.declarations import collect
from tests.harness.declaring import task

CALLABLE = "settings.POSIXCRON['TASKS']['t']['callable']"
JOBS = "tests.testapp.jobs"


def only_problem(**definition: Any) -> tuple[str, str, str]:
    _, problems = collect({"TASKS": {"t": task(**definition)}})
    assert len(problems) == 1, problems
    return problems[0].id, problems[0].msg, problems[0].hint


@pytest.mark.parametrize("name", ["static", "klass"])
def test_a_method_reached_through_its_class_is_refused_naming_the_module_that_imports(name):
    path = f"{JOBS}.Holder.{name}"
    assert only_problem(callable=path) == (
        "posixcron.E011",
        f"{CALLABLE} = {path!r} cannot be imported: 'Holder' is not a module but an attribute "
        f"of the module {JOBS!r}, and only 'module.attribute' paths are supported.",
        f"Declare a module-level name for it in {JOBS}, e.g. {name} = Holder.{name}, and use "
        f'"{JOBS}.{name}".',
    )


def test_an_instance_method_reached_through_its_class_is_refused_as_needing_an_instance():
    path = f"{JOBS}.Holder.method"
    check_id, msg, hint = only_problem(callable=path)
    assert check_id == "posixcron.E011"
    assert "'Holder' is not a module but an attribute of the module" in msg
    assert hint == (
        "Holder.method is an instance method: calling it needs an instance of Holder. Declare "
        f"a function in {JOBS} that creates one and calls its method(), and name that function."
    )


def test_a_missing_attribute_behind_a_class_is_named():
    path = f"{JOBS}.Holder.nope"
    check_id, msg, hint = only_problem(callable=path)
    assert check_id == "posixcron.E011"
    assert msg.endswith("paths are supported; and Holder has no attribute 'nope'.")
    assert hint.startswith("Check the attribute names")


def test_a_module_imported_into_another_is_named_by_its_own_path():
    path = f"{JOBS}.time.sleep"  # jobs.py does `import time`
    assert only_problem(callable=path) == (
        "posixcron.E011",
        f"{CALLABLE} = {path!r} cannot be imported: 'time' in the module {JOBS!r} is the "
        f"module 'time' imported there, not a submodule of {JOBS!r}.",
        'Use its own path, "time.sleep".',
    )


def test_a_missing_module_keeps_the_import_error():
    _, msg, hint = only_problem(callable=f"{JOBS}.nope.run")
    assert "ModuleNotFoundError: No module named 'tests.testapp.jobs.nope'" in msg
    assert hint.startswith("Check the module path")


def test_a_keyword_for_a_positional_only_parameter_says_so():
    path = f"{JOBS}.positional_only"
    check_id, msg, hint = only_problem(callable=path, kwargs={"a": 1})
    assert check_id == "posixcron.E013"
    # Python's own words follow the colon; they differ between versions.
    assert msg.startswith(f"{CALLABLE} = {path!r} cannot be called with the declared kwargs ")
    assert "positional" in msg
    assert hint.startswith("Make the kwargs match the signature positional_only(a: 'int', /")
    assert hint.endswith(
        "'a' is positional-only: kwargs are passed by keyword. Declare a function that takes "
        "it by keyword and passes it on by position."
    )


def test_a_kwargs_key_clashing_with_the_context_parameter_says_so():
    path = f"{JOBS}.context_and_more"
    assert only_problem(callable=path, takes_context=True, kwargs={"context": 1}) == (
        "posixcron.E013",
        f"{CALLABLE} = {path!r} cannot be called with a RunContext first and the declared "
        "kwargs {'context': 1}: multiple values for argument 'context'.",
        "With takes_context, the RunContext is passed as the first positional argument, to "
        "the parameter 'context'; the kwargs key 'context' clashes with it. Rename the key "
        "(and the parameter it is meant for), or remove it.",
    )


def test_a_partial_whose_bound_arguments_break_the_signature_is_an_error():
    path = f"{JOBS}.PARTIAL_TOO_MANY"  # functools.partial(noop, 1)
    assert only_problem(callable=path) == (
        "posixcron.E013",
        f"{CALLABLE} = {path!r} cannot be called with the arguments its functools.partial "
        "binds (1) and the declared kwargs {}: too many positional arguments.",
        "Make the arguments the partial binds and the kwargs, together, match the signature "
        "noop() -> 'None'.",
    )


def test_a_partial_is_checked_by_its_own_signature():
    path = f"{JOBS}.PARTIAL_OF_RECORD"  # functools.partial(record, task_name="partial")
    assert collect({"TASKS": {"t": task(callable=path, kwargs={"label": "x"})}})[1] == []
    check_id, _, hint = only_problem(callable=path, kwargs={"lable": "x"})
    assert check_id == "posixcron.E013"
    assert hint.endswith("It has no parameter 'lable'.")


def test_a_callable_without_a_signature_is_no_error():
    # Nothing to check against: posixcron.W003 says so (tests/checks/test_unchecked_call.py).
    path = f"{JOBS}.no_signature"
    declarations, problems = collect({"TASKS": {"t": task(callable=path, kwargs={"secs": 1})}})
    assert problems == []
    assert list(declarations) == ["t"]
