"""reconcile()/apply() against the database DATABASE_URL points at."""

from __future__ import annotations

import copy
import datetime as dt
import logging
import threading
from functools import partial

import pytest
from django.db import connection
from freezegun import freeze_time

from django_posixcron.declarations import TaskDeclaration
from django_posixcron.models import Run, Task
from django_posixcron.reconcile import DEFINITION_FIELDS, apply, plan, reconcile
from tests.harness.declaring import NOW, declare, task

UTC = dt.UTC
pytestmark = pytest.mark.django_db


def actions(caplog: pytest.LogCaptureFixture) -> list[tuple[object, object]]:
    return [
        (getattr(r, "action", None), getattr(r, "task", None))
        for r in caplog.records
        if r.name == "django_posixcron.reconcile"
    ]


def test_create_update_retire_restore_with_log_lines(caplog):
    caplog.set_level(logging.INFO, logger="django_posixcron")
    reconcile(now=NOW, declarations=declare(a=task(), b=task("0 4 * * *")))
    assert actions(caplog) == [
        ("task_created", "a"),
        ("task_created", "b"),
        ("reconciled", None),
    ]
    assert set(Task.objects.values_list("name", flat=True)) == {"a", "b"}

    caplog.clear()
    result = reconcile(now=NOW, declarations=declare(a=task("0 5 * * *")))
    assert actions(caplog) == [("task_updated", "a"), ("task_retired", "b"), ("reconciled", None)]
    assert [c.task.name for c in result.update] == ["a"]
    b = Task.objects.get(name="b")
    assert b.declared is False
    assert Task.objects.get(name="a").schedule == "0 5 * * *"

    caplog.clear()
    reconcile(now=NOW, declarations=declare(a=task("0 5 * * *"), b=task("0 4 * * *")))
    assert actions(caplog) == [("task_restored", "b"), ("reconciled", None)]
    assert Task.objects.get(name="b").declared is True
    assert Task.objects.get(name="b").pk == b.pk


def test_unchanged_is_empty_and_keeps_the_cursor():
    declarations = declare(a=task())
    reconcile(now=NOW, declarations=declarations)
    Task.objects.filter(name="a").update(next_run_at=NOW - dt.timedelta(days=1))
    result = reconcile(now=NOW + dt.timedelta(days=5), declarations=declarations)
    assert result.is_empty
    assert Task.objects.get(name="a").next_run_at == NOW - dt.timedelta(days=1)


def test_a_schedule_or_zone_edited_by_hand_is_rewritten_from_settings():
    # Edited in a database shell (or by a tool) with the hash left as it was: the unchanged
    # fast path, which goes by the hash, must not keep what nothing can evaluate.
    declarations = declare(a=task("15 3 * * *"), b=task("0 4 * * *", timezone="Asia/Kolkata"))
    reconcile(now=NOW, declarations=declarations)
    Task.objects.filter(name="a").update(schedule="*/5 * * * *")
    Task.objects.filter(name="b").update(timezone="Mars/Olympus")

    assert [line.split(":")[0] for line in plan(declarations, Task.objects.all(), NOW).lines()][
        :2
    ] == ["changed task 'a'", "changed task 'b'"]
    result = reconcile(now=NOW, declarations=declarations)

    assert sorted(c.task.name for c in result.update) == ["a", "b"]
    assert Task.objects.get(name="a").schedule == "15 3 * * *"
    assert Task.objects.get(name="b").timezone == "Asia/Kolkata"
    assert reconcile(now=NOW, declarations=declarations).is_empty


