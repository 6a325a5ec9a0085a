"""What a Tasks worker does with a handed-off run: flip it to running, execute, record.

"The worker resolves the callable from its own settings by task name (never from the
database), flips the run queued -> running with a conditional update (no row changed: a
duplicate delivery, logged, nothing runs), runs it, records the outcome and returns normally:
retries follow retry_delay, never the backend's own retry."
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import signal
import socket
import threading
import time
import traceback
import types
from functools import cache
from typing import Any

from django.conf import settings
from django.core.signals import setting_changed
from django.db import DatabaseError, close_old_connections, connections
from django.db.models import Exists, OuterRef
from django.dispatch import receiver

from django_posixcron.conf import poll_interval_or_default
from django_posixcron.context import RunContext
from django_posixcron.db import (
    DatabaseNow,
    app_alias,
    away,
    database_now,
    drop_connection,
    has_clock,
    one_line,
    own_connection,
)
from django_posixcron.declarations import TaskDeclaration, collect, describe_problems
from django_posixcron.declarations.problems import Problem
from django_posixcron.executors.base import describe_exception, refuse_unrun
from django_posixcron.log import get_logger
from django_posixcron.models import Run, RunStatus, Task
from django_posixcron.scheduling import rules
from django_posixcron.scheduling.outcomes import (
    Notifier,
    Outcome,
    cap,
    send_robust,
    write_outcomes,
)
from django_posixcron.signals import run_started

logger = get_logger("django_posixcron.worker")

# How long a worker tries to record a run's outcome while the database is away (a restart,
# a failover): longer than the stale limit, after which the schedulers mark the run lost,
# since an outcome that reaches a lost run is still recorded on it.
RECORD_FOR = 120.0


@cache
def _declared() -> tuple[dict[str, TaskDeclaration], list[Problem]]:
    return collect()


@receiver(setting_changed)
def _refresh(*, setting: str, **kwargs: object) -> None:
    if setting in ("POSIXCRON", "TIME_ZONE", "USE_TZ"):
        _declared.cache_clear()


def worker_label() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"[:255]


def execute(run_id: int, database: str | None = None) -> None:
    """Execute the handed-off run `run_id` here, once; record its outcome.

    Returns normally whatever the task code did: the outcome and its retry are ours to
    record, never the backend's.
    """
    if not isinstance(run_id, int) or isinstance(run_id, bool):
        # Only the scheduler enqueues this task, with the run's primary key; anything else
        # was enqueued by hand, and must not be taken for another run (1.5 for run 1).
        raise TypeError(f"execute_run takes a run's primary key (an int), got {run_id!r}")
    if database is not None and database not in settings.DATABASES:
        # Queued by `runscheduler --database ALIAS`: this worker's settings must have it.
        raise ValueError(
            f"execute_run: run {run_id} was queued on the database {database!r}, which is not "
            f"in this worker's settings.DATABASES ({', '.join(map(repr, settings.DATABASES))})"
        )
    using = database or app_alias()
    run = Run.objects.using(using).select_related("task").filter(pk=run_id).first()
    if run is None:
        logger.warning(
            "run %s does not exist (deleted since it was queued); nothing to run",
            run_id,
            extra={"action": "handoff_run_missing", "run_id": run_id},
        )
        return
    # Before the flip: a worker's first job reads its settings (collect() imports every
    # callable), which takes a while, and a stop signal landing there (db_worker's second
    # SIGTERM) must leave the run queued for another worker, not `running` on a worker gone.
    declaration, refusal = _declaration_for(run)
    handlers = _signal_handlers()  # db_worker's handler puts the default back as it runs
    try:
        if not _flip(run, using):
            return
    except BaseException as exc:
        # Its update commits on its own, and a stop signal's handler runs as the driver
        # returns from it (or from the task's dating after it): the run may be running here.
        try:
            _stopped_while_starting(run, exc, handlers | _signal_handlers(), using)
        except Exception:
            logger.exception(
                "run %s of task %s: the worker was stopped as it took the run, and whether "
                "it is running here could not be recorded; if it is, it ends lost once its "
                "heartbeat is stale",
                run.pk,
                run.task.name,
                extra={"action": "db_error", "task": run.task.name, "run_id": run.pk},
            )
        raise
    if declaration is None:
        _record(run, RunStatus.FAILED, _finish(run, time.monotonic()), refusal, "", using)
        return
    _execute(run, declaration, using)


def _flip(run: Run, using: str) -> bool:
    """Take the run from queued to running here; False when it is not queued any more."""
    now = database_now(using)
    label = worker_label()
    flipped = (
        Run.objects.using(using)
        .filter(pk=run.pk, status=RunStatus.QUEUED)
        .update(status=RunStatus.RUNNING, started_at=now, heartbeat_at=now, worker=label)
    )
    if not flipped:
        current = Run.objects.using(using).filter(pk=run.pk).values_list("status", flat=True)
        status = next(iter(current), "deleted")
        logger.warning(
            "run %s of task %s is %s, not queued: a duplicate delivery, or a run already "
            "marked lost; nothing runs",
            run.pk,
            run.task.name,
            status,
            extra={"action": "duplicate_delivery", "task": run.task.name, "run_id": run.pk},
        )
        return False
    run.status, run.started_at, run.heartbeat_at, run.worker = RunStatus.RUNNING, now, now, label
    _date_last_run(run, now, using)
    return True


def _date_last_run(run: Run, now: dt.datetime, using: str) -> None:
    """The claim dated the task's last run when it queued it; the run starts now. Unless a
    later run of the task was claimed meanwhile, the task's last run starts now too, so that
    its "last run" reads as the run's own start and duration, not the queue's wait."""
    later = Run.objects.using(using).filter(task_id=OuterRef("pk"), pk__gt=run.pk)
    Task.objects.using(using).filter(pk=run.task_id, last_run_started_at__lt=now).exclude(
        Exists(later)
    ).update(last_run_started_at=now)


def _stopped_while_starting(
    run: Run, exc: BaseException, handlers: frozenset[types.CodeType], using: str
) -> None:
    """Record the run lost if a stop signal landed while it was taken running here.

    db_worker's second SIGTERM in the flip's statements, after the run's own update
    committed (it waits on the database, and the handler runs as it returns), left the run
    `running` on a worker that was gone, lost only once its heartbeat went stale. Whether the
    update went through is read back: running here, it ends lost now (its retry rule
    applies); still queued, it is left to another worker.
    """
    if not _stops_the_worker(exc, handlers):
        return
    drop_connection(using)  # the signal may have cut a statement off mid-way
    label = worker_label()
    started = (
        Run.objects.using(using)
        .filter(pk=run.pk, status=RunStatus.RUNNING, worker=label)
        .values_list("started_at", flat=True)
        .first()
    )
    if started is None:
        return
    run.status, run.started_at, run.worker = RunStatus.RUNNING, started, label
    error = cap(
        f"Lost: worker {label} was stopped while this run was starting "
        f"({describe_exception(exc)}); it did not run."
    )
    _record(run, RunStatus.LOST, database_now(using), error, "", using)


def _declaration_for(run: Run) -> tuple[TaskDeclaration | None, str]:
    """Return the worker's own declaration of the run's task, or why it cannot run it."""
    declarations, problems = _declared()
    name = run.task.name
    declaration = declarations.get(name)
    if declaration is None:
        mine = [p for p in problems if f"[{name!r}]" in p.path]
        if mine:
            return None, cap(
                f"Task {name} is declared with errors in this worker's settings "
                f"({worker_label()}):\n{describe_problems(mine)}"
            )
        return None, (
            f"Task {name} is not declared in this worker's settings ({worker_label()}): "
            "workers must run the same POSIXCRON settings as the schedulers."
        )
    if declaration.definition_hash != run.task.definition_hash:
        return None, (
            f"Task {name} is declared differently in this worker's settings "
            f"({worker_label()}: definition {declaration.definition_hash[:12]}) than in the "
            f"database ({run.task.definition_hash[:12]}): the worker runs other code than the "
            "schedulers (a deploy in progress?). Nothing ran; the task's retry rule applies."
        )
    return declaration, ""


def _execute(run: Run, declaration: TaskDeclaration, using: str) -> None:
    started = time.monotonic()
    beat = RunHeartbeat(using, run, declaration, started)
    status, error, tb = RunStatus.SUCCEEDED, "", ""
    stopping: BaseException | None = None
    handlers = _signal_handlers()
    func: Any = None
    # Everything from here on is in the try: the run is `running` on this worker, and a stop
    # signal landing before the call (in the log line, or while the heartbeat's thread
    # starts) must end it lost, not leave it running on a worker that is gone.
    try:
        logger.info(
            "run started task=%s trigger=%s scheduled_for=%s run=%s worker=%s",
            run.task.name,
            run.trigger,
            run.scheduled_for.isoformat(),
            run.pk,
            run.worker,
            extra={"action": "run_started", "task": run.task.name, "run_id": run.pk},
        )
        beat.start()
        send_robust(run_started, run)
        context = RunContext.of(run, declaration.timezone) if declaration.takes_context else None
        args = () if context is None else (context,)
        # What runs is always resolved from settings, never from the stored path.
        func = declaration.resolve()
        refuse_unrun(func(*args, **dict(declaration.kwargs or {})))
    except BaseException as exc:
        own = getattr(getattr(func, "__func__", func), "__code__", None)
        if _stops_the_worker(exc, handlers | _signal_handlers(), own):
            # The worker is being stopped: its signal handler raised this in the task's
            # thread. "A worker's shutdown is the backend's business, and a run cut off by it
            # ends lost and is retried": recorded lost (the retry rule applies, run_lost is
            # sent), then raised again, so the worker's own shutdown goes on.
            status, stopping = RunStatus.LOST, exc
            error = cap(
                f"Lost: worker {run.worker} was stopped while this run was running "
                f"({describe_exception(exc)}); it did not finish."
            )
        else:
            # The task's own exception, sys.exit() included: its failure, as on the
            # scheduler's executors.
            status, error = RunStatus.FAILED, cap(describe_exception(exc))
        tb = cap(traceback.format_exc(), keep_tail=True)
        # A stop signal's exception (or the task's own) can land in the middle of a query
        # on this thread's connection: MySQL then answers the outcome's write with "commands
        # out of sync", and the run stayed `running` on a worker gone. Written on a new one.
        drop_connection(using)
    finally:
        beat.stop()
    if beat.timed_out:
        logger.info(
            "run %s of task %s returned after it was recorded as timed out",
            run.pk,
            run.task.name,
            extra={"action": "run_returned_late", "task": run.task.name, "run_id": run.pk},
        )
    else:
        _record(run, status, _finish(run, started), error, tb, using)
    if stopping is not None:
        raise stopping


# The signals a worker is stopped by: db_worker's handler for them raises SystemExit (on the
# second signal, or the first while it waits between jobs) in the thread that runs the job,
# RQ's SimpleWorker's too (cold shutdown), and the work horse of RQ's HerokuWorker raises
# ShutDownImminentException from its SIGRTMIN handler (or SIGALRM, once it is armed).
_STOP_SIGNALS = tuple(
    getattr(signal, name)
    for name in ("SIGINT", "SIGTERM", "SIGQUIT", "SIGHUP", "SIGRTMIN")
    if hasattr(signal, name)
)


def _signal_handlers() -> frozenset[types.CodeType]:
    """Return the code of the Python handlers installed for the stop signals."""
    codes = set()
    for signum in _STOP_SIGNALS:
        handler = signal.getsignal(signum)
        code = getattr(getattr(handler, "__func__", handler), "__code__", None)
        if isinstance(code, types.CodeType):
            codes.add(code)
    return frozenset(codes)


def _stops_the_worker(
    exc: BaseException, handlers: frozenset[types.CodeType], own: Any = None
) -> bool:
    """Say whether `exc` stops the worker rather than ends the task.

    A stop signal's handler raises it in the middle of the task's code, and the handler's
    frame is then in the traceback; a task that calls sys.exit() itself (a script-like job)
    raises SystemExit without one, and that is the task's failure: the worker goes on with
    its next job. KeyboardInterrupt is what Python's own SIGINT handler raises, from no
    Python frame: always a stop. (SIGALRM is not a stop signal: RQ's job timeout raises from
    its handler, and a timeout is recorded as such.)

    `own` is the code of the task's callable. A callable that is also a stop signal's
    handler (a reload hook for SIGHUP, scheduled too) has its own frame right under the
    frame that called it: that one is the task, not a signal.
    """
    if isinstance(exc, KeyboardInterrupt):
        return True
    tb = exc.__traceback__
    callee = tb.tb_next if tb is not None else None
    while tb is not None:
        code = tb.tb_frame.f_code
        if code in handlers and not (tb is callee and code is own):
            return True
        tb = tb.tb_next
    return False


def _finish(run: Run, started_monotonic: float) -> dt.datetime:
    assert run.started_at is not None
    return run.started_at + dt.timedelta(seconds=time.monotonic() - started_monotonic)


def _record(
    run: Run, status: str, finished_at: dt.datetime, error: str, tb: str, using: str
) -> bool:
    """Write the outcome with the scheduler's own rules (retry, streak, signals).

    A database restarted or failed over while the run executed left this thread's
    connection broken: the write is tried again on a new connection, with the scheduler's
    back-off, for up to RECORD_FOR. Dropped, the outcome of a run that returned made it end
    lost and run again. (Written after the schedulers marked it lost, it is still recorded.)
    """
    # An unstarted Notifier sends inline: the worker's receivers see run_finished before
    # the task returns to the backend.
    outcome = Outcome(run, status, finished_at, error, tb)
    give_up_at, failures = time.monotonic() + RECORD_FOR, 0
    while True:
        try:
            return bool(write_outcomes([outcome], using, Notifier()))
        except DatabaseError as exc:
            if not away(exc):
                raise
            connection = connections[using]
            failures += 1
            delay = rules.back_off(failures)
            if connection.in_atomic_block or time.monotonic() + delay > give_up_at:
                raise
            logger.error(
                "could not record the outcome of run %s of task %s yet (%s); trying again "
                "in %.1f s",
                run.pk,
                run.task.name,
                one_line(exc),
                delay,
                extra={"action": "db_error", "task": run.task.name, "run_id": run.pk},
            )
            with contextlib.suppress(Exception):
                connection.close()
            time.sleep(delay)


class RunHeartbeat:
    """Beat for one handed-off run on a thread of its own; record its timeout.

    "A worker heartbeats the run while it executes": every HEARTBEAT_EVERY seconds (or the
    poll interval, if shorter), by the database clock, as schedulers beat for themselves.
    "timeout is recorded by the worker": the call cannot be stopped (it runs in the worker's
    own thread), so past its timeout the run is recorded timed_out and its retry set up.
    """

    def __init__(self, using: str, run: Run, declaration: TaskDeclaration, started: float) -> None:
        self.using = using
        self.run = run
        self.every = min(poll_interval_or_default(), rules.HEARTBEAT_EVERY)
        self.deadline = (
            started + declaration.timeout.total_seconds() if declaration.timeout else None
        )
        self.started = started
        self.timed_out = False
        self._stop = threading.Event()
        self._thread = threading.Thread(
            target=self._serve, name=f"posixcron-run-{run.pk}", daemon=True
        )

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.ident is not None:  # started (a stop signal may come first)
            self._thread.join()

    def _wait(self) -> float:
        if self.deadline is None:
            return self.every
        return max(0.0, min(self.every, self.deadline - time.monotonic()))

    def _serve(self) -> None:
        # Beats on a connection of its own, not one from a pool the worker's runs may hold
        # all of: a run whose beats wait is presumed lost and run again.
        own_connection(self.using)
        try:
            while not self._stop.wait(self._wait()):
                if self.deadline is not None and time.monotonic() >= self.deadline:
                    self._time_out()
                    return
                self._beat()
        finally:
            connections.close_all()

    def _beat(self) -> None:
        stamp = DatabaseNow() if has_clock(self.using) else database_now(self.using)
        try:
            Run.objects.using(self.using).filter(pk=self.run.pk).update(heartbeat_at=stamp)
        except DatabaseError as exc:
            logger.error(
                "heartbeat of run %s failed, retrying: %s",
                self.run.pk,
                one_line(exc),
                extra={
                    "action": "heartbeat_error",
                    "task": self.run.task.name,
                    "run_id": self.run.pk,
                },
            )
            close_old_connections()
            connections[self.using].close()

    def _time_out(self) -> None:
        assert self.deadline is not None
        limit = dt.timedelta(seconds=self.deadline - self.started)
        error = (
            f"Timed out after {limit}. The worker cannot stop Python code: the call may still "
            "be running in the background."
        )
        try:
            finished = _finish(self.run, self.started)
            self.timed_out = _record(self.run, RunStatus.TIMED_OUT, finished, error, "", self.using)
        except DatabaseError:
            logger.exception(
                "could not record the timeout of run %s; its outcome will be recorded when it "
                "returns",
                self.run.pk,
                extra={"action": "db_error", "task": self.run.task.name, "run_id": self.run.pk},
            )
