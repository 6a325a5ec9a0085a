"""`manage.py schedulerstatus`: what it lists and when it exits non-zero."""

from __future__ import annotations

import datetime as dt
import json
import os
import socket
import subprocess
import sys
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from django_posixcron.db import database_now
from django_posixcron.models import RunStatus, SchedulerProcess, Task
from django_posixcron.scheduling.rules import stale_after
from tests.factories import RunFactory, TaskFactory

pytestmark = pytest.mark.django_db

SECOND = dt.timedelta(seconds=1)


@pytest.fixture
def now() -> dt.datetime:
    return database_now("default")


@pytest.fixture(autouse=True)
def _settings(posixcron):
    posixcron({}, POLL_INTERVAL=10)


def make_task(name: str, now: dt.datetime, **fields: Any) -> Task:
    defaults: dict[str, Any] = {
        "name": name,
        "callable_path": "tests.testapp.jobs.record",
        "next_run_at": now + dt.timedelta(minutes=30),
    }
    defaults.update(fields)
    return TaskFactory.create(**defaults)


def make_process(
    now: dt.datetime, *, age: dt.timedelta = SECOND, **fields: Any
) -> SchedulerProcess:
    defaults = {"hostname": socket.gethostname(), "pid": 4242, "version": "1.0"}
    defaults.update(fields)
    return SchedulerProcess.objects.create(
        started_at=now - dt.timedelta(hours=1), last_heartbeat_at=now - age, **defaults
    )


def status(*args: str) -> tuple[int, str]:
    out = StringIO()
    try:
        call_command("schedulerstatus", *args, stdout=out)
    except CommandError as exc:
        return exc.returncode, out.getvalue() + f"\nerror: {exc}"
    return 0, out.getvalue()


def test_healthy_lists_the_live_schedulers_and_exits_0(now):
    process = make_process(now)
    make_task("hourly", now)
    make_task("paused", now, paused=True)

    code, out = status()

    assert code == 0, out
    assert "Schedulers: 1 live" in out
    assert process.label in out
    assert "Tasks: 1 active, 1 paused, 0 overdue, 0 failing" in out
    assert out.rstrip().endswith("OK")


def test_no_scheduler_at_all_is_unhealthy(now):
    make_task("hourly", now)
    code, out = status()
    assert code == 1
    assert "Schedulers: 0 live" in out
    assert "no live scheduler" in out


@pytest.mark.parametrize("state", ["stale", "stopped"])
def test_a_stale_or_stopped_scheduler_is_not_live(now, state):
    poll = 10.0
    if state == "stale":
        make_process(now, age=stale_after(poll) + SECOND)
    else:
        make_process(now, stopped_at=now - SECOND)
    code, out = status()
    assert code == 1
    assert "no live scheduler" in out


def test_a_heartbeat_within_the_scheduler_s_own_threshold_is_live(now):
    make_process(now, age=stale_after(10.0) - SECOND)
    assert status()[0] == 0


def test_an_overdue_task_is_unhealthy_unless_the_lag_allows_it(now):
    make_process(now)
    make_task("late", now, next_run_at=now - dt.timedelta(seconds=60))
    make_task("late-but-paused", now, next_run_at=now - dt.timedelta(hours=2), paused=True)
    make_task("late-but-retired", now, next_run_at=now - dt.timedelta(hours=2), declared=False)
    make_task("just-due", now, next_run_at=now - dt.timedelta(seconds=5))

    code, out = status()
    assert code == 1
    assert "overdue  late " in out
    assert "1 overdue task(s): late" in out
    for quiet in ("late-but-paused", "late-but-retired", "just-due"):
        assert quiet not in out

    assert status("--max-lag", "120")[0] == 0
    code, out = status("--ignore-overdue")
    assert code == 0
    assert "overdue  late " in out


def test_a_failing_task_is_unhealthy_unless_ignored(now):
    make_process(now)
    make_task(
        "broken",
        now,
        last_run_status=RunStatus.LOST,
        last_run_finished_at=now - dt.timedelta(minutes=2),
        retry_at=now + dt.timedelta(minutes=3),
    )
    make_task("fine", now, last_run_status=RunStatus.SUCCEEDED)

    code, out = status()
    assert code == 1
    assert "failing  broken  last run lost" in out
    assert "retry at" in out
    assert "fine" not in out

    code, out = status("--ignore-failing")
    assert code == 0
    assert "failing  broken" in out


def test_a_retry_the_next_cron_run_comes_before_is_not_promised(now):
    make_process(now)
    make_task(
        "hourly",
        now,
        last_run_status=RunStatus.FAILED,
        last_run_finished_at=now - dt.timedelta(minutes=2),
        next_run_at=now + dt.timedelta(minutes=10),
        retry_at=now + dt.timedelta(hours=2),
    )
    code, out = status()
    assert code == 1
    assert "retry at" not in out
    next_run = (now + dt.timedelta(minutes=10)).isoformat()
    assert (
        f"failing  hourly  last run failed 120.0 s ago, next run at {next_run} (before the retry)"
        in out
    )


