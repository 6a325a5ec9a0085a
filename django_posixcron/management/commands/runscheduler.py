"""Run the scheduler: check, reconcile settings into the database, then loop."""

from __future__ import annotations

import contextlib
import os
import socket
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from django.core.management.base import CommandError, CommandParser
from django.db import DatabaseError, connections

from django_posixcron.checks import judging_alias
from django_posixcron.conf import get_settings
from django_posixcron.db import (
    bound_idle_transactions,
    conflict,
    database_now,
    lock_not_granted,
    one_line,
    own_connection,
    with_connection_timeouts,
)
from django_posixcron.executors.base import exit_without_waiting
from django_posixcron.executors.thread import threads_in_task_code
from django_posixcron.log import get_logger
from django_posixcron.management import common
from django_posixcron.management.common import (
    add_database_option,
    check_database_support,
    check_migrated,
    command_alias,
    non_negative_float,
    poll_interval,
    positive_int,
    refused,
)

if TYPE_CHECKING:
    from django_posixcron.declarations import TaskDeclaration

# How long `--once` waits at start-up for a lock another process holds (SQLite's write lock
# during another's long write, a row another transaction holds) before it gives up: well
# inside the minute, so the invocation still fires the current minute's occurrences.
ONCE_LOCK_PATIENCE = 30.0

# The start-up summary lists this many tasks; schedulerstatus lists them all.
SUMMARY_TASKS = 100


def checked_declarations() -> dict[str, TaskDeclaration]:
    """Return the declared tasks; refuse settings with any problem, even a silenced one."""
    from django_posixcron.declarations import collect, describe_problems
    from django_posixcron.handoff.checks import handoff_messages

    declarations, problems = collect()
    # The hand-off's errors too: a backend that never runs what it is given (Dummy), or one
    # that cannot be loaded, would leave every handed-off run lost or failed, forever.
    handoff = [m for m in handoff_messages(declarations) if m.is_serious()]
    if problems or handoff:
        # Silenced errors get here (self.check() raised for the others). A task with an error
        # cannot be scheduled, and reconciling without it would retire it without a word: such
        # errors are not for silencing.
        ids = ", ".join(sorted({p.id for p in problems} | {str(m.id) for m in handoff}))
        described = [describe_problems(problems)] if problems else []
        described += [f"- ({m.id}) {m.msg} HINT: {m.hint}" for m in handoff]
        raise CommandError(
            f"settings.POSIXCRON has {len(problems) + len(handoff)} problem(s) ({ids}). "
            "posixcron.E0NN errors cannot be silenced: SILENCED_SYSTEM_CHECKS hides them from "
            "`manage.py check`, but a task with an error cannot be scheduled. Fix them:\n"
            + "\n".join(described)
        )
    return declarations


def refuse_without_the_setting() -> None:
    """Refuse to start when settings.POSIXCRON is missing altogether (posixcron.W004).

    No setting declares no task, and reconciling would retire every task the database holds
    (their pending retries with them) because of a misspelt setting or the wrong settings
    module: a mistake far likelier than a project that installs the app to schedule nothing.
    """
    from django.conf import settings

    from django_posixcron.checks import DECLARE, W_NOT_SET

    if not hasattr(settings, "POSIXCRON"):
        raise CommandError(
            f"settings.POSIXCRON is not set ({W_NOT_SET}): runscheduler refuses to start, "
            f"as reconciling would retire every task in the database. {DECLARE}"
        )


def check_frequency(declarations: dict[str, TaskDeclaration], poll_interval: float) -> None:
    """Apply the frequency guard (posixcron.E024) to --poll-interval as to the setting."""
    from django_posixcron.declarations import too_frequent

    too_often = sorted(
        f"{name} ({declaration.schedule})"
        for name, declaration in declarations.items()
        if too_frequent(declaration.schedule, poll_interval) is not None
    )
    if too_often:
        raise CommandError(
            f"--poll-interval {poll_interval:g} is longer than the shortest interval between "
            f"occurrences of {', '.join(too_often)}. The frequency guard applies to it as to "
            "POSIXCRON['POLL_INTERVAL'] (posixcron.E024): use a poll interval of at most the "
            "shortest interval of every task, or schedule those tasks less often."
        )


def refuse_inside_a_transaction(using: str) -> None:
    """Refuse to run tasks from inside a transaction of the caller's (a TestCase's).

    Task code runs on the executor's threads (or child processes), each on a connection of
    its own, which can neither see nor join the caller's transaction: on SQLite its writes
    failed with "database table is locked" (the run recorded failed, the command exiting 0);
    on PostgreSQL and MariaDB they committed outside the test and leaked into the next
    tests, the rows the test had made were invisible to it, and a task touching a row the
    claim had locked waited for the test, which waited for the task.
    """
    if connections[using].in_atomic_block:
        from django_posixcron.scheduling.loop import inside_a_transaction

        raise CommandError(inside_a_transaction("runscheduler was called", using))


