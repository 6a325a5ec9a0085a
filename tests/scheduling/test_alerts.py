"""Alert signals, once per episode across schedulers; pausing after N failures in a row."""

from __future__ import annotations

import datetime as dt
import logging
import threading
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.db.models.signals import post_init
from django.dispatch import Signal
from freezegun import freeze_time

from django_posixcron.db import app_alias
from django_posixcron.models import OverdueAlert, Run, RunStatus, Task
from django_posixcron.scheduler import Scheduler
from django_posixcron.scheduling import alerts
from django_posixcron.scheduling.outcomes import Notifier, Outcome, write_outcomes
from django_posixcron.signals import run_lost, task_failing, task_overdue
from tests.factories import RunFactory, SchedulerProcessFactory
from tests.harness.locks import task_row_held
from tests.harness.signals import blocking_receiver
from tests.harness.tasks import T0, Tasks, running_on_a_dead_process
from tests.harness.waiting import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

MINUTE = dt.timedelta(minutes=1)
HOUR = dt.timedelta(hours=1)


class Received(list[dict[str, Any]]):
    """What one signal's receivers were sent, in order."""


@pytest.fixture
def received() -> Iterator[dict[str, Received]]:
    found: dict[str, Received] = {}
    connected = []
    for name, sig in (("failing", task_failing), ("overdue", task_overdue), ("lost", run_lost)):
        found[name] = Received()

        def receiver(sender: object, _into: Received = found[name], **kwargs: Any) -> None:
            kwargs.pop("signal")
            _into.append(kwargs)

        sig.connect(receiver, weak=False)
        connected.append((sig, receiver))
    yield found
    for sig, receiver in connected:
        Signal.disconnect(sig, receiver)


def fail_until_paused(scheduler: Scheduler, name: str, ticks: int) -> None:
    """Tick at the task's due time `ticks` times, letting each run finish."""
    for _ in range(ticks):
        task = Task.objects.get(name=name)
        if task.paused or task.due_at is None:
            return
        scheduler.tick(max(task.due_at, T0))
        assert scheduler.wait_idle(timeout=10)


def failing_task(tasks: Tasks, settings: Any, **extra: Any) -> Task:
    # Only the pause_after_failures policy is read from settings here; the rows come from
    # `tasks`, with the declaration the scheduler holds.
    settings.POSIXCRON = {"TASKS": {"flaky": {"schedule": "0 * * * *", "callable": "x.y", **extra}}}
    return tasks(
        "flaky",
        callable_path="tests.testapp.jobs.fail",
        retry_delay=60,
        next_run_at=T0,
    )


def test_pause_after_failures_pauses_with_one_failing_episode(
    tasks, make_scheduler, settings, received
):
    failing_task(tasks, settings, pause_after_failures=2)
    scheduler = make_scheduler()

    fail_until_paused(scheduler, "flaky", ticks=5)

    task = Task.objects.get(name="flaky")
    assert task.paused
    assert task.paused_reason == (
        "Paused automatically after 2 failed runs in a row (pause_after_failures = 2)."
    )
    # No further run once paused: the occurrence and its one retry.
    assert list(Run.objects.order_by("pk").values_list("trigger", "status")) == [
        ("cron", "failed"),
        ("retry", "failed"),
    ]
    [sent] = received["failing"]
    assert (sent["task"].name, sent["failures"], sent["paused"]) == ("flaky", 2, True)

    # Resuming clears the reason; the next failure (the streak goes on) pauses it again.
    task.resume()
    assert Task.objects.get(name="flaky").paused_reason == ""
    scheduler.tick(T0 + HOUR)
    assert scheduler.wait_idle(timeout=10)
    assert Task.objects.get(name="flaky").paused
    assert [(s["failures"], s["paused"]) for s in received["failing"]] == [(2, True), (3, True)]


