"""The idle-transaction bound on the scheduler's own connections: what it changes, and what
it must leave as it was."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.db import OperationalError, connection, connections, transaction

from django_posixcron.db import bound_idle_transactions
from django_posixcron.models import Task
from tests.factories import TaskFactory
from tests.harness.processes import only_on

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def bound() -> Iterator[None]:
    unbind = bound_idle_transactions("default")
    try:
        yield
    finally:
        unbind()


def show(name: str) -> str:
    query = f"SHOW {name}" if connection.vendor == "postgresql" else f"SELECT @@session.{name}"
    with connection.cursor() as cursor:
        cursor.execute(query)
        (value,) = cursor.fetchone()
    return str(value)


def test_postgresql_bounds_each_transaction_and_never_the_session(bound: None) -> None:
    only_on("postgresql", why="SET LOCAL is PostgreSQL's")
    TaskFactory.create_batch(3)
    assert show("idle_in_transaction_session_timeout") == "0"
    with transaction.atomic():
        # The first statement a named, server-side cursor: the bound goes on a cursor of its
        # own (on the statement's, it became DECLARE ... CURSOR FOR SET LOCAL: an error).
        assert len(list(Task.objects.iterator(chunk_size=2))) == 3
        assert show("idle_in_transaction_session_timeout") == "30s"
        with transaction.atomic():  # a savepoint changes nothing
            assert show("idle_in_transaction_session_timeout") == "30s"
    assert show("idle_in_transaction_session_timeout") == "0"


def test_a_dead_connection_found_by_the_bound_is_djangos_error(bound: None) -> None:
    # The bound is often the statement that finds a connection dead: the driver's own error
    # escaped the scheduler's outage handling (an uncaught traceback, a run left running).
    only_on("postgresql", why="SET LOCAL is PostgreSQL's")
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        (pid,) = cursor.fetchone()
    other = connections.create_connection("default")
    try:
        with other.cursor() as cursor:
            cursor.execute("SELECT pg_terminate_backend(%s)", [pid])
    finally:
        other.close()
    with pytest.raises(OperationalError), transaction.atomic():
        Task.objects.count()
    connection.close()


def test_mariadb_gives_the_callers_connection_back_unbounded() -> None:
    # runscheduler called from code: the session setting stayed on the caller's connection.
    if not getattr(connection, "mysql_is_mariadb", False):
        pytest.skip("idle_transaction_timeout is MariaDB's")
    unbind = bound_idle_transactions("default")
    assert show("idle_transaction_timeout") == "30"
    unbind()
    assert show("idle_transaction_timeout") == "0"
