"""Parsing: what POSIX accepts, the normalised text, and every rejection with its message."""

from __future__ import annotations

import pickle

import pytest

from django_posixcron.cron import CronExpression, CronSyntaxError

POSITIONS = ("minute", "hour", "day-of-month", "month", "day-of-week")


def expression_with(position: int, token: str) -> str:
    """Return a valid expression with one field replaced by `token`."""
    parts = ["0", "0", "1", "1", "*"]
    parts[position] = token
    return " ".join(parts)


@pytest.mark.parametrize(
    ("text", "normalised"),
    [
        ("15 3 * * 1-5", "15 3 * * 1-5"),
        ("  15\t 3 * *  1-5\t", "15 3 * * 1-5"),
        ("00 003 01 01 00", "0 3 1 1 0"),
        ("5,1,3-4,2 * * * *", "1-5 * * * *"),
        ("1,2 1-1 * * *", "1,2 1 * * *"),
        # Fixed-time stays fixed-time; full day and month fields mean `*`.
        ("0-59 0-23 1-31 1-12 0-6", "0-59 0-23 * * *"),
        ("59,0 23 31 12 6", "0,59 23 31 12 6"),
        ("0 0 29 2 *", "0 0 29 2 *"),
    ],
)
def test_accepted_and_normalised(text, normalised):
    assert str(CronExpression(text)) == normalised


def test_equal_expressions_compare_and_hash_equal():
    one = CronExpression("0,15,30,45 * * * *")
    other = CronExpression(" 45,30,15,0\t* * * *")
    assert one == other
    assert hash(one) == hash(other)
    assert len({one, other}) == 1
    assert one != CronExpression("0,15,30 * * * *")
    assert one != "0,15,30,45 * * * *"


@pytest.mark.parametrize(
    ("one", "other"),
    [
        ("0 0 * 1-12 *", "0 0 * * *"),
        ("0-59 * * * *", "* * * * *"),  # the hour's `*` already makes it elapsed-time
        ("* 0-23 * * *", "* * * * *"),
        ("0 0 1-31 * 1", "0 0 * * *"),  # "a day matches if either matches": every day
        ("0 0 * * 0-6", "0 0 * * *"),
        ("0 0 1-30 4 *", "0 0 * 4 *"),
        ("0 0 1-29 2 3", "0 0 * 2 *"),
        ("0 0 31 2 1", "0 0 * 2 1"),  # no February 31: the Mondays of February
        ("0 0 30,31 2,4 *", "0 0 30 4 *"),
        ("0 0 31 1,3,5,7,8,10,12 *", "0 0 31 * *"),
    ],
)
def test_expressions_with_the_same_occurrences_are_equal(one, other):
    assert CronExpression(one) == CronExpression(other)
    assert hash(CronExpression(one)) == hash(CronExpression(other))
    assert str(CronExpression(one)) == str(CronExpression(other)) == other


@pytest.mark.parametrize(
    ("one", "other"),
    [
        # Under the day rule a full range is not `*`: every day against Mondays only.
        ("0 0 1-31 * 1", "0 0 * * 1"),
        ("0 0 1 * 0-6", "0 0 1 * *"),
        # A literal `*` in the minute or hour field follows elapsed time across DST changes.
        ("0-59 2 * * *", "* 2 * * *"),
        ("0-59 0-23 * * *", "* * * * *"),
        ("0 0 1-30 * *", "0 0 * * *"),
        ("0 0 30 1-3 *", "0 0 30 1,3,4 *"),
    ],
)
def test_expressions_with_different_occurrences_differ(one, other):
    assert CronExpression(one) != CronExpression(other)
    assert str(CronExpression(one)) != str(CronExpression(other))


def test_one_cache_of_parsed_expressions():
    from django_posixcron.timing import expression

    assert expression("15 3 * * 1-5") is CronExpression("15 3 * * 1-5")


def test_repr_pickle_and_copy():
    expression = CronExpression("15 3 * * 1-5")
    assert repr(expression) == "CronExpression('15 3 * * 1-5')"
    assert pickle.loads(pickle.dumps(expression)) == expression


