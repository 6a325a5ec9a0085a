"""The set-based writes: every row gets its own values, other fields are left alone."""

from __future__ import annotations

import datetime as dt
from typing import Any
from zoneinfo import ZoneInfo

import pytest
from django.db import DataError, IntegrityError, connection, transaction
from django.db.models import (
    BooleanField,
    CharField,
    DateTimeField,
    DurationField,
    ForeignKey,
    IntegerField,
    TextField,
)
from django.test.utils import CaptureQueriesContext
from django.utils.translation import gettext_lazy

from django_posixcron.models import Run, RunStatus, Task
from django_posixcron.scheduling import bulk
from tests.factories import NOW, RunFactory, TaskFactory

pytestmark = pytest.mark.django_db(transaction=True)


def test_update_many_writes_each_rows_values_nulls_included() -> None:
    tasks = TaskFactory.create_batch(3)
    later = NOW + dt.timedelta(minutes=7)
    # NULL first: a VALUES list typed from its first row would make the column text.
    rows = [
        (tasks[0].pk, None, ""),
        (tasks[1].pk, later, "failed"),
        (tasks[2].pk, NOW, "succeeded"),
    ]
    bulk.update_many(Task, ["retry_at", "last_run_status"], rows, "default")

    got = {t.pk: (t.retry_at, t.last_run_status) for t in Task.objects.all()}
    assert got == {pk: (retry_at, status) for pk, retry_at, status in rows}


def test_update_many_touches_only_the_fields_it_is_given() -> None:
    task = TaskFactory.create()
    # The admin pauses the task between the claim's read and its write.
    Task.objects.filter(pk=task.pk).update(paused=True)

    bulk.update_many(Task, ["retry_at"], [(task.pk, NOW)], "default")

    stored = Task.objects.get(pk=task.pk)
    assert (stored.paused, stored.retry_at) == (True, NOW)


def test_update_many_over_several_statements_and_durations() -> None:
    task = TaskFactory.create()
    runs = RunFactory.create_batch(bulk.CHUNK + 3, task=task, status=RunStatus.RUNNING)
    rows = [
        (run.pk, RunStatus.SUCCEEDED, dt.timedelta(seconds=i, microseconds=5))
        for i, run in enumerate(runs)
    ]
    bulk.update_many(Run, ["status", "duration"], rows, "default")

    got = dict(Run.objects.values_list("pk", "duration"))
    assert got == {pk: duration for pk, _, duration in rows}
    assert set(Run.objects.values_list("status", flat=True)) == {RunStatus.SUCCEEDED}


@pytest.mark.skipif(
    not bulk.can_insert_new("default"), reason="no INSERT ... ON CONFLICT ... RETURNING here"
)
def test_insert_new_after_an_update_writes_both_and_refuses_what_fired_already() -> None:
    """The claim's writes: the cursors advanced, then the runs inserted, a run whose
    occurrence another process inserted first refused; on PostgreSQL in one statement."""
    tasks = TaskFactory.create_batch(3)
    fired = RunFactory.create(task=tasks[2], scheduled_for=NOW)
    later = NOW + dt.timedelta(hours=1)
    runs = [
        RunFactory.build(task=task, scheduled_for=NOW, status=RunStatus.RUNNING) for task in tasks
    ]
    advance = (Task, ["next_run_at", "due_at"], [(t.pk, later, later) for t in tasks])

    with CaptureQueriesContext(connection) as queries:
        inserted = bulk.insert_new(runs, "task", "default", update_first=advance)

    assert inserted == runs[:2]
    assert all(run.pk is not None for run in inserted)
    assert set(Run.objects.values_list("pk", flat=True)) == {fired.pk, *(r.pk for r in inserted)}
    assert set(Task.objects.values_list("next_run_at", "due_at")) == {(later, later)}
    if connection.vendor == "postgresql":
        assert len(queries) == 1, [q["sql"] for q in queries]


def test_insert_all_sets_each_rows_key_in_order_and_a_conflict_inserts_nothing() -> None:
    """The claim's insert where the database returns no rows it skipped (MariaDB): every run
    inserted with its values and its own primary key; a conflict raises, as bulk_create()."""
    if not connection.features.can_return_rows_from_bulk_insert:
        pytest.skip("no RETURNING from a bulk insert")
    tasks = TaskFactory.create_batch(3)
    runs = [
        RunFactory.build(
            task=task,
            scheduled_for=NOW + i * dt.timedelta(minutes=1),
            status=RunStatus.RUNNING,
            error=f"e{i}",
        )
        for i, task in enumerate(tasks)
    ]

    bulk.insert_all(runs, "default")

    assert all(not run._state.adding and run._state.db == "default" for run in runs)
    stored = {
        pk: (task, error) for pk, task, error in Run.objects.values_list("pk", "task", "error")
    }
    assert stored == {run.pk: (run.task_id, run.error) for run in runs}
    again = [RunFactory.build(task=tasks[1], scheduled_for=runs[1].scheduled_for)]
    with pytest.raises(IntegrityError), transaction.atomic():
        bulk.insert_all(
            [RunFactory.build(task=tasks[0], scheduled_for=NOW - dt.timedelta(hours=1)), *again],
            "default",
        )
    assert Run.objects.count() == 3


