"""The RunContext a task declared with takes_context gets: its fields and attempt rules."""

from __future__ import annotations

import datetime as dt
from pathlib import Path

import pytest

from django_posixcron.context import RunContext
from django_posixcron.executors import ProcessExecutor
from django_posixcron.models import Run, RunStatus, Task, Trigger
from tests.harness.tasks import T0
from tests.testapp.models import Hit

pytestmark = pytest.mark.django_db(transaction=True)

ZONE = "Europe/Berlin"  # T0 (10:00 UTC, January) is 11:00 there
MINUTE = dt.timedelta(minutes=1)


def contexts(name: str, path: Path | None = None) -> list[tuple[str, str, str, str, str]]:
    """Return (run id, trigger, attempt, scheduled_for, occurrence) as the callable saw them."""
    if path is not None:
        lines = path.read_text("utf-8").splitlines()
    else:
        hits = Hit.objects.filter(task_name__startswith=f"context:{name}:").order_by("pk")
        lines = [f"{hit.task_name}|{hit.label}" for hit in hits]
    found = []
    for line in lines:
        task_name, trigger, attempt, scheduled_for, occurrence = line.split("|")
        found.append((task_name.rsplit(":", 1)[1], trigger, attempt, scheduled_for, occurrence))
    return found


def run_ids(name: str) -> list[str]:
    runs = Run.objects.filter(task__name=name).order_by("pk")
    return [str(pk) for pk in runs.values_list("pk", flat=True)]


@pytest.mark.parametrize("executor", ["thread", "process"])
def test_a_cron_run_and_its_retry_in_the_tasks_zone(tasks, make_scheduler, executor, tmp_path):
    # The process executor's child reports through a file: on SQLite it has no test database.
    path = tmp_path / "contexts.txt" if executor == "process" else None
    tasks(
        "ctx",
        schedule="0 11 * * *",  # 11:00 in Berlin
        callable_path="tests.testapp.jobs.record_context",
        kwargs={"fail": True, "path": str(path or "")},
        timezone=ZONE,
        retry_delay=60,
        next_run_at=T0,
        takes_context=True,
    )
    options = {"executor": ProcessExecutor(2)} if executor == "process" else {}
    scheduler = make_scheduler(**options)

    scheduler.tick(T0)
    assert scheduler.wait_idle(timeout=30)
    failed = Run.objects.get(task__name="ctx")
    assert failed.status == RunStatus.FAILED
    assert failed.finished_at is not None
    retry_due = failed.finished_at + MINUTE
    scheduler.tick(retry_due)
    assert scheduler.wait_idle(timeout=30)

    first, second = run_ids("ctx")
    retry = Run.objects.get(pk=second)
    assert (retry.trigger, retry.attempt, retry.occurrence) == (Trigger.RETRY, 2, T0)
    assert contexts("ctx", path) == [
        (first, "cron", "1", "2086-01-07T11:00:00+01:00", "2086-01-07T11:00:00+01:00"),
        (
            second,
            "retry",
            "2",
            retry.scheduled_for.astimezone(dt.timezone(dt.timedelta(hours=1))).isoformat(),
            "2086-01-07T11:00:00+01:00",
        ),
    ]


def test_attempts_count_on_per_occurrence_and_restart_with_the_next(tasks, make_scheduler):
    tasks(
        "ctx",
        schedule="0 11 * * *",
        callable_path="tests.testapp.jobs.record_context",
        kwargs={"fail": True},
        timezone=ZONE,
        retry_delay=60,
        next_run_at=T0,
        takes_context=True,
    )
    scheduler = make_scheduler()
    now = T0
    for _ in range(3):  # the occurrence, then two retries of it
        scheduler.tick(now)
        assert scheduler.wait_idle(timeout=10)
        finished_at = Run.objects.filter(task__name="ctx").latest("pk").finished_at
        assert finished_at is not None
        now = finished_at + MINUTE
    # The next day's occurrence comes while a retry is pending: it consumes the retry and is
    # attempt 1 of itself.
    scheduler.tick(T0 + dt.timedelta(days=1))
    assert scheduler.wait_idle(timeout=10)

    seen = [
        (trigger, attempt, occurrence) for _, trigger, attempt, _, occurrence in contexts("ctx")
    ]
    assert seen == [
        ("cron", "1", "2086-01-07T11:00:00+01:00"),
        ("retry", "2", "2086-01-07T11:00:00+01:00"),
        ("retry", "3", "2086-01-07T11:00:00+01:00"),
        ("cron", "1", "2086-01-08T11:00:00+01:00"),
    ]