@pytest.mark.parametrize(("value", "name"), [(5, "int"), (["* * * * *"], "list"), ({}, "dict")])
def test_not_a_string(value, name):
    # Unhashable values too: the type is checked before the parse cache is consulted.
    with pytest.raises(TypeError, match=f"a cron expression is a str, not {name}"):
        CronExpression(value)


@pytest.mark.parametrize(
    ("text", "field", "token", "message"),
    [
        (
            "*/15 * * * *",
            "minute",
            "*/15",
            "Bad minute '*/15': steps are not POSIX, list the minutes: 0,15,30,45",
        ),
        (
            "0-30/5 * * * *",
            "minute",
            "0-30/5",
            "Bad minute '0-30/5': steps are not POSIX, list the minutes: 0,5,10,15,20,25,30",
        ),
        (
            # Leading zeros read as everywhere else, however many.
            "5-00010/5 * * * *",
            "minute",
            "5-00010/5",
            "Bad minute '5-00010/5': steps are not POSIX, list the minutes: 5,10",
        ),
        ("0-99999/5 * * * *", "minute", "0-99999/5", "Bad minute '0-99999/5': steps are not POSIX"),
        (
            "0 */6 * * *",
            "hour",
            "*/6",
            "Bad hour '*/6': steps are not POSIX, list the hours: 0,6,12,18",
        ),
        (
            "0 0 */10 * *",
            "day-of-month",
            "*/10",
            "Bad day-of-month '*/10': steps are not POSIX, list the days: 1,11,21,31",
        ),
        (
            "0 0 1 */3 *",
            "month",
            "*/3",
            "Bad month '*/3': steps are not POSIX, list the months: 1,4,7,10",
        ),
        ("*/1 * * * *", "minute", "*/1", "Bad minute '*/1': steps are not POSIX, use *"),
        ("*/0 * * * *", "minute", "*/0", "Bad minute '*/0': steps are not POSIX"),
        ("0 0 * * mon", "day-of-week", "mon", "Bad day-of-week 'mon': names are not POSIX, use 1"),
        (
            "0 0 * * MON-FRI",
            "day-of-week",
            "MON-FRI",
            "Bad day-of-week 'MON-FRI': names are not POSIX, use 1-5",
        ),
        (
            "0 0 * * Sunday",
            "day-of-week",
            "Sunday",
            "Bad day-of-week 'Sunday': names are not POSIX, use 0",
        ),
        (
            "0 0 * * fri-mon",
            "day-of-week",
            "fri-mon",
            "Bad day-of-week 'fri-mon': names are not POSIX, use 5-6,0-1",
        ),
        ("0 0 1 jan *", "month", "jan", "Bad month 'jan': names are not POSIX, use 1"),
        ("0 0 1 * jan", "day-of-week", "jan", "Bad day-of-week 'jan': names are not POSIX"),
        (
            "0 0 ? * 1",
            "day-of-month",
            "?",
            "Bad day-of-month '?': '?' (any) is a Quartz token, not POSIX, use *",
        ),
        (
            "0 0 L * *",
            "day-of-month",
            "L",
            "Bad day-of-month 'L': 'L' (last) is a Quartz token, "
            "not POSIX; it has no POSIX equivalent",
        ),
        (
            "0 0 * * 5L",
            "day-of-week",
            "5L",
            "Bad day-of-week '5L': 'L' (last) is a Quartz "
            "token, not POSIX; it has no POSIX equivalent",
        ),
        (
            "0 0 15W * *",
            "day-of-month",
            "15W",
            "Bad day-of-month '15W': 'W' (nearest weekday) is "
            "a Quartz token, not POSIX; it has no POSIX equivalent",
        ),
        (
            "0 0 * * 1#2",
            "day-of-week",
            "1#2",
            "Bad day-of-week '1#2': '#' (nth weekday) is a "
            "Quartz token, not POSIX; POSIX has no equivalent",
        ),
        (
            "0 0 * * 7",
            "day-of-week",
            "7",
            "Bad day-of-week '7': 7 is not a POSIX day-of-week (0-6, Sunday is 0), use 0",
        ),
        (
            "0 0 * * 5-7",
            "day-of-week",
            "5-7",
            "Bad day-of-week '5-7': 7 is not a POSIX day-of-week (0-6, Sunday is 0), use 0,5,6",
        ),
        (
            # 8 and 9 are no day at all: no spelling says the same.
            "0 0 * * 7-9",
            "day-of-week",
            "7-9",
            "Bad day-of-week '7-9': 7 is not a POSIX day-of-week (0-6, Sunday is 0)",
        ),
        (
            "0 22-2 * * *",
            "hour",
            "22-2",
            "Bad hour '22-2': ranges must not wrap around (a-b needs a <= b), use 22-23,0-2",
        ),
        (
            "*,5 * * * *",
            "minute",
            "*,5",
            "Bad minute '*,5': '*' cannot be part of a list: use * alone, or list the values",
        ),
        (
            "*-5 * * * *",
            "minute",
            "*-5",
            "Bad minute '*-5': '*' must stand alone, not inside a range",
        ),
        (
            "*5 * * * *",
            "minute",
            "*5",
            "Bad minute '*5': '*' must stand alone, not next to other characters",
        ),
        ("1,,2 * * * *", "minute", "1,,2", "Bad minute '1,,2': empty element in the list"),
        ("1, * * * *", "minute", "1,", "Bad minute '1,': empty element in the list"),
        (
            "+5 * * * *",
            "minute",
            "+5",
            "Bad minute '+5': signs are not allowed, numbers are plain digits 0-9",
        ),
        (
            "-5 * * * *",
            "minute",
            "-5",
            "Bad minute '-5': signs are not allowed, numbers are plain digits 0-9",
        ),
        (
            "1.5 * * * *",
            "minute",
            "1.5",
            "Bad minute '1.5': decimals are not allowed, use whole numbers",
        ),
        (
            "0x1f * * * *",
            "minute",
            "0x1f",
            "Bad minute '0x1f': hexadecimal is not allowed, use decimal digits",
        ),
        (
            "1e1 * * * *",
            "minute",
            "1e1",
            "Bad minute '1e1': exponents are not allowed, use plain digits",
        ),
        (
            "\u0661 * * * *",
            "minute",
            "\u0661",
            "Bad minute '\u0661': '\u0661' is not an ASCII digit, use the digits 0-9",
        ),
        (
            "\u00b9 * * * *",
            "minute",
            "\u00b9",
            "Bad minute '\u00b9': '\u00b9' is not an ASCII digit, use the digits 0-9",
        ),
        (
            "\uff15 * * * *",
            "minute",
            "\uff15",
            "Bad minute '\uff15': '\uff15' is not an ASCII digit, use the digits 0-9",
        ),
        (
            "\u00e9 * * * *",
            "minute",
            "\u00e9",
            "Bad minute '\u00e9': unexpected character '\u00e9', use digits 0-9, '-' and ','",
        ),
        ("60 * * * *", "minute", "60", "Bad minute '60': must be 0-59"),
        ("0 24 * * *", "hour", "24", "Bad hour '24': must be 0-23"),
        ("0 0 0 * *", "day-of-month", "0", "Bad day-of-month '0': must be 1-31"),
        ("0 0 32 * *", "day-of-month", "32", "Bad day-of-month '32': must be 1-31"),
        ("0 0 1 0 *", "month", "0", "Bad month '0': must be 1-12"),
        ("0 0 1 13 *", "month", "13", "Bad month '13': must be 1-12"),
        ("0 0 1 1-13 *", "month", "1-13", "Bad month '1-13': must be 1-12"),
        ("0 0 * * 8", "day-of-week", "8", "Bad day-of-week '8': must be 0-6"),
        (
            "0 0 30 2 *",
            "day-of-month",
            "30",
            "Bad day-of-month '30': never fires: February has no day 30",
        ),
        (
            "0 0 30,31 2 *",
            "day-of-month",
            "30,31",
            "Bad day-of-month '30,31': never fires: February has no day 30 or 31",
        ),
        (
            "0 0 31 4,6,9,11 *",
            "day-of-month",
            "31",
            "Bad day-of-month '31': never fires: April, "
            "June, September and November have no day 31",
        ),
        (
            "@hourly",
            "expression",
            "@hourly",
            "Bad expression '@hourly': macros are not POSIX, use '0 * * * *'",
        ),
        (
            "@daily",
            "expression",
            "@daily",
            "Bad expression '@daily': macros are not POSIX, use '0 0 * * *'",
        ),
        (
            "@reboot",
            "expression",
            "@reboot",
            "Bad expression '@reboot': macros are not POSIX and @reboot has no POSIX spelling",
        ),
        (
            "0 0 * *",
            "expression",
            "0 0 * *",
            "Bad expression '0 0 * *': expected 5 fields "
            "(minute hour day-of-month month day-of-week), found 4",
        ),
        (
            "0 0 0 * * *",
            "expression",
            "0 0 0 * * *",
            "Bad expression '0 0 0 * * *': expected 5 "
            "fields (minute hour day-of-month month day-of-week), found 6 (POSIX has no seconds or "
            "year field)",
        ),
        (
            "",
            "expression",
            "",
            "Bad expression '': expected 5 fields (minute hour day-of-month "
            "month day-of-week), found 0",
        ),
        (
            "0 0 * * *\n",
            "expression",
            "0 0 * * *\n",
            "Bad expression '0 0 * * *\\n': only "
            "spaces and tabs may separate fields, found a newline",
        ),
        (
            "0\u00a00 * * *",
            "expression",
            "0\u00a00 * * *",
            "Bad expression '0\\xa00 * * *': "
            "only spaces and tabs may separate fields, found U+00A0",
        ),
        (
            "0 0 * *\u2003*",
            "expression",
            "0 0 * *\u2003*",
            "Bad expression '0 0 * *\\u2003*': "
            "only spaces and tabs may separate fields, found U+2003",
        ),
    ],
)
def test_rejected_with_field_token_and_rule(text, field, token, message):
    with pytest.raises(CronSyntaxError) as caught:
        CronExpression(text)
    error = caught.value
    assert isinstance(error, ValueError)
    assert (error.field, error.token, str(error)) == (field, token, message)
    assert str(error) == f"Bad {field} {token!r}: {error.reason}"


