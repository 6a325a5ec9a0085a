"""Set-based writes of the claim and the outcomes: one statement for a batch of rows.

DESIGN section 8: "The claim path is set-based (a batch is claimed, inserted and advanced in
a few statements, not one per task)". What each row becomes is decided elsewhere (the pure
rules); this module only writes the answers, each statement naming only the fields it is
given, so a concurrent pause from the admin (another field) is never overwritten.
"""

from __future__ import annotations

import datetime as dt
import sqlite3
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from django.conf import settings
from django.db import connections
from django.db.models import (
    BigIntegerField,
    BooleanField,
    CharField,
    DateTimeField,
    DurationField,
    Field,
    ForeignKey,
    IntegerField,
    Model,
    PositiveIntegerField,
    PositiveSmallIntegerField,
    TextField,
)

M = TypeVar("M", bound=Model)

# Rows per statement: SQLite before 3.32 allows 999 parameters per statement; the largest
# batch the scheduler writes (200 outcomes, six values each) stays one statement elsewhere.
CHUNK = 500

# UPDATE ... FROM arrived in SQLite 3.33; an older library gets the per-row statements.
SQLITE_UPDATE_FROM = sqlite3.sqlite_version_info >= (3, 33)


# Field classes whose get_db_prep_save() returns a value of this type unchanged (None too).
# Not the auto fields: a backend may refuse some values of theirs (MySQL refuses 0).
_PLAIN: dict[type[Any], type[Any]] = {
    BigIntegerField: int,
    BooleanField: bool,
    CharField: str,
    IntegerField: int,
    PositiveIntegerField: int,
    PositiveSmallIntegerField: int,
    TextField: str,
}


def preparer(field: Any, connection: Any) -> Callable[[Any], Any]:
    """Return a function that prepares a value of `field` as ``get_db_prep_save()`` does.

    Values already of the field's plain Python type (a str for a CharField, an aware datetime
    for a DateTimeField, ...) skip the field's generic conversion and checks, which cost more
    than the rest of a batch's Python (profiled: 39 calls per run, a third of the claim's
    and the outcome's own time); anything else, and every other field class, goes through
    ``get_db_prep_save()`` itself. Exact classes only: a subclass may prepare differently.
    """

    def full(value: Any) -> Any:
        return field.get_db_prep_save(value, connection)

    kind = type(field)
    if kind is ForeignKey:
        target = preparer(field.target_field, connection)
        return lambda value: None if value is None else target(value)
    if kind is DateTimeField:
        adapt = connection.ops.adapt_datetimefield_value
        if connection.vendor == "mysql" and settings.USE_TZ:
            # What the MySQL backend's adapt_datetimefield_value() gives an aware datetime,
            # the connection's zone read once (profiled on MariaDB: that function was 7% of
            # the loop's time in a burst).
            zone = connection.timezone
            adapt = lambda value: str(value.astimezone(zone).replace(tzinfo=None))  # noqa: E731

        def datetime(value: Any) -> Any:
            if type(value) is dt.datetime and value.tzinfo is not None:
                return adapt(value)
            return None if value is None else full(value)

        return datetime
    plain = _PLAIN.get(kind)
    if kind is DurationField and connection.features.has_native_duration_field:
        plain = dt.timedelta
    if plain is None:
        return full
    return lambda value: value if value is None or type(value) is plain else full(value)


def _same(column: Sequence[Any]) -> bool:
    """Whether every value of `column` is the first one (equal, and of its very type)."""
    first = column[0]
    return all(v is first or (type(v) is type(first) and v == first) for v in column)


def _prepared(columns: Sequence[Any], rows: Sequence[Sequence[Any]], connection: Any) -> list[Any]:
    """Each row's values prepared by their fields, a column at a time: a column with one value
    for every row (a batch's start, its status) prepared once. Converting every instant of
    every row cost a tenth of the loop's time in a burst on MariaDB (profiled)."""
    if not rows:
        return []
    prepared = []
    for field, column in zip(columns, zip(*rows, strict=True), strict=True):
        p = preparer(field, connection)
        prepared.append([p(column[0])] * len(column) if _same(column) else [p(v) for v in column])
    return [list(row) for row in zip(*prepared, strict=True)]