def test_failing_after_sends_once_per_episode_and_a_success_ends_it(
    tasks, make_scheduler, settings, received, tmp_path
):
    healthy = tmp_path / "healthy"
    settings.POSIXCRON = {"TASKS": {}, "FAILING_AFTER": 2}
    tasks(
        "flaky",
        callable_path="tests.testapp.jobs.fail_unless_file",
        kwargs={"path": str(healthy)},
        retry_delay=60,
        next_run_at=T0,
    )
    scheduler = make_scheduler()

    fail_until_paused(scheduler, "flaky", ticks=4)  # four failures in a row
    assert [(s["failures"], s["paused"]) for s in received["failing"]] == [(2, False)]
    assert Task.objects.get(name="flaky").consecutive_failures == 4

    # A success ends the episode; the next two failures start (and signal) another.
    healthy.touch()
    fail_until_paused(scheduler, "flaky", ticks=1)
    assert Task.objects.get(name="flaky").consecutive_failures == 0
    healthy.unlink()
    Task.objects.filter(name="flaky").update(next_run_at=T0 + HOUR, due_at=T0 + HOUR)
    fail_until_paused(scheduler, "flaky", ticks=2)
    assert [(s["failures"], s["paused"]) for s in received["failing"]] == [
        (2, False),
        (2, False),
    ]


def test_task_overdue_is_sent_once_across_schedulers_per_due_time(tasks, make_scheduler, received):
    # Declared differently by both schedulers (another deploy owns it): nobody claims it.
    tasks("stuck", next_run_at=T0)
    Task.objects.filter(name="stuck").update(definition_hash="another-deploy")
    first, second = make_scheduler(), make_scheduler()

    # 30 s late, past POLL_INTERVAL (1 s here): both see it; the first to tick sends it.
    first.tick(T0 + dt.timedelta(seconds=30))
    second.tick(T0 + dt.timedelta(seconds=31))
    first.tick(T0 + MINUTE)

    [sent] = received["overdue"]
    assert (sent["task"].name, sent["due_at"]) == ("stuck", T0)

    # A new due time is a new episode (here: a manual request before the cursor).
    Task.objects.get(name="stuck").request_run(T0 - MINUTE)
    second.tick(T0 + 2 * MINUTE)
    first.tick(T0 + 2 * MINUTE)
    assert [s["due_at"] for s in received["overdue"]] == [T0, T0 - MINUTE]


def test_a_task_resumed_or_created_after_its_due_time_gets_a_poll_interval_first(
    tasks, make_scheduler, received
):
    # At 11:00:20: resumed, a task paused over its 10:00 occurrence, and one of another
    # deploy, which nobody here may claim; created, a task for the minute it matches.
    tasks("held", next_run_at=T0, paused=True)
    tasks("elsewhere", next_run_at=T0, paused=True)
    Task.objects.filter(name="elsewhere").update(definition_hash="another-deploy")
    at = T0 + HOUR + dt.timedelta(seconds=20)
    with freeze_time(at):
        Task.objects.filter(name__in=["held", "elsewhere"]).resume(now=at)
        tasks("new", schedule="* * * * *", now=at)
    scheduler = make_scheduler()  # POLL_INTERVAL = 1 s

    # Due for an hour or for 20 s, but active for half a second: claimed, not "overdue".
    scheduler.tick(at + dt.timedelta(seconds=0.5))
    assert scheduler.wait_idle(timeout=10)
    assert received["overdue"] == []
    assert sorted(Run.objects.values_list("task__name", "scheduled_for")) == [
        ("held", T0),
        ("new", T0 + HOUR),
    ]

    # Still unclaimed a poll interval after it was resumed, the other deploy's task is
    # overdue, for the due time it has had all along.
    assert not Task.objects.overdue(at + dt.timedelta(seconds=0.5), dt.timedelta(seconds=1))
    scheduler.tick(at + dt.timedelta(seconds=2))
    [sent] = received["overdue"]
    assert (sent["task"].name, sent["due_at"]) == ("elsewhere", T0)


