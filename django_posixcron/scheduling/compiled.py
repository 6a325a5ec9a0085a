"""ORM queries compiled to SQL once and run again with new instants.

Every idle tick sends the same few statements with new instants in them (the oldest heartbeat
that counts as live, the tick's own instant). Building those querysets and compiling them
cost several times the statements' round trips (profiled with 10,000 tasks: about 80% of an
idle tick), so a tick compiles each shape once and afterwards only binds the instants.

The queryset is built once with stand-in instants; their places among the compiled
parameters are found by value (after the backend's adaptation, since SQLite and MySQL bind
instants as text), and each run puts the real instants, adapted the same way, in their place.
Results get the converters the ORM would apply. Only instants change between runs, and on
PostgreSQL a set of primary keys (locked_rows()): anything else that varies (a process id, a
list of excluded ids) belongs in the cache key.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections import OrderedDict
from collections.abc import Callable, Hashable, Iterable, Sequence
from typing import Any, TypeVar, cast

from django.db import connections
from django.db.models import F, Lookup, Model, QuerySet
from django.db.models.sql import UpdateQuery

from django_posixcron.scheduling.bulk import array_literal, cast_type

M = TypeVar("M", bound=Model)

# Stand-ins no real instant of ours equals: 1901, one microsecond apart per name.
_STAND_IN = dt.datetime(1901, 2, 3, 4, 5, 6, tzinfo=dt.UTC)


class CompiledQuery:
    """A query compiled once; `rows()`, `instances()` and `update()` bind new instants.

    `build(**instants)` returns the queryset; `instants` names its datetime parameters.
    `update` (field name -> value, the values may use the instants) makes it an UPDATE of
    the queryset's rows, as ``QuerySet.update()`` would send it.
    """

    def __init__(
        self,
        using: str,
        build: Callable[..., QuerySet[Any]],
        instants: Sequence[str] = (),
        *,
        update: Callable[..., dict[str, Any]] | None = None,
        values: Sequence[str] = (),
    ) -> None:
        self.using = using
        stand_ins: dict[str, Any] = {
            name: _STAND_IN + dt.timedelta(microseconds=i + 1) for i, name in enumerate(instants)
        }
        # Other parameters bound as they are given: each stands in as a text no real value
        # of ours is.
        plain = {name: f"posixcron stand-in {name}" for name in values}
        queryset = build(**stand_ins, **plain)
        if update is None:
            compiler = queryset.query.get_compiler(using)
            sql, params = compiler.as_sql()
            selected = [column for column, _, _ in compiler.select[: compiler.col_count]]
            self.names = [
                alias or getattr(column.target, "attname", "")
                for column, _, alias in compiler.select[: compiler.col_count]
            ]
            self._converters = compiler.get_converters(selected)
            self._compiler = compiler
        else:
            query = cast(UpdateQuery, queryset.query.chain(UpdateQuery))
            query.add_update_values(update(**stand_ins))
            query.annotations = {}
            sql, params = query.get_compiler(using).as_sql()
            self.names = []
            self._converters = {}
        self.sql = sql
        self._params = list(params)
        adapt = connections[using].ops.adapt_datetimefield_value
        where = {adapt(value): name for name, value in stand_ins.items()}
        where.update({value: name for name, value in plain.items()})
        self._plain = set(plain)
        self._slots: list[tuple[int, str]] = []
        for index, param in enumerate(self._params):
            try:
                name = where.get(param)
            except TypeError:  # an unhashable parameter is never one of ours
                continue
            if name is not None:
                self._slots.append((index, name))
        unbound = {*instants, *values} - {name for _, name in self._slots}
        if unbound:
            # The instant went into the SQL text or was transformed: compiling once would
            # freeze it. A programming error in the caller, found by the tests on each backend.
            raise ValueError(f"instants not bound as parameters: {', '.join(sorted(unbound))}")

    def _bind(self, instants: dict[str, Any]) -> list[Any]:
        params = list(self._params)
        adapt = connections[self.using].ops.adapt_datetimefield_value
        for index, name in self._slots:
            value = instants[name]
            params[index] = value if name in self._plain else adapt(value)
        return params

    def instances(self, model: type[M], **instants: dt.datetime) -> list[M]:
        """Run a model query (no values()); return its rows as instances, as the ORM would.

        The query may select every column or, with ``only()``, some of them, its primary key
        among them: the others are deferred, loaded on first access as the ORM loads them.
        Selected annotations become attributes, like ``QuerySet.annotate()`` sets them.
        """
        attnames = {f.attname for f in model._meta.concrete_fields}
        count = next((i for i, n in enumerate(self.names) if n not in attnames), len(self.names))
        fields = self.names[:count]
        if model._meta.pk.attname not in fields:
            raise ValueError(f"not a query of {model.__name__} rows: {self.names}")
        annotations = self.names[count:]
        result = []
        for row in self._fetch(instants):
            instance = model.from_db(self.using, fields, row[:count])
            for name, value in zip(annotations, row[count:], strict=True):
                setattr(instance, name, value)
            result.append(instance)
        return result

    def rows(self, **instants: Any) -> list[dict[str, Any]]:
        """Run the query; return its rows as dicts by the names values() gave them."""
        return [dict(zip(self.names, row, strict=True)) for row in self._fetch(instants)]

    def _fetch(self, instants: dict[str, Any]) -> list[Any]:
        with connections[self.using].cursor() as cursor:
            cursor.execute(self.sql, self._bind(instants))
            fetched: list[Any] = cursor.fetchall()
        if self._converters:
            return list(self._compiler.apply_converters(fetched, self._converters))
        return fetched

    def update(self, **instants: dt.datetime) -> int:
        """Run the UPDATE; return how many rows it matched."""
        with connections[self.using].cursor() as cursor:
            cursor.execute(self.sql, self._bind(instants))
            return int(cursor.rowcount)


class QueryCache:
    """The compiled queries of one thread's loop, by shape; the least recently used go."""

    def __init__(self, using: str, size: int = 16) -> None:
        self.using = using
        self.size = size
        self._queries: OrderedDict[Hashable, CompiledQuery] = OrderedDict()

    def get(
        self,
        key: Hashable,
        build: Callable[..., QuerySet[Any]],
        instants: Sequence[str] = (),
        *,
        update: Callable[..., dict[str, Any]] | None = None,
    ) -> CompiledQuery:
        query = self._queries.get(key)
        if query is None:
            query = CompiledQuery(self.using, build, instants, update=update)
            self._queries[key] = query
            if len(self._queries) > self.size:
                self._queries.popitem(last=False)
        else:
            self._queries.move_to_end(key)
        return query