def update_many(
    model: type[Model], fields: list[str], rows: Sequence[tuple[Any, ...]], using: str
) -> None:
    """Set `fields` of many rows (pk first in each row) in one statement per chunk.

    PostgreSQL and SQLite: ``UPDATE t SET f = v.f FROM (VALUES ...) v WHERE t.pk = v.pk``;
    MariaDB/MySQL: ``UPDATE t SET f = CASE pk WHEN ... END WHERE pk IN (...)``.
    Values go through each field's own preparation, so every backend gets its types.
    """
    if not rows:
        return
    connection = connections[using]
    columns = _update_columns(model, fields)
    vendor = connection.vendor
    # PostgreSQL's statement prepares its values a column at a time (unnest()).
    params: Sequence[Sequence[Any]] = (
        rows if vendor == "postgresql" else _prepared(columns, rows, connection)
    )
    if vendor == "sqlite" and not SQLITE_UPDATE_FROM:
        _update_each(model, columns, params, using)
        return
    build = {"postgresql": _postgresql, "mysql": _mysql}.get(vendor, _sqlite)
    with connection.cursor() as cursor:
        for start in range(0, len(params), CHUNK):
            cursor.execute(*build(model, columns, params[start : start + CHUNK], connection))


def _update_columns(model: type[Model], fields: list[str]) -> list[Any]:
    """The primary key, then `fields`: the columns of update_many()'s rows."""
    return [model._meta.pk, *(model._meta.get_field(name) for name in fields)]


def _flat(rows: Sequence[Sequence[Any]]) -> list[Any]:
    return [value for row in rows for value in row]


def _assignments(columns: list[Field[Any, Any]], quote: Any, source: list[str]) -> str:
    return ", ".join(
        f"{quote(field.column)} = v.{name}"
        for field, name in zip(columns[1:], source[1:], strict=True)
    )


def _postgresql(
    model: type[Model], columns: list[Any], rows: Sequence[Sequence[Any]], connection: Any
) -> tuple[str, list[Any]]:
    """``UPDATE ... FROM unnest(arrays)``: one array per column whose values differ, each
    cast to its column's type, NULLs included; a column with one value for every row is set
    from that value (see unnest()). `rows` are the values as given, not prepared yet."""
    quote = connection.ops.quote_name
    table = quote(model._meta.db_table)
    values, source, params = unnest(columns, rows, connection, prepare=True)
    sets = ", ".join(
        f"{quote(field.column)} = {value}"
        for field, value in zip(columns[1:], values[1:], strict=True)
    )
    sql = f"UPDATE {table} SET {sets} FROM {source} WHERE {table}.{quote(columns[0].column)} = v.c0"
    return sql, params


def unnest(
    columns: list[Any], rows: Sequence[Sequence[Any]], connection: Any, *, prepare: bool = False
) -> tuple[list[str], str, list[Any]]:
    """PostgreSQL rows as ``unnest()`` of one array per column: (each column's value in SQL,
    the FROM source ``unnest(...) AS v (c0, ...)``, the parameters in the order they appear).

    Arrays keep a statement's text independent of its row count. A column whose value is the
    same in every row (a batch's status, its empty error, a NULL finish) is sent once, as a
    scalar: the driver quotes each array element in Python, which cost more than the
    statement's round trip (profiled: a fifth of the scheduler loop's time). The first
    column always stays an array, so there are as many rows as `rows`.

    With `prepare`, the values are as given and each field prepares them (preparer()), a
    column at a time: a scalar once, not once per row (preparing every value of a claim's
    twenty columns was a twentieth of the loop's time in a burst, profiled).
    """
    values: list[str] = []
    scalars: list[Any] = []
    arrays: list[Any] = []
    names: list[str] = []
    for i, (field, column) in enumerate(zip(columns, zip(*rows, strict=True), strict=True)):
        cast = cast_type(field, connection)
        first = column[0]
        p = preparer(field, connection) if prepare else None
        if i and _same(column):
            values.append(f"%s::{cast}")
            scalars.append(first if p is None else p(first))
        else:
            values.append(f"v.c{i}")
            names.append(f"c{i}")
            prepared = column if p is None else [p(v) for v in column]
            arrays.append((array_literal(prepared), cast))
    source = "unnest({}) AS v ({})".format(
        ", ".join(f"%s::{cast}[]" for _, cast in arrays), ", ".join(names)
    )
    return values, source, [*scalars, *(array for array, _ in arrays)]