def test_a_manual_run_serves_its_request_instant(tasks, make_scheduler):
    task = tasks(
        "ctx",
        schedule="0 3 * * *",
        callable_path="tests.testapp.jobs.record_context",
        timezone=ZONE,
        takes_context=True,
    )
    requested = T0 + dt.timedelta(seconds=7)
    task.request_run(requested)
    scheduler = make_scheduler()
    scheduler.tick(requested)
    assert scheduler.wait_idle(timeout=10)
    [(_, trigger, attempt, scheduled_for, occurrence)] = contexts("ctx")
    assert (trigger, attempt) == ("manual", "1")
    assert scheduled_for == occurrence == "2086-01-07T11:00:07+01:00"


def test_the_context_is_in_the_declarations_zone_whatever_the_row_says(tasks, make_scheduler):
    # The row's zone edited by hand, its hash left as it was: what runs follows settings.
    task = tasks(
        "ctx",
        schedule="0 3 * * *",
        callable_path="tests.testapp.jobs.record_context",
        timezone=ZONE,
        takes_context=True,
    )
    Task.objects.filter(pk=task.pk).update(timezone="Mars/Olympus")
    requested = T0 + dt.timedelta(seconds=7)
    task.request_run(requested)
    scheduler = make_scheduler()
    scheduler.tick(requested)
    assert scheduler.wait_idle(timeout=10)
    assert Run.objects.get(task__name="ctx").status == RunStatus.SUCCEEDED
    [(_, trigger, _, scheduled_for, _)] = contexts("ctx")
    assert (trigger, scheduled_for) == ("manual", "2086-01-07T11:00:07+01:00")


def test_a_task_without_takes_context_gets_none(tasks, make_scheduler):
    tasks("plain", next_run_at=T0)  # record(label="", task_name="record"): no context argument
    scheduler = make_scheduler()
    scheduler.tick(T0)
    assert scheduler.wait_idle(timeout=10)
    assert Run.objects.get(task__name="plain").status == RunStatus.SUCCEEDED


def test_the_context_pickles_for_the_process_executor():
    import pickle

    context = RunContext("t", 1, "cron", T0, T0, 1)
    assert pickle.loads(pickle.dumps(context)) == context


def test_a_lost_run_is_retried_as_the_next_attempt_of_its_occurrence(tasks, make_scheduler):
    from tests.factories import SchedulerProcessFactory

    occurrence = T0 - dt.timedelta(hours=1)
    task = tasks(
        "ctx",
        schedule="0 * * * *",
        callable_path="tests.testapp.jobs.record_context",
        timezone=ZONE,
        retry_delay=60,
        next_run_at=T0 + dt.timedelta(hours=1),
        takes_context=True,
    )
    dead = SchedulerProcessFactory.create(last_heartbeat_at=occurrence)
    Run.objects.create(
        task=task,
        trigger=Trigger.RETRY,
        status=RunStatus.RUNNING,
        scheduled_for=occurrence + MINUTE,
        started_at=occurrence + MINUTE,
        process=dead,
        occurrence=occurrence,
        attempt=2,
    )
    scheduler = make_scheduler()
    scheduler.tick(T0)  # marks it lost: a failure, retried after retry_delay
    scheduler.tick(T0 + 2 * MINUTE)
    assert scheduler.wait_idle(timeout=10)

    [(_, trigger, attempt, _, seen_occurrence)] = contexts("ctx")
    assert (trigger, attempt, seen_occurrence) == ("retry", "3", "2086-01-07T10:00:00+01:00")
