"""The scheduler's connection reads timestamps with psycopg's C loader: the same values."""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import DataError, connection, connections

from django_posixcron.db import fast_timestamps
from tests.harness.tasks import T0

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's loaders"),
]

INSTANTS = [
    T0,
    T0.replace(microsecond=999_999),
    dt.datetime(1, 1, 1, tzinfo=dt.UTC),
    dt.datetime(9999, 12, 31, 23, 59, 59, 999_999, tzinfo=dt.UTC),
    dt.datetime(2086, 10, 27, 2, 30, fold=1, tzinfo=ZoneInfo("Europe/Berlin")),
    dt.datetime(1969, 12, 31, 23, 59, 59, 500_000, tzinfo=dt.UTC),
]


@pytest.fixture
def fresh() -> Iterator[Any]:
    """A connection of its own, opened, that fast_timestamps() has not looked at."""
    wrapper = connections.create_connection("default")
    wrapper.ensure_connection()
    yield wrapper
    wrapper.close()


def loader_of(wrapper: Any) -> type[Any]:
    from psycopg.pq import Format

    loader: type[Any] = wrapper.connection.adapters.get_loader(1184, Format.TEXT)
    return loader


def read(wrapper: Any) -> list[dt.datetime]:
    with wrapper.cursor() as cursor:
        cursor.execute("SELECT unnest(%s::timestamptz[])", [INSTANTS])
        return [value for (value,) in cursor.fetchall()]


def test_the_c_loader_reads_the_values_djangos_loader_reads(fresh: Any) -> None:
    djangos = loader_of(fresh)
    before = read(fresh)

    fast_timestamps(fresh)

    assert loader_of(fresh) is not djangos
    after = read(fresh)
    # In UTC: Python never finds an instant of a repeated hour equal to one in another zone.
    assert after == before == [instant.astimezone(dt.UTC) for instant in INSTANTS]
    assert {value.tzinfo for value in after} == {dt.UTC}
    with fresh.cursor() as cursor:
        cursor.execute("SELECT 'infinity'::timestamptz")
        with pytest.raises(DataError, match="after year 10K"):  # as Django's loader refuses it
            cursor.fetchone()


def test_other_connections_keep_djangos_loader(fresh: Any) -> None:
    other = connections.create_connection("default")
    other.ensure_connection()
    try:
        djangos = loader_of(other)
        fast_timestamps(fresh)
        assert loader_of(other) is djangos
    finally:
        other.close()


def test_a_session_in_another_zone_keeps_djangos_loader(fresh: Any) -> None:
    with fresh.cursor() as cursor:
        cursor.execute("SET TIME ZONE 'Asia/Kolkata'")
    djangos = loader_of(fresh)

    fast_timestamps(fresh)

    assert loader_of(fresh) is djangos


def test_a_tick_reads_its_timestamps_with_the_c_loader(make_scheduler: Any) -> None:
    scheduler = make_scheduler()
    scheduler.tick(T0)
    scheduler.tick(T0)  # the first one may have opened the connection

    assert loader_of(connection).__name__ == "UTCLoader"