def test_a_failing_task_whose_next_run_is_under_way_says_so(now):
    make_process(now)
    started = now - dt.timedelta(seconds=30)
    make_task(
        "retrying",
        now,
        last_run_status=RunStatus.FAILED,
        last_run_finished_at=now - dt.timedelta(minutes=2),
        last_run_started_at=started,
        retry_at=None,
    )
    code, out = status()
    assert code == 1
    assert (
        "failing  retrying  last run failed 120.0 s ago, "
        f"running again since {started.isoformat()}" in out
    )


def test_a_task_paused_by_its_failures_says_so_instead_of_a_retry_time(now):
    make_process(now)
    reason = "Paused automatically after 2 failed runs in a row (pause_after_failures = 2)."
    make_task(
        "paused-broken",
        now,
        last_run_status=RunStatus.FAILED,
        last_run_finished_at=now - dt.timedelta(minutes=2),
        retry_at=now - dt.timedelta(minutes=1),
        paused=True,
        paused_reason=reason,
    )
    code, out = status()
    assert code == 1
    assert f"failing  paused-broken  last run failed 120.0 s ago, paused: {reason}" in out
    assert "retry at" not in out
    code, out = status("--json")
    [failing] = json.loads(out.split("\nerror:")[0])["failing"]
    assert (failing["paused"], failing["paused_reason"]) == (True, reason)


def test_this_host_wants_a_live_scheduler_here(now):
    make_process(now, hostname="some-other-host")
    assert status()[0] == 0
    code, out = status("--this-host")
    assert code == 1
    assert f"no live scheduler on host {socket.gethostname()}" in out
    make_process(now, pid=7)
    assert status("--this-host")[0] == 0


def test_json_output_for_machines(now):
    make_process(now, pid=99)
    make_task("broken", now, last_run_status=RunStatus.FAILED)
    code, out = status("--json")
    assert code == 1
    document = json.loads(out.split("\nerror:")[0])
    assert document["healthy"] is False
    assert document["problems"] == ["1 failing task(s)"]
    assert [p["pid"] for p in document["schedulers"]] == [99]
    assert document["failing"][0]["name"] == "broken"
    assert document["failing"][0]["last_run_status"] == "failed"


def test_deferred_changes_name_their_holders_and_stay_healthy(now):
    from django_posixcron.deployments import record

    steady = make_task("steady", now)
    canary_only = make_task("canary-only", now)
    fleet = {"steady": steady.definition_hash}
    canary = {**fleet, "canary-only": canary_only.definition_hash}
    make_process(now, pid=1, declaration_set=record("default", fleet))
    make_process(now, pid=2, declaration_set=record("default", canary))
    code, out = status("--json")
    assert code == 0, out
    host = socket.gethostname()
    # The fleet would retire the canary's task: it waits while the canary is live.
    assert json.loads(out)["deferred"] == [
        {
            "name": "canary-only",
            "stored_hash": canary_only.definition_hash,
            "held_by": [f"{host}:2"],
            "waiting": [{"hash": None, "declared_by": [f"{host}:1"]}],
        }
    ]
    code, out = status()
    assert "Deferred definition changes: 1 (a rollout in progress)" in out
    assert (
        f"  deferred  canary-only: stored {canary_only.definition_hash[:12]} held by {host}:2; "
        f"waiting: not declared by {host}:1"
    ) in out


@pytest.mark.parametrize("value", ["-1", "soon", "inf", "1e11", "1e300"])
def test_max_lag_is_validated(value):
    with pytest.raises(CommandError, match=r"max.lag"):
        call_command("schedulerstatus", "--max-lag", value)


def test_an_unreachable_database_is_one_line_and_exit_1(monkeypatch):
    from django.db import OperationalError

    from django_posixcron.management.commands import schedulerstatus

    def refuse(using: str) -> dt.datetime:
        raise OperationalError("connection refused\n\tIs the server running?")

    monkeypatch.setattr(schedulerstatus, "database_now", refuse)
    code, out = status()
    assert code == 1
    assert out.strip().endswith(
        "error: database unavailable: connection refused; Is the server running?"
    )


