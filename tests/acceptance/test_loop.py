"""The loop's promises, driven with Scheduler.tick(now): retries, overlap, manual, errors."""

from __future__ import annotations

import datetime as dt
import logging
import socket
import threading
from typing import Any

import pytest
from django.db import connection

from django_posixcron.models import Run, SchedulerProcess, Task
from django_posixcron.scheduler import Scheduler
from tests.factories import TaskFactory
from tests.harness.charsets import utf8mb3_columns
from tests.harness.world import HOUR, MINUTE, T0, World, hits, record, runs, task
from tests.testapp.jobs import GATES
from tests.testapp.models import Hit

pytestmark = pytest.mark.django_db(transaction=True)

SECOND = dt.timedelta(seconds=1)


def job(name: str, func: str, schedule: str = "0 * * * *", **extra: Any) -> dict[str, Any]:
    return {
        "schedule": schedule,
        "callable": f"tests.testapp.jobs.{func}",
        "kwargs": {"task_name": name},
        "retry_delay": 300,
        **extra,
    }


def open_gate(name: str) -> None:
    GATES.setdefault(name, threading.Event()).set()


def close_gate(name: str) -> None:
    GATES[name] = threading.Event()


def test_no_make_up_after_a_long_gap(world):
    world.settings({"hourly": record("hourly", "15 * * * *")})
    world.start(T0)
    gap_end = T0 + dt.timedelta(days=3, hours=2, minutes=40)  # 12:40, three days on
    world.tick(gap_end)
    world.tick(gap_end + MINUTE)
    assert runs("hourly") == [("cron", "succeeded", T0 + 15 * MINUTE)]
    assert task("hourly").next_run_at == gap_end.replace(minute=15) + HOUR
    world.tick(gap_end.replace(minute=15) + HOUR)
    assert hits("hourly") == 2


def test_failure_retries_after_retry_delay_and_success_clears_it(world):
    world.settings({"flaky": job("flaky", "fail_then_succeed", retry_delay=120)})
    world.start(T0)
    world.tick(T0)
    flaky = task("flaky")
    assert flaky.last_run_status == "failed"
    assert flaky.retry_at is not None
    assert T0 + 120 * SECOND <= flaky.retry_at < T0 + 130 * SECOND
    assert flaky.due_at == flaky.retry_at
    failed = Run.objects.get(task=flaky)
    assert "RuntimeError: first call fails" in failed.traceback
    assert "Traceback" in failed.traceback

    assert world.tick(T0 + 119 * SECOND).claimed == []
    retry_at = flaky.retry_at
    world.tick(retry_at)
    assert runs("flaky") == [("cron", "failed", T0), ("retry", "succeeded", retry_at)]
    flaky = task("flaky")
    assert flaky.retry_at is None
    assert flaky.last_run_status == "succeeded"
    assert flaky.due_at == T0 + HOUR


def test_the_next_occurrence_fires_first_when_it_comes_before_the_retry(world):
    world.settings({"flaky": job("flaky", "fail_then_succeed", retry_delay=90 * 60)})
    world.start(T0)
    world.tick(T0)
    assert task("flaky").due_at == T0 + HOUR
    world.tick(T0 + HOUR)
    assert runs("flaky") == [("cron", "failed", T0), ("cron", "succeeded", T0 + HOUR)]
    assert task("flaky").retry_at is None
    # The retry (11:30) was consumed by the 11:00 run.
    assert world.tick(T0 + HOUR + 31 * MINUTE).claimed == []


def test_a_failing_task_keeps_retrying_at_its_delay(world):
    world.settings({"bad": job("bad", "raise_value_error", schedule="0 0 1 1 *", retry_delay=60)})
    world.start(T0)
    task("bad").request_run(T0)
    world.tick(T0)
    for _ in range(3):
        world.tick(task("bad").retry_at)
    assert [r[:2] for r in runs("bad")] == [("manual", "failed")] + [("retry", "failed")] * 3
    assert hits("bad") == 4


