"""The kwargs key: stored as JSON, so given back exactly as declared or refused."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from typing import Any

from django_posixcron.declarations.ids import E_KWARGS_JSON, E_KWARGS_TYPE
from django_posixcron.declarations.problems import Form, Invalid, KeyPath, show
from django_posixcron.declarations.values import (
    NUL_DETAIL,
    SURROGATE_DETAIL,
    has_nul,
    has_surrogate,
    json_depth,
)

# The deepest nesting of dicts and lists every supported database stores: MariaDB refuses a
# JSON value nested deeper than this (its JSON_VALID check on the column), PostgreSQL and
# MySQL accept more.
MAX_JSON_DEPTH = 31

# The largest kwargs, as JSON, a task may declare. Reconciling writes a batch of tasks per
# statement, and MariaDB/MySQL refuse a statement past max_allowed_packet (16 MiB by default
# on MariaDB) by dropping the connection, which reads as an outage retried forever: a hundred
# tasks at this size stay well inside it. Arguments this large belong in a file or a table.
MAX_KWARGS_BYTES = 65_536

# The integers every supported database's JSON stores exactly: MySQL's JSON type keeps signed
# and unsigned 64-bit integers and turns larger ones into doubles, rounded (PostgreSQL's jsonb,
# MariaDB's and SQLite's JSON text keep any integer).
JSON_INTEGERS = range(-(2**63), 2**64)

JSON_HINT = (
    "Use only str, int, float (finite), bool, None, lists and dicts with str keys: the "
    "arguments are stored in the database."
)


def kwargs(value: object, path: KeyPath) -> dict[str, Any]:
    """Return the kwargs as the database's JSONField will give them back."""
    if type(value) is dict and not value:
        return {}  # the default, and most tasks': nothing to walk or round-trip
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        hint = "The keyword arguments are passed as callable(**kwargs)."
        raise Invalid(E_KWARGS_TYPE, Form.EXPECTED, "a dict with str keys", hint)
    try:
        # Walked before json.dumps, which turns int, float, bool and None keys into str
        # without a word (the task would get {'1': ...} for {1: ...}) and, with sort_keys,
        # fails on mixed keys with an unhelpful "'<' not supported".
        bad_key = _non_str_key(value, (), set())
        text = "" if bad_key else json.dumps(dict(value), allow_nan=False, sort_keys=True)
    except RecursionError:
        raise Invalid(
            E_KWARGS_JSON, Form.GOT, "is nested too deeply to be stored", JSON_HINT
        ) from None
    except (TypeError, ValueError) as error:
        detail = f"is not JSON-serialisable: {error}"
        found = _unserialisable(dict(value), (), set())
        if found is not None:
            keys, bad = found
            detail += f" (the value at {_under(path, keys)} is {type(bad).__name__} {show(bad)})"
        raise Invalid(E_KWARGS_JSON, Form.GOT, detail, JSON_HINT) from None
    if bad_key:
        keys, key = bad_key
        key_path = _under(path, keys)
        detail = (
            f"is not JSON-serialisable as declared: the key at {key_path} is "
            f"{type(key).__name__} {show(key)}, not a str (JSON would turn it into a str or "
            "refuse it)"
        )
        raise Invalid(E_KWARGS_JSON, Form.GOT, detail, JSON_HINT)
    size = len(text.encode("utf-8", "surrogatepass"))
    if size > MAX_KWARGS_BYTES:
        detail = (
            f"serialises to {size:,} bytes of JSON; at most {MAX_KWARGS_BYTES:,} are stored "
            "(MariaDB and MySQL refuse larger statements by dropping the connection)"
        )
        hint = "Pass a reference instead (a file path, a table's key) and load the data there."
        raise Invalid(E_KWARGS_JSON, Form.GOT, detail, hint)
    # Round-trip so that what is hashed and compared equals what the JSONField gives back
    # (tuples become lists).
    normalised: dict[str, Any] = json.loads(text)
    depth = json_depth(normalised)
    if depth > MAX_JSON_DEPTH:
        detail = (
            f"is nested {depth} dicts and lists deep (the kwargs dict counts as one); the "
            f"database stores at most {MAX_JSON_DEPTH} (MariaDB's limit for JSON)"
        )
        hint = "Flatten the arguments, or pass such data another way (e.g. as a JSON string)."
        raise Invalid(E_KWARGS_JSON, Form.GOT, detail, hint)
    if has_nul(normalised):
        hint = "Remove the NUL character, or pass such data another way (e.g. base64)."
        raise Invalid(E_KWARGS_JSON, Form.GOT, NUL_DETAIL, hint)
    if has_surrogate(normalised):
        hint = "Decode the text properly (it is not valid Unicode), or pass it as base64."
        raise Invalid(E_KWARGS_JSON, Form.GOT, SURROGATE_DETAIL, hint)
    if (big := _outside_json_integers(normalised, ())) is not None:
        keys, number = big
        at = _under(path, keys)
        detail = (
            f"holds the integer {show(number)} at {at}, outside the 64-bit range MySQL's JSON "
            "stores exactly (it keeps a rounded float: the admin would show another number, "
            "and the stored definition would differ from settings at every start)"
        )
        hint = "Pass such a number as a str, and convert it with int() in the task."
        raise Invalid(E_KWARGS_JSON, Form.GOT, detail, hint)
    return normalised


def _under(path: KeyPath, keys: tuple[object, ...]) -> KeyPath:
    """Return the path of the value `keys` lead to from `path`."""
    for step in keys:
        path = path / step
    return path


def _unserialisable(
    value: object, keys: tuple[object, ...], seen: set[int]
) -> tuple[tuple[object, ...], object] | None:
    """Return the keys leading to the first value json.dumps refuses in `value`, and it; None
    when there is none to name (a loop of containers: json.dumps says so itself).

    Only called once json.dumps has refused `value`, whose depth it walked without a
    RecursionError: recursion is safe.
    """
    if isinstance(value, float):
        return None if math.isfinite(value) else (keys, value)
    if value is None or isinstance(value, (str, int)):
        return None
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return keys, value
    if id(value) in seen:
        return None
    seen.add(id(value))
    for key, item in items:
        found = _unserialisable(item, (*keys, key), seen)
        if found is not None:
            return found
    return None


def _outside_json_integers(
    value: object, keys: tuple[object, ...]
) -> tuple[tuple[object, ...], int] | None:
    """Return the keys leading to the first integer in `value` outside JSON_INTEGERS, and it.

    `value` is parsed JSON no deeper than MAX_JSON_DEPTH: recursion is safe.
    """
    if isinstance(value, dict):
        items: Any = value.items()
    elif isinstance(value, list):
        items = enumerate(value)
    else:
        if type(value) is int and value not in JSON_INTEGERS:
            return keys, value
        return None
    for key, item in items:
        found = _outside_json_integers(item, (*keys, key))
        if found is not None:
            return found
    return None


def _non_str_key(
    value: object, keys: tuple[object, ...], seen: set[int]
) -> tuple[tuple[object, ...], object] | None:
    """Return the keys leading to the first dict key in `value` that is not a str, and it."""
    if isinstance(value, Mapping | list | tuple):
        if id(value) in seen:
            return None  # a cycle (json.dumps reports it), or a container already walked
        seen.add(id(value))
    if isinstance(value, Mapping):
        for key, item in value.items():
            if not isinstance(key, str):
                return (*keys, key), key
            found = _non_str_key(item, (*keys, key), seen)
            if found is not None:
                return found
    elif isinstance(value, list | tuple):
        for index, item in enumerate(value):
            found = _non_str_key(item, (*keys, index), seen)
            if found is not None:
                return found
    return None