def _quoted(text: str) -> str:
    return '"' + text.replace("\\", "\\\\").replace('"', '\\"') + '"'


# How an element of each type is written in a PostgreSQL array literal, exactly as the
# driver would send it. A duration is written only when not negative: the server reads a
# negative one differently under IntervalStyle sql_standard.
_ELEMENT: dict[type[Any], Callable[[Any], str | None]] = {
    int: str,
    bool: lambda v: "t" if v else "f",
    str: _quoted,
    dt.datetime: dt.datetime.isoformat,
    dt.timedelta: lambda v: (
        f"{v.days} days {v.seconds}.{v.microseconds:06d} seconds" if v.days >= 0 else None
    ),
}


def array_literal(values: Sequence[Any]) -> str | list[Any]:
    """Return `values` as one PostgreSQL array literal (``{1,NULL,"a \\"b\\""}``), or as a
    list for the driver when an element is of another type.

    The driver adapts a list element by element in Python (profiled: about a tenth of the
    loop's time in a burst, three to four times the cost of this); the literal is one string
    parameter, cast to the column's array type in the statement.
    """
    parts = []
    for value in values:
        if value is None:
            parts.append("NULL")
            continue
        write = _ELEMENT.get(type(value))
        if write is None and isinstance(value, str):  # a choice of a TextChoices, say
            write = _quoted
        part = None if write is None else write(value)
        if part is None:
            return list(values)
        parts.append(part)
    return "{" + ",".join(parts) + "}"


# cast_type() by field and PostgreSQL connection class: db_type() formats the column's type
# anew at each call (profiled: 3% of the loop's time in a burst, once per column of every
# set-based statement).
_CAST_TYPES: dict[tuple[Any, type[Any]], str] = {}


def cast_type(field: Any, connection: Any) -> str:
    """The type a parameter for `field` is cast to: its column's, but a ``varchar`` without
    its length. An explicit cast to ``varchar(n)`` cuts a longer value silently, where
    writing it to the column fails ("value too long"), as an ORM write of it does."""
    key = (field, type(connection))
    cast = _CAST_TYPES.get(key)
    if cast is None:
        kind: str = field.db_type(connection)
        cast = _CAST_TYPES[key] = "varchar" if kind.startswith("varchar(") else kind
    return cast


def _sqlite(
    model: type[Model], columns: list[Any], params: Sequence[Sequence[Any]], connection: Any
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
    model: type[Model], columns: list[Any], params: Sequence[Sequence[Any]], connection: Any
) -> tuple[str, list[Any]]:
    """``UPDATE t SET f = CASE pk WHEN ... END, ... WHERE pk IN (...)``.

    Not a join with the values as a derived table: InnoDB may then scan the table and lock
    every row it reads (another scheduler's claimed tasks, a run the admin is deleting), where
    ``pk IN`` locks only the rows written.
    """
    quote = connection.ops.quote_name
    pk = quote(columns[0].column)
    whens = " ".join(["WHEN %s THEN %s"] * len(params))
    sets = []
    values: list[Any] = []
    for i, field in enumerate(columns[1:], start=1):
        column = [row[i] for row in params]
        if _same(column):
            # One value for every row: set once, not a WHEN per row.
            sets.append(f"{quote(field.column)} = %s")
            values.append(column[0])
            continue
        sets.append(f"{quote(field.column)} = CASE {pk} {whens} END")
        for row in params:
            values += (row[0], row[i])
    in_list = ", ".join(["%s"] * len(params))
    sql = f"UPDATE {quote(model._meta.db_table)} SET {', '.join(sets)} WHERE {pk} IN ({in_list})"
    return sql, values + [row[0] for row in params]


