"""The five POSIX fields: bounds, parsing, and the messages for what POSIX does not allow."""

from __future__ import annotations

import re
from typing import NamedTuple

from django_posixcron.cron.errors import CronSyntaxError


class Field(NamedTuple):
    name: str
    low: int
    high: int
    plural: str  # for "list the minutes: ..."


MINUTE = Field("minute", 0, 59, "minutes")
HOUR = Field("hour", 0, 23, "hours")
DAY_OF_MONTH = Field("day-of-month", 1, 31, "days")
MONTH = Field("month", 1, 12, "months")
DAY_OF_WEEK = Field("day-of-week", 0, 6, "days")
# Any number past three significant digits: out of every field's range, whatever its size.
OUT_OF_RANGE = 10**6
FIELDS = (MINUTE, HOUR, DAY_OF_MONTH, MONTH, DAY_OF_WEEK)

MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
DAY_NAMES = ("Sunday", "Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday")
_NAME_VALUES: dict[str, dict[str, int]] = {
    MONTH.name: {name[:3].lower(): number for number, name in enumerate(MONTH_NAMES, 1)},
    DAY_OF_WEEK.name: {name[:3].lower(): number for number, name in enumerate(DAY_NAMES)},
}
_MACROS = {
    "@yearly": "0 0 1 1 *",
    "@annually": "0 0 1 1 *",
    "@monthly": "0 0 1 * *",
    "@weekly": "0 0 * * 0",
    "@daily": "0 0 * * *",
    "@midnight": "0 0 * * *",
    "@hourly": "0 * * * *",
}

# "A field is `*` or a comma list of elements; an element is a number or an inclusive range
# `a-b`. Digits are ASCII `0-9` only." -- [0-9] rather than \d, which matches any Unicode digit.
_FIELD_RE = re.compile(r"\*|[0-9]+(?:-[0-9]+)?(?:,[0-9]+(?:-[0-9]+)?)*")
# Whitespace other than space and tab: \s is Unicode-aware, so this catches NBSP, U+2003, ...
_OTHER_SPACE_RE = re.compile(r"[^\S \t]")
_BLANKS_RE = re.compile(r"[ \t]+")
_QUARTZ_RE = re.compile(r"[0-9]*L(?:-[0-9]+)?|LW|[0-9]*W", re.IGNORECASE)
_NAME_RE = re.compile(r"([a-z]+)(?:-([a-z]+))?", re.IGNORECASE)
_STEP_RE = re.compile(r"(\*|[0-9]+)(?:-([0-9]+))?/([0-9]+)")
_SPACE_NAMES = {"\n": "a newline", "\r": "a carriage return", "\x0b": "a vertical tab"}
_SPACE_NAMES["\x0c"] = "a form feed"


def split_fields(text: str) -> list[str]:
    """Split an expression into its five field texts, or raise CronSyntaxError."""
    bad_space = _OTHER_SPACE_RE.search(text)
    if bad_space is not None:
        char = bad_space.group()
        what = _SPACE_NAMES.get(char, f"U+{ord(char):04X}")
        raise CronSyntaxError(
            "expression", text, f"only spaces and tabs may separate fields, found {what}"
        )
    stripped = text.strip(" \t")
    if stripped.startswith("@"):
        macro = stripped.split(" ")[0].split("\t")[0]
        spelling = _MACROS.get(macro.lower())
        if spelling is not None:
            reason = f"macros are not POSIX, use '{spelling}'"
        elif macro.lower() == "@reboot":
            reason = "macros are not POSIX and @reboot has no POSIX spelling"
        else:
            reason = "macros are not POSIX"
        raise CronSyntaxError("expression", macro, reason)
    parts = _BLANKS_RE.split(stripped) if stripped else []
    if len(parts) != len(FIELDS):
        reason = (
            f"expected 5 fields (minute hour day-of-month month day-of-week), found {len(parts)}"
        )
        if len(parts) in (6, 7):
            reason += " (POSIX has no seconds or year field)"
        raise CronSyntaxError("expression", text, reason)
    return parts


def _value(digits: str) -> int:
    """Return the number `digits` spell (leading zeros allowed); past three significant
    digits, a number out of every field's range (int() refuses more than 4300 digits)."""
    significant = digits.lstrip("0") or "0"
    return int(significant) if len(significant) <= 3 else OUT_OF_RANGE


def _number(field: Field, digits: str, element: str) -> int:
    value = _value(digits)
    if value == 7 and field is DAY_OF_WEEK:
        # "Use 0" only where 0 says the same: 7 alone, not a range through it.
        hint = ", use 0" if element.lstrip("0") == "7" else ""
        raise CronSyntaxError(
            field.name, element, f"7 is not a POSIX day-of-week (0-6, Sunday is 0){hint}"
        )
    if not field.low <= value <= field.high:
        raise CronSyntaxError(field.name, element, f"must be {field.low}-{field.high}")
    return value


def parse_field(field: Field, text: str) -> tuple[int, ...] | None:
    """Return the sorted values of a field, None for `*`, or raise CronSyntaxError."""
    if _FIELD_RE.fullmatch(text) is None:
        _explain(field, text)
    if text == "*":
        return None
    values: set[int] = set()
    for element in text.split(","):
        low_text, dash, high_text = element.partition("-")
        low = _number(field, low_text, element)
        if not dash:
            values.add(low)
            continue
        if field is DAY_OF_WEEK and high_text.lstrip("0") == "7" and low <= 6:
            days = {0, *range(low, 7)}
            raise CronSyntaxError(
                field.name,
                element,
                f"7 is not a POSIX day-of-week (0-6, Sunday is 0), use {render(days)}",
            )
        high = _number(field, high_text, element)
        if low > high:
            raise CronSyntaxError(
                field.name,
                element,
                f"ranges must not wrap around (a-b needs a <= b), use {_unwrap(field, low, high)}",
            )
        values.update(range(low, high + 1))
    return tuple(sorted(values))