def test_overlap_skip_records_a_skipped_run_and_allow_runs_concurrently(world):
    close_gate("skipper")
    close_gate("allower")
    world.settings(
        {
            "skipper": job("skipper", "wait_for_gate", overlap="skip"),
            "allower": job("allower", "wait_for_gate", overlap="allow"),
        }
    )
    world.start(T0)
    world.tick(T0, wait=False)
    world.tick(T0 + HOUR, wait=False)
    assert [r[:2] for r in runs("skipper")] == [("cron", "running"), ("cron", "skipped")]
    assert [r[:2] for r in runs("allower")] == [("cron", "running"), ("cron", "running")]
    open_gate("skipper")
    open_gate("allower")
    assert world.scheduler.wait_idle(timeout=15)
    assert [r[1] for r in runs("skipper")] == ["succeeded", "skipped"]
    assert [r[1] for r in runs("allower")] == ["succeeded", "succeeded"]
    assert hits("skipper") == 1
    assert hits("allower") == 2
    # A skip is not a failure: no retry.
    assert task("skipper").retry_at is None


def test_overlap_skip_records_the_skip_on_time_when_every_slot_is_busy(world):
    # The claim took only as many tasks as there were free slots, before deciding overlap:
    # with the slot taken by the task's own run, the next occurrence was not skipped but ran
    # late, once the run ended, and the occurrences in between left no row at all.
    close_gate("slow")
    world.settings(
        {"slow": job("slow", "wait_for_gate", overlap="skip")},
        CONCURRENCY=1,
    )
    world.start(T0)
    world.tick(T0, wait=False)
    world.tick(T0 + HOUR, wait=False)
    world.tick(T0 + 2 * HOUR, wait=False)
    assert [r[:3] for r in runs("slow")] == [
        ("cron", "running", T0),
        ("cron", "skipped", T0 + HOUR),
        ("cron", "skipped", T0 + 2 * HOUR),
    ]
    open_gate("slow")
    assert world.scheduler.wait_idle(timeout=15)
    world.tick(T0 + 3 * HOUR)
    assert [r[1:3] for r in runs("slow")][-1] == ("succeeded", T0 + 3 * HOUR)


def test_a_task_row_deleted_while_the_scheduler_runs_is_created_again(world, monkeypatch, caplog):
    # Deleted in a shell while schedulers ran, a declared task never fired again (until the
    # next start-up), and nothing said so.
    from django_posixcron.scheduling import loop

    world.settings({"victim": record("victim", "0 * * * *"), "fine": record("fine", "0 * * * *")})
    monkeypatch.setattr(loop, "ROWS_CHECK_EVERY", 0.0)  # counted at every tick
    world.start(T0)
    world.scheduler.reconcile(T0)  # as runscheduler's start-up does: it counts the rows
    world.tick(T0)
    Task.objects.filter(name="victim").delete()
    with caplog.at_level(logging.WARNING, logger="django_posixcron"):
        world.tick(T0 + HOUR)
    assert "1 task row(s) were deleted while this scheduler ran" in caplog.text
    assert task("victim").declared
    # Created again in a minute its schedule matches: it fires at once (DESIGN 4.3).
    assert runs("victim") == [("cron", "succeeded", T0 + HOUR)]
    assert hits("fine") == 2


def test_a_task_row_deleted_while_another_deploy_creates_one_is_created_again(
    world, monkeypatch, caplog
):
    # Counted as a total, a deletion was missed when another release's scheduler created a
    # task of its own in the same minute: the deleted task never fired again.
    from django_posixcron.scheduling import loop

    world.settings({"victim": record("victim", "0 * * * *"), "fine": record("fine", "0 * * * *")})
    monkeypatch.setattr(loop, "ROWS_CHECK_EVERY", 0.0)  # counted at every tick
    world.start(T0)
    world.scheduler.reconcile(T0)
    world.tick(T0)
    Task.objects.filter(name="victim").delete()
    TaskFactory.create(name="another-deploys-task", next_run_at=None)
    with caplog.at_level(logging.WARNING, logger="django_posixcron"):
        world.tick(T0 + HOUR)
    assert "1 task row(s) were deleted while this scheduler ran" in caplog.text
    assert runs("victim") == [("cron", "succeeded", T0 + HOUR)]
    # Counted again after reconciling: nothing more was deleted.
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="django_posixcron"):
        world.tick(T0 + 2 * HOUR)
    assert "were deleted" not in caplog.text