@pytest.mark.parametrize(
    ("field", "edited"),
    [
        ("callable_path", "tests.testapp.jobs.fail"),
        ("kwargs", {"label": "edited"}),
        ("kwargs", {}),
        ("retry_delay", dt.timedelta(seconds=1)),
        ("overlap", "allow"),
        ("timeout", None),
        ("description", "edited"),
        ("definition_hash", "0" * 64),
    ],
)
def test_any_definition_column_edited_by_hand_is_rewritten_from_settings(field, edited):
    # The loop goes by the stored timeout, overlap and retry delay, and the admin shows the
    # stored callable, arguments and description: a restart must put back what settings
    # declare, as `runscheduler --check` reports it, and leave the cursor where it was.
    declarations = declare(
        a=task(
            "15 3 * * *",
            callable="tests.testapp.jobs.record",
            kwargs={"label": "declared", "task_name": "a"},
            timeout=30,
            overlap="skip",
            description="declared",
        )
    )
    reconcile(now=NOW, declarations=declarations)
    before = Task.objects.get(name="a")
    Task.objects.filter(name="a").update(**{field: edited})

    assert not plan(declarations, Task.objects.all(), NOW).is_empty
    result = reconcile(now=NOW + dt.timedelta(minutes=1), declarations=declarations)

    assert [c.task.name for c in result.update] == ["a"]
    after = Task.objects.get(name="a")
    for name in DEFINITION_FIELDS:
        assert getattr(after, name) == getattr(before, name), name
    assert after.next_run_at == before.next_run_at
    assert reconcile(now=NOW, declarations=declarations).is_empty


def test_numbers_the_database_keeps_as_decimals_are_not_a_change():
    # PostgreSQL's jsonb gives 1e100 back as the integer 10**100: compared as they are, the
    # task was rewritten at every start-up and `--check` never passed.
    arguments = {
        "huge": 1e100,
        "large": 1.5e20,
        "whole": 2.0,
        "tiny": 1.5e-7,
        "zero": -0.0,
        "exact": 12345678901234567890,
        "nested": [{"x": 1e300}, 2.5, True, None],
    }
    declarations = declare(a=task(callable="tests.testapp.jobs.takes_anything", kwargs=arguments))
    reconcile(now=NOW, declarations=declarations)

    assert plan(declarations, Task.objects.all(), NOW).is_empty
    assert reconcile(now=NOW, declarations=declarations).is_empty
    Task.objects.filter(name="a").update(kwargs={**arguments, "exact": 12345678901234567891})
    assert not plan(declarations, Task.objects.all(), NOW).is_empty
    assert [c.task.name for c in reconcile(now=NOW, declarations=declarations).update] == ["a"]


@pytest.mark.parametrize(("old", "new"), [(1, True), (0, False), (2, 2.0), ([1], [True])])
def test_kwargs_that_change_type_but_not_value_are_rewritten(old, new):
    # Python finds 1 == True == 1.0, the callable does not: the stored arguments (shown in
    # the admin) must follow, and the change line must name the kwargs.
    declared = partial(task, callable="tests.testapp.jobs.takes_anything")
    reconcile(now=NOW, declarations=declare(a=declared(kwargs={"x": old})))
    declarations = declare(a=declared(kwargs={"x": new}))

    [change] = reconcile(now=NOW, declarations=declarations).update

    assert "kwargs" in change.fields
    assert change.details[0].startswith("kwargs ")
    stored = Task.objects.get(name="a").kwargs["x"]
    assert stored == new
    assert type(stored) is type(new)
    assert reconcile(now=NOW, declarations=declarations).is_empty


@pytest.mark.parametrize(("old", "new"), [(10**16, 1e16), ([10**18], [1e18])])
def test_an_int_declared_again_as_a_float_with_an_exponent_is_a_kwargs_change(old, new):
    # Only PostgreSQL's jsonb gives 1e16 back as an integer: SQLite and MariaDB keep the text
    # as written, so there the stored value must become the float. Either way the change
    # line names the kwargs, and the next start-up finds nothing to do.
    declared = partial(task, callable="tests.testapp.jobs.takes_anything")
    reconcile(now=NOW, declarations=declare(a=declared(kwargs={"x": old})))
    declarations = declare(a=declared(kwargs={"x": new}))

    [change] = reconcile(now=NOW, declarations=declarations).update

    assert change.details[0].startswith("kwargs "), change.details
    stored = Task.objects.get(name="a").kwargs["x"]
    assert stored == (old if connection.vendor == "postgresql" else new)
    if connection.vendor != "postgresql":
        assert type(stored) is type(new)
    assert reconcile(now=NOW, declarations=declarations).is_empty
    assert plan(declarations, Task.objects.all(), NOW).is_empty


