"""A rolling deploy: old and new processes side by side; old code never runs a new definition."""

from __future__ import annotations

import datetime as dt
import functools
import json
import signal
import socket

import pytest

from django_posixcron.models import Run, RunStatus, Task
from tests.harness.processes import SLOW_CASE, Child, Schedulers, only_on, record_task, utcnow
from tests.testapp.models import Hit

pytestmark = [pytest.mark.processes, pytest.mark.django_db(transaction=True)]


def labelled(label: str) -> dict[str, object]:
    entry = record_task("job")
    entry["kwargs"] = {"label": label, "task_name": "job"}
    return entry


def succeeded_runs_reach(count: int) -> bool:
    return Run.objects.filter(status=RunStatus.SUCCEEDED).count() >= count


def test_only_processes_with_the_new_definition_claim_it(schedulers: Schedulers) -> None:
    # The new definition is stored (by the new process) while an old process is live, as
    # during a rollback, or an old process restarting in the middle of a rollout.
    schedulers.configure({"job": labelled("new"), "steady": record_task("steady")})
    (new,) = schedulers.start_live(1)
    schedulers.wait_for(lambda: Task.objects.filter(name="job").exists(), what="job stored")
    new_hash = Task.objects.get(name="job").definition_hash

    # Same name and schedule, different kwargs: the old process defers to the live new one.
    schedulers.configure({"job": labelled("old"), "steady": record_task("steady")})
    (old,) = schedulers.start_live(1)
    schedulers.wait_for(lambda: "deferred task 'job'" in old.output(), what="the revert deferred")
    assert Task.objects.get(name="job").definition_hash == new_hash

    # Both processes wake for each instant; only the new one may fire "job", either may
    # fire "steady", whose definition did not change.
    for expected in (2, 4, 6):
        instant = (utcnow() + dt.timedelta(seconds=1)).replace(microsecond=0)
        Task.objects.filter(name__in=["job", "steady"]).update(
            run_requested_at=instant, due_at=instant
        )
        schedulers.wait_for(
            functools.partial(succeeded_runs_reach, expected), what=f"{expected} runs"
        )

    job_runs = Run.objects.filter(task__name="job")
    assert set(job_runs.values_list("process__pid", flat=True)) == {new.pid}
    assert set(Hit.objects.filter(task_name="job").values_list("label", flat=True)) == {"new"}
    assert Hit.objects.filter(task_name="steady").count() == 3
    # Whether the old process ever found "job" due before the new one claimed it is a race
    # (so its "differs from this process's settings" line may or may not be there); that it
    # deferred the revert is not.
    assert "deferred task 'job'" in old.output()


# -- several declaration sets live at once ------------------------------------------------------
# "Several declaration sets can be live at once [...] A task that any live scheduler declares
# never stops firing, and an old process restarting in the middle of a rollout never reverts or
# retires what the new processes declare."

EVERY_MINUTE = "* * * * *"
# The stale limit of processes polling every second: the 30 s floor (rules.STALE_AFTER_MIN).
STALE = 30.0
# Whatever else a loaded CI host adds to the stated times: a tick, a process's exit.
SLACK = 5.0


def version(name: str, label: str) -> dict[str, object]:
    entry = record_task(name, EVERY_MINUTE)
    entry["kwargs"] = {"label": label, "task_name": name}
    return entry


V1 = {"a": version("a", "v1"), "c": version("c", "same")}
V2 = {"a": version("a", "v2"), "b": version("b", "v2"), "c": version("c", "same")}


def stored(name: str) -> tuple[str, bool] | None:
    row = Task.objects.filter(name=name).values_list("definition_hash", "declared").first()
    return None if row is None else (row[0], row[1])


def label_of(child: Child) -> str:
    return f"{socket.gethostname()}:{child.pid}"


def away_from_the_minute() -> bool:
    """Return True between :05 and :50, where no every-minute run is starting or running."""
    return 5 <= utcnow().second <= 50


def early_in_the_minute() -> bool:
    """Return True between :02 and :25, a safe time to create every-minute tasks.

    A new `* * * * *` task fires the minute it is created in; created in the last seconds of
    a minute, that run may still be running when the next minute is due, and `overlap: skip`
    then rightly skips it. Starting early leaves a slow host half a minute for start-up.
    """
    return 2 <= utcnow().second <= 25


