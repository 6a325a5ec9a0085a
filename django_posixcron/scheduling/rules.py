"""The scheduler's rules as pure functions: no database, no clock, no threads.

Which trigger fires, a task's next state after a claim, and what an outcome does to its task
are decided here; claim.py and outcomes.py only read rows in and write the answers out.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
from typing import Any

from django_posixcron.models import FAILURE_STATUSES, RunStatus, Trigger, due_at
from django_posixcron.timing import next_occurrence, served_occurrence

# A process is presumed dead once it has missed three heartbeats: one slow beat (a GC pause,
# a database hiccup) must not turn its runs into lost ones and fire them twice. The floor
# covers very short poll intervals, where three beats are shorter than a database failover
# or a container being rescheduled.
STALE_AFTER_TICKS = 3
STALE_AFTER_MIN = dt.timedelta(seconds=30)

# Every process heartbeats at least this often, whatever its poll interval, so that a process
# polling every minute is not taken for dead by one whose threshold is the 30 s floor.
HEARTBEAT_EVERY = 10.0

# Database outage back-off: quick enough to notice a restart within a second, capped well
# under the stale limit: "the stale limit is longer than the loop's longest back-off", so a
# process sleeping out an outage is back and beating before anyone presumes it dead.
BACKOFF_MIN = 0.5
BACKOFF_MAX = 10.0


def stale_after(poll_interval: float) -> dt.timedelta:
    """Return how long without a heartbeat makes a scheduler process presumed dead."""
    heartbeat_every = min(poll_interval, HEARTBEAT_EVERY)
    return max(STALE_AFTER_MIN, dt.timedelta(seconds=STALE_AFTER_TICKS * heartbeat_every))


def back_off(failures: int) -> float:
    """Return the delay before the next attempt after `failures` failed ones in a row."""
    return float(min(BACKOFF_MAX, BACKOFF_MIN * 2.0 ** (max(1, failures) - 1)))


def decide(
    next_run_at: dt.datetime | None,
    retry_at: dt.datetime | None,
    run_requested_at: dt.datetime | None,
    now: dt.datetime,
) -> tuple[str, dt.datetime] | None:
    """Return (trigger, scheduled_for) for a due task, or None if nothing is due.

    Precedence when several are due at once: cron, then retry, then manual. One run answers
    every reason the task was due for: the cron occurrence is what the exactly-once promise
    is about, and a retry or a manual request only asks for "one more run soon", which that
    run is.
    """
    if next_run_at is not None and next_run_at <= now:
        return Trigger.CRON, next_run_at
    if retry_at is not None and retry_at <= now:
        return Trigger.RETRY, retry_at
    if run_requested_at is not None and run_requested_at <= now:
        return Trigger.MANUAL, run_requested_at
    return None


@dataclasses.dataclass(frozen=True)
class Claimed:
    """What a claim does to one task: its new state, and the run to insert (if any)."""

    changes: dict[str, Any]
    trigger: str | None = None
    scheduled_for: dt.datetime | None = None
    skipped: bool = False


def after_claim(
    *,
    schedule: str,
    timezone: str,
    next_run_at: dt.datetime | None,
    retry_at: dt.datetime | None,
    run_requested_at: dt.datetime | None,
    last_run_started_at: dt.datetime | None,
    now: dt.datetime,
    overlapping: bool,
) -> Claimed:
    """Return the task's state after a claim at `now`, and what run it fires."""
    decided = decide(next_run_at, retry_at, run_requested_at, now)
    trigger = scheduled_for = None
    if decided is not None:
        trigger, scheduled_for = decided
        if trigger == Trigger.CRON:
            # "No make-up: after downtime a task fires once, then resumes its schedule."
            # The cursor goes to the first occurrence strictly after now, however many
            # occurrences were missed. And past the occurrence the fired cursor stands for:
            # written under other rules of the zone, it may stand for one still ahead here.
            served = served_occurrence(schedule, timezone, scheduled_for)
            next_run_at = next_occurrence(schedule, timezone, max(now, served))
        # Any run consumes a pending retry ("when the next cron occurrence comes first, it
        # fires first and consumes the retry") and a manual request already made.
        retry_at = None
        if run_requested_at is not None and run_requested_at <= now:
            run_requested_at = None
        if not overlapping:
            last_run_started_at = now
    changes = {
        "next_run_at": next_run_at,
        "retry_at": retry_at,
        "run_requested_at": run_requested_at,
        "due_at": due_at(next_run_at, retry_at, run_requested_at),
        "last_run_started_at": last_run_started_at,
    }
    return Claimed(changes, trigger, scheduled_for, skipped=decided is not None and overlapping)