def test_update_many_with_columns_the_same_in_every_row_and_one_not() -> None:
    """A column with one value for every row (a NULL too) is written as a single value on
    PostgreSQL: every row still gets it, a one-row batch included."""
    tasks = TaskFactory.create_batch(3, retry_at=NOW, last_run_status="failed")
    later = NOW + dt.timedelta(minutes=7)
    rows = [(t.pk, None, "succeeded", later + dt.timedelta(seconds=i)) for i, t in enumerate(tasks)]
    bulk.update_many(Task, ["retry_at", "last_run_status", "due_at"], rows, "default")
    bulk.update_many(Task, ["consecutive_failures"], [(tasks[0].pk, 4)], "default")

    got = {
        t.pk: (t.retry_at, t.last_run_status, t.due_at, t.consecutive_failures)
        for t in Task.objects.all()
    }
    assert got == {
        pk: (None, status, due, 4 if pk == tasks[0].pk else 0) for pk, _, status, due in rows
    }


@pytest.mark.skipif(
    not bulk.can_insert_new("default"), reason="no INSERT ... ON CONFLICT ... RETURNING here"
)
def test_insert_new_keyed_by_a_later_column_with_most_values_shared() -> None:
    """Rows keyed by a column that is not the first, most others the same in every row:
    each value lands in its own column, and the conflicting row is refused."""
    task = TaskFactory.create()
    fired = RunFactory.create(task=task, scheduled_for=NOW)
    times = [NOW - dt.timedelta(minutes=i) for i in range(3)]
    runs = [
        RunFactory.build(
            task=task, scheduled_for=at, attempt=i + 1, started_at=NOW, status=RunStatus.RUNNING
        )
        for i, at in enumerate(times)
    ]

    inserted = bulk.insert_new(runs, "attempt", "default")

    assert inserted == runs[1:]
    stored = Run.objects.exclude(pk=fired.pk).order_by("attempt")
    assert [
        (r.pk, r.task_id, r.scheduled_for, r.attempt, r.status, r.started_at) for r in stored
    ] == [(r.pk, task.pk, r.scheduled_for, r.attempt, RunStatus.RUNNING, NOW) for r in runs[1:]]
    assert [r.attempt for r in stored] == [2, 3]


@pytest.mark.skipif(connection.vendor == "sqlite", reason="SQLite does not enforce a length")
def test_a_value_too_long_for_its_column_fails_the_write_not_cut_short() -> None:
    """An explicit cast to varchar(n) would store the first n characters without a word."""
    task = TaskFactory.create()
    too_long = "x" * 256  # the schedule column is 255 characters

    with pytest.raises(DataError):
        bulk.update_many(Task, ["schedule"], [(task.pk, too_long)], "default")

    assert Task.objects.get(pk=task.pk).schedule == task.schedule


def _samples(field: Any) -> list[Any]:
    """Values the scheduler writes into `field`, of its plain type and not."""
    if isinstance(field, ForeignKey):
        return [None, 1, 42]
    if isinstance(field, DateTimeField):
        aware = dt.datetime(2026, 3, 29, 1, 30, 15, 123456, tzinfo=dt.UTC)
        paris = aware.astimezone(ZoneInfo("Europe/Paris"))
        return [None, aware, paris]
    if isinstance(field, DurationField):
        return [None, dt.timedelta(0), dt.timedelta(seconds=1.5), dt.timedelta(days=3)]
    if isinstance(field, BooleanField):
        return [None, True, False]
    if isinstance(field, IntegerField):
        return [None, 0, 7, 2**40, True, "12"]
    if isinstance(field, (CharField, TextField)):
        return [None, "", "x\ny", gettext_lazy("paused"), 5]
    return []


@pytest.mark.parametrize("model", [Task, Run])
def test_the_fast_preparer_prepares_as_get_db_prep_save_does(model: type[Any]) -> None:
    """bulk.preparer() skips Django's generic conversion for plain values: on every backend,
    and for every field the scheduler writes, it must give exactly what the field gives."""
    compared = 0
    for field in model._meta.concrete_fields:
        prepare = bulk.preparer(field, connection)
        for value in _samples(field):
            try:
                expected = field.get_db_prep_save(value, connection)
            except ValueError as exc:  # e.g. MySQL refuses 0 for an auto-increment key
                with pytest.raises(type(exc)):
                    prepare(value)
            else:
                assert prepare(value) == expected, (field, value)
            compared += 1
    assert compared > 40