def test_once_signals_what_its_claims_leave_due_not_what_they_claim(
    tasks, make_scheduler, received
):
    # `runscheduler --once` from system cron claims at minute boundaries: a retry that fell
    # due 40 s before is claimed by this invocation. Looked for before the claim, it read as
    # "overdue, not claimed" (a warning cron mailed at every retry). Another deploy's task,
    # which nobody here may claim, is overdue.
    from django_posixcron.db import database_now

    now = database_now(app_alias())
    tasks("retrying", next_run_at=now + HOUR, retry_at=now - dt.timedelta(seconds=40))
    tasks("elsewhere", next_run_at=now - dt.timedelta(seconds=40))
    Task.objects.filter(name="elsewhere").update(definition_hash="another-deploy")
    Task.objects.update(updated_at=now - HOUR)

    result = make_scheduler().run_once()  # POLL_INTERVAL = 1 s

    assert [s["task"].name for s in received["overdue"]] == ["elsewhere"]
    assert [task.name for task in result.overdue] == ["elsewhere"]
    assert list(Run.objects.values_list("task__name", "trigger", "status")) == [
        ("retrying", "retry", "succeeded")
    ]


def test_once_waits_for_its_runs_when_the_overdue_look_fails(
    tasks, make_scheduler, monkeypatch, caplog, gate
):
    # The look comes after the claims, while the runs go on: its failure (a connection
    # blip) ended run_once, and the shutdown recorded the runs still going `interrupted`
    # past the grace while their callables ran on (then retried: run twice).
    from django.db import OperationalError

    def refused(*args: Any, **kwargs: Any) -> list[Task]:
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(alerts, "signal_overdue", refused)
    name, event = gate
    tasks("slow", callable_path="tests.testapp.jobs.blocked", kwargs={"gate_name": name})
    from django_posixcron.db import database_now

    now = database_now(app_alias())
    Task.objects.update(next_run_at=now, due_at=now)
    scheduler = make_scheduler(grace=0.2)
    done = threading.Thread(target=scheduler.run_once)
    with caplog.at_level(logging.ERROR, logger="django_posixcron"):
        done.start()
        wait_until(lambda: Run.objects.exists(), what="the run to start")
        wait_until(lambda: "could not look for overdue tasks" in caplog.text, what="the look")
        event.set()
        done.join(20)
    assert not done.is_alive()
    assert list(Run.objects.values_list("status", flat=True)) == [RunStatus.SUCCEEDED]


def test_a_backlog_of_overdue_tasks_is_signalled_once_each_a_batch_at_a_time(
    tasks, make_scheduler, received, django_assert_max_num_queries
):
    # More overdue tasks than one batch, nobody able to claim them, two schedulers looking.
    names = [f"stuck-{i:03d}" for i in range(alerts.OVERDUE_BATCH + 50)]
    for name in names:
        tasks(name, next_run_at=T0)
    Task.objects.update(definition_hash="another-deploy")
    first, second = make_scheduler(), make_scheduler()
    late = T0 + dt.timedelta(seconds=30)

    # One read, one insert for the batch (the fleet-wide "once"; MariaDB, which cannot say
    # which rows an INSERT IGNORE took, one per episode), and the tasks' own marks in one
    # locking read and one UPDATE for the batch, in a transaction of their own.
    per_episode = connection.vendor == "mysql"
    with django_assert_max_num_queries(6 + (alerts.OVERDUE_BATCH if per_episode else 0)):
        alerts.signal_overdue(late, app_alias(), first.notifier)
    first.tick(late + dt.timedelta(seconds=1))
    second.tick(late + dt.timedelta(seconds=2))
    first.tick(late + dt.timedelta(seconds=3))
    second.tick(late + dt.timedelta(seconds=4))

    sent = [s["task"].name for s in received["overdue"]]
    assert sorted(sent) == names  # each once, none twice, whichever scheduler sent it
    assert set(Task.objects.values_list("overdue_signalled_for", flat=True)) == {T0}