def test_a_manual_request_fires_as_manual_at_the_next_tick(world):
    world.settings({"yearly": record("yearly", "0 0 1 1 *")})
    world.start(T0)
    requested = T0 + 5 * MINUTE + 7 * SECOND
    task("yearly").request_run(requested)
    assert world.tick(requested - SECOND).claimed == []
    world.tick(requested + SECOND)
    assert runs("yearly") == [("manual", "succeeded", requested)]
    assert task("yearly").due_at == dt.datetime(2087, 1, 1, tzinfo=dt.UTC)
    assert world.tick(requested + MINUTE).claimed == []


def test_a_paused_task_ignores_manual_requests_until_resumed(world):
    world.settings({"yearly": record("yearly", "0 0 1 1 *")})
    world.start(T0)
    yearly = task("yearly")
    yearly.pause()
    yearly.request_run(T0)
    world.tick(T0 + MINUTE)
    assert hits("yearly") == 0
    task("yearly").resume()
    world.tick(T0 + 2 * MINUTE)
    assert runs("yearly") == [("manual", "succeeded", T0)]


def test_a_process_with_other_declarations_does_not_claim_and_says_so(world, caplog):
    world.settings({"job": record("job", "0 * * * *")})
    world.start(T0)
    # A rolling deploy: the database was reconciled by the new code (new kwargs) ...
    world.settings({"job": {**record("job", "0 * * * *"), "kwargs": {"task_name": "new"}}})
    world.start(T0 + MINUTE)
    # ... while an old process still has the old settings.
    world.settings({"job": record("job", "0 * * * *")})
    old = Scheduler(grace=5)
    world.schedulers.append(old)
    with caplog.at_level(logging.WARNING, logger="django_posixcron"):
        assert old.tick(T0 + HOUR).claimed == []
    assert any(getattr(r, "action", None) == "definition_differs" for r in caplog.records)
    assert hits("job") == 0
    world.tick(T0 + HOUR)
    assert hits("new") == 1
    assert hits("job") == 0


@pytest.mark.parametrize(
    ("func", "expected"),
    [
        ("raise_system_exit", "SystemExit"),
        ("raise_keyboard_interrupt", "KeyboardInterrupt"),
        ("raise_value_error", "ValueError: boom broke on purpose"),
    ],
)
def test_any_exception_from_task_code_is_stored_and_the_scheduler_goes_on(world, func, expected):
    world.settings({"boom": job("boom", func), "fine": record("fine", "0 * * * *")})
    world.start(T0)
    world.tick(T0)
    failed = Run.objects.get(task__name="boom")
    assert failed.status == "failed"
    assert expected.split(":")[0] in failed.error
    assert "Traceback (most recent call last)" in failed.traceback
    assert expected.split(":")[0] in failed.traceback
    assert "tests/testapp/jobs.py" in failed.traceback
    assert runs("fine") == [("cron", "succeeded", T0)]
    # The scheduler is alive: the retry and the next hour both fire.
    world.tick(task("boom").retry_at)
    world.tick(T0 + HOUR)
    assert hits("boom") == 3
    assert hits("fine") == 2


def test_a_run_of_a_dead_process_becomes_lost_and_is_retried(world):
    world.settings({"job": record("job", "0 0 1 1 *", retry_delay=600)})
    world.start(T0)
    dead = SchedulerProcess.objects.create(
        hostname=socket.gethostname(),
        pid=999999,
        started_at=T0 - HOUR,
        last_heartbeat_at=T0 - 10 * MINUTE,
    )
    Run.objects.create(
        task=task("job"),
        trigger="cron",
        status="running",
        scheduled_for=T0 - 11 * MINUTE,
        started_at=T0 - 11 * MINUTE,
        process=dead,
    )
    world.tick(T0)
    lost = Run.objects.get(task__name="job")
    assert lost.status == "lost"
    job_ = task("job")
    assert job_.last_run_status == "lost"
    assert job_.retry_at == T0 + 10 * MINUTE
    world.tick(T0 + 10 * MINUTE)
    assert [r[:2] for r in runs("job")] == [("cron", "lost"), ("retry", "succeeded")]


