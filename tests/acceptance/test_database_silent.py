"""A database that stops answering without closing its connections.

A refused connection fails at once; a silent one (a partition, a failover that moves the
address, a frozen server) holds every statement and every connection attempt for the
driver's timeouts. The processes reach the test database through a relay the test silences.
PostgreSQL only: libpq's timeouts are the ones these tests depend on.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection

from tests.harness.processes import Schedulers, only_on
from tests.harness.proxy import Relay, relay_to

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True), pytest.mark.long]


@pytest.fixture
def relay() -> Iterator[Relay]:
    only_on("postgresql", why="libpq's connection timeouts")
    settings = connection.settings_dict
    with relay_to(settings["HOST"] or "127.0.0.1", int(settings["PORT"] or 5432)) as relay:
        yield relay


def through(schedulers: Schedulers, relay: Relay, tasks: dict[str, Any]) -> None:
    schedulers.configure(tasks, extra={"DB_PORT": relay.port})


def test_schedulerstatus_answers_while_the_database_is_silent(
    schedulers: Schedulers, relay: Relay
) -> None:
    # A monitoring job without a timeout of its own waited for ever.
    through(schedulers, relay, {})
    relay.silence()
    result = schedulers.manage("schedulerstatus", timeout=60)
    assert result.returncode == 1, result
    assert "database unavailable: " in result.stderr, result
