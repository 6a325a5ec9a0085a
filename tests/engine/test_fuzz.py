"""Any string gives a CronExpression or a CronSyntaxError, never another exception."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from django_posixcron.cron import CronExpression, CronSyntaxError

FUZZ = settings(max_examples=300, deadline=None, derandomize=True)
CRONISH = st.text(
    alphabet=st.sampled_from(list("0123456789*,-/ \t?LW#@abcdefghjmnorstuy\n\u0661\u00b9\u00a0.+")),
    max_size=40,
)


FIELDS = {"minute", "hour", "day-of-month", "month", "day-of-week", "expression"}


def parse_or_reject(text: str) -> None:
    try:
        expression = CronExpression(text)
    except CronSyntaxError as caught:
        error = caught
    else:
        # The normalised text is itself valid and means the same.
        assert CronExpression(str(expression)) == expression
        expression.describe()
        return
    assert error.field in FIELDS
    assert str(error).startswith(f"Bad {error.field} ")
    assert error.token or not text.strip(" \t")
    assert error.reason


@FUZZ
@given(st.text(max_size=60))
def test_any_text(text):
    parse_or_reject(text)


@FUZZ
@given(CRONISH)
def test_cron_like_text(text):
    parse_or_reject(text)


@FUZZ
@given(st.lists(CRONISH.filter(lambda s: " " not in s and "\t" not in s), min_size=5, max_size=5))
def test_five_cron_like_fields(parts):
    parse_or_reject(" ".join(parts))


def test_ten_kilobyte_strings_return():
    for text in (
        "1," * 5_000 + "1 * * * *",
        "0" * 10_000 + " * * * *",
        "1-2," * 2_500 + " * * * *",
        " " * 10_000,
        "* " * 5_000,
        "\u0661" * 10_000,
        ("9" * 5_000) + "-" + ("9" * 5_000) + " * * * *",
        "*/" + "9" * 10_000 + " * * * *",
        "mon-" * 2_500 + " * * * *",
    ):
        parse_or_reject(text)
