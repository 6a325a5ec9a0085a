"""MySQL's 3-byte utf8 on chosen text columns, for the length of a block."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import pytest
from django.db import connection
from django.db.models import Model


@contextlib.contextmanager
def utf8mb3_columns(model: type[Model], *columns: str) -> Iterator[None]:
    """Make `columns` (LONGTEXT, NOT NULL) of `model`'s table utf8mb3 on MySQL, as a project
    whose tables or connection use MySQL's 3-byte utf8 (Django's default connection
    charset) has them; skip elsewhere. They are utf8mb4 again afterwards."""
    if connection.vendor != "mysql":
        pytest.skip("MySQL's utf8mb3")
    table = model._meta.db_table

    def convert(charset: str) -> None:
        changes = ", ".join(
            f"MODIFY {column} LONGTEXT CHARACTER SET {charset} NOT NULL" for column in columns
        )
        with connection.cursor() as cursor:
            cursor.execute(f"ALTER TABLE {table} {changes}")

    convert("utf8mb3")
    try:
        yield
    finally:
        convert("utf8mb4")