def minutes(first: dt.datetime, last: dt.datetime) -> list[dt.datetime]:
    start = first.replace(second=0, microsecond=0)
    count = int((last.replace(second=0, microsecond=0) - start).total_seconds() // 60) + 1
    return [start + dt.timedelta(minutes=i) for i in range(count)]


def assert_every_minute_once(
    name: str, created: tuple[dt.datetime, dt.datetime], last: dt.datetime
) -> None:
    """Every minute from the task's creation to `last` fired once, by cron, successfully.

    `created` brackets the task's creation: a new `* * * * *` task fires the minute it is
    created in, which may be the minute before the test's next reading of the clock.
    """
    runs = Run.objects.filter(task__name=name)
    fired = sorted(runs.values_list("scheduled_for", "trigger", "status"))
    assert fired, name
    first = fired[0][0]
    earliest, latest = (instant.replace(second=0, microsecond=0) for instant in created)
    assert earliest <= first <= latest, (name, first, created)
    assert fired == [(m, "cron", RunStatus.SUCCEEDED) for m in minutes(first, last)], name
    # Task code ran once per run: no run executed twice, none behind the database's back.
    assert Hit.objects.filter(task_name=name).count() == len(fired), name


@pytest.mark.slow
@pytest.mark.long
def test_rolling_deploy_restart_and_rollback_fire_every_minute_exactly_once(
    schedulers: Schedulers,
) -> None:
    only_on("postgresql", "mysql", why="several processes on one database; " + SLOW_CASE)
    schedulers.configure(V1)
    schedulers.wait_for(early_in_the_minute, timeout=60, what="the start of a minute")
    t_launch = utcnow()
    p1a, p1b = schedulers.start_live(2)
    schedulers.wait_for(lambda: stored("a") and stored("c"), what="v1 reconciled")
    t_start = utcnow()
    v1_a = stored("a")

    # v2 starts beside them: it creates b, and defers a to the live v1 processes.
    schedulers.configure(V2)
    t_b_launch = utcnow()
    (p2,) = schedulers.start_live(1)
    schedulers.wait_for(lambda: stored("b"), what="b created by v2")
    t_b = utcnow()
    schedulers.wait_for(lambda: "deferred task 'a'" in p2.output(), what="a deferred")
    assert stored("a") == v1_a
    status = schedulers.manage("schedulerstatus", "--json", "--ignore-overdue", "--ignore-failing")
    deferred = {d["name"]: d for d in json.loads(status.stdout)["deferred"]}
    assert set(deferred) == {"a", "b"}, status.stdout
    assert set(deferred["a"]["held_by"]) == {label_of(p1a), label_of(p1b)}
    assert deferred["a"]["waiting"] == [{"hash": v2_hash("a"), "declared_by": [label_of(p2)]}]
    schedulers.wait_for(
        lambda: Run.objects.filter(task__name="b", status=RunStatus.SUCCEEDED).exists(),
        timeout=70,
        what="b's first run",
    )

    # A v1 process dies and comes back mid-rollout: it neither reverts a nor retires b.
    schedulers.wait_for(away_from_the_minute, timeout=60, what="a quiet second")
    schedulers.expect_exit(p1a)
    p1a.kill()
    schedulers.configure(V1)
    (p1a_again,) = schedulers.start_live(1)
    schedulers.wait_for(lambda: "deferred task 'b'" in p1a_again.output(), what="b deferred")
    assert stored("a") == v1_a
    assert stored("b") == (v2_hash("b"), True)

    # One v1 process stops cleanly while another is live: nothing changes.
    schedulers.expect_exit(p1b)
    p1b.signal(signal.SIGTERM)
    assert p1b.wait() == 0
    assert stored("a") == v1_a

    # The last v1 process is killed: a switches to v2 once its heartbeat is stale.
    schedulers.wait_for(away_from_the_minute, timeout=60, what="a quiet second")
    schedulers.expect_exit(p1a_again)
    t_kill = utcnow()
    p1a_again.kill()
    schedulers.wait_for(
        lambda: stored("a") == (v2_hash("a"), True), timeout=STALE + SLACK + 5, what="a at v2"
    )
    t_switch = utcnow()
    switched_in = (t_switch - t_kill).total_seconds()
    assert STALE - 2 <= switched_in <= STALE + SLACK, switched_in
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="a", label="v2").exists(),
        timeout=70,
        what="a run of a at v2",
    )

    # The rollback: a v1 process starts while v2 is live (it defers), then v2 stops cleanly.
    schedulers.configure(V1)
    (p1c,) = schedulers.start_live(1)
    schedulers.wait_for(lambda: "deferred task 'a'" in p1c.output(), what="the revert deferred")
    assert stored("a") == (v2_hash("a"), True)
    schedulers.wait_for(away_from_the_minute, timeout=60, what="a quiet second")
    schedulers.expect_exit(p2)
    t_stop = utcnow()
    p2.signal(signal.SIGTERM)
    assert p2.wait() == 0
    t_exit = utcnow()
    schedulers.wait_for(
        lambda: stored("a") == v1_a and stored("b") == (v2_hash("b"), False),
        timeout=SLACK,
        what="the rollback applied",
    )
    t_revert = utcnow()
    assert (t_revert - t_exit).total_seconds() <= 1 + SLACK
    schedulers.wait_for(
        lambda: Hit.objects.filter(task_name="a", label="v1", created_at__gt=t_revert).exists(),
        timeout=70,
        what="a run of a back at v1",
    )
    last = Run.objects.filter(task__name="a").latest("scheduled_for").scheduled_for
    schedulers.wait_for(
        lambda: Run.objects.filter(task__name="c", scheduled_for=last, status="succeeded"),
        what="c's run of the last minute",
    )
    schedulers.expect_exit(p1c)
    p1c.signal(signal.SIGTERM)
    assert p1c.wait() == 0

    # No minute missed, none run twice, each run with the definition stored when it fired.
    assert_every_minute_once("a", (t_launch, t_start), last)
    assert_every_minute_once("c", (t_launch, t_start), last)
    assert_every_minute_once("b", (t_b_launch, t_b), t_stop)
    hits = Hit.objects.filter(task_name="a")
    assert set(hits.filter(created_at__lt=t_kill).values_list("label", flat=True)) == {"v1"}
    # Nobody runs a while the last v1 process is dead but not yet stale; the occurrence missed
    # meanwhile fires at once after the switch, with v2 code.
    assert set(
        hits.filter(created_at__gt=t_kill, created_at__lt=t_stop).values_list("label", flat=True)
    ) == {"v2"}
    assert set(hits.filter(created_at__gt=t_revert).values_list("label", flat=True)) == {"v1"}