@pytest.mark.parametrize("count", [2, alerts.OVERDUE_WARNINGS + 3])
def test_many_overdue_tasks_are_one_warning_and_each_an_info_line(
    count, tasks, make_scheduler, received, caplog
):
    names = [f"stuck-{i}" for i in range(count)]
    for i, name in enumerate(names):
        tasks(name, next_run_at=T0 + i * MINUTE)
    Task.objects.update(definition_hash="another-deploy")  # nobody claims them
    scheduler = make_scheduler()

    with caplog.at_level(logging.INFO, logger="django_posixcron.scheduler.alerts"):
        scheduler.tick(T0 + HOUR)

    by_action = {
        action: [r for r in caplog.records if getattr(r, "action", "") == action]
        for action in ("task_overdue", "tasks_overdue")
    }
    assert sorted(r.task for r in by_action["task_overdue"]) == names
    assert len(received["overdue"]) == count  # every task is still signalled
    if count <= alerts.OVERDUE_WARNINGS:
        assert {r.levelno for r in by_action["task_overdue"]} == {logging.WARNING}
        assert by_action["tasks_overdue"] == []
    else:
        assert {r.levelno for r in by_action["task_overdue"]} == {logging.INFO}
        [summary] = by_action["tasks_overdue"]
        assert summary.levelno == logging.WARNING
        assert sorted(summary.tasks) == names
        message = summary.getMessage()
        assert message.startswith(f"{count} tasks are overdue (due since {T0.isoformat()}")
        assert message.endswith(f"and {count - alerts.OVERDUE_WARNINGS} more")


def test_a_row_another_process_holds_is_signalled_while_held_and_only_once(
    tasks, make_scheduler, received
):
    """DESIGN 7: "detected by a plain read, so a locked row is still seen". A scheduler frozen
    in the middle of its claim holds its rows locked for as long as it is frozen: those are
    the tasks the alert is for."""
    if not connection.features.has_select_for_update_skip_locked:
        pytest.skip("SQLite locks no rows")
    for name in ("held", "free"):
        tasks(name, next_run_at=T0)
    Task.objects.update(definition_hash="another-deploy")
    first, second = make_scheduler(), make_scheduler()
    late = T0 + dt.timedelta(seconds=30)
    with task_row_held(name="held"):  # a claim in progress elsewhere holds the row
        # The loop is not held up by the locked row, and signals it with the others.
        sent = alerts.signal_overdue(late, app_alias(), first.notifier)
        assert sorted(t.name for t in sent) == ["free", "held"]
        # Another scheduler looking while the row is still held sends nothing again.
        assert alerts.signal_overdue(late, app_alias(), second.notifier) == []
    assert alerts.signal_overdue(late, app_alias(), second.notifier) == []
    assert alerts.signal_overdue(late, app_alias(), first.notifier) == []
    assert sorted(s["task"].name for s in received["overdue"]) == ["free", "held"]
    # The free row carries the mark processes of an earlier release read; the held one could
    # not be written, and its OverdueAlert row speaks for it.
    marks = dict(Task.objects.values_list("name", "overdue_signalled_for"))
    assert marks == {"free": T0, "held": None}
    assert OverdueAlert.objects.count() == 2


def test_a_task_claimed_between_the_look_and_the_mark_keeps_its_new_episode(
    tasks, make_scheduler, received
):
    """The mark is the episode's due time: a task whose due time moved after the look (a
    claim elsewhere) is a new episode, and must not be marked signalled for it."""
    tasks("moved", next_run_at=T0)
    tasks("stayed", next_run_at=T0)
    Task.objects.update(definition_hash="another-deploy")
    late = T0 + dt.timedelta(seconds=30)
    seen = list(alerts.unsignalled_overdue(late, app_alias()).order_by("name"))
    Task.objects.filter(name="moved").update(due_at=T0 + HOUR, next_run_at=T0 + HOUR)

    alerts._mark(seen, app_alias())

    marks = dict(Task.objects.values_list("name", "overdue_signalled_for"))
    assert marks == {"moved": None, "stayed": T0}