def test_run_counters_add_to_existing_rows_whatever_values_differ() -> None:
    from django_posixcron.models import RunCount
    from django_posixcron.scheduling.counting import count_runs

    a, b = TaskFactory.create_batch(2)
    RunCount.objects.create(task_name=a.name, trigger="schedule", status="succeeded", count=5)

    def runs(*specs: tuple[Task, str, str]) -> list[Run]:
        return [Run(task=task, trigger=trigger, status=status) for task, trigger, status in specs]

    # Every column the same but the count's key (sent once on PostgreSQL), then columns that
    # differ in every way, counts of 2 among them.
    count_runs(runs((a, "schedule", "succeeded"), (b, "schedule", "succeeded")), "default")
    count_runs(
        runs(
            (a, "schedule", "succeeded"),
            (a, "schedule", "succeeded"),
            (a, "retry", "failed"),
            (b, "manual", "skipped"),
        ),
        "default",
    )

    got = {(c.task_name, c.trigger, c.status): c.count for c in RunCount.objects.all()}
    assert got == {
        (a.name, "schedule", "succeeded"): 8,
        (b.name, "schedule", "succeeded"): 1,
        (a.name, "retry", "failed"): 1,
        (b.name, "manual", "skipped"): 1,
    }


def test_run_counters_cost_one_statement_whose_text_does_not_grow_with_the_batch() -> None:
    from django_posixcron.scheduling.counting import count_runs

    tasks = TaskFactory.create_batch(40)
    statements: list[list[str]] = []

    def record(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        statements[-1].append(sql)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(record):
        for batch in (tasks[:3], tasks):
            statements.append([])
            count_runs([Run(task=t, trigger="schedule", status="ok") for t in batch], "default")
    assert [len(s) for s in statements] == [1, 1]
    if connection.vendor == "postgresql":
        # The counters travel as arrays: one text for 3 counters and for 40, which the
        # driver parses once.
        assert statements[0] == statements[1]


TRICKY_TEXT = [
    'a "quoted" word',
    "back\\slash \\\\ and \\",
    "{braces}, commas,",
    "NULL",
    "",
    " spaces around ",
    "tab\tline\nbreak",
    "ünïcödé ✓",
    None,
]
ARRAYS = [
    ("bigint", [1, -2, 0, 2**62, None]),
    ("boolean", [True, False, None, True]),
    ("varchar", TRICKY_TEXT),
    ("text", TRICKY_TEXT),
    ("varchar", [RunStatus.SUCCEEDED, RunStatus.FAILED, None]),
    (
        "timestamptz",
        [
            NOW,
            NOW.replace(microsecond=1),
            dt.datetime(1, 1, 1, tzinfo=dt.UTC),
            dt.datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=dt.UTC),
            dt.datetime(2086, 3, 31, 2, 30, tzinfo=ZoneInfo("Asia/Kolkata")),
            None,
        ],
    ),
    (
        "interval",
        [dt.timedelta(0), dt.timedelta(microseconds=1), dt.timedelta(days=3, seconds=5), None],
    ),
]


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's arrays")
@pytest.mark.parametrize(("cast", "values"), ARRAYS)
def test_an_array_literal_is_read_as_the_values_the_driver_would_send(
    cast: str, values: list[Any]
) -> None:
    literal = bulk.array_literal(values)
    assert isinstance(literal, str)  # one parameter, not a list adapted element by element

    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT %s::{cast}[] = %s::{cast}[], %s::{cast}[]", [values, literal, literal]
        )
        same, back = cursor.fetchone()

    assert same
    assert back == values


@pytest.mark.parametrize(
    "values",
    [[dt.timedelta(seconds=1), dt.timedelta(seconds=-1)], [1, 1.5], [dt.date(2086, 1, 1)]],
    ids=["negative duration", "float", "date"],
)
def test_an_array_with_an_element_of_another_kind_is_left_to_the_driver(values: list[Any]) -> None:
    assert bulk.array_literal(values) == values


@pytest.mark.skipif(connection.vendor != "postgresql", reason="PostgreSQL's arrays")
def test_text_that_needs_quoting_is_written_as_it_was_given() -> None:
    task = TaskFactory.create()
    runs = RunFactory.create_batch(len(TRICKY_TEXT), task=task, status=RunStatus.RUNNING)
    rows = [
        (run.pk, text or "", f"tb {i} {text}", dt.timedelta(seconds=i))
        for i, (run, text) in enumerate(zip(runs, TRICKY_TEXT, strict=True))
    ]

    sent: list[Any] = []

    def keep_params(execute: Any, sql: str, params: Any, many: bool, context: Any) -> Any:
        sent.extend(params)
        return execute(sql, params, many, context)

    with connection.execute_wrapper(keep_params):
        bulk.update_many(Run, ["error", "traceback", "duration"], rows, "default")

    got = {
        pk: (error, tb, duration)
        for pk, error, tb, duration in Run.objects.values_list(
            "pk", "error", "traceback", "duration"
        )
    }
    assert got == {pk: (error, tb, duration) for pk, error, tb, duration in rows}
    # Each column one string, not a list the driver adapts element by element.
    assert sent
    assert [p for p in sent if isinstance(p, list)] == []
