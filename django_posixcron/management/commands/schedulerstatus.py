"""Report scheduler health for people and liveness probes: exit 0 healthy, 1 otherwise."""

from __future__ import annotations

import dataclasses
import datetime as dt
import json
import os
import socket
import sys
from typing import Any

from django.conf import settings
from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError

from django_posixcron.conf import poll_interval_or_default
from django_posixcron.db import app_alias, database_now, outage, with_connection_timeouts
from django_posixcron.deployments import Pending, live_peers, pending_changes
from django_posixcron.management import common
from django_posixcron.management.common import (
    add_database_option,
    command_alias,
    max_lag,
    read_failure,
)
from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task, earliest
from django_posixcron.scheduling.rules import retry_replaced, stale_after

UTC = dt.UTC
# Runs of a kind listed by name; the rest are counted.
LISTED = 20


@dataclasses.dataclass
class Status:
    """What the database says about the schedulers and the tasks at one instant."""

    now: dt.datetime
    live: list[SchedulerProcess]
    overdue: list[Task]
    failing: list[Task]
    paused: int
    active: int
    problems: list[str]
    # Definition changes live processes disagree on (a rollout in progress); not a problem.
    pending: list[Pending] = dataclasses.field(default_factory=list)
    # Handed-off runs (DESIGN section 6): how many wait for a worker, and those a live
    # scheduler would mark lost: queued past their start_deadline, or whose worker went silent.
    queued: int = 0
    queued_too_long: list[Run] = dataclasses.field(default_factory=list)
    silent_workers: list[Run] = dataclasses.field(default_factory=list)

    @property
    def healthy(self) -> bool:
        return not self.problems


def collect(
    now: dt.datetime,
    *,
    max_lag: dt.timedelta,
    stale: dt.timedelta,
    this_host: str | None = None,
    ignore_failing: bool = False,
    ignore_overdue: bool = False,
    using: str | None = None,
) -> Status:
    """Return the status at `now`; `problems` lists what makes it unhealthy."""
    using = app_alias(using)
    tasks = Task.objects.using(using)
    live_qs = SchedulerProcess.objects.using(using).live(now, stale).order_by("hostname", "pid")
    live = list(live_qs)
    overdue = list(tasks.overdue(now, max_lag).order_by("due_at", "name"))
    failing = list(tasks.failing().order_by("name"))
    problems = []
    if this_host is not None:
        if not any(p.hostname == this_host for p in live):
            problems.append(f"no live scheduler on host {this_host}")
    elif not live:
        problems.append("no live scheduler")
    if overdue and not ignore_overdue:
        problems.append(f"{len(overdue)} overdue task(s): {_names(overdue)}")
    if failing and not ignore_failing:
        problems.append(f"{len(failing)} failing task(s)")
    runs = Run.objects.using(using).select_related("task").order_by("pk")
    queued_too_long = list(runs.past_start_deadline(now)[: LISTED + 1])
    silent = list(runs.silent_workers(now - stale)[: LISTED + 1])
    if queued_too_long:
        problems.append(f"{_count(queued_too_long)} run(s) queued past their start_deadline")
    if silent:
        problems.append(f"{_count(silent)} run(s) whose worker went silent")
    pending: list[Pending] = []
    if len({p.declaration_set for p in live}) > 1:
        # Only when live processes declare different sets: the common case reads no task.
        rows = tasks.values_list("name", "definition_hash", "declared")
        pending = pending_changes(rows, live_peers(using, now, stale))
    return Status(
        now=now,
        live=live,
        pending=pending,
        overdue=overdue,
        failing=failing,
        paused=tasks.paused().count(),
        active=tasks.active().count(),
        problems=problems,
        queued=Run.objects.using(using).queued().count(),
        queued_too_long=queued_too_long[:LISTED],
        silent_workers=silent[:LISTED],
    )


# A problem line names this many tasks, the most overdue first, and counts the rest.
NAMED = 5


def _names(tasks: list[Task]) -> str:
    names = ", ".join(task.name for task in tasks[:NAMED])
    return f"{names} and {len(tasks) - NAMED} more" if len(tasks) > NAMED else names


def _count(listed: list[Run]) -> str:
    return f"more than {LISTED}" if len(listed) > LISTED else str(len(listed))


def _ago(now: dt.datetime, then: dt.datetime | None) -> str:
    if then is None:
        return "never"
    return f"{(now - then).total_seconds():.1f} s ago"