def test_the_marks_of_ended_episodes_are_pruned_and_a_new_due_time_is_a_new_episode(
    tasks, make_scheduler, received
):
    tasks("stuck", next_run_at=T0)
    tasks("still", next_run_at=T0)
    Task.objects.update(definition_hash="another-deploy")
    scheduler = make_scheduler()
    late = T0 + dt.timedelta(seconds=30)
    alerts.signal_overdue(late, app_alias(), scheduler.notifier)
    assert OverdueAlert.objects.count() == 2

    # The episode of "stuck" ends: its due time moves (a request before the cursor).
    Task.objects.get(name="stuck").request_run(T0 - MINUTE)
    assert alerts.prune_ended_episodes(app_alias()) == 1
    assert list(OverdueAlert.objects.values_list("task__name", "due_at")) == [("still", T0)]
    sent = alerts.signal_overdue(late, app_alias(), scheduler.notifier)
    assert [(t.name, t.due_at) for t in sent] == [("stuck", T0 - MINUTE)]
    assert alerts.prune_ended_episodes(app_alias()) == 0


def test_a_task_due_within_the_poll_interval_is_not_overdue(tasks, make_scheduler, received):
    tasks("busy", next_run_at=T0)
    Task.objects.filter(name="busy").update(definition_hash="another-deploy")
    make_scheduler(poll_interval=60).tick(T0 + dt.timedelta(seconds=59))
    assert received["overdue"] == []


def test_run_lost_is_sent_once_by_the_scheduler_that_marks_it(
    tasks, make_scheduler, received, caplog
):
    task = tasks("orphan", next_run_at=T0 + HOUR)
    run = running_on_a_dead_process(task, T0 - HOUR)
    first, second = make_scheduler(), make_scheduler()
    first.tick(T0)
    second.tick(T0)

    lost = Run.objects.get(pk=run.pk)
    assert lost.status == RunStatus.LOST
    # Found lost an hour after it started: how long it ran is not known, and not an hour.
    assert (lost.finished_at, lost.duration) == (T0, None)
    [sent] = received["lost"]
    assert sent["run"].pk == run.pk
    [line] = [r for r in caplog.records if getattr(r, "action", "") == "run_finished"]
    assert f"task=orphan trigger=cron status=lost duration=- run={run.pk}" in line.getMessage()


def test_the_forced_exit_sends_nothing_and_leaves_the_episode_to_the_next_writer(tasks, received):
    task = tasks("flaky", next_run_at=T0 + HOUR)
    process = SchedulerProcessFactory.create(last_heartbeat_at=T0)

    def interrupted(i: int, notifier: Notifier | None) -> None:
        run = Run.objects.create(
            task=task,
            trigger="manual",
            status=RunStatus.RUNNING,
            scheduled_for=T0 + i * MINUTE,
            started_at=T0 + i * MINUTE,
            process=process,
        )
        outcome = Outcome(run, RunStatus.INTERRUPTED, T0 + i * MINUTE, "interrupted")
        assert write_outcomes([outcome], app_alias(), notifier)

    for i in range(3):  # FAILING_AFTER failures, written as the forced exit writes them
        interrupted(i, None)
    assert received["failing"] == []
    assert not Task.objects.get(pk=task.pk).failing_signalled

    interrupted(3, Notifier())  # the next writer has a notifier: the episode is told
    assert [(s["failures"], s["paused"]) for s in received["failing"]] == [(4, False)]
    assert Task.objects.get(pk=task.pk).failing_signalled