def test_a_clean_stop_of_the_last_old_process_switches_at_once(schedulers: Schedulers) -> None:
    schedulers.configure({"a": version("a", "v1")})
    (old,) = schedulers.start_live(1)
    schedulers.wait_for(lambda: stored("a"), what="v1 reconciled")
    schedulers.configure({"a": version("a", "v2")})
    (new,) = schedulers.start_live(1)
    schedulers.wait_for(lambda: "deferred task 'a'" in new.output(), what="a deferred")

    schedulers.expect_exit(old)
    old.signal(signal.SIGTERM)
    assert old.wait() == 0
    t_exit = utcnow()
    schedulers.wait_for(
        lambda: stored("a") == (v2_hash("a"), True), timeout=SLACK, what="a switched"
    )
    # "At once when that process stops cleanly": within a poll interval of its exit.
    assert (utcnow() - t_exit).total_seconds() <= 1 + SLACK
    assert "declaration set(s)" in new.output()


def v2_hash(name: str) -> str:
    from django_posixcron.declarations import collect

    declarations, problems = collect({"TASKS": V2, "POLL_INTERVAL": 1})
    assert problems == []
    return declarations[name].definition_hash


def test_a_once_run_with_new_settings_leaves_no_task_behind(schedulers: Schedulers) -> None:
    # A smoke test of the next release (`runscheduler --once` with its settings) beside the
    # running fleet: it creates the task only it declares, and stops before the fleet's next
    # look. The fleet never saw it live; its task stayed declared, overdue every minute.
    schedulers.configure(V1)
    (fleet,) = schedulers.start_live(1)
    schedulers.configure(V2)
    smoke = schedulers.start("--once")
    schedulers.expect_exit(smoke)
    assert smoke.wait() == 0, schedulers.outputs()
    assert Task.objects.filter(name="b").exists()
    schedulers.wait_for(
        lambda: stored("b") == (v2_hash("b"), False),
        timeout=SLACK,
        what="the task only the --once run declared retired",
    )
    # Seen stopped ("started and stopped since the last look"), or, on a slow host, seen live
    # by a tick of the fleet and then gone ("no longer live"): either way it reconciled.
    assert "reconciling again" in fleet.output()
    # What the fleet declares is its own still.
    assert stored("a") == (Task.objects.get(name="a").definition_hash, True)
