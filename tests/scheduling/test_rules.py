"""The scheduler's pure rules, without a database (pytest-django refuses any query here)."""

from __future__ import annotations

import datetime as dt

import pytest

from django_posixcron.models import RunStatus, Trigger
from django_posixcron.scheduling import rules

UTC = dt.UTC
T0 = dt.datetime(2086, 1, 7, 10, 0, tzinfo=UTC)
MINUTE = dt.timedelta(minutes=1)
HOUR = dt.timedelta(hours=1)


def claimed(**state: object) -> rules.Claimed:
    fields: dict[str, object] = {
        "schedule": "0 * * * *",
        "timezone": "UTC",
        "next_run_at": None,
        "retry_at": None,
        "run_requested_at": None,
        "last_run_started_at": None,
        "now": T0,
        "overlapping": False,
    }
    fields.update(state)
    return rules.after_claim(**fields)  # type: ignore[arg-type]


def test_cron_comes_before_retry_and_retry_before_manual() -> None:
    assert rules.decide(T0, T0, T0, T0) == (Trigger.CRON, T0)
    assert rules.decide(T0 + MINUTE, T0 - MINUTE, T0, T0) == (Trigger.RETRY, T0 - MINUTE)
    assert rules.decide(T0 + MINUTE, None, T0, T0) == (Trigger.MANUAL, T0)
    assert rules.decide(T0 + MINUTE, T0 + MINUTE, None, T0) is None


def test_a_claim_after_downtime_fires_once_and_resumes_the_schedule() -> None:
    """ "No make-up: after downtime a task fires once, then resumes its schedule." """
    now = T0 + 5 * HOUR + 30 * MINUTE
    result = claimed(next_run_at=T0, retry_at=T0, now=now)
    assert (result.trigger, result.scheduled_for) == (Trigger.CRON, T0)
    assert result.changes["next_run_at"] == T0 + 6 * HOUR
    assert result.changes["retry_at"] is None  # consumed by the cron occurrence
    assert result.changes["due_at"] == T0 + 6 * HOUR
    assert result.changes["last_run_started_at"] == now


def test_a_manual_request_is_consumed_and_the_cursor_stays() -> None:
    result = claimed(next_run_at=T0 + HOUR, run_requested_at=T0 - MINUTE)
    assert (result.trigger, result.scheduled_for) == (Trigger.MANUAL, T0 - MINUTE)
    assert result.changes["next_run_at"] == T0 + HOUR
    assert result.changes["run_requested_at"] is None
    assert result.changes["due_at"] == T0 + HOUR


def test_an_overlapping_claim_skips_and_leaves_the_last_start_alone() -> None:
    started = T0 - HOUR
    result = claimed(next_run_at=T0, last_run_started_at=started, overlapping=True)
    assert result.skipped
    assert result.changes["last_run_started_at"] == started
    assert result.changes["next_run_at"] == T0 + HOUR


def test_nothing_due_changes_nothing() -> None:
    result = claimed(next_run_at=T0 + HOUR)
    assert result.trigger is None
    assert not result.skipped
    assert result.changes["due_at"] == T0 + HOUR


@pytest.mark.parametrize(
    ("status", "expected"),
    [
        (RunStatus.SUCCEEDED, None),
        (RunStatus.FAILED, T0 + 5 * MINUTE),
        (RunStatus.LOST, T0 + 5 * MINUTE),
        (RunStatus.INTERRUPTED, T0 + 5 * MINUTE),
        (RunStatus.TIMED_OUT, T0 + 5 * MINUTE),
        (RunStatus.SKIPPED, T0 + HOUR),
    ],
)
def test_an_outcomes_effect_on_the_retry(status: str, expected: dt.datetime | None) -> None:
    """ "On failure set retry_at = failure time + retry_delay; on success clear it." """
    assert rules.retry_after_outcome(status, T0, 5 * MINUTE, T0 + HOUR) == expected