def test_alerts_a_stopping_scheduler_could_not_send_are_given_back_to_the_fleet(
    tasks, make_scheduler, received, caplog
):
    """A slow receiver at shutdown: the episodes still queued were marked signalled here, and
    without giving them back no scheduler of the fleet would ever send them."""
    for name in ("first", "second"):
        tasks(name, next_run_at=T0)
    failing = tasks("failing", next_run_at=T0 + HOUR)
    Task.objects.update(definition_hash="another-deploy")
    Task.objects.filter(pk=failing.pk).update(consecutive_failures=3, failing_signalled=True)
    stopping, peer = make_scheduler(), make_scheduler()
    stopping.notifier.start()
    with blocking_receiver(task_overdue) as entered:
        late = T0 + dt.timedelta(seconds=30)
        won = alerts.signal_overdue(late, app_alias(), stopping.notifier)
        assert len(won) == 2
        stopping.notifier.send(task_failing, task=Task.objects.get(pk=failing.pk), failures=3)
        assert entered.wait(30)  # the first overdue signal is with the slow receiver
        with caplog.at_level(logging.WARNING, logger="django_posixcron"):
            abandoned = stopping.notifier.stop(0.1)
        assert [sig for sig, _ in abandoned] == [task_overdue, task_failing]
        alerts.give_back(abandoned, app_alias())
    [warning] = [r for r in caplog.records if getattr(r, "action", "") == "signals_abandoned"]
    left = abandoned[0][1]["task"].name
    assert f"task_overdue(task={left}), task_failing(task=failing)" in warning.getMessage()
    # The one its receivers were still busy with is named too (partly sent: not given back).
    sending = ({"first", "second"} - {left}).pop()
    assert warning.getMessage().endswith(
        f"; cut off while its receivers ran: task_overdue(task={sending})"
    )

    # The peer's next look sends the overdue episode given back, and only that one.
    sent = alerts.signal_overdue(late, app_alias(), peer.notifier)
    assert [t.name for t in sent] == [left]
    assert not Task.objects.get(pk=failing.pk).failing_signalled


def test_a_failing_episode_given_back_for_a_paused_task_is_sent_by_the_next_scheduler(
    tasks, make_scheduler, settings, received, caplog
):
    """Given back at a shutdown, the episode was left to "the writer of the task's next
    failure": a task paused by its failures never fails again, and nobody was paged."""
    failing_task(tasks, settings, pause_after_failures=2)
    fail_until_paused(make_scheduler(), "flaky", ticks=5)
    task = Task.objects.get(name="flaky")
    assert task.paused
    assert task.failing_signalled
    received["failing"].clear()
    # What a shutdown does with the task_failing its receivers had no time for.
    alerts.give_back([(task_failing, {"task": task, "failures": 2, "paused": True})], app_alias())

    peer = make_scheduler()
    with caplog.at_level(logging.WARNING, logger="django_posixcron"):
        peer.tick(T0 + 2 * HOUR)
        peer.tick(T0 + 3 * HOUR)
    assert [(s["task"].name, s["failures"], s["paused"]) for s in received["failing"]] == [
        ("flaky", 2, True)
    ]
    assert Task.objects.get(name="flaky").failing_signalled
    assert "task flaky is failing (2 failed runs in a row, paused)" in caplog.text


def test_a_slow_run_finished_receiver_does_not_hold_the_alerts_back(received):
    """Behind one queue, each slow run_finished receiver (a chat post per run) held every
    page back, by minutes after a few runs, and a shutdown then dropped them."""
    from django_posixcron.signals import run_finished

    notifier = Notifier()
    notifier.start()
    try:
        with blocking_receiver(run_finished) as entered:
            notifier.send(run_finished, run=None)
            assert entered.wait(30)  # the run receiver is busy
            notifier.send(task_overdue, task=None, due_at=T0)
            wait_until(lambda: received["overdue"], 10, "the alert, while run_finished is busy")
            assert received["overdue"] == [{"task": None, "due_at": T0}]
    finally:
        notifier.stop(5)


def test_a_raising_receiver_is_named_with_its_signal_and_task_and_one_traceback(tasks, caplog):
    """It was logged twice with a traceback each (Django's line and ours), and neither said
    which signal, task or run: a receiver connected to five signals could not be told apart."""

    def boom(sender: object, **kwargs: Any) -> None:
        raise RuntimeError("receiver boom")

    task = tasks("flaky")
    task_failing.connect(boom, weak=False)
    try:
        with caplog.at_level(logging.ERROR):
            Notifier().send(task_failing, task=task, failures=3, paused=False)
    finally:
        task_failing.disconnect(boom)
    ours = [r for r in caplog.records if getattr(r, "action", "") == "signal_receiver_error"]
    assert [r.getMessage() for r in ours] == [
        "receiver test_a_raising_receiver_is_named_with_its_signal_and_task_and_one_traceback."
        "<locals>.boom of task_failing(task=flaky) raised RuntimeError('receiver boom'); "
        "ignored (traceback under django.dispatch)"
    ]
    assert [r.name for r in caplog.records if r.exc_info] == ["django.dispatch"]
    assert [(r.task, hasattr(r, "run_id")) for r in ours] == [("flaky", False)]