def retry_replaced(
    retry_at: dt.datetime, next_run_at: dt.datetime | None, run_requested_at: dt.datetime | None
) -> bool:
    """Whether a pending retry will never run: a run comes first and consumes it (the next cron
    occurrence, or a requested run), as after_claim() does."""
    return any(at is not None and at <= retry_at for at in (next_run_at, run_requested_at))


def attempt_of(
    trigger: str,
    scheduled_for: dt.datetime,
    retry_occurrence: dt.datetime | None,
    retry_attempt: int,
) -> tuple[dt.datetime, int]:
    """Return (occurrence, attempt) of a run the claim fires.

    "occurrence (the cron occurrence the run serves: for a retry, the one whose failure it
    retries; for a manual run, the request instant), attempt (1 for an occurrence's first run,
    +1 for each retry of it, whatever ended the previous run: failed, timed out, lost or
    interrupted; a cron occurrence that consumes a pending retry is attempt 1 of itself)."
    The task row carries the failed run's occurrence and attempt until its retry fires.
    """
    if trigger == Trigger.RETRY and retry_occurrence is not None:
        return retry_occurrence, retry_attempt + 1
    if trigger == Trigger.RETRY:
        # A retry recorded before runs knew their occurrence: at least the second attempt.
        return scheduled_for, 2
    return scheduled_for, 1


def retry_after_outcome(
    status: str,
    finished_at: dt.datetime,
    retry_delay: dt.timedelta,
    retry_at: dt.datetime | None,
) -> dt.datetime | None:
    """Return the task's retry_at once a run ended with `status`.

    "On failure set retry_at = failure time + retry_delay; on success clear it."
    A lost, interrupted or timed_out run counts as a failure; a skip changes nothing.
    """
    if status == RunStatus.SUCCEEDED:
        return None
    if status in FAILURE_STATUSES:
        return finished_at + retry_delay
    return retry_at


def outdated_success(
    status: str,
    occurrence: dt.datetime | None,
    failures: int,
    failed_occurrence: dt.datetime | None,
) -> bool:
    """Return whether a success serves an older occurrence than the task's latest failure.

    With overlap "allow", the 10:00 run can still be going when the 11:00 one fails; its
    success, recorded later, says nothing about 11:00. It must neither clear the retry the
    11:00 failure set up ("every failure is visible and retried") nor end the failure streak,
    nor stand as the task's last run over the newer one's outcome. `failed_occurrence` is the
    occurrence the latest failure's retry retries (the task's retry_occurrence).
    """
    return (
        status == RunStatus.SUCCEEDED
        and failures > 0
        and occurrence is not None
        and failed_occurrence is not None
        and occurrence < failed_occurrence
    )


def outdated_failure(
    status: str,
    occurrence: dt.datetime | None,
    retry_at: dt.datetime | None,
    retry_occurrence: dt.datetime | None,
) -> bool:
    """Return whether a failure serves an older occurrence than the retry pending.

    With overlap "allow", the 10:00 run can still be going when the 11:00 one fails and sets
    up its retry; the task holds one retry, and the 10:00 failure, recorded later, must not
    take it over: the 11:00 failure would never be retried. A newer occurrence supersedes an
    older one's retry, as "the next cron occurrence ... consumes the retry". The failure
    still counts in the streak.
    """
    return (
        status in FAILURE_STATUSES
        and retry_at is not None
        and occurrence is not None
        and retry_occurrence is not None
        and occurrence < retry_occurrence
    )


def late_success_cancels_retry(
    status: str,
    occurrence: dt.datetime | None,
    attempt: int,
    retry_at: dt.datetime | None,
    retry_occurrence: dt.datetime | None,
    retry_attempt: int,
) -> bool:
    """Return whether a run's real outcome, arriving after it was marked lost, cancels the
    retry that verdict set up.

    Marking it lost applied the retry rule and counted a failure; its real outcome is
    recorded on the run ("the status becomes the real outcome") but adds no second retry
    and no second failure. A success cancels the retry the verdict set up while that retry
    has not fired: it would run the occurrence again. Once the retry fired, the task's state
    belongs to that attempt (is_latest_run() is then False).
    """
    return (
        status == RunStatus.SUCCEEDED
        and retry_at is not None
        and occurrence is not None
        and retry_occurrence == occurrence
        and retry_attempt == attempt
    )