class Command(common.Command):
    help = (
        "Run the scheduled tasks declared in settings.POSIXCRON: check them, reconcile them "
        "into the database, then fire each occurrence exactly once until stopped."
    )
    # The checks run in handle(), so that call_command() refuses bad settings too.
    requires_system_checks: list[str] = []
    # --verbosity: 0 prints neither the start-up summary nor --once's "Ran" line.
    verbosity = 1

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--poll-interval",
            type=poll_interval,
            default=None,
            metavar="S",
            help="Seconds between database polls (default: POSIXCRON['POLL_INTERVAL']).",
        )
        parser.add_argument(
            "--concurrency",
            type=positive_int,
            default=None,
            metavar="N",
            help="Runs executing at once in this process (default: POSIXCRON['CONCURRENCY']).",
        )
        parser.add_argument(
            "--grace",
            type=non_negative_float,
            default=25.0,
            metavar="S",
            help="On SIGTERM/SIGINT, seconds to wait for running tasks (default: 25, inside "
            "Kubernetes' 30 s; give the supervisor's stop timeout this plus 15 s).",
        )
        parser.add_argument(
            "--executor",
            choices=("thread", "process"),
            default="thread",
            help=(
                "Where task code runs: threads of this process (default), or a child process "
                "per run, which a timeout or the end of the grace period can really stop."
            ),
        )
        add_database_option(parser)
        parser.add_argument(
            "--once",
            action="store_true",
            help="Tick once, wait for the runs it started, record them and exit.",
        )
        parser.add_argument(
            "--check",
            action="store_true",
            help="Print what reconciling would change and exit 1 if anything would, 0 if not.",
        )

    def run_from_argv(self, argv: list[str]) -> None:
        """Run the command from the command line; then end the process even if task code
        left threads running.

        The interpreter's own exit waits for every non-daemon thread: one that a task started
        in the thread executor and never ended kept a stopped scheduler alive after "scheduler
        stopped" (until a second signal killed it) and ``--once`` from exiting at all (a
        crontab's invocations piled up). Called from code (``call_command``), nothing changes:
        the caller's process goes on.

        Its own process, it also writes what task code prints a line at a time (a pipe to a
        log collector otherwise holds it until a buffer fills), and says so when it is PID 1.
        """
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(AttributeError, ValueError):
                stream.reconfigure(line_buffering=True)  # type: ignore[union-attr]
        if os.getpid() == 1:
            get_logger("django_posixcron.scheduler").warning(
                "running as PID 1 (a container without an init): orphaned processes that "
                "task code leaves are never reaped, and a signal that comes before the "
                "scheduler handles it is ignored; run it under an init (docker run --init, "
                "tini, dumb-init, or Kubernetes' shareProcessNamespace)",
                extra={"action": "pid_1"},
            )
        try:
            super().run_from_argv(argv)
        except SystemExit as exc:
            if not (left := _threads_left_running()):
                raise
            code = exc.code if isinstance(exc.code, int) else 0 if exc.code is None else 1
        except BaseException as exc:  # a crash, or a Ctrl-C before the handlers
            if not (left := _threads_left_running()):
                raise
            traceback.print_exc()
            code = 130 if isinstance(exc, KeyboardInterrupt) else 1
        else:
            if not (left := _threads_left_running()):
                return
            code = 0
        get_logger("django_posixcron.scheduler").warning(
            "exiting without waiting for %d thread(s) task code left running: %s",
            len(left),
            ", ".join(thread.name for thread in left),
            extra={"action": "threads_left_running"},
        )
        exit_without_waiting(code)

    def handle(self, *args: Any, **options: Any) -> None:
        from django_posixcron.declarations.top_level import collected_once

        self.verbosity = options["verbosity"]
        # Refuse to start on any error (a SystemCheckError exits non-zero). Without the
        # database: Django 6.1 otherwise asks every connection for its features here (a query
        # on SQLite and MySQL), and a database that is down must be waited for below, not end
        # the process with a traceback. What the scheduler needs of the database is checked
        # by check_database_support() once it answers.
        # The database settings judged are those of the alias this process runs on: a
        # --database that names another than the routers' would otherwise be warned about
        # the routers' one.
        with collected_once(), judging_alias(options["database"] or None):
            self.check(display_num_errors=False, databases=[])
            refuse_without_the_setting()
            declarations = checked_declarations()
        if options["poll_interval"] is not None:
            check_frequency(declarations, options["poll_interval"])

        using = command_alias(options["database"])
        if not options["check"]:
            refuse_inside_a_transaction(using)
        # Before the first connection: a database that stops answering is then an error,
        # and a session the server keeps after this process was cut off holds no lock long.
        with_connection_timeouts(using)
        # The loop's queries on a connection of its own, outside a connection pool that task
        # code may hold all of (the heartbeat's and the shutdown's threads take theirs).
        give_back = own_connection(using)
        unbind = bound_idle_transactions(using)
        try:
            if options["check"]:
                self._check(declarations, using)
                return
            scheduler = self._scheduler(options, declarations, using)
            # The scheduler keeps its own mapping: this one, 4 MiB at 100,000 tasks, would
            # stay for the life of the process with this frame.
            del declarations
            self._serve(options, scheduler, using)
        finally:
            unbind()
            give_back()

    def _check(self, declarations: Any, using: str) -> None:
        """--check: print what reconciling would change; exit 1 if anything would."""
        from django_posixcron.reconcile import reconcile

        try:
            check_database_support(using)
            check_migrated(using)
            # The cursors it would give are counted from the clock the scheduler judges
            # due-ness by: a host whose clock runs ahead would print tomorrow for today.
            now = database_now(using)
            plan = reconcile(check_only=True, declarations=declarations, using=using, now=now)
        except DatabaseError as exc:
            # Away (try again later), or refusing what was asked: a role without the
            # privileges, a file that is not an SQLite database. Either way one line, not a
            # traceback in the deploy pipeline.
            raise CommandError(refused("is unavailable", exc, "the check", using)) from None
        if plan.is_empty:
            self.stdout.write("The database matches settings: nothing to reconcile.")
            return
        for line in plan.lines(pending=True):
            self.stdout.write(line)
        raise CommandError("The database differs from settings (see above).", returncode=1)

    def _scheduler(self, options: dict[str, Any], declarations: Any, using: str) -> Any:
        from django_posixcron.executors import ProcessExecutor
        from django_posixcron.scheduler import Scheduler

        concurrency = options["concurrency"] or get_settings().concurrency
        executor = ProcessExecutor(concurrency) if options["executor"] == "process" else None
        return Scheduler(
            declarations=declarations,
            poll_interval=options["poll_interval"],
            concurrency=concurrency,
            grace=options["grace"],
            executor=executor,
            database=using,
        )

    def _serve(self, options: dict[str, Any], scheduler: Any, using: str) -> None:
        """Start up (waiting for the database if need be), then run the loop or one tick."""

        def prepare() -> str:
            database = check_database_support(using)
            check_migrated(using)
            # Registered (with what it declares) before reconciling, so that concurrent
            # schedulers see each other; "now" for the first-start rule is the database's
            # clock (start() measures it), as for every due time. Each change, deferral and
            # the summary are logged by reconcile itself.
            if scheduler.process is None:  # a retry after an outage registers only once
                scheduler.start()
            scheduler.reconcile()
            return database

        if options["once"]:
            self._once(scheduler, prepare)
            return
        # A long-running scheduler started before its database (a host reboot) waits for it.
        try:
            ready = scheduler.until_reachable(prepare)
        except DatabaseError as exc:
            raise CommandError(f"The database refused the start-up: {one_line(exc)}") from None
        if ready is None:
            return  # stopped by a signal while waiting
        self._summary(scheduler, ready)
        scheduler.run()

    def _start_once(self, scheduler: Any, prepare: Callable[[], str]) -> str:
        """Start up for --once, waiting out a lock another process holds (a conflict, not an
        outage) for up to ONCE_LOCK_PATIENCE: exiting would skip this minute's occurrences,
        which the next invocation, a minute later, no longer fires."""
        give_up_at = time.monotonic() + ONCE_LOCK_PATIENCE
        while True:
            try:
                database: str = scheduler.starting_up(prepare)
            except DatabaseError as exc:
                left = give_up_at - time.monotonic()
                if not conflict(exc) or left <= 0 or scheduler.stopping:
                    raise
                # The loop's back-off, logged as the loop logs it (db_lock_timeout).
                delay = scheduler.outage.failed(exc)
                connections[scheduler.using].close()
                time.sleep(min(delay, left))
                continue
            scheduler.outage.recovered()
            return database

    def _once(self, scheduler: Any, prepare: Callable[[], str]) -> None:
        """Tick once, wait for its runs, and say how it went (for system cron)."""
        # Driven from system cron: the next invocation is the retry, so say why and exit.
        try:
            database = self._start_once(scheduler, prepare)
        except DatabaseError as exc:
            if lock_not_granted(exc):
                raise CommandError(
                    f"A database lock was not granted for {ONCE_LOCK_PATIENCE:.0f} s at "
                    f"start-up (another process holds it): {one_line(exc)}"
                ) from None
            raise CommandError(refused("is unavailable", exc, using=scheduler.using)) from None
        self._summary(scheduler, database)
        try:
            result = scheduler.run_once()
        except DatabaseError as exc:
            raise CommandError(
                refused("became unavailable", exc, "the tick", scheduler.using)
            ) from None
        queued = f", handed off {len(result.queued)} to workers" if result.queued else ""
        if self.verbosity:
            self.stdout.write(
                f"Ran {len(result.started)} task(s){queued}, skipped {len(result.skipped)}; "
                "exiting."
            )
        if scheduler.unrecorded:
            raise CommandError(
                f"{scheduler.unrecorded} run outcome(s) could not be recorded (the database "
                "became unavailable, or another transaction held their rows: see the log "
                "above). Other schedulers will mark those runs lost."
            )

    def _summary(self, scheduler: Any, database: str) -> None:
        assert scheduler.process is not None
        if not self.verbosity:
            # -v 0, Django's "minimal output": from system cron, whatever is printed is
            # mailed, a summary every minute. What goes wrong is still said (stderr, logs).
            return
        self.stdout.write(
            f"django-posixcron scheduler {socket.gethostname()}:{os.getpid()} on {database}; "
            f"poll every {scheduler.poll_interval:g} s, {scheduler.concurrency} at once, "
            f"history {get_settings().history_days} days."
        )
        try:
            self._list_tasks(scheduler)
        except DatabaseError as exc:
            # The database can go away between the start-up and this line (a restart, a
            # dropped table), and the summary is only informative: the loop that follows
            # waits such an outage out and logs it.
            self.stdout.write(f"The task list could not be read: {one_line(exc)}")
        # Piped to a log collector, stdout is block-buffered: the summary came out when the
        # process exited, and never after a kill -9.
        self.stdout.flush()

    def _list_tasks(self, scheduler: Any) -> None:
        from django_posixcron.models import Task
        from django_posixcron.timing import in_zone

        write = self.stdout.write
        declared = Task.objects.using(scheduler.using).filter(declared=True)
        # The first SUMMARY_TASKS only, read as plain values: a project declaring 100,000
        # tasks got 100,000 lines, and the model instances to print them took 150 MiB that
        # the process kept for the rest of its life.
        rows = declared.order_by("name").values_list(
            "name", "schedule", "paused", "due_at", "timezone", "definition_hash"
        )[:SUMMARY_TASKS]
        shown, now = 0, scheduler.now()
        for name, schedule, paused, due_at, timezone, stored_hash in rows:
            if paused:
                when = "paused"
            elif due_at is None:
                when = "not scheduled"
            else:
                try:
                    local = in_zone(due_at, timezone).isoformat(timespec="seconds")
                except (ValueError, LookupError):
                    # A row another process's declarations stored may name a zone this
                    # host's zone files lack: the start-up summary must not stop the start.
                    local = due_at.isoformat(timespec="seconds")
                # Back after downtime, a task's due time is behind: it fires now, once.
                when = f"due now (since {local})" if due_at <= now else f"next {local}"
                when += f" ({timezone})"
            when += _not_ours(scheduler, name, schedule, stored_hash)
            write(f"  {name}: {schedule!s} -> {when}")
            shown += 1
        if not shown:
            write("No tasks declared in settings.POSIXCRON['TASKS'].")
        elif shown == SUMMARY_TASKS and (more := declared.count() - shown) > 0:
            write(f"  ... and {more} more; manage.py schedulerstatus lists every task.")


def _not_ours(scheduler: Any, name: str, schedule: str, stored_hash: str) -> str:
    """Say why a listed task is not run by this process: during a rolling deploy the rows
    hold what another live process declares, which this one defers to and never claims."""
    declaration = scheduler.declarations.get(name)
    if declaration is None:
        return " [not declared by this process: another deploy's task, not run here]"
    if declaration.definition_hash == stored_hash:
        return ""
    if declaration.schedule != schedule:
        mine = f"declares {declaration.schedule!r}"
    else:
        mine = "declares it differently"
    return f" [another deploy's definition, not run here; this process {mine}]"


def _threads_left_running() -> list[threading.Thread]:
    """The threads task code still runs in: the non-daemon ones besides the main one (the
    scheduler's own have ended, or are daemons), and the executor's workers still inside a
    call (a run recorded interrupted or timed out whose code has not returned)."""
    main = threading.main_thread()
    left = [t for t in threading.enumerate() if t is not main and not t.daemon and t.is_alive()]
    return left + [t for t in threads_in_task_code() if t not in left]