def test_a_receiver_that_exits_does_not_end_the_signal_thread(tasks, caplog):
    """Django's send_robust() catches Exception only: a receiver calling sys.exit() ended
    the thread, and every later signal of the process was silently never sent."""
    got = []

    def leave(sender: object, **kwargs: Any) -> None:
        got.append(kwargs["failures"])
        if kwargs["failures"] == 3:
            raise SystemExit(1)

    task = tasks("flaky")
    notifier = Notifier()
    notifier.start()
    task_failing.connect(leave, weak=False)
    try:
        with caplog.at_level(logging.ERROR):
            notifier.send(task_failing, task=task, failures=3, paused=False)
            notifier.send(task_failing, task=task, failures=4, paused=True)
            wait_until(lambda: len(got) == 2, 10, "the signal after the one that exited")
    finally:
        task_failing.disconnect(leave)
        assert notifier.stop(5) == []
    assert got == [3, 4]
    ours = [r for r in caplog.records if getattr(r, "action", "") == "signal_receiver_error"]
    assert [(r.getMessage(), r.task) for r in ours] == [
        (
            "a receiver of task_failing(task=flaky) raised SystemExit(1); ignored, and the "
            "receivers after it did not get this signal",
            "flaky",
        )
    ]


def test_an_owed_failing_alert_is_not_sent_for_an_episode_a_success_just_ended(
    tasks, settings, received
):
    """The look for owed task_failing alerts reads a task three failures deep whose alert was
    never sent (a forced exit); before it marks the episode, a peer records a success. The
    episode ended: no stale alert, and the next three failures page once."""
    task = failing_task(tasks, settings)

    def record(at: dt.datetime, status: str, notifier: Notifier | None) -> None:
        run = running_on_a_dead_process(task, at)  # whose process does not matter here
        write_outcomes([Outcome(run, status, at, "boom")], app_alias(), notifier)

    for hour in range(3):  # written without a notifier: the alert a forced exit left unsent
        record(T0 + hour * HOUR, RunStatus.FAILED, None)
    read = Task.objects.filter(pk=task.pk)
    assert read.values_list("consecutive_failures", "failing_signalled").get() == (3, False)

    peer_wrote: list[bool] = []

    def success_meanwhile(sender: Any, instance: Task, **kwargs: Any) -> None:
        # The owed look builds each candidate it read; a peer's success commits right then.
        if not peer_wrote:
            peer_wrote.append(True)
            record(T0 + 3 * HOUR, RunStatus.SUCCEEDED, Notifier())

    post_init.connect(success_meanwhile, sender=Task, weak=False)
    try:
        alerts.signal_owed_failing(app_alias(), Notifier(), 3, {})
    finally:
        post_init.disconnect(success_meanwhile, sender=Task)
    assert peer_wrote
    assert read.values_list("consecutive_failures", "failing_signalled").get() == (0, False)
    assert received["failing"] == []

    for hour in range(4, 7):
        record(T0 + hour * HOUR, RunStatus.FAILED, Notifier())
    assert [r["failures"] for r in received["failing"]] == [3]