def test_a_timed_out_run_counts_as_a_failure(world):
    close_gate("slow")
    world.settings({"slow": job("slow", "wait_for_gate", timeout=30, retry_delay=60)})
    world.start(T0)
    world.tick(T0, wait=False)
    world.tick(T0 + 31 * SECOND, wait=False)
    slow = task("slow")
    assert runs("slow") == [("cron", "timed_out", T0)]
    assert slow.last_run_status == "timed_out"
    assert slow.retry_at == T0 + 91 * SECOND
    open_gate("slow")
    assert world.scheduler.wait_idle(timeout=15)
    # The late return does not overwrite the recorded outcome.
    assert runs("slow") == [("cron", "timed_out", T0)]


def test_an_interrupted_run_counts_as_a_failure(world):
    close_gate("long")
    world.settings({"long": job("long", "wait_for_gate", retry_delay=60)})
    scheduler = world.start(T0, grace=0)
    world.tick(T0, wait=False)
    scheduler.shutdown()
    world.scheduler = None
    assert runs("long") == [("cron", "interrupted", T0)]
    long = task("long")
    assert long.last_run_status == "interrupted"
    assert long.retry_at is not None
    open_gate("long")
    world.start(T0 + MINUTE)
    world.tick(long.retry_at)
    assert [r[:2] for r in runs("long")] == [("cron", "interrupted"), ("retry", "succeeded")]


def test_paused_and_retired_tasks_never_fire_even_when_due(world):
    world.settings({"p": record("p", "0 * * * *"), "r": record("r", "0 * * * *")})
    world.start(T0 - MINUTE)
    Task.objects.filter(name="p").update(paused=True)
    world.settings({"p": record("p", "0 * * * *")})
    world.start(T0 - MINUTE)
    for step in range(3):
        world.tick(T0 + step * HOUR)
    assert hits("p") == 0
    assert hits("r") == 0


def test_an_exception_whose_str_fails_is_still_recorded_as_a_failure(world):
    world.settings({"odd": job("odd", "raise_unprintable"), "fine": record("fine", "0 * * * *")})
    world.start(T0)
    world.tick(T0)
    odd = Run.objects.get(task__name="odd")
    assert odd.status == "failed"
    assert "UnprintableError" in odd.traceback
    # Not stuck "running": the next occurrence runs instead of being skipped as an overlap.
    world.tick(T0 + HOUR)
    assert [r[1] for r in runs("odd")] == ["failed", "failed"]
    assert hits("fine") == 2


def test_an_error_message_with_a_lone_surrogate_is_recorded_escaped(world):
    # A file name decoded with surrogateescape: no driver encodes it. The batch it was in
    # was dropped, its runs left `running` (then lost and run again).
    world.settings(
        {
            "surrogate": job("surrogate", "raise_with_surrogate"),
            "fine": record("fine", "0 * * * *"),
        }
    )
    world.start(T0)
    world.tick(T0)
    bad = Run.objects.get(task__name="surrogate")
    assert bad.status == "failed"
    assert bad.error == "ValueError: cannot parse report-\\udcff.csv"
    assert Run.objects.get(task__name="fine").status == "succeeded"
    world.tick(T0 + HOUR)
    assert [r[1] for r in runs("surrogate")] == ["failed", "failed"]
    assert hits("fine") == 2


@pytest.fixture
def utf8mb3_error_columns():
    """On MySQL, the run's error and traceback columns in MySQL's 3-byte utf8."""
    with utf8mb3_columns(Run, "error", "traceback"):
        yield