def is_latest_run(started_at: dt.datetime | None, last_run_started_at: dt.datetime | None) -> bool:
    """Return whether no run of the task started after this one (the claim sets the task's
    last_run_started_at to its newest run's start; a worker starts a handed-off run later)."""
    return started_at is not None and (
        last_run_started_at is None or started_at >= last_run_started_at
    )


def accepts_outcome(current_status: str, status: str) -> bool:
    """Return whether an outcome `status` may still be written over a run in `current_status`.

    A running run takes its outcome; a queued one only lost or failed (see below). So does one
    already marked lost: "an outcome that arrives for a run already marked lost is still
    recorded on it (logged and signalled), never dropped". Any other final status stays: it
    was written by this process (a timeout, the grace period) and the late return is only
    logged.
    """
    if current_status == RunStatus.LOST:
        # Two peers marking the same dead process's run lost: the second changes nothing.
        return status != RunStatus.LOST
    if current_status == RunStatus.QUEUED:
        # A handed-off run no worker started: lost past its start_deadline, or failed when
        # the backend refused it. A worker's own outcome comes after its flip to running.
        return status in (RunStatus.LOST, RunStatus.FAILED)
    return current_status == RunStatus.RUNNING


@dataclasses.dataclass(frozen=True)
class Streak:
    """A task's failures in a row after an outcome, and what they set off."""

    failures: int
    signalled: bool  # this episode's task_failing has been sent (now or before)
    send: bool = False  # send task_failing with this outcome
    pause: bool = False  # pause the task with this outcome


def failure_streak(
    status: str,
    failures: int,
    signalled: bool,
    *,
    failing_after: int,
    pause_after: int | None,
    paused: bool = False,
) -> Streak:
    """Return the streak after an outcome with `status`.

    "task_failing(sender, task, failures, paused) — FAILING_AFTER consecutive failed runs
    (default 3; retries count; a success ends the episode). The task key
    "pause_after_failures": N pauses the task right after its Nth consecutive failure (no
    further run), sends task_failing with paused=True". A pause is sent even when the episode
    was already signalled: it is news to whoever watches. A task resumed while its streak
    goes on is paused again by its next failure.
    """
    if status == RunStatus.SUCCEEDED:
        return Streak(0, False)
    if status not in FAILURE_STATUSES:
        return Streak(failures, signalled)
    failures += 1
    pause = pause_after is not None and failures >= pause_after and not paused
    send = pause or (not signalled and failures >= failing_after)
    return Streak(failures, signalled or send, send=send, pause=pause)


# Rows due but locked by another scheduler are committed by it within milliseconds; asking
# again this soon neither spins nor leaves the rest of a large due batch waiting a full poll.
CONTENDED_RETRY = 0.05


def wake_in(
    now: dt.datetime,
    heartbeat_every: float,
    next_due: dt.datetime | None,
    limit: int,
    claimed: bool,
) -> float:
    """Return how long the loop may sleep after a tick at `now`.

    "Sleep until the earliest due_at or POLL_INTERVAL, whichever is sooner": `limit` is how
    many runs the tick could claim (0 when every slot is busy: a finishing run wakes the
    loop), `claimed` whether it claimed any.
    """
    candidates = [heartbeat_every]
    if next_due is not None:
        if next_due > now:
            candidates.append((next_due - now).total_seconds())
        elif limit > 0 and claimed:
            # Claimed what was due (maybe a full batch): the cursors moved, ask again.
            candidates.append(0.0)
        elif limit > 0:
            candidates.append(CONTENDED_RETRY)
    return max(0.0, min(candidates))


def due_within(next_due: dt.datetime | None, now: dt.datetime, seconds: float) -> bool:
    """Whether `next_due` is after `now` by at most `seconds` (a tick's round trip to the
    database: the database's clock has then about reached it)."""
    return next_due is not None and now < next_due <= now + dt.timedelta(seconds=seconds)
