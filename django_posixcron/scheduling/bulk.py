"""Set-based writes of the claim and the outcomes: one statement for a batch of rows.

DESIGN section 8: "The claim path is set-based (a batch is claimed, inserted and advanced in
a few statements, not one per task)". What each row becomes is decided elsewhere (the pure
rules); this module only writes the answers, each statement naming only the fields it is
given, so a concurrent pause from the admin (another field) is never overwritten.
"""

from __future__ import annotations

import sqlite3
from collections.abc import Sequence
from typing import Any

from django.db import connections
from django.db.models import Field, Model

# Rows per statement: SQLite before 3.32 allows 999 parameters per statement; the largest
# batch the scheduler writes (200 outcomes, six values each) stays one statement elsewhere.
CHUNK = 500

# UPDATE ... FROM arrived in SQLite 3.33; an older library gets the per-row statements.
SQLITE_UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33)


def update_many(
    model: type[Model], fields: list[str], rows: Sequence[tuple[Any, ...]], using: str
) -> None:
    """Set `fields` of many rows (pk first in each row) in one statement per chunk.

    PostgreSQL and SQLite: ``UPDATE t SET f = v.f FROM (VALUES ...) v WHERE t.pk = v.pk``;
    MariaDB/MySQL: ``UPDATE t JOIN (SELECT ... UNION ALL SELECT ...) v ON ... SET ...``.
    Values go through each field's own preparation, so every backend gets its types.
    """
    if not rows:
        return
    connection = connections[using]
    columns: list[Any] = [model._meta.pk, *(model._meta.get_field(name) for name in fields)]
    params = [
        [field.get_db_prep_save(v, connection) for field, v in zip(columns, row, strict=True)]
        for row in rows
    ]
    vendor = connection.vendor
    if vendor == "sqlite" and not SQLITE_UPDATE_FROM:
        _update_each(model, columns, params, using)
        return
    build = {"postgresql": _postgresql, "mysql": _mysql}.get(vendor, _sqlite)
    with connection.cursor() as cursor:
        for start in range(0, len(params), CHUNK):
            cursor.execute(*build(model, columns, params[start : start + CHUNK], connection))


def _flat(rows: list[list[Any]]) -> list[Any]:
    return [value for row in rows for value in row]


def _assignments(columns: list[Field[Any, Any]], quote: Any, source: list[str]) -> str:
    return ", ".join(
        f"{quote(field.column)} = v.{name}"
        for field, name in zip(columns[1:], source[1:], strict=True)
    )


def _postgresql(
    model: type[Model], columns: list[Any], params: list[list[Any]], connection: Any
) -> tuple[str, list[Any]]:
    """``UPDATE ... FROM unnest(arrays)``: one array per column, so the statement's text is
    the same for every batch (the driver caches its parsing) and its size does not grow with
    the batch; each array is cast to its column's type, NULLs included."""
    quote = connection.ops.quote_name
    names = [f"c{i}" for i in range(len(columns))]
    arrays = ", ".join(f"%s::{field.db_type(connection)}[]" for field in columns)
    sql = (
        f"UPDATE {quote(model._meta.db_table)} SET {_assignments(columns, quote, names)} "
        f"FROM unnest({arrays}) AS v ({', '.join(names)}) "
        f"WHERE {quote(model._meta.db_table)}.{quote(columns[0].column)} = v.c0"
    )
    return sql, [list(column) for column in zip(*params, strict=True)]


def _sqlite(
    model: type[Model], columns: list[Any], params: list[list[Any]], connection: Any
) -> tuple[str, list[Any]]:
    quote = connection.ops.quote_name
    row = "({})".format(", ".join(["%s"] * len(columns)))
    # SQLite names a VALUES list's columns column1, column2, ...
    names = [f"column{i + 1}" for i in range(len(columns))]
    sql = "UPDATE {table} SET {sets} FROM (VALUES {rows}) AS v WHERE {table}.{pk} = v.column1"
    sql = sql.format(
        table=quote(model._meta.db_table),
        sets=_assignments(columns, quote, names),
        rows=", ".join([row] * len(params)),
        pk=quote(columns[0].column),
    )
    return sql, _flat(params)


def _mysql(
    model: type[Model], columns: list[Any], params: list[list[Any]], connection: Any
) -> tuple[str, list[Any]]:
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    names = [f"c{i}" for i in range(len(columns))]
    first = "SELECT {}".format(", ".join(f"%s AS {name}" for name in names))
    rest = " UNION ALL SELECT {}".format(", ".join(["%s"] * len(columns)))
    sets = ", ".join(
        f"{table}.{quote(field.column)} = v.{name}"
        for field, name in zip(columns[1:], names[1:], strict=True)
    )
    rows = first + rest * (len(params) - 1)
    sql = f"UPDATE {table} JOIN ({rows}) AS v ON {table}.{quote(columns[0].column)} = v.c0"
    return f"{sql} SET {sets}", _flat(params)


def _update_each(
    model: type[Model], columns: list[Any], params: list[list[Any]], using: str
) -> None:
    """One parameterised UPDATE ... WHERE pk = %s per row, pipelined by executemany."""
    connection = connections[using]
    quote = connection.ops.quote_name
    sql = "UPDATE {} SET {} WHERE {} = %s".format(
        quote(model._meta.db_table),
        ", ".join(f"{quote(field.column)} = %s" for field in columns[1:]),
        quote(columns[0].column),
    )
    with connection.cursor() as cursor:
        cursor.executemany(sql, [[*row[1:], row[0]] for row in params])