def test_an_emoji_a_utf8mb3_column_refuses_is_recorded_escaped(world, utf8mb3_error_columns):
    # MySQL refuses the text with error 1366, an OperationalError: it was taken for an outage,
    # the batch kept and tried again forever, and nothing was claimed any more.
    world.settings(
        {
            "emoji": job("emoji", "raise_with_emoji"),
            "plain": job("plain", "raise_value_error"),
            "fine": record("fine", "0 * * * *"),
        }
    )
    world.start(T0)
    world.tick(T0)
    bad = Run.objects.get(task__name="emoji")
    assert bad.status == "failed"
    assert bad.error.startswith("[the error text could not be stored as written: ")
    assert bad.error.endswith("\nValueError: deploy failed \\U0001f525")
    assert "raise_with_emoji" in bad.traceback
    assert Run.objects.get(task__name="plain").status == "failed"
    assert Run.objects.get(task__name="fine").status == "succeeded"
    world.tick(T0 + HOUR)
    assert hits("fine") == 2
    assert [r[1] for r in runs("emoji")] == ["failed", "failed"]


def test_an_outcome_the_database_never_takes_is_logged_with_its_run_and_task(
    world, monkeypatch, caplog
):
    # The one line saying a run's outcome is gone carried the run's id but not its task, which
    # every other record about a run carries for a log collector to group by.
    from django_posixcron.scheduling import execution

    world.settings({"fine": record("fine", "0 * * * *")})
    scheduler = world.start(T0)

    def refuse(*args, **kwargs):
        raise ValueError("refused")

    monkeypatch.setattr(execution, "write_outcomes", refuse)
    world.tick(T0)
    monkeypatch.undo()
    (dropped,) = [r for r in caplog.records if getattr(r, "action", "") == "outcome_dropped"]
    assert (dropped.task, dropped.run_id) == ("fine", Run.objects.get().pk)
    scheduler.shutdown()  # the run is still `running`: the shutdown records it interrupted


def test_an_emoji_in_an_error_message_is_kept_where_the_column_stores_it(world):
    if connection.vendor == "mysql" and "utf8mb4" not in connection.settings_dict.get(
        "OPTIONS", {}
    ).get("charset", ""):
        pytest.skip("a utf8mb4 connection")
    world.settings({"emoji": job("emoji", "raise_with_emoji")})
    world.start(T0)
    world.tick(T0)
    assert Run.objects.get(task__name="emoji").error == "ValueError: deploy failed \U0001f525"


def two_hours_on_one_thread(
    world: World, caplog: pytest.LogCaptureFixture, name: str, function: str
) -> None:
    """Run `name` (jobs.`function`) and a task that writes, alternately on one worker thread,
    for two hours: what one run leaves on the thread's connection meets the next."""
    world.settings({name: job(name, function), "fine": record("fine", "0 * * * *")}, CONCURRENCY=1)
    world.start(T0)
    with caplog.at_level(logging.WARNING, logger="django_posixcron"):
        for hour in (T0, T0 + HOUR):
            world.tick(hour)  # one slot: one of the two runs
            world.tick(hour + SECOND)  # then the other, on the same thread


def test_a_run_that_leaves_a_transaction_open_does_not_break_the_next_runs(world, caplog):
    # Django closes a connection inside an atomic block only halfway: every later run on the
    # thread failed with "the connection is closed" until the scheduler restarted.
    two_hours_on_one_thread(world, caplog, "open", "leave_atomic_open")
    assert [r[1] for r in runs("open")] == ["succeeded", "succeeded"]
    assert [r[1] for r in runs("fine")] == ["succeeded", "succeeded"]
    assert hits("fine") == 2
    assert hits("open") == 0  # what it wrote inside the transaction was rolled back
    assert "left a transaction open on database 'default'" in caplog.text


def test_a_run_that_leaves_autocommit_off_is_told_its_writes_were_rolled_back(world, caplog):
    # Its writes were rolled back with the connection's close, and the run said nothing.
    world.settings(
        {"off": job("off", "leave_autocommit_off"), "fine": record("fine", "0 * * * *")},
        CONCURRENCY=1,
    )
    world.start(T0)
    with caplog.at_level(logging.WARNING, logger="django_posixcron"):
        world.tick(T0)
        world.tick(T0 + SECOND)
    assert [r[1] for r in runs("off")] == ["succeeded"]
    assert hits("off") == 0
    assert hits("fine") == 1  # the thread's next run has a connection of its own
    assert (
        "left a transaction open on database 'default' (autocommit turned off and no commit)"
        in caplog.text
    )


