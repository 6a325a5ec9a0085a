"""plan(): pure, no database; unsaved Task rows stand in for the table."""

from __future__ import annotations

import datetime as dt

from django_posixcron.declarations import TaskDeclaration
from django_posixcron.models import Task
from django_posixcron.reconcile import plan
from tests.harness.declaring import NOW, declare, task

UTC = dt.UTC


def rows_after(declarations: dict[str, TaskDeclaration], now: dt.datetime = NOW) -> list[Task]:
    """Return the rows a first reconciliation would create, unsaved."""
    return [change.task for change in plan(declarations, [], now).create]


def test_empty():
    result = plan({}, [], NOW)
    assert result.is_empty
    assert result.lines() == [
        "Reconciled 0 declared tasks: 0 created, 0 updated, 0 restored, 0 retired, 0 unchanged."
    ]


def test_pending_lines_say_what_would_happen():
    result = plan(declare(a=task("15 3 * * *", timezone="Asia/Kolkata")), [], NOW)
    assert result.lines(pending=True) == [
        "new task 'a': schedule '15 3 * * *' in Asia/Kolkata; callable tests.testapp.jobs.noop; "
        "next run 2086-01-08T03:15:00+05:30",
        "Reconciling 1 declared task would leave: 1 to create, 0 to update, 0 to restore, "
        "0 to retire, 0 unchanged.",
    ]


def test_create():
    declarations = declare(b=task("0 4 * * *"), a=task("15 3 * * *", description="x"))
    result = plan(declarations, [], NOW)
    assert not result.is_empty
    assert [c.task.name for c in result.create] == ["a", "b"]
    a = result.create[0].task
    assert a.pk is None
    assert a.declared
    assert not a.paused
    assert a.definition_hash == declarations["a"].definition_hash
    assert a.next_run_at == dt.datetime(2086, 1, 8, 3, 15, tzinfo=UTC)
    assert a.due_at == a.next_run_at
    assert result.lines()[0] == (
        "new task 'a': schedule '15 3 * * *' in UTC; callable tests.testapp.jobs.noop; "
        "next run 2086-01-08T03:15:00+00:00"
    )


def test_unchanged_keeps_cursor():
    declarations = declare(a=task())
    rows = rows_after(declarations)
    later = NOW + dt.timedelta(days=3)
    result = plan(declarations, rows, later)
    assert result.is_empty
    assert result.unchanged == ["a"]
    assert result.lines()[-1].endswith("0 retired, 1 unchanged.")


def test_schedule_change_moves_cursor():
    rows = rows_after(declare(a=task("15 3 * * *")))
    later = dt.datetime(2086, 1, 7, 12, 0, 30, tzinfo=UTC)
    result = plan(declare(a=task("0 12 * * *")), rows, later)
    [change] = result.update
    assert change.action == "task_updated"
    # The current minute matches: fires now.
    assert change.task.next_run_at == dt.datetime(2086, 1, 7, 12, 0, tzinfo=UTC)
    assert "schedule '15 3 * * *' -> '0 12 * * *'" in change.line
    assert rows[0].schedule == "15 3 * * *"  # the input is not mutated


def test_zone_change_moves_cursor():
    rows = rows_after(declare(a=task("15 3 * * *")))
    result = plan(declare(a=task("15 3 * * *", timezone="Europe/Berlin")), rows, NOW)
    [change] = result.update
    assert change.task.timezone == "Europe/Berlin"
    assert change.task.next_run_at == dt.datetime(2086, 1, 8, 2, 15, tzinfo=UTC)
    assert "next_run_at" in change.fields


def test_other_change_keeps_cursor():
    rows = rows_after(declare(a=task("15 3 * * *")))
    rows[0].next_run_at = rows[0].due_at = dt.datetime(2086, 1, 1, tzinfo=UTC)  # overdue
    new = declare(a=task("15 3 * * *", retry_delay=60, description="d", overlap="allow"))
    [change] = plan(new, rows, NOW).update
    assert change.task.next_run_at == dt.datetime(2086, 1, 1, tzinfo=UTC)
    assert "next_run_at" not in change.fields
    assert set(change.fields) == {
        "retry_delay",
        "description",
        "overlap",
        "definition_hash",
        "updated_at",
    }
    assert change.task.definition_hash == new["a"].definition_hash


def test_a_change_of_keys_without_a_column_is_named_in_its_line():
    # enqueue, start_deadline and takes_context are in the definition hash but have no
    # column: the change line must still say what changed, not end in an empty list.
    rows = rows_after(declare(a=task()))
    handed_off = declare(a=task(enqueue={"queue_name": "cron"}, start_deadline=40))
    [change] = plan(handed_off, rows, NOW).update
    assert change.line == (
        "changed task 'a': enqueue, start_deadline or takes_context changed (now enqueue "
        "{'backend': 'default', 'queue_name': 'cron', 'priority': 0}, start_deadline 40 s, "
        "takes_context False)"
    )
    assert change.fields == ("definition_hash", "updated_at")

    rows = rows_after(handed_off)
    [change] = plan(declare(a=task()), rows, NOW).update
    assert change.line.endswith("(now enqueue off, takes_context False)")


