"""The public entry point: `Scheduler` and the stale rule; the parts live in `scheduling/`."""

from django_posixcron.scheduling.loop import Scheduler, TickResult
from django_posixcron.scheduling.rules import stale_after

__all__ = ["Scheduler", "TickResult", "stale_after"]