class AnyOf(Lookup):  # Lookup is not subscriptable at run time
    """PostgreSQL's ``column = ANY(%s::type[])``, the array given as one literal parameter
    (bulk.array_literal()): unlike ``IN (%s, %s, ...)`` its text is the same whatever the
    number of values, so it is compiled once and the driver dumps one string, not one
    parameter per value. Used as an expression in filter(), not registered on any field."""

    lookup_name = "posixcron_any_of"
    prepare_rhs = False

    def as_sql(self, compiler: Any, connection: Any) -> tuple[str, tuple[Any, ...]]:
        lhs, params = self.process_lhs(compiler, connection)
        array = f"%s::{cast_type(self.lhs.output_field, connection)}[]"
        return f"{lhs} = ANY({array})", (*params, self.rhs)


# The locking reads of locked_rows(), compiled once per shape and thread (a compiled query
# keeps the compiler of the connection it was compiled on, and connections are per thread):
# (alias, model, fields, skip_locked) -> query.
_locking_reads = threading.local()


def locked_rows(
    model: type[Model],
    pks: Iterable[Any],
    fields: Sequence[str],
    using: str,
    *,
    skip_locked: bool = False,
) -> list[dict[str, Any]]:
    """Lock the rows of `model` with these primary keys, in key order; return their `fields`
    as values() would (with `skip_locked`, only the rows no other transaction holds).

    Inside a transaction. On PostgreSQL one statement compiled once, the keys one array
    parameter (profiled: building, compiling and binding ``pk__in`` of an outcome batch cost
    more than the statement); elsewhere the ORM's ``pk__in``.
    """
    ordered = sorted(pks)
    connection = connections[using]
    if connection.vendor != "postgresql":
        return list(
            model._default_manager.using(using)
            .select_for_update(skip_locked=skip_locked)
            .filter(pk__in=ordered)
            .order_by("pk")
            .values(*fields)
        )
    key = (using, model, tuple(fields), skip_locked)
    cache: dict[Hashable, CompiledQuery] | None = getattr(_locking_reads, "queries", None)
    if cache is None:
        cache = _locking_reads.queries = {}
    query = cache.get(key)
    if query is None:

        def build(pks: str) -> QuerySet[Any]:
            return (
                model._default_manager.using(using)
                .select_for_update(skip_locked=skip_locked)
                .filter(AnyOf(F("pk"), pks))
                .order_by("pk")
                .values(*fields)
            )

        query = cache[key] = CompiledQuery(using, build, values=["pks"])
    # One string; a list (keys of a type without a literal) the driver adapts itself.
    return query.rows(pks=array_literal(ordered))