def test_alerts_queued_behind_a_stuck_receiver_go_back_to_the_fleet(
    tasks, make_scheduler, settings, received, monkeypatch, caplog
):
    """An alert receiver that hangs (a webhook called without a timeout) held every episode
    its process won afterwards, and no other scheduler would ever send them (they are marked
    signalled): one hung receiver muted the fleet's alerts, with nothing in any log."""
    from django_posixcron.scheduling import outcomes

    monkeypatch.setattr(outcomes, "ALERTS_STUCK_AFTER", 0.2)
    settings.POSIXCRON = {"TASKS": {}, "FAILING_AFTER": 1}
    for name in ("first", "second"):
        tasks(name, callable_path="tests.testapp.jobs.fail", retry_delay=3600, next_run_at=T0)
    entered, release = threading.Event(), threading.Event()

    def hang_once(sender: object, **kwargs: Any) -> None:
        if not entered.is_set():
            entered.set()
            release.wait(30)

    stuck = make_scheduler()
    stuck.notifier.start()  # as run() does: the alerts have a thread of their own
    task_failing.connect(hang_once, weak=False)
    try:
        with caplog.at_level(logging.WARNING):
            stuck.tick(T0)
            assert stuck.wait_idle(timeout=10)
            assert entered.wait(10)  # one failing alert holds the receiver; the other waits
            wait_until(stuck.notifier.alerts_stuck, 10, "the receiver to count as stuck")
            stuck.tick(T0 + dt.timedelta(seconds=30))
            signalled = dict(Task.objects.values_list("name", "failing_signalled"))
            # The one being sent stays this process's; the one queued is the fleet's again,
            # and this process does not win it back while its receiver is stuck.
            assert sorted(signalled.values()) == [False, True]
            given = next(name for name, marked in signalled.items() if not marked)
            sending = next(name for name, marked in signalled.items() if marked)
            assert stuck.notifier.take_episodes() == []

            # Another scheduler sends it, once.
            peer = make_scheduler()
            peer.tick(T0 + dt.timedelta(seconds=40))
            assert [kwargs["task"].name for kwargs in received["failing"]] == [sending, given]
            assert Task.objects.get(name=given).failing_signalled is True
        actions = [getattr(r, "action", "") for r in caplog.records]
        assert actions.count("alerts_stuck") == 1
        assert actions.count("alerts_given_back") == 1
        # Back from its receiver, the process signals alerts again, and says so.
        release.set()
        wait_until(lambda: stuck.notifier.alerts_stuck() is None, 10, "the receiver to return")
        with caplog.at_level(logging.WARNING):
            stuck.tick(T0 + dt.timedelta(seconds=50))
        assert "alerts_unstuck" in [getattr(r, "action", "") for r in caplog.records]
        assert stuck.notifier.alerting()
    finally:
        release.set()
        task_failing.disconnect(hang_once)
        stuck.notifier.stop(5)


def test_a_lost_run_alert_stays_queued_behind_a_stuck_receiver(tasks, monkeypatch, received):
    # No other scheduler would send run_lost for it: it waits for the receiver, in order.
    from django_posixcron.scheduling import outcomes

    monkeypatch.setattr(outcomes, "ALERTS_STUCK_AFTER", 0.1)
    task = tasks("flaky")
    notifier = Notifier()
    notifier.start()
    try:
        with blocking_receiver(task_overdue) as entered:
            notifier.send(task_overdue, task=task, due_at=T0)
            assert entered.wait(10)
            lost = RunFactory.create(task=task)
            notifier.send(run_lost, run=lost)
            notifier.send(task_failing, task=task, failures=3, paused=False)
            notifier.send(task_overdue, task=task, due_at=T0 + dt.timedelta(hours=1))
            wait_until(notifier.alerts_stuck, 10, "the receiver to count as stuck")
            assert not notifier.alerting()
            taken = notifier.take_episodes()
            assert [(sig, kwargs.get("due_at")) for sig, kwargs in taken] == [
                (task_failing, None),
                (task_overdue, T0 + dt.timedelta(hours=1)),
            ]
        wait_until(lambda: received["lost"], 10, "the lost run's alert")
        assert received["lost"] == [{"run": lost}]
        assert [kwargs["due_at"] for kwargs in received["overdue"]] == [T0]
        assert received["failing"] == []
    finally:
        assert notifier.stop(5) == []
