"""The index hint of the runs' subqueries on MariaDB, in each way Django writes them."""

from __future__ import annotations

import pytest

from django_posixcron.db import force_index

TABLE, INDEX = "`django_posixcron_run`", "`posixcron_run_task_sched`"
HINT = f" FORCE INDEX ({INDEX})"


@pytest.mark.parametrize(
    ("sql", "hinted"),
    [
        # Django 5.2 and 6.0: the alias bare.
        (
            "(SELECT U0.`d` FROM `django_posixcron_run` U0 WHERE U0.`task_id` = 1 LIMIT 1)",
            f"(SELECT U0.`d` FROM `django_posixcron_run` U0{HINT} WHERE U0.`task_id` = 1 LIMIT 1)",
        ),
        # Django 6.1 quotes it (the first shape hinted between table and alias: refused).
        (
            "(SELECT `U0`.`d` FROM `django_posixcron_run` `U0` WHERE `U0`.`task_id` = 1)",
            f"(SELECT `U0`.`d` FROM `django_posixcron_run` `U0`{HINT} WHERE `U0`.`task_id` = 1)",
        ),
        ("SELECT 1 FROM `django_posixcron_run` AS `U0` WHERE x", None),
        ("SELECT 1 FROM `django_posixcron_run` WHERE x", None),
        ("SELECT 1 FROM `django_posixcron_run`", None),
        # A spelling it does not know: left alone.
        ("SELECT 1 FROM `django_posixcron_run` u_0 WHERE x", "unchanged"),
        ("SELECT 1 FROM `other` U0 WHERE x", "unchanged"),
    ],
)
def test_the_hint_follows_the_table_and_its_alias(sql, hinted):
    if hinted == "unchanged":
        assert force_index(sql, TABLE, INDEX) == sql
        return
    if hinted is None:  # after the table (and its alias), before what follows
        head, _, tail = sql.partition(" WHERE") if " WHERE" in sql else (sql, "", "")
        hinted = f"{head}{HINT}{' WHERE' + tail if tail else ''}"
    assert force_index(sql, TABLE, INDEX) == hinted