def _update_each(
    model: type[Model], columns: list[Any], params: Sequence[Sequence[Any]], using: str
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


def can_insert_new(using: str) -> bool:
    """Whether insert_new() can run here: INSERT ... ON CONFLICT DO NOTHING RETURNING."""
    connection = connections[using]
    if connection.vendor == "postgresql":
        return True
    return connection.vendor == "sqlite" and sqlite3.sqlite_version_info >= (3, 35)


def insert_new(
    objs: Sequence[M],
    key: str,
    using: str,
    *,
    update_first: tuple[type[Model], list[str], Sequence[tuple[Any, ...]]] | None = None,
) -> list[M]:
    """Insert `objs` in one statement, skipping any a unique constraint refuses; return those
    inserted, their primary keys set.

    Which were inserted is read from the returned (pk, `key`) pairs, so `key` (a column such
    as the run's task) must be distinct within `objs`. PostgreSQL and SQLite 3.35+ only (see
    can_insert_new()); the conflicting rows cost nothing, no savepoint is needed.

    `update_first` is an update_many() (model, fields, rows) to make before inserting. On
    PostgreSQL it goes in the same statement, as a data-modifying WITH (run whether or not
    the INSERT reads it): a batch of claims then costs one round trip to the server less.
    """
    if not objs:
        if update_first is not None:
            update_many(*update_first, using)
        return []
    meta: Any = type(objs[0])._meta
    connection = connections[using]
    prefix = ""
    prefix_params: list[Any] = []
    if update_first is not None:
        model, names, values = update_first
        if connection.vendor == "postgresql" and len(objs) <= CHUNK and 0 < len(values) <= CHUNK:
            columns = _update_columns(model, names)
            sql, prefix_params = _postgresql(model, columns, values, connection)
            prefix = f"WITH advanced AS ({sql}) "
        else:
            update_many(model, names, values, using)
    quote = connection.ops.quote_name
    key_attname = meta.get_field(key).attname
    fields, head = _insert_head(meta, connection)
    k = fields.index(meta.get_field(key))
    tail = (
        f" ON CONFLICT DO NOTHING RETURNING {quote(meta.pk.column)}, "
        f"{quote(meta.get_field(key).column)}"
    )
    inserted = []
    with connection.cursor() as cursor:
        for start in range(0, len(objs), CHUNK):
            # A chunk at a time, prepared and read back: 100,000 rows at once (a first
            # reconciliation) would raise the process's peak and what it keeps.
            part = objs[start : start + CHUNK]
            by_key = {getattr(obj, key_attname): obj for obj in part}
            assert len(by_key) == len(part), f"{key} is not distinct in the rows to insert"
            chunk = _insert_values(fields, part)
            if connection.vendor == "postgresql":
                # Arrays and scalars, as in update_many; the key column first, always an
                # array (its values are distinct), and the columns in the INSERT's order.
                selected, source, unnested = unnest(
                    [fields[k], *fields[:k], *fields[k + 1 :]],
                    [[row[k], *row[:k], *row[k + 1 :]] for row in chunk],
                    connection,
                    prepare=True,
                )
                select = ", ".join([*selected[1 : k + 1], selected[0], *selected[k + 1 :]])
                sql = f"{prefix}{head} SELECT {select} FROM {source}{tail}"
                params = [*prefix_params, *unnested]
            else:
                row = "({})".format(", ".join(["%s"] * len(fields)))
                values = _flat(_prepared(fields, chunk, connection))
                sql, params = f"{head} VALUES {', '.join([row] * len(chunk))}{tail}", values
            cursor.execute(sql, params)
            for pk, key_value in cursor.fetchall():
                obj = by_key[key_value]
                obj.pk = pk
                obj._state.adding, obj._state.db = False, using
                inserted.append(obj)
    return inserted


def _insert_head(meta: Any, connection: Any) -> tuple[list[Any], str]:
    """The columns an insert of `meta`'s rows writes (all but the primary key), and the
    statement's ``INSERT INTO table (columns)``."""
    quote = connection.ops.quote_name
    fields: list[Any] = [f for f in meta.concrete_fields if not f.primary_key]
    head = "INSERT INTO {} ({})".format(
        quote(meta.db_table), ", ".join(quote(f.column) for f in fields)
    )
    return fields, head


def _insert_values(fields: list[Any], objs: Sequence[Model]) -> list[list[Any]]:
    """Each object's values for `fields`, unprepared: pre_save() for the fields that fill
    themselves in (auto_now_add), as a save does; the attributes otherwise."""
    filled = [
        f.pre_save if getattr(f, "auto_now", False) or getattr(f, "auto_now_add", False) else None
        for f in fields
    ]
    return [
        [
            getattr(obj, f.attname) if fill is None else fill(obj, True)
            for f, fill in zip(fields, filled, strict=True)
        ]
        for obj in objs
    ]


def insert_all(objs: Sequence[Model], using: str) -> None:
    """Insert `objs` with one multi-row ``INSERT ... RETURNING`` per chunk; set their primary
    keys, in the order the rows were given, as bulk_create() does where the database returns
    rows from a bulk insert (``features.can_return_rows_from_bulk_insert``: MariaDB 10.5+).

    A unique conflict raises IntegrityError: call it inside a savepoint. Values are prepared
    as update_many() prepares them: bulk_create() prepared each value of each row through the
    field's generic conversion (profiled on MariaDB: a quarter of the loop's time in a burst).
    """
    if not objs:
        return
    connection = connections[using]
    if not connection.features.can_return_rows_from_bulk_insert:
        raise NotImplementedError(f"{connection.vendor} returns no rows from a bulk insert")
    meta: Any = type(objs[0])._meta
    fields, head = _insert_head(meta, connection)
    row = "({})".format(", ".join(["%s"] * len(fields)))
    returning = f" RETURNING {connection.ops.quote_name(meta.pk.column)}"
    with connection.cursor() as cursor:
        for start in range(0, len(objs), CHUNK):
            part = objs[start : start + CHUNK]
            values = _flat(_prepared(fields, _insert_values(fields, part), connection))
            cursor.execute(f"{head} VALUES {', '.join([row] * len(part))}{returning}", values)
            pks = cursor.fetchall()
            assert len(pks) == len(part), "the insert returned another number of rows"
            for obj, (pk,) in zip(part, pks, strict=True):
                obj.pk = pk
                obj._state.adding, obj._state.db = False, using


def can_compare_and_set(using: str) -> bool:
    """Whether compare_and_set() can run here (SQLite 3.35+: UPDATE ... FROM ... RETURNING)."""
    connection = connections[using]
    return connection.vendor == "sqlite" and sqlite3.sqlite_version_info >= (3, 35)


def compare_and_set(
    model: type[Model],
    guard: str,
    fields: list[str],
    rows: Sequence[tuple[Any, ...]],
    using: str,
) -> set[Any]:
    """Set `fields` of the rows whose `guard` still holds the value read; return their pks.

    Each row is (pk, the guard's value as read, *values). One statement per chunk: where
    another writer moved the guard meanwhile, the row is left alone and its pk not returned.
    """
    if not rows:
        return set()
    connection = connections[using]
    meta: Any = model._meta
    quote = connection.ops.quote_name
    guard_field = meta.get_field(guard)
    columns: list[Any] = [meta.pk, guard_field, *(meta.get_field(name) for name in fields)]
    params = _prepared(columns, rows, connection)
    table = quote(meta.db_table)
    names = [f"column{i + 1}" for i in range(len(columns))]
    sets = ", ".join(
        f"{quote(f.column)} = v.{name}" for f, name in zip(columns[2:], names[2:], strict=True)
    )
    moved: set[Any] = set()
    with connection.cursor() as cursor:
        for start in range(0, len(params), CHUNK):
            chunk = params[start : start + CHUNK]
            row = "({})".format(", ".join(["%s"] * len(columns)))
            cursor.execute(
                f"UPDATE {table} SET {sets} FROM (VALUES {', '.join([row] * len(chunk))}) AS v "
                f"WHERE {table}.{quote(meta.pk.column)} = v.column1 "
                f"AND {table}.{quote(guard_field.column)} IS v.column2 "
                f"RETURNING {table}.{quote(meta.pk.column)}",
                _flat(chunk),
            )
            moved.update(pk for (pk,) in cursor.fetchall())
    return moved