def test_a_run_that_closes_the_driver_connection_keeps_its_slot_working(world, caplog):
    # MySQL's close of a connection the run had already closed raises: it went up through the
    # worker thread's cleanup, the thread died and its slot was never given back, so with one
    # slot the scheduler never ran anything again.
    two_hours_on_one_thread(world, caplog, "closer", "close_driver_connection")
    assert [r[1] for r in runs("closer")] == ["succeeded", "succeeded"]
    assert [r[1] for r in runs("fine")] == ["succeeded", "succeeded"]
    assert hits("closer") == hits("fine") == 2
    if connection.vendor == "mysql":
        assert "closing the connection to database 'default' after run" in caplog.text
    assert "left a transaction open" not in caplog.text


def test_a_run_that_committed_with_autocommit_off_lost_nothing_and_is_not_warned(world, caplog):
    world.settings({"committed": job("committed", "commit_with_autocommit_off")})
    world.start(T0)
    with caplog.at_level(logging.WARNING, logger="django_posixcron"):
        world.tick(T0)
        world.tick(T0 + SECOND)
    assert hits("committed") == 1
    assert "left a transaction open" not in caplog.text


def test_an_exception_whose_str_raises_is_still_recorded_failed_and_retried(world):
    # str() raised a KeyboardInterrupt out of the recording itself: the run stayed `running`
    # for good, and every later occurrence was skipped as overlapping it.
    world.settings({"odd": job("odd", "raise_interrupting_str", retry_delay=60)})
    world.start(T0)
    world.tick(T0)
    [run] = Run.objects.filter(task__name="odd")
    assert run.status == "failed"
    assert run.error == "InterruptingStrError: <str() of the exception raised an error>"
    assert "raise InterruptingStrError" in run.traceback
    world.tick(task("odd").retry_at)
    assert [r[:2] for r in runs("odd")] == [("cron", "failed"), ("retry", "failed")]


def test_what_a_run_activates_ends_with_it(world):
    # timezone.activate() and translation.activate() in task code lasted on the worker
    # thread: every later run of any task on it saw Asia/Tokyo and German.
    world.settings(
        {
            "activates": job("activates", "activate_zone_and_language"),
            "reads": job("reads", "record_zone_and_language", "5 * * * *"),
        },
        CONCURRENCY=1,
    )
    world.start(T0)
    world.tick(T0)
    world.tick(T0 + 5 * MINUTE)
    assert hits("activates") == 1
    assert Hit.objects.get(task_name="reads").label == "UTC|en-us"


def test_an_error_message_with_a_nul_character_does_not_stall_the_scheduler(world):
    world.settings({"binary": job("binary", "raise_with_nul"), "fine": record("fine", "0 * * * *")})
    world.start(T0)
    world.tick(T0)
    binary = Run.objects.get(task__name="binary")
    assert binary.status == "failed"
    assert "unexpected bytes" in binary.error
    world.tick(T0 + HOUR)
    assert hits("fine") == 2
    assert task("binary").last_run_status == "failed"


def test_a_run_the_executor_cannot_start_fails_and_the_others_of_its_batch_start(
    world, monkeypatch
):
    """The executor refuses one run (no thread can be started): that run is recorded failed
    and retried; the rest of its claim still starts."""
    world.settings(
        {name: record(name, "0 * * * *", retry_delay=60) for name in ("first", "second")}
    )
    scheduler = world.start(T0 - MINUTE)
    executor = scheduler.executor
    original, refused = executor.submit, list[int]()

    def submit(key, call):
        if not refused:
            refused.append(key)
            raise RuntimeError("can't start new thread")
        return original(key, call)

    monkeypatch.setattr(executor, "submit", submit)
    world.tick(T0)
    world.tick(T0 + dt.timedelta(seconds=1))  # writes what the first tick left to write

    failed = Run.objects.select_related("task").get(pk=refused[0])
    assert failed.status == "failed"
    assert failed.error == "Could not start the run: RuntimeError: can't start new thread"
    assert failed.finished_at is not None
    assert failed.task.retry_at == failed.finished_at + MINUTE
    (other,) = Run.objects.exclude(pk=failed.pk)
    assert other.status == "succeeded"
    assert hits(other.task.name) == 1
