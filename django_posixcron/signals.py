"""Signals sent by the scheduler around each run, for integrations (metrics, alerting)."""

from django.dispatch import Signal

# Sent when a run starts, with ``run=`` (a copy of the ``Run``, status ``running``). Receivers
# run on the scheduler's signal thread, in order, never on the run's own thread, so a slow
# receiver cannot hold the run back; an exception they raise is logged and ignored.
run_started = Signal()

# Sent once a run has its final status (succeeded, failed, skipped, lost, interrupted,
# timed_out), with ``run=`` carrying that status, its duration and error.
run_finished = Signal()

# Alert signals (DESIGN section 7). Each is sent once per episode across the whole fleet, by
# the one scheduler whose conditional write marked the episode in the database, from that
# scheduler's signal thread (never its loop thread).

# A due task not claimed within POLL_INTERVAL: ``task=`` (a ``Task``) and ``due_at=`` (the
# due time it missed, UTC). Once per due time: claiming the task ends the episode.
task_overdue = Signal()

# A run marked lost (its scheduler process stopped heartbeating): ``run=``.
run_lost = Signal()

# ``FAILING_AFTER`` consecutive failed runs of a task (retries count; a success ends the
# episode): ``task=``, ``failures=`` (how many in a row) and ``paused=`` (True when the task's
# ``pause_after_failures`` paused it with this failure; then it is sent, once, at that failure).
task_failing = Signal()
