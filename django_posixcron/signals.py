"""Signals sent by the scheduler around each run, for integrations (metrics, alerting)."""

from django.dispatch import Signal

# Sent from the worker thread just before the task's callable is called, with ``run=`` (a
# ``Run`` whose status is ``running``). Receivers run in that thread; an exception they raise
# is logged and ignored, so a broken receiver never stops a run.
run_started = Signal()

# Sent once a run has its final status (succeeded, failed, skipped, lost, interrupted,
# timed_out), with ``run=`` carrying that status, its duration and error.
run_finished = Signal()