def unavailable(message: str) -> CommandError:
    """The database could not be reached (not refused, not missing its migrations).

    A CommandError itself, not a subclass: Django prints the class's name before the
    message ("CommandError: database unavailable: ..."), as for the command's other errors.
    """
    error = CommandError(message, returncode=1)
    error.unavailable = True  # type: ignore[attr-defined]
    return error


class Command(common.Command):
    help = (
        "Show live scheduler processes, overdue and failing tasks, and runs handed to workers. "
        "Exit 0 when healthy, 1 when no scheduler is live, a task is overdue or failing, or a "
        "handed-off run is queued past its start deadline or its worker went silent."
    )
    # A probe must answer about the database, even while a deploy has broken settings.
    requires_system_checks: list[str] = []

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--max-lag",
            type=max_lag,
            default=None,
            metavar="S",
            help="A task due more than S seconds ago is overdue (default: the poll interval).",
        )
        parser.add_argument(
            "--ignore-failing",
            action="store_true",
            help="List failing tasks but stay healthy (restarting will not fix a task).",
        )
        parser.add_argument(
            "--ignore-overdue",
            action="store_true",
            help="List overdue tasks but stay healthy.",
        )
        parser.add_argument(
            "--ignore-unavailable",
            action="store_true",
            help="Say so but stay healthy when the database cannot be reached: restarting "
            "the scheduler will not bring it back (a liveness probe), and a scheduler keeps "
            "the outcomes of runs that end meanwhile until it can write them.",
        )
        parser.add_argument(
            "--this-host",
            action="store_true",
            help="Require a live scheduler on this host (its hostname), not anywhere: "
            "what a per-container liveness probe wants.",
        )
        parser.add_argument(
            "--json", action="store_true", help="Print one JSON object instead of text."
        )
        add_database_option(parser)

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            status = self._status(options)
        except CommandError as error:
            ignored = getattr(error, "unavailable", False) and options["ignore_unavailable"]
            if options["json"]:
                # Still one JSON object on stdout, for whatever parses it: an unknown
                # --database, a database that does not answer, a missed migration.
                answer = {"healthy": False, "problems": [str(error)]}
                self.stdout.write(json.dumps(answer, indent=2))
            elif ignored:
                self.stdout.write(f"{error} (ignored: --ignore-unavailable)")
            if ignored:
                return
            raise
        try:
            if options["json"]:
                self.stdout.write(json.dumps(self._as_dict(status), indent=2))
            else:
                self._print(status)
            self.stdout.flush()
        except BrokenPipeError:
            # Piped into a reader that stopped early (`| head -1`, `| grep -q live`): what
            # it did not read is not a problem of the schedulers. The exit status still says
            # theirs; the rest of the output goes nowhere, and so does Python's own flush.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        if not status.healthy:
            raise CommandError("; ".join(status.problems), returncode=1)

    def _status(self, options: dict[str, Any]) -> Status:
        if not getattr(settings, "USE_TZ", False):
            # It skips the system checks, which say the same (posixcron.E025): without it
            # every instant below would be read as naive.
            raise CommandError(
                "django-posixcron requires USE_TZ = True (posixcron.E025): the stored times "
                "are UTC instants.",
                returncode=1,
            )
        poll_interval = poll_interval_or_default()
        max_lag = options["max_lag"]
        using = command_alias(options["database"])
        # A probe must answer: a database that stops answering without closing the
        # connection held it for ever (libpq's connect_timeout is infinite by default).
        with_connection_timeouts(using)
        try:
            return collect(
                database_now(using),
                max_lag=dt.timedelta(seconds=poll_interval if max_lag is None else max_lag),
                stale=stale_after(poll_interval),
                this_host=socket.gethostname() if options["this_host"] else None,
                ignore_failing=options["ignore_failing"],
                ignore_overdue=options["ignore_overdue"],
                using=using,
            )
        except DatabaseError as exc:
            # A probe wants a one-line answer, not a traceback.
            message = read_failure(using, exc, "the status query")
            if outage(exc) and message.startswith("database unavailable"):
                raise unavailable(message) from exc
            raise CommandError(message, returncode=1) from exc

    def _print(self, status: Status) -> None:
        write, now = self.stdout.write, status.now
        write(f"Schedulers: {len(status.live)} live")
        for process in status.live:
            write(
                f"  {process.label}  version {process.version or '?'}  "
                f"started {process.started_at.isoformat()}  "
                f"heartbeat {_ago(now, process.last_heartbeat_at)}"
            )
        write(
            f"Tasks: {status.active} active, {status.paused} paused, "
            f"{len(status.overdue)} overdue, {len(status.failing)} failing"
        )
        for task in status.overdue:
            assert task.due_at is not None
            lag = (now - task.due_at).total_seconds()
            write(f"  overdue  {task.name}  due {task.due_at.isoformat()} ({lag:.1f} s late)")
        for task in status.failing:
            label = RunStatus(task.last_run_status).label if task.last_run_status else "?"
            if task.paused:
                # A paused task's retry is on hold: the instant would read as missed.
                retry = f", paused: {task.paused_reason}" if task.paused_reason else ", paused"
            elif task.is_running and not task.retry_at:
                # Its next run (the retry, or the occurrence that consumed it) is under way.
                assert task.last_run_started_at is not None
                retry = f", running again since {task.last_run_started_at.isoformat()}"
            else:
                retry = f", retry at {task.retry_at.isoformat()}" if task.retry_at else ""
                if task.retry_at and retry_replaced(
                    task.retry_at, task.next_run_at, task.run_requested_at
                ):
                    # The next cron occurrence (or a requested run) comes first and consumes
                    # the retry.
                    first = earliest(task.next_run_at, task.run_requested_at)
                    assert first is not None
                    retry = f", next run at {first.isoformat()} (before the retry)"
            write(
                f"  failing  {task.name}  last run {label} "
                f"{_ago(now, task.last_run_finished_at)}{retry}"
            )
        if status.queued or status.queued_too_long or status.silent_workers:
            write(f"Runs handed to workers: {status.queued} queued")
        for run in status.queued_too_long:
            assert run.start_deadline_at is not None
            write(
                f"  queued too long  {run.task.name}  run {run.pk} on backend {run.backend!r}, "
                f"start deadline {run.start_deadline_at.isoformat()}"
            )
        for run in status.silent_workers:
            write(
                f"  worker silent  {run.task.name}  run {run.pk} on {run.worker or '?'} "
                f"(backend {run.backend!r}), heartbeat {_ago(now, run.heartbeat_at)}"
            )
        if status.pending:
            write(f"Deferred definition changes: {len(status.pending)} (a rollout in progress)")
            for change in status.pending:
                write(f"  deferred  {change.describe()}")
        if status.healthy:
            write(self.style.SUCCESS("OK"))

    @staticmethod
    def _as_dict(status: Status) -> dict[str, Any]:
        def iso(value: dt.datetime | None) -> str | None:
            return None if value is None else value.isoformat()

        return {
            "healthy": status.healthy,
            "problems": status.problems,
            "now": iso(status.now),
            "schedulers": [
                {
                    "host": p.hostname,
                    "pid": p.pid,
                    "version": p.version,
                    "started_at": iso(p.started_at),
                    "last_heartbeat_at": iso(p.last_heartbeat_at),
                }
                for p in status.live
            ],
            "active": status.active,
            "paused": status.paused,
            "overdue": [{"name": t.name, "due_at": iso(t.due_at)} for t in status.overdue],
            "failing": [
                {
                    "name": t.name,
                    "last_run_status": t.last_run_status,
                    "last_run_finished_at": iso(t.last_run_finished_at),
                    "retry_at": iso(t.retry_at),
                    "paused": t.paused,
                    "paused_reason": t.paused_reason,
                }
                for t in status.failing
            ],
            "queued": status.queued,
            "queued_too_long": [
                {
                    "run": r.pk,
                    "task": r.task.name,
                    "backend": r.backend,
                    "result_id": r.result_id,
                    "start_deadline_at": iso(r.start_deadline_at),
                }
                for r in status.queued_too_long
            ],
            "silent_workers": [
                {
                    "run": r.pk,
                    "task": r.task.name,
                    "backend": r.backend,
                    "worker": r.worker,
                    "heartbeat_at": iso(r.heartbeat_at),
                }
                for r in status.silent_workers
            ],
            "deferred": [
                {
                    "name": change.name,
                    "stored_hash": change.stored,
                    "held_by": list(change.holders),
                    "waiting": [
                        {"hash": version, "declared_by": list(labels)}
                        for version, labels in change.waiting.items()
                    ],
                }
                for change in status.pending
            ],
        }