def test_an_unreachable_database_is_one_command_error_line_on_stderr(tmp_path):
    # As the command's other errors: "CommandError: ...", not the name of a class of ours.
    env = {
        **os.environ,
        "DATABASE_URL": "postgres://postgres@127.0.0.1:1/nowhere",
        "DJANGO_SETTINGS_MODULE": "tests.settings",
    }
    result = subprocess.run(
        [sys.executable, "-m", "django", "schedulerstatus"],
        cwd=Path(__file__).resolve().parents[2],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 1, result.stderr
    assert result.stdout == ""
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("CommandError: database unavailable: "), lines


def test_ignore_unavailable_stays_healthy_only_through_an_outage(monkeypatch):
    from django.db import OperationalError, ProgrammingError

    from django_posixcron.management.commands import schedulerstatus

    def away(using: str) -> dt.datetime:
        raise OperationalError("connection refused")

    monkeypatch.setattr(schedulerstatus, "database_now", away)
    code, out = status("--ignore-unavailable")
    assert code == 0
    assert out.strip() == (
        "database unavailable: connection refused (ignored: --ignore-unavailable)"
    )

    # A refusal (a role without the privileges) would fail again at every probe.
    def refused(using: str) -> dt.datetime:
        raise ProgrammingError("permission denied for table django_posixcron_task")

    monkeypatch.setattr(schedulerstatus, "database_now", refused)
    code, out = status("--ignore-unavailable")
    assert code == 1
    assert "database refused the status query: permission denied" in out


def test_json_says_an_unreachable_database_as_json_too(monkeypatch):
    from django.db import OperationalError

    from django_posixcron.management.commands import schedulerstatus

    def refuse(using: str) -> dt.datetime:
        raise OperationalError("connection refused")

    monkeypatch.setattr(schedulerstatus, "database_now", refuse)
    out = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("schedulerstatus", "--json", stdout=out)
    assert raised.value.returncode == 1
    assert json.loads(out.getvalue()) == {
        "healthy": False,
        "problems": ["database unavailable: connection refused"],
    }


def test_json_says_an_unknown_database_alias_as_json_too():
    out = StringIO()
    with pytest.raises(CommandError) as raised:
        call_command("schedulerstatus", "--json", "--database", "nope", stdout=out)
    assert raised.value.returncode == 1
    answer = json.loads(out.getvalue())
    assert answer["healthy"] is False
    [problem] = answer["problems"]
    assert "'nope' is not in settings.DATABASES" in problem


def test_broken_poll_interval_settings_fall_back_to_the_default(posixcron, now):
    posixcron({}, POLL_INTERVAL="soon")
    make_process(now, age=dt.timedelta(seconds=25))
    assert status()[0] == 0


def test_handed_off_runs_queued_past_their_deadline_or_with_a_silent_worker_are_reported(now):
    make_process(now)
    task = make_task("export", now)
    RunFactory.create(
        task=task,
        status=RunStatus.QUEUED,
        backend="default",
        started_at=None,
        start_deadline_at=now + dt.timedelta(minutes=5),
    )
    late = RunFactory.create(
        task=task,
        status=RunStatus.QUEUED,
        backend="rq",
        result_id="abc-123",
        started_at=None,
        start_deadline_at=now - SECOND,
    )
    silent = RunFactory.create(
        task=task,
        status=RunStatus.RUNNING,
        backend="default",
        worker="worker-host:77",
        heartbeat_at=now - stale_after(10.0) - SECOND,
    )
    RunFactory.create(  # a worker beating for its run: fine
        task=task,
        status=RunStatus.RUNNING,
        backend="default",
        worker="worker-host:78",
        heartbeat_at=now - SECOND,
    )

    code, out = status()

    assert code == 1
    assert "Runs handed to workers: 2 queued" in out
    assert f"queued too long  export  run {late.pk} on backend 'rq'" in out
    assert f"worker silent  export  run {silent.pk} on worker-host:77" in out
    assert "1 run(s) queued past their start_deadline" in out
    assert "1 run(s) whose worker went silent" in out

    code, out = status("--json")
    data = json.loads(out.split("\nerror:")[0])
    assert data["queued"] == 2
    assert [r["result_id"] for r in data["queued_too_long"]] == ["abc-123"]
    assert [r["worker"] for r in data["silent_workers"]] == ["worker-host:77"]


def test_queued_runs_within_their_deadline_are_healthy(now):
    make_process(now)
    task = make_task("export", now)
    RunFactory.create(
        task=task,
        status=RunStatus.QUEUED,
        backend="default",
        started_at=None,
        start_deadline_at=now + dt.timedelta(minutes=5),
    )

    code, out = status()

    assert code == 0, out
    assert "Runs handed to workers: 1 queued" in out


def test_the_problem_line_names_the_most_overdue_tasks(now):
    make_process(now)
    for minutes in range(1, 8):
        make_task(f"late-{minutes}", now, next_run_at=now - dt.timedelta(minutes=minutes))

    code, out = status()

    assert code == 1
    assert "7 overdue task(s): late-7, late-6, late-5, late-4, late-3 and 2 more" in out


def test_without_use_tz_it_says_so_instead_of_reading_naive_times(now, settings):
    # It skips the system checks (to answer while a deploy broke them), so E025 never showed:
    # it printed naive times and judged overdue tasks by them.
    make_process(now)
    settings.USE_TZ = False
    code, out = status()
    assert code == 1
    assert "requires USE_TZ = True (posixcron.E025)" in out
    code, out = status("--json")
    assert code == 1
    answer = json.loads(out.split("\nerror: ")[0])
    assert answer["healthy"] is False
    assert "USE_TZ" in answer["problems"][0]