BAD_TOKENS = ["", "*/2", "x", "?", "L", "1#1", "-1", "1.0", "99", "\u0663", "\u00b2", "1-", "-"]
BAD_TOKENS += ["1-2-3", "2-1", "**", "*,*", ",", "1,,", "0x1", "1e2", "+1", "'1'", "\x00"]


@pytest.mark.parametrize("token", BAD_TOKENS)
@pytest.mark.parametrize("position", range(5))
def test_every_bad_token_in_every_position(position, token):
    if token == "" and position == 4:
        pytest.skip("an empty last field is a 4-field expression")
    text = expression_with(position, token)
    with pytest.raises(CronSyntaxError) as caught:
        CronExpression(text)
    if token:
        assert caught.value.field == POSITIONS[position]
        assert caught.value.token in token


def test_message_shortens_huge_tokens_but_keeps_them():
    text = "9" * 10_000 + " * * * *"
    with pytest.raises(CronSyntaxError) as caught:
        CronExpression(text)
    assert caught.value.token == "9" * 10_000
    assert len(str(caught.value)) < 200


def test_day_of_month_and_week_both_restricted_never_rejected():
    # Either day field may match, and every month has every weekday.
    assert str(CronExpression("0 0 31 2 1")) == "0 0 * 2 1"


def test_error_pickles():
    with pytest.raises(CronSyntaxError) as caught:
        CronExpression("61 * * * *")
    copy = pickle.loads(pickle.dumps(caught.value))
    assert (copy.field, copy.token, str(copy)) == ("minute", "61", "Bad minute '61': must be 0-59")