def test_stored_row_matches_the_declaration():
    declarations = declare(
        a=task(
            "0 0 1,15 * 1",
            callable="tests.testapp.jobs.record",
            kwargs={"label": "x", "task_name": "a"},
            timezone="Europe/Berlin",
            retry_delay=dt.timedelta(seconds=90, microseconds=5),
            timeout=1.5,
            overlap="allow",
            description="Ünïcode",
        )
    )
    reconcile(now=NOW, declarations=declarations)
    row = Task.objects.get(name="a")
    assert row.definition_hash == declarations["a"].definition_hash
    # Read back from the database, the row plans as unchanged: no type drift per backend.
    assert plan(declarations, Task.objects.all(), NOW).is_empty


def varied(
    names: list[str], schedule: str, label: str, description: str
) -> dict[str, TaskDeclaration]:
    """Declarations of `names` whose fields are shared by every task, differ from task to
    task, or are NULL for some: the set-based writes send each kind differently. `schedule`,
    `label` (a keyword argument) and `description` are formatted with the task's index."""
    return declare(
        **{
            n: task(
                schedule.format(i=i),
                callable="tests.testapp.jobs.record",
                kwargs={"label": label.format(i=i), "task_name": n} if i % 2 else {},
                timezone="Europe/Berlin" if i % 3 else "UTC",
                retry_delay=dt.timedelta(seconds=90, microseconds=i),
                timeout=None if i % 2 else 1.5,
                overlap="allow",
                description=description.format(i=i) if i % 3 else "",
            )
            for i, n in enumerate(names)
        }
    )


def test_rewritten_rows_match_their_new_declarations_field_by_field():
    """Every definition field rewritten on many rows at once, values shared by all rows and
    values that differ, NULLs and JSON included: read back, the rows plan as unchanged."""
    names = [f"t{i}" for i in range(7)]
    reconcile(now=NOW, declarations=declare(**{n: task(timeout=5) for n in names}))
    redeclared = varied(names, "{i} 0 1,15 * 1", 'x{i} q"uo\\te', "Ünïcode, 'quoted' {{{i}}}")

    result = reconcile(now=NOW, declarations=redeclared)

    assert [c.task.name for c in result.update] == names
    rows = {t.name: t for t in Task.objects.all()}
    for n, declaration in redeclared.items():
        assert (rows[n].kwargs, rows[n].timeout, rows[n].description) == (
            declaration.kwargs,
            declaration.timeout,
            declaration.description,
        )
        assert rows[n].definition_hash == declaration.definition_hash
    assert plan(redeclared, Task.objects.all(), NOW).is_empty


def test_created_rows_match_their_declarations_field_by_field():
    """New tasks are written in one set-based insert (PostgreSQL, SQLite): values shared by
    all rows and values that differ, NULLs, JSON and text that needs quoting included, each
    row gets exactly what the ORM's own insert of that task gives."""
    names = [f"n{i}" for i in range(7)]
    declared = varied(names, "{i} 3 * * *", 'q"uo\\te {i}', "Ünïcode {i}")

    result = reconcile(now=NOW, declarations=declared)

    assert sorted(c.task.name for c in result.create) == names
    assert all(c.task.pk is not None for c in result.create)
    stored = {t.name: t for t in Task.objects.all()}
    for change in result.create:
        # The same row the ORM writes for that task: save a copy of it, then compare.
        expected = copy.copy(change.task)
        expected.pk, expected.name = None, f"orm-{expected.name}"
        expected._state.adding = True
        expected.save()
        expected.refresh_from_db()
        row = stored[change.task.name]
        assert row.pk == change.task.pk
        for field in Task._meta.concrete_fields:
            if field.name not in ("id", "name"):
                assert getattr(row, field.attname) == getattr(expected, field.attname), field.name
    assert plan(declared, Task.objects.filter(name__in=names), NOW).is_empty


