"""The Prometheus series, read from the database so that every process reports one truth.

"Series, label task = task name" (DESIGN section 7); base units, Unix seconds. Nothing here
is kept in a process's memory: any number of web processes serving the view, and any number
of schedulers, give the same numbers, and a restart loses nothing.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

from django.db.models import (
    BooleanField,
    Count,
    DurationField,
    ExpressionWrapper,
    F,
    OuterRef,
)
from django.db.models.functions import Coalesce

from django_posixcron.conf import poll_interval_or_default
from django_posixcron.db import ByTaskIndex, app_alias, database_now
from django_posixcron.models import (
    Run,
    RunCount,
    RunStatus,
    SchedulerProcess,
    Task,
    overdue_before,
)
from django_posixcron.scheduling.rules import stale_after

if TYPE_CHECKING:
    from prometheus_client.metrics_core import Metric


def _latest(runs: Any, field: str) -> ByTaskIndex:
    """Return `field` of the task's latest run among `runs`, "latest" by scheduled time.

    By scheduled_for, not by finish or start: the (task, scheduled_for) index then finds it
    at once however long the history is, where sorting a task's runs by another column
    would read all of them at every scrape. By scheduled_for alone: with the primary key as
    a tie-break (runs of two triggers at one instant) MariaDB sorted every task's history at
    every scrape, the index's hidden key ascending where the order asked it descending.
    """
    return ByTaskIndex(runs.order_by("-scheduled_for").values(field)[:1])


def task_rows(using: str, overdue_at: dt.datetime) -> list[dict[str, Any]]:
    """Return each declared task's state and its latest runs' figures, in one query;
    `overdue` says whether it should have fired before `overdue_at`."""
    lag = ExpressionWrapper(F("started_at") - F("scheduled_for"), output_field=DurationField())
    ran = Run.objects.filter(task=OuterRef("pk")).exclude(status=RunStatus.SKIPPED)
    query: Any = (
        Task.objects.using(using)
        .filter(declared=True)
        .annotate(
            # From the history while it holds a run of the task; from the task once pruning
            # or a delete took them all (the outcomes keep the latest finished run's there).
            latest_duration=Coalesce(
                _latest(ran.filter(duration__isnull=False), "duration"), F("last_duration")
            ),
            fire_lag=Coalesce(
                _latest(ran.filter(started_at__isnull=False).annotate(lag=lag), "lag"),
                F("last_fire_lag"),
            ),
            overdue=ExpressionWrapper(overdue_before(overdue_at), output_field=BooleanField()),
        )
        .order_by("name")
        .values(
            "name",
            "paused",
            "due_at",
            "overdue",
            "latest_duration",
            "fire_lag",
            "last_success_at",
        )
    )
    return list(query)


def _seconds(value: dt.timedelta | None) -> float | None:
    return None if value is None else value.total_seconds()


def _timestamp(value: dt.datetime | None) -> float | None:
    return None if value is None else value.timestamp()


class DatabaseCollector:
    """A prometheus_client collector of the scheduler's series, read at each scrape."""

    def __init__(self, using: str | None = None) -> None:
        self.using = using

    def describe(self) -> list[Metric]:
        # Describing would read the database at registration: say nothing instead.
        return []

    def collect(self) -> Iterator[Metric]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        using = app_alias(self.using)
        now = database_now(using)
        poll_interval = poll_interval_or_default()
        slack = dt.timedelta(seconds=poll_interval)

        runs = CounterMetricFamily(
            "posixcron_runs",
            "Runs that reached a final status, by task, status and trigger; never goes down.",
            labels=["task", "status", "trigger"],
        )
        for count in RunCount.objects.using(using).order_by("task_name", "status", "trigger"):
            runs.add_metric([count.task_name, count.status, count.trigger], count.count)
        yield runs

        gauges = {
            # OpenMetrics states the unit of a series whose name ends in it (# UNIT).
            name: GaugeMetricFamily(
                f"posixcron_{name}",
                text,
                labels=["task"],
                unit="seconds" if name.endswith("_seconds") else "",
            )
            for name, text in (
                ("last_run_duration_seconds", "Duration of the task's latest finished run."),
                ("fire_lag_seconds", "Start of the task's latest run minus its scheduled time."),
                ("last_success_timestamp_seconds", "Finish of the task's latest succeeded run."),
                ("next_run_timestamp_seconds", "When the task is next due; absent while paused."),
                ("task_paused", "1 when the task is paused."),
                ("task_overdue", "1 when the task is due for more than POLL_INTERVAL."),
                ("runs_queued", "Runs of the task waiting for a worker."),
            )
        }
        queued = dict(
            Run.objects.using(using)
            .queued()
            .values("task__name")
            .annotate(n=Count("pk"))
            .values_list("task__name", "n")
        )
        for row in task_rows(using, now - slack):
            name = row["name"]
            values = {
                "last_run_duration_seconds": _seconds(row["latest_duration"]),
                "fire_lag_seconds": _seconds(row["fire_lag"]),
                "last_success_timestamp_seconds": _timestamp(row["last_success_at"]),
                "next_run_timestamp_seconds": None if row["paused"] else _timestamp(row["due_at"]),
                "task_paused": float(row["paused"]),
                "task_overdue": float(bool(row["overdue"])),
                "runs_queued": float(queued.get(name, 0)),
            }
            for series, value in values.items():
                if value is not None:
                    gauges[series].add_metric([name], value)
        yield from gauges.values()

        alive = SchedulerProcess.objects.using(using).live(now, stale_after(poll_interval)).count()
        yield GaugeMetricFamily(
            "posixcron_schedulers_alive",
            "Scheduler processes whose heartbeat is recent (the schedulerstatus rule).",
            value=alive,
        )
