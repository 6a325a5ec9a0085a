"""Messages that point at the fix: near misses by case, lazy descriptions, the documented rules."""

from __future__ import annotations

import zoneinfo
from pathlib import Path

import pytest
from django.utils import translation
from django.utils.translation import gettext_lazy

from django_posixcron.declarations import collect
from tests.harness.declaring import task

DOCS = Path(__file__).parents[2] / "docs" / "settings.rst"


@pytest.mark.parametrize(
    ("key", "suggestion"),
    [
        ("tasks", "TASKS"),
        ("Tasks", "TASKS"),
        ("poll_interval", "POLL_INTERVAL"),
        ("Poll_Intervall", "POLL_INTERVAL"),
        ("concurrency", "CONCURRENCY"),
        ("history_day", "HISTORY_DAYS"),
        ("TASK", "TASKS"),  # still found by difflib
    ],
)
def test_top_level_near_misses_by_case_get_a_suggestion(key, suggestion):
    [problem] = collect({key: {}})[1]
    assert problem.id == "posixcron.E002"
    assert problem.msg == f"settings.POSIXCRON has an unknown key {key!r}."
    assert problem.hint == (
        f"Did you mean {suggestion!r}? Known keys: TASKS, POLL_INTERVAL, CONCURRENCY, "
        "HISTORY_DAYS, FAILING_AFTER, ENQUEUE."
    )


@pytest.mark.parametrize(
    ("key", "suggestion"), [("Schedule", "schedule"), ("RETRY_DELAY", "retry_delay")]
)
def test_task_key_near_misses_by_case_get_a_suggestion(key, suggestion):
    definition = task()
    if key == "Schedule":
        definition["Schedule"] = definition.pop("schedule")
    else:
        definition[key] = 60
    problems = collect({"TASKS": {"t": definition}})[1]
    unknown = [p for p in problems if p.id == "posixcron.E006"]
    assert [p.hint.split("?")[0] for p in unknown] == [f"Did you mean {suggestion!r}"]


@pytest.mark.parametrize(
    ("zone", "suggestion"),
    [("utc", "UTC"), ("europe/berlin", "Europe/Berlin"), ("EUROPE/BERLN", "Europe/Berlin")],
)
def test_zone_near_misses_by_case_get_a_suggestion(zone, suggestion):
    [problem] = collect({"TASKS": {"t": task(timezone=zone)}})[1]
    assert problem.id == "posixcron.E016"
    assert problem.msg == (
        "settings.POSIXCRON['TASKS']['t']['timezone'] is misconfigured. Expected an IANA time "
        f"zone name but got {zone!r}."
    )
    assert problem.hint.startswith(f"Did you mean {suggestion!r}? Use a name such as")


def test_an_unknown_zone_shaped_like_an_iana_name_points_at_the_zone_database():
    # A zone newer than the host's database ('Europe/Kyiv' on an old one) read as a typo.
    [problem] = collect({"TASKS": {"t": task(timezone="Europe/Atlantis")}})[1]
    assert problem.id == "posixcron.E016"
    assert problem.hint.endswith(
        "If 'Europe/Atlantis' is a zone newer than this host's time zone database, update it: "
        f"Python reads zones from {', '.join(zoneinfo.TZPATH)}, then from the 'tzdata' package."
    )
    [typo] = collect({"TASKS": {"t": task(timezone="europe/atlantis")}})[1]
    assert "time zone database" not in typo.hint


class TestLazyDescription:
    def test_accepted_stored_as_str_with_the_plain_str_hash(self):
        lazy = collect({"TASKS": {"t": task(description=gettext_lazy("Mail the report"))}})
        plain = collect({"TASKS": {"t": task(description="Mail the report")}})
        assert lazy[1] == plain[1] == []
        declaration = lazy[0]["t"]
        assert type(declaration.description) is str
        assert declaration.description == "Mail the report"
        assert declaration.definition() == plain[0]["t"].definition()
        assert declaration.definition_hash == plain[0]["t"].definition_hash

    def test_translated_into_language_code_whatever_language_is_active(self, settings):
        # A check run inside a German request must not change the definition (and its hash).
        with translation.override("de"):
            declarations, _ = collect({"TASKS": {"t": task(description=gettext_lazy("Yes"))}})
        assert declarations["t"].description == "Yes"

        settings.LANGUAGE_CODE = "de"
        declarations, _ = collect({"TASKS": {"t": task(description=gettext_lazy("Yes"))}})
        assert declarations["t"].description == "Ja"

    def test_a_nul_in_a_lazy_description_is_still_e020(self):
        [problem] = collect({"TASKS": {"t": task(description=gettext_lazy("a\x00b"))}})[1]
        assert problem.id == "posixcron.E020"
        assert "holds a NUL character" in problem.msg

    @pytest.mark.parametrize(
        ("value", "shown"), [(["x"], "list ['x']"), (5, "int 5"), (b"report", "bytes b'report'")]
    )
    def test_other_non_str_values_name_their_type(self, value, shown):
        [problem] = collect({"TASKS": {"t": task(description=value)}})[1]
        assert problem.id == "posixcron.E020"
        assert problem.msg == (
            "settings.POSIXCRON['TASKS']['t']['description'] is misconfigured. Expected a str but "
            f"got {shown}."
        )


class TestFrequencyGuardAsDocumented:
    def test_an_every_minute_schedule_takes_a_poll_interval_of_at_most_60_seconds(self):
        declarations, problems = collect({"TASKS": {"t": task("* * * * *")}, "POLL_INTERVAL": 60})
        assert (list(declarations), problems) == (["t"], [])
        [problem] = collect({"TASKS": {"t": task("* * * * *")}, "POLL_INTERVAL": 60.5})[1]
        assert problem.id == "posixcron.E024"

    def test_the_docs_say_at_most(self):
        text = " ".join(DOCS.read_text("utf-8").split())
        assert "needs ``POLL_INTERVAL`` under 60 seconds" not in text
        assert "needs ``POLL_INTERVAL`` of at most 60 seconds" in text


def test_a_huge_value_is_named_in_a_line_that_can_be_read():
    """A 5,000-character mistake is cut in the message, with its length; the problem keeps
    the whole value."""
    huge = "x" * 5000
    [problem] = collect({"TASKS": {"t": task(retry_delay=huge)}})[1]
    assert problem.id == "posixcron.E017"
    assert problem.msg.startswith("settings.POSIXCRON['TASKS']['t']['retry_delay'] is ")
    assert problem.msg.endswith(f"but got '{'x' * 99}... (5002 characters).")
    assert problem.value == huge


def test_a_huge_cron_token_is_cut_in_the_hint_too():
    [problem] = collect({"TASKS": {"t": task(schedule="9" * 5000 + " * * * *")}})[1]
    assert problem.id == "posixcron.E009"
    assert len(problem.msg) < 400
    assert problem.hint.startswith(f"Fix the minute field, '{'9' * 99}... (5002 characters): ")


def test_a_name_of_the_longest_valid_length_is_shown_whole():
    name = "n" * 100
    [problem] = collect({"TASKS": {name: task(overlap="never")}})[1]
    assert problem.msg.startswith(f"settings.POSIXCRON['TASKS'][{name!r}]['overlap'] is ")