def test_paused_is_never_touched():
    rows = rows_after(declare(a=task("15 3 * * *")))
    rows[0].paused = True
    [change] = plan(declare(a=task("0 4 * * *")), rows, NOW).update
    assert change.task.paused is True
    assert "paused" not in change.fields
    result = plan({}, rows, NOW)
    assert "paused" not in result.retire[0].fields


def test_retire_and_restore():
    declarations = declare(a=task("15 3 * * *"))
    rows = rows_after(declarations)
    rows[0].retry_at = dt.datetime(2086, 1, 7, 9, 0, tzinfo=UTC)
    result = plan({}, rows, NOW)
    [change] = result.retire
    assert change.action == "task_retired"
    assert change.task.declared is False
    assert change.fields == ("declared", "updated_at")
    assert change.task.next_run_at == rows[0].next_run_at  # cursor kept as is
    retired = change.task

    # Staying retired is no change, and no declared task is counted "unchanged" for it.
    assert plan({}, [retired], NOW).is_empty
    assert plan({}, [retired], NOW).summary().endswith("0 retired, 0 unchanged.")

    later = dt.datetime(2086, 2, 1, 3, 15, 59, tzinfo=UTC)
    [back] = plan(declarations, [retired], later).update
    assert back.action == "task_restored"
    assert back.task.declared is True
    assert back.task.retry_at is None
    assert back.task.next_run_at == dt.datetime(2086, 2, 1, 3, 15, tzinfo=UTC)
    assert back.line.startswith("restored task 'a': declared again")


def test_due_at_keeps_pending_retry_and_request():
    rows = rows_after(declare(a=task("15 3 * * *")))
    retry = dt.datetime(2086, 1, 7, 11, 0, tzinfo=UTC)
    rows[0].retry_at = retry
    [change] = plan(declare(a=task("0 23 * * *")), rows, NOW).update
    assert change.task.next_run_at == dt.datetime(2086, 1, 7, 23, 0, tzinfo=UTC)
    assert change.task.due_at == retry
    assert change.task.retry_at == retry


def test_cursor_rule_at_the_minute_boundary():
    declarations = declare(a=task("15 3 * * *"))
    before = dt.datetime(2086, 1, 7, 3, 14, 59, 999999, tzinfo=UTC)
    at = dt.datetime(2086, 1, 7, 3, 15, tzinfo=UTC)
    end = dt.datetime(2086, 1, 7, 3, 15, 59, 999999, tzinfo=UTC)
    after = dt.datetime(2086, 1, 7, 3, 16, tzinfo=UTC)
    today = dt.datetime(2086, 1, 7, 3, 15, tzinfo=UTC)
    tomorrow = dt.datetime(2086, 1, 8, 3, 15, tzinfo=UTC)
    assert rows_after(declarations, before)[0].next_run_at == today
    assert rows_after(declarations, at)[0].next_run_at == today
    assert rows_after(declarations, end)[0].next_run_at == today
    assert rows_after(declarations, after)[0].next_run_at == tomorrow


def test_lost_cursor_is_restored():
    rows = rows_after(declare(a=task()))
    rows[0].next_run_at = rows[0].due_at = None
    [change] = plan(declare(a=task()), rows, NOW).update
    assert change.task.next_run_at is not None
    assert change.task.due_at == change.task.next_run_at


def _stored(row: Task) -> dict[str, object]:
    return {f.attname: getattr(row, f.attname) for f in Task._meta.concrete_fields}


def test_rows_are_left_as_they_were_unless_planned_in_place():
    declarations = declare(a=task("15 3 * * *"), b=task("0 4 * * *"))
    rows = rows_after(declarations)
    for row in rows:
        row.declared = row.name == "a"  # a to rewrite, b to restore
    rows.append(rows_after(declare(c=task()))[0])  # c to retire
    before = [_stored(row) for row in rows]
    changed = declare(a=task("30 3 * * *"), b=task("0 4 * * *"))

    result = plan(changed, rows, NOW)
    assert [_stored(row) for row in rows] == before
    assert not any(c.task in rows for c in result.changes)

    # Reconciling reads rows for one plan alone: the plan takes them over instead of copying
    # each (a deploy rewriting 100,000 tasks held both).
    in_place = plan(changed, rows, NOW, in_place=True)
    assert [c.task for c in in_place.changes] == rows
    assert in_place.lines() == result.lines()
    assert [_stored(c.task) for c in in_place.changes] == [_stored(c.task) for c in result.changes]


def test_a_changed_definition_is_worded_as_settings_spell_it():
    # The plan printed "retry_delay datetime.timedelta(seconds=300) -> ..." and
    # "callable_path ...": Python's reprs and the column's name, not the settings key.
    rows = rows_after(declare(a=task(retry_delay=300)))
    changed = declare(a=task(callable="tests.testapp.jobs.fail", retry_delay=60, timeout=600))
    [change] = plan(changed, rows, NOW).update
    assert "callable 'tests.testapp.jobs.noop' -> 'tests.testapp.jobs.fail'" in change.line
    assert "retry_delay 300 s -> 60 s" in change.line
    assert "timeout none -> 600 s" in change.line
    assert "datetime" not in change.line
