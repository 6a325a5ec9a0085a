"""The demo tasks declared in example_project/settings.py."""

from __future__ import annotations

import datetime as dt
import logging
import os
import socket

from django.utils import timezone

from example_project.demo_jobs.models import Heartbeat

logger = logging.getLogger(__name__)


def hello(greeting: str = "Hello") -> None:
    """Log a greeting."""
    logger.info("%s from the scheduler", greeting, extra={"action": "demo_hello"})


def on_a_worker() -> None:
    """Log from the Django Tasks worker that ran it (make demo DEMO_ARGS="--worker")."""
    logger.info(
        "Hello from the worker %s:%d",
        socket.gethostname(),
        os.getpid(),
        extra={"action": "demo_worker"},
    )


def flaky() -> None:
    """Fail during the first 15 seconds of odd minutes, so the 20-second retry succeeds."""
    now = timezone.now()
    if now.minute % 2 == 1 and now.second < 15:
        raise RuntimeError(
            f"It is {now:%H:%M:%S}, an odd minute: failing on purpose (the retry will work)"
        )
    logger.info("flaky succeeded at %s", f"{now:%H:%M:%S}", extra={"action": "demo_flaky_ok"})


def heartbeat() -> None:
    """Record that this scheduler process is alive."""
    Heartbeat.objects.create(host=socket.gethostname(), pid=os.getpid())


def prune_heartbeats(keep_minutes: int = 60) -> None:
    """Delete heartbeats older than keep_minutes."""
    cutoff = timezone.now() - dt.timedelta(minutes=keep_minutes)
    deleted, _ = Heartbeat.objects.filter(created_at__lt=cutoff).delete()
    logger.info("pruned %d heartbeat(s)", deleted, extra={"action": "demo_pruned"})


def report() -> None:
    """Log how many heartbeats the last 24 hours saw."""
    since = timezone.now() - dt.timedelta(days=1)
    count = Heartbeat.objects.filter(created_at__gte=since).count()
    logger.info("%d heartbeat(s) in the last 24 hours", count, extra={"action": "demo_report"})