@pytest.mark.parametrize("count", [3, 40])
def test_rewriting_retiring_and_restoring_costs_the_same_queries_for_any_number_of_tasks(
    count, django_assert_max_num_queries
):
    """Planning reads only some of a row's fields: touching another one on a planned row
    would cost a query per task. The statements per reconciliation stay a fixed handful."""
    names = [f"t{i:02d}" for i in range(count)]
    reconcile(now=NOW, declarations=declare(**{n: task() for n in names}))
    Task.objects.update(paused=True, consecutive_failures=2, last_run_status="failed")
    half = names[: count // 2]

    with django_assert_max_num_queries(12):
        result = reconcile(now=NOW, declarations=declare(**{n: task("0 4 * * *") for n in half}))
    with django_assert_max_num_queries(12):
        restored = reconcile(now=NOW, declarations=declare(**{n: task() for n in names}))

    assert (len(result.update), len(result.retire)) == (len(half), count - len(half))
    assert len(restored.update) == count
    # Paused stays paused; a restored task's failures in a row belong to its previous life.
    rows = Task.objects.values_list("name", "paused", "consecutive_failures", "declared")
    assert {name: rest for name, *rest in rows} == {
        name: [True, 2 if name in half else 0, True] for name in names
    }


def test_pause_and_history_survive_redeclaration_and_retirement():
    reconcile(now=NOW, declarations=declare(a=task()))
    row = Task.objects.get(name="a")
    row.pause()
    Run.objects.create(task=row, trigger="cron", status="succeeded", scheduled_for=NOW)
    reconcile(now=NOW, declarations=declare(a=task("0 1 * * *")))
    reconcile(now=NOW, declarations={})
    retired = Task.objects.get(name="a")
    assert retired.paused is True
    assert retired.declared is False
    assert retired.state == "retired"
    assert Run.objects.filter(task=row).count() == 1
    reconcile(now=NOW, declarations=declare(a=task("0 2 * * *")))
    back = Task.objects.get(name="a")
    assert back.paused is True
    assert back.declared is True
    assert back.schedule == "0 2 * * *"
    assert Run.objects.filter(task=back).count() == 1


def test_check_only_changes_nothing():
    result = reconcile(now=NOW, declarations=declare(a=task()), check_only=True)
    assert not result.is_empty
    assert Task.objects.count() == 0
    assert result.lines()[0].startswith("new task 'a'")


def test_apply_replans_inside_the_lock():
    declarations = declare(a=task())
    stale = plan(declarations, [], NOW)  # planned before someone else created the row
    reconcile(now=NOW, declarations=declarations)
    done = apply(stale)
    assert done.is_empty
    assert Task.objects.count() == 1


def test_due_at_consistent_with_pending_request():
    reconcile(now=NOW, declarations=declare(a=task("15 3 * * *")))
    row = Task.objects.get(name="a")
    row.request_run(NOW)
    reconcile(now=NOW, declarations=declare(a=task("0 23 * * *")))
    row.refresh_from_db()
    assert row.next_run_at == dt.datetime(2086, 1, 7, 23, 0, tzinfo=UTC)
    assert row.run_requested_at == NOW
    assert row.due_at == NOW


@pytest.mark.parametrize(
    ("frozen", "expected"),
    [
        ("2086-01-07 03:14:59.999", dt.datetime(2086, 1, 7, 3, 15, tzinfo=UTC)),
        ("2086-01-07 03:15:00.000", dt.datetime(2086, 1, 7, 3, 15, tzinfo=UTC)),
        ("2086-01-07 03:15:59.999", dt.datetime(2086, 1, 7, 3, 15, tzinfo=UTC)),
        ("2086-01-07 03:16:00.000", dt.datetime(2086, 1, 8, 3, 15, tzinfo=UTC)),
    ],
)
def test_cursor_rule_at_the_exact_minute_boundary(frozen, expected, posixcron):
    posixcron({"nightly-report": task("15 3 * * *")})
    with freeze_time(frozen):
        reconcile()
    assert Task.objects.get(name="nightly-report").next_run_at == expected


@pytest.mark.parametrize(
    ("schedule", "frozen", "expected"),
    [
        # Spring forward in Berlin (02:00 -> 03:00 on 29 March 2026): 02:30 fires at 03:00, the
        # first instant after the gap, so a task created in that minute fires at once...
        ("30 2 * * *", "2026-03-29 01:00:20", dt.datetime(2026, 3, 29, 1, 0, tzinfo=UTC)),
        # ... and one created a minute later waits for the next day's 02:30 (+02:00).
        ("30 2 * * *", "2026-03-29 01:01:20", dt.datetime(2026, 3, 30, 0, 30, tzinfo=UTC)),
        # Fall back (03:00 -> 02:00 on 25 October 2026): created in the second 02:30 (+01:00),
        # a fixed-time task does not fire; its occurrence was the first pass (+02:00).
        ("30 2 * * *", "2026-10-25 01:30:20", dt.datetime(2026, 10, 26, 1, 30, tzinfo=UTC)),
        # An elapsed-time schedule fires in both passes: the wall minute decides.
        ("30 * * * *", "2026-10-25 01:30:20", dt.datetime(2026, 10, 25, 1, 30, tzinfo=UTC)),
    ],
)
def test_cursor_rule_on_days_the_clocks_change(schedule, frozen, expected, posixcron):
    """docs/running.rst, "First start": the current minute is judged by the DST rule.

    Under freeze_time, as a project's own tests run it: freezegun's datetime dropped `fold`
    when converted to the task's zone, and the second 02:30 read as the first, an hour
    earlier, so the task got a cursor in the past and fired at once.
    """
    posixcron({"berlin": task(schedule, timezone="Europe/Berlin")})
    with freeze_time(frozen):
        reconcile()
    assert Task.objects.get(name="berlin").next_run_at == expected


def test_schedule_change_at_boundary_fires_now_only_in_matching_minute(posixcron):
    posixcron({"a": task("0 3 * * *")})
    with freeze_time("2086-01-07 03:14:30"):
        reconcile()
    posixcron({"a": task("14 3 * * *")})
    with freeze_time("2086-01-07 03:14:30"):
        reconcile()
    assert Task.objects.get(name="a").next_run_at == dt.datetime(2086, 1, 7, 3, 14, tzinfo=UTC)


def test_many_tasks_in_batches():
    declarations = declare(**{f"t-{i:04d}": task(f"{i % 60} * * * *") for i in range(1200)})
    reconcile(now=NOW, declarations=declarations)
    assert Task.objects.count() == 1200
    changed = {**declarations, **declare(**{f"t-{i:04d}": task("0 0 * * *") for i in range(600)})}
    result = reconcile(now=NOW, declarations=changed)
    assert len(result.update) == 600
    assert Task.objects.filter(schedule="0 0 * * *").count() == 600
    result = reconcile(now=NOW, declarations={})
    assert len(result.retire) == 1200
    assert Task.objects.retired().count() == 1200


@pytest.mark.django_db(transaction=True)
def test_concurrent_applies_produce_one_result():
    """Two threads, each with its own connection, reconcile the same settings at once."""
    if connection.vendor == "sqlite" and connection.settings_dict["NAME"] == ":memory:":
        pytest.skip("an in-memory SQLite database is not shared between threads")
    declarations = declare(**{f"t-{i:03d}": task(f"{i % 60} 3 * * *") for i in range(300)})
    barrier = threading.Barrier(2, timeout=30)
    results = []
    errors: list[BaseException] = []

    def run() -> None:
        from django.db import connections

        try:
            barrier.wait()
            results.append(reconcile(now=NOW, declarations=declarations))
        except BaseException as error:
            errors.append(error)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=60)
    assert not any(t.is_alive() for t in threads)
    assert errors == []
    assert Task.objects.count() == 300
    created = sorted(len(r.create) for r in results)
    assert created == [0, 300]
    assert sorted(len(r.unchanged) for r in results) == [0, 300]


def test_lost_cursor_and_foreign_hash_are_repaired():
    declarations = declare(a=task(), b=task())
    reconcile(now=NOW, declarations=declarations)
    Task.objects.filter(name="a").update(next_run_at=None, due_at=None)
    Task.objects.filter(name="b").update(definition_hash="old", schedule="0 0 * * *")
    result = reconcile(now=NOW, declarations=declarations)
    assert sorted(c.task.name for c in result.update) == ["a", "b"]
    assert Task.objects.get(name="a").next_run_at is not None
    assert Task.objects.get(name="b").definition_hash == declarations["b"].definition_hash
    assert reconcile(now=NOW, declarations=declarations).is_empty


@pytest.mark.parametrize("now", [NOW.replace(tzinfo=None), NOW.date(), "now"])
def test_reconciling_at_an_instant_that_is_not_aware_is_refused(now):
    # A naive instant was stored as one in TIME_ZONE (a warning at most), a string or a date
    # raised from deep inside.
    with pytest.raises(TypeError, match="now must be an aware datetime"):
        reconcile(now=now, declarations=declare(a=task()))
    assert not Task.objects.exists()
