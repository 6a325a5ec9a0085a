"""runscheduler validates the settings once for its system checks and its declarations."""

from __future__ import annotations

from django.test import override_settings

from django_posixcron.declarations import collect
from django_posixcron.declarations.top_level import collected_once

ONE = {"TASKS": {"a": {"schedule": "0 3 * * *", "callable": "tests.testapp.jobs.noop"}}}
TWO = {
    "TASKS": {
        **ONE["TASKS"],
        "b": {"schedule": "0 4 * * *", "callable": "tests.testapp.jobs.noop"},
    }
}


def test_within_the_block_settings_are_validated_once_and_reused():
    with override_settings(POSIXCRON=ONE), collected_once():
        first, problems = collect()
        with override_settings(POSIXCRON=TWO):
            again, _ = collect()  # what start-up validated, not validated again
        assert list(again) == ["a"]
        assert again["a"] is first["a"]
        again.clear()  # each caller gets its own dict
        assert list(collect()[0]) == ["a"]
        assert problems == []
    with override_settings(POSIXCRON=TWO):
        assert list(collect()[0]) == ["a", "b"]  # outside the block: read afresh


def test_problems_are_reused_too_and_explicit_input_is_never_memoised():
    broken = {"TASKS": {"a": {"schedule": "61 * * * *", "callable": "tests.testapp.jobs.noop"}}}
    with override_settings(POSIXCRON=broken), collected_once():
        _, problems = collect()
        assert [p.id for p in problems] == ["posixcron.E009"]
        assert [p.id for p in collect()[1]] == ["posixcron.E009"]
        assert list(collect(ONE)[0]) == ["a"]