def render(values: set[int] | tuple[int, ...]) -> str:
    """Return the canonical text of a value set: runs of three or more as ranges."""
    ordered = sorted(values)
    parts: list[str] = []
    index = 0
    while index < len(ordered):
        end = index
        while end + 1 < len(ordered) and ordered[end + 1] == ordered[end] + 1:
            end += 1
        if end - index >= 2:
            parts.append(f"{ordered[index]}-{ordered[end]}")
            index = end + 1
        else:
            parts.append(str(ordered[index]))
            index += 1
    return ",".join(parts)


def _unwrap(field: Field, low: int, high: int) -> str:
    """Return `low-high` split at the end of the field: 22-2 -> "22-23,0-2"."""

    def span(start: int, end: int) -> str:
        return str(start) if start == end else f"{start}-{end}"

    return f"{span(low, field.high)},{span(field.low, high)}"


def _explain(field: Field, text: str) -> None:
    """Raise the CronSyntaxError that says what is wrong with a field that failed the grammar."""
    elements = text.split(",")
    if "" in elements:
        raise CronSyntaxError(field.name, text, "empty element in the list")
    if "*" in elements:
        raise CronSyntaxError(
            field.name, text, "'*' cannot be part of a list: use * alone, or list the values"
        )
    for element in elements:
        if _FIELD_RE.fullmatch(element) is None:
            _explain_element(field, element)
    # Every element is fine on its own, so the grammar must have failed on the whole:
    raise CronSyntaxError(field.name, text, "must be * or a comma list of numbers and ranges a-b")


def _explain_element(field: Field, element: str) -> None:
    name = field.name
    if "*" in element and "/" not in element:
        where = "inside a range" if "-" in element else "next to other characters"
        raise CronSyntaxError(name, element, f"'*' must stand alone, not {where}")
    if "/" in element:
        raise CronSyntaxError(name, element, _step_reason(field, element))
    for char, meaning in (("?", "any"), ("#", "nth weekday")):
        if char in element:
            hint = ", use *" if char == "?" else "; POSIX has no equivalent"
            raise CronSyntaxError(
                name, element, f"'{char}' ({meaning}) is a Quartz token, not POSIX{hint}"
            )
    if _QUARTZ_RE.fullmatch(element):
        letter = "W" if "W" in element.upper() and "L" not in element.upper() else "L"
        meaning = "nearest weekday" if letter == "W" else "last"
        raise CronSyntaxError(
            name,
            element,
            f"'{letter}' ({meaning}) is a Quartz token, not POSIX; it has no POSIX equivalent",
        )
    if element[:1] in "+-":
        raise CronSyntaxError(name, element, "signs are not allowed, numbers are plain digits 0-9")
    if "." in element:
        raise CronSyntaxError(name, element, "decimals are not allowed, use whole numbers")
    if re.fullmatch(r"[0-9]*0[xX][0-9a-fA-F]*", element):
        raise CronSyntaxError(name, element, "hexadecimal is not allowed, use decimal digits")
    if re.fullmatch(r"[0-9]+[eE][0-9+-]*", element):
        raise CronSyntaxError(name, element, "exponents are not allowed, use plain digits")
    named = _NAME_RE.fullmatch(element)
    if named is not None:
        raise CronSyntaxError(name, element, _name_reason(field, named))
    for char in element:
        if char.isdigit() and char not in "0123456789":
            raise CronSyntaxError(
                name, element, f"{char!r} is not an ASCII digit, use the digits 0-9"
            )
    for char in element:
        if char not in "0123456789-":
            raise CronSyntaxError(
                name, element, f"unexpected character {char!r}, use digits 0-9, '-' and ','"
            )
    raise CronSyntaxError(name, element, "must be a number or a range a-b")


def _step_reason(field: Field, element: str) -> str:
    reason = "steps are not POSIX"
    match = _STEP_RE.fullmatch(element)
    if match is None:
        return reason
    start_text, end_text, step_text = match.groups()
    step = _value(step_text)
    if start_text == "*":
        start, end = field.low, field.high
    else:
        start = _value(start_text)
        end = field.high if end_text is None else _value(end_text)
    if not 0 < step < OUT_OF_RANGE or not field.low <= start <= end <= field.high:
        return reason
    values = tuple(range(start, end + 1, step))
    if step == 1:
        return f"{reason}, use {'*' if start_text == '*' else render(values)}"
    return f"{reason}, list the {field.plural}: {','.join(map(str, values))}"


def _name_reason(field: Field, named: re.Match[str]) -> str:
    reason = "names are not POSIX"
    table = _NAME_VALUES.get(field.name)
    if table is None:
        return reason
    numbers = [table.get(part[:3].lower()) for part in named.groups() if part is not None]
    known = [
        part.lower() in (full.lower() for full in (*MONTH_NAMES, *DAY_NAMES)) or len(part) == 3
        for part in named.groups()
        if part is not None
    ]
    if None in numbers or not all(known):
        return reason
    first, last = numbers[0], numbers[-1]
    if first is not None and last is not None and first > last:
        return f"{reason}, use {_unwrap(field, first, last)}"
    return f"{reason}, use {'-'.join(str(number) for number in numbers)}"
