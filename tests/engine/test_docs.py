"""Every example in docs/semantics.rst holds."""

from __future__ import annotations

import datetime as dt
import doctest
import re
from pathlib import Path
from zoneinfo import ZoneInfo

import pytest

from django_posixcron.cron import CronExpression, CronSyntaxError

PAGE = Path(__file__).resolve().parents[2] / "docs" / "semantics.rst"
TEXT = PAGE.read_text(encoding="utf-8")
ROWS = re.findall(r"\* - ``([^`]+)``\n((?:     - .*\n|       .*\n)+)", TEXT)


def test_doctests():
    result = doctest.testfile(str(PAGE), module_relative=False, optionflags=doctest.ELLIPSIS)
    assert result.attempted > 0
    assert result.failed == 0


ERRORS = [
    (text, " ".join(" ".join(rest.split()).removeprefix("- ").split("``")[1].split()))
    for text, rest in ROWS
    if "``Bad " in rest
]


@pytest.mark.parametrize(("text", "message"), ERRORS)
def test_error_table(text, message):
    with pytest.raises(CronSyntaxError) as caught:
        CronExpression(text)
    assert str(caught.value) == message


def test_error_table_found():
    assert len(ERRORS) >= 15


STAMP = r"``(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d)``"
BERLIN = [(text, stamp) for text, rest in ROWS for stamp in re.findall(STAMP, rest)]
ZONED = re.findall(r"\* (\w+/\w+) .*?``([^`]+)``\s+fires at\s+" + STAMP, TEXT, re.DOTALL)


@pytest.mark.parametrize(
    ("zone", "text", "stamp"),
    [("Europe/Berlin", text, stamp) for text, stamp in BERLIN] + ZONED,
)
def test_listed_instants_are_occurrences(zone, text, stamp):
    when = dt.datetime.fromisoformat(stamp).astimezone(ZoneInfo(zone))
    assert when.isoformat() == stamp
    assert CronExpression(text).matches(when)


def test_dst_examples_found():
    assert len(BERLIN) >= 10
    assert {zone for zone, _, _ in ZONED} == {
        "Australia/Lord_Howe",
        "Pacific/Chatham",
        "America/Havana",
        "America/Santiago",
    }