def test_an_outcome_is_recorded_over_running_and_over_lost_but_not_twice_lost() -> None:
    assert rules.accepts_outcome(RunStatus.RUNNING, RunStatus.SUCCEEDED)
    assert rules.accepts_outcome(RunStatus.LOST, RunStatus.SUCCEEDED)
    assert rules.accepts_outcome(RunStatus.LOST, RunStatus.FAILED)
    assert not rules.accepts_outcome(RunStatus.LOST, RunStatus.LOST)
    assert not rules.accepts_outcome(RunStatus.TIMED_OUT, RunStatus.SUCCEEDED)
    assert not rules.accepts_outcome(RunStatus.INTERRUPTED, RunStatus.SUCCEEDED)


@pytest.mark.parametrize("poll_interval", [0.1, 1, 5, 10, 30, 60, 3600])
def test_the_stale_limit_is_longer_than_the_longest_back_off(poll_interval: float) -> None:
    """Item 9: the longest back-off equalled the stale limit (30 s).

    "The stale limit is longer than the loop's longest back-off": a process sleeping out a
    database outage must not be presumed dead while its threads still execute runs.
    """
    longest = max(rules.back_off(failures) for failures in range(1, 100))
    assert longest == rules.BACKOFF_MAX
    # One back-off and one heartbeat period fit inside the stale limit.
    heartbeat_every = min(poll_interval, rules.HEARTBEAT_EVERY)
    assert dt.timedelta(seconds=longest + heartbeat_every) < rules.stale_after(poll_interval)


def test_the_back_off_doubles_from_half_a_second() -> None:
    assert [rules.back_off(n) for n in range(1, 7)] == [0.5, 1.0, 2.0, 4.0, 8.0, 10.0]


@pytest.mark.parametrize(
    ("next_due", "limit", "any_claimed", "expected"),
    [
        # "Sleep until the earliest due_at or POLL_INTERVAL, whichever is sooner."
        (T0 + dt.timedelta(seconds=3), 4, False, 3.0),
        (T0 + HOUR, 4, False, 10.0),
        (None, 4, False, 10.0),
        # Due now and claimed: the cursors moved, ask again at once.
        (T0, 4, True, 0.0),
        # Due now, nothing claimed (another scheduler holds the rows): a short retry.
        (T0, 4, False, rules.CONTENDED_RETRY),
        # Every slot busy: a finishing run wakes the loop; until then, the heartbeat period.
        (T0, 0, False, 10.0),
    ],
)
def test_how_long_the_loop_sleeps(next_due, limit, any_claimed, expected):
    assert rules.wake_in(T0, 10.0, next_due, limit, any_claimed) == expected


def test_due_within_a_round_trip() -> None:
    now = dt.datetime(2086, 1, 7, 10, tzinfo=dt.UTC)
    ms = dt.timedelta(milliseconds=1)
    assert rules.due_within(now + ms, now, 0.002)
    assert rules.due_within(now + 2 * ms, now, 0.002)
    assert not rules.due_within(now + 3 * ms, now, 0.002)
    # Already due is the ordinary claim's case, not this one; nothing due, nothing to claim.
    assert not rules.due_within(now, now, 0.002)
    assert not rules.due_within(now - ms, now, 0.002)
    assert not rules.due_within(None, now, 0.002)


def test_a_cursor_written_under_other_zone_rules_is_fired_once() -> None:
    """A Berlin 09:00 stored as 07:00 UTC (by rules at UTC+2; Berlin is at UTC+1 in January):
    it fires, and the next cursor is tomorrow's 09:00, not today's at 08:00 UTC."""
    stale = T0.replace(hour=7)
    result = claimed(schedule="0 9 * * *", timezone="Europe/Berlin", next_run_at=stale, now=stale)
    assert (result.trigger, result.scheduled_for) == (Trigger.CRON, stale)
    assert result.changes["next_run_at"] == T0.replace(hour=8) + dt.timedelta(days=1)

    # Stored as 09:00 UTC (rules at UTC+0): it stands for today's 09:00, which has passed.
    late = T0.replace(hour=9)
    result = claimed(schedule="0 9 * * *", timezone="Europe/Berlin", next_run_at=late, now=late)
    assert result.changes["next_run_at"] == T0.replace(hour=8) + dt.timedelta(days=1)
