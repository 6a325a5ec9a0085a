"""One set-based claim of a batch of due tasks, in one short transaction."""

from __future__ import annotations

import dataclasses
import datetime as dt
import functools
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, NamedTuple

from django.db import IntegrityError, InterfaceError, OperationalError, connections, transaction
from django.db.models import (
    BooleanField,
    Count,
    Exists,
    ExpressionWrapper,
    Model,
    OuterRef,
    Q,
    QuerySet,
    Subquery,
    Sum,
    Value,
)
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

from django_posixcron.db import DatabaseNow, UnfinishedExists, conflict, has_clock
from django_posixcron.handoff.enqueue import Enqueuer, queue
from django_posixcron.log import get_logger
from django_posixcron.models import (
    UNFINISHED_STATUSES,
    Overlap,
    Run,
    RunStatus,
    SchedulerProcess,
    Task,
    Trigger,
    due_at,
)
from django_posixcron.scheduling import bulk, rules
from django_posixcron.scheduling.alerts import any_overdue
from django_posixcron.scheduling.compiled import QueryCache
from django_posixcron.scheduling.counting import count_runs
from django_posixcron.scheduling.outcomes import Outcome
from django_posixcron.timing import next_occurrence, served_occurrence

if TYPE_CHECKING:
    from django_posixcron.declarations import TaskDeclaration

# Under the documented "django_posixcron.scheduler" logger, one child per part.
logger = get_logger("django_posixcron.scheduler.claim")

# Tasks whose stored definition differs from ours are left out of the claim query, then
# looked at again after this long, so a rolling deploy that settles is noticed within a minute.
MISMATCH_RECHECK = dt.timedelta(seconds=60)

# Columns of the claimed task rows nothing on a run's path reads: the admin's, the metrics' and
# the overdue alert's timestamps and figures (the outcome reads last_success_at and the last
# run's figures under its own lock).
# Parsing them cost about a twentieth of the loop's time in a burst while Django's Python
# loader parsed PostgreSQL timestamps (db.fast_timestamps() now hands them to psycopg's C
# loader where it can); they are still sent and built for nothing. A signal receiver that
# reads one of them from ``run.task`` loads it then, with a query, as Django loads any
# deferred field.
UNREAD_IN_CLAIM = (
    "created_at",
    "updated_at",
    "last_run_finished_at",
    "last_success_at",
    "last_duration",
    "last_fire_lag",
    "overdue_signalled_for",
    # A run executes its declaration (whose definition the stored one equals), and the
    # description may be long. Not the kwargs: a run_finished receiver may well read them.
    "callable_path",
    "description",
    "paused_reason",
)

Planned = tuple[Task, "TaskDeclaration", dict[str, Any], Run | None]


class Claimed(NamedTuple):
    """What a claim returns: the runs to start, the skipped runs, and the instant the
    claim judged due-ness at (None when it judged by the database's clock and found nothing
    due)."""

    started: list[tuple[Run, TaskDeclaration]]
    skipped: list[Run]
    at: dt.datetime | None


def _defaults(model: type[Model]) -> list[tuple[str, Callable[[], Any]]]:
    """Each concrete field's attribute name and a function giving its default."""
    out: list[tuple[str, Callable[[], Any]]] = []
    for field in model._meta.concrete_fields:
        if field.has_default() and callable(field.default):
            out.append((field.attname, field.get_default))
        else:
            # A constant default (or none: "" or None), computed once.
            out.append((field.attname, functools.partial(_same, field.get_default())))
    return out


def _same(value: Any) -> Any:
    return value


_RUN_FIELDS = _defaults(Run)
_RUN_ATTNAMES = [name for name, _ in _RUN_FIELDS]
_RUN_TASK: Any = Run._meta.get_field("task")
_RUN_PROCESS: Any = Run._meta.get_field("process")


def new_run(task: Task, process: SchedulerProcess, **values: Any) -> Run:
    """``Run(task=task, process=process, **values)``, built from its fields' values.

    Given keywords, Django's model constructor pops and checks each field's keyword and
    sets each relation through its descriptor (which asks the database routers): 31 µs a
    run on the 2-core machine, against 8 µs positionally, and a tenth of the loop's time in
    a burst. Positionally it still sets each foreign key's column through a descriptor that
    looks for a cached relation to drop, half of what was left; unless someone listens to
    pre_init or post_init for runs (a field tracker, say), the run's attributes are set as
    that constructor leaves them, without it. The task and the process are cached on the run
    as the descriptor caches them.
    """
    values["task_id"] = task.pk
    values["process_id"] = process.pk
    row: list[Any] = [
        values.pop(name) if name in values else default() for name, default in _RUN_FIELDS
    ]
    if values:
        raise TypeError(f"Run has no fields {', '.join(sorted(values))}")
    if pre_init.has_listeners(Run) or post_init.has_listeners(Run):
        # Positional model arguments are Django's own fast path (from_db() uses it); the
        # stubs' plugin types only keywords.
        run = Run(*row)  # type: ignore[misc]
    else:
        run = Run.__new__(Run)
        run._state = ModelState()
        run.__dict__.update(zip(_RUN_ATTNAMES, row, strict=True))
    _RUN_TASK.set_cached_value(run, task)
    _RUN_PROCESS.set_cached_value(run, process)
    return run


class Claimer:
    """Claim due tasks whose stored definition is this process's own; insert their runs."""

    def __init__(self, declarations: Mapping[str, TaskDeclaration], using: str) -> None:
        self.declarations = declarations
        self.using = using
        self.mismatched: dict[int, str] = {}
        self._mismatch_logged: set[tuple[str, str]] = set()
        self._recheck_at: dt.datetime | None = None
        # Tasks handed to Django Tasks workers: claimed even when no local slot is free.
        self.handoff_names = sorted(n for n, d in declarations.items() if d.enqueue is not None)
        self.enqueuer = Enqueuer(using)
        # The claim's locking read, compiled once per shape (compiled.py).
        self.queries = QueryCache(using, size=32)
        # Runs the claim's own transaction could not enqueue, recorded failed after commit.
        self.refused: list[Outcome] = []
        # This claim's runs the unique constraint refused: their occurrences had fired already.
        self.conflicted: list[Run] = []
        # The runs of a claim whose transaction ended in an error that may have come after
        # its commit (the connection lost while the server committed): resolved by
        # committed_runs() once the database answers again.
        self.unsure: list[tuple[Run, TaskDeclaration]] = []

    def refresh_mismatches(self, now: dt.datetime) -> None:
        if self._recheck_at is None or now >= self._recheck_at:
            self.mismatched.clear()
            self._recheck_at = now + MISMATCH_RECHECK

    def forget_mismatches(self) -> None:
        """Look at every task again at the next claim (after reconciling changed rows)."""
        self.mismatched.clear()
        self._recheck_at = None

    def claim(
        self,
        now: dt.datetime | None,
        limit: int,
        process: SchedulerProcess,
        *,
        slotless: bool = False,
        due_by: dt.datetime | None = None,
    ) -> Claimed:
        """Claim up to `limit` due tasks in one transaction; return the runs to start, the
        skipped ones, and the instant the claim was judged at.

        `now` None judges due-ness by the database's clock in the locking read itself (a
        backend with a clock only): the tick that finds a task due within its own round trip
        claims it at once instead of asking the clock again, and nothing is claimed before
        the database's clock reaches its due time.

        Runs of handed-off tasks come back `queued`, already enqueued when their backend
        stores jobs in our database; the caller enqueues the others after commit
        (enqueue_after_commit).

        `slotless` claims only what needs no local slot, every one being busy: runs handed to
        workers elsewhere, and the occurrences `overlap: skip` records as skipped because the
        task's previous run is still going. Left for a free slot, such an occurrence was not
        skipped on time but ran late once the previous run ended, and the occurrences in
        between left no row at all.

        `due_by` (with `now` given) claims only tasks due by that instant; the runs are still
        judged and started at `now`.
        """
        self.conflicted = []
        attempted: list[tuple[Run, TaskDeclaration]] = []
        try:
            return self._claim(now, limit, process, slotless, due_by, attempted)
        except (OperationalError, InterfaceError) as exc:
            # Connection errors: the server may have committed before the reply was lost.
            # A conflict (a lock not granted in time, a deadlock) was answered, and rolled
            # back, as was anything else (a constraint).
            if not conflict(exc):
                self.unsure = attempted
            raise

    def _claim(
        self,
        now: dt.datetime | None,
        limit: int,
        process: SchedulerProcess,
        slotless: bool,
        due_by: dt.datetime | None,
        attempted: list[tuple[Run, TaskDeclaration]],
    ) -> Claimed:
        with transaction.atomic(using=self.using):
            if due_by is not None:
                assert now is not None, "due_by needs an instant to claim at"
                locked = self._lock_due(min(now, due_by), limit, slotless)
            else:
                locked = self._lock_due(now, limit, slotless)
            if now is None:
                if not locked:
                    return Claimed([], [], None)
                # One statement, one instant: its clock when it started.
                now = getattr(locked[0], "db_now", None)
                assert now is not None
            claimable = self._matching(locked)
            # "overlap: skip counts queued runs as running": `busy` came with the rows.
            busy = {
                t.pk
                for t, _ in claimable
                if t.overlap == Overlap.SKIP and getattr(t, "busy", False)
            }
            planned = [
                (
                    task,
                    declaration,
                    *self.plan(task, declaration, now, process, overlapping=task.pk in busy),
                )
                for task, declaration in claimable
                # Without a slot, only a skip or a hand-off (what the locking read chose).
                if not slotless or task.pk in busy or declaration.enqueue
            ]
            for _, declaration, _, run in planned:
                if run is not None and run.status == RunStatus.RUNNING and declaration.enqueue:
                    queue(run, declaration, now)
            attempted.extend((run, d) for _, d, _, run in planned if run is not None)
            if connections[self.using].features.has_select_for_update_skip_locked:
                runs = self.write_locked(planned)
            else:
                runs = self.write_compare_and_set(planned)
            if self.conflicted:
                self.give_back(self.conflicted)
            # A skip is final when inserted; the other runs are counted with their outcome.
            count_runs((run for run, _ in runs if run.status == RunStatus.SKIPPED), self.using)
            if self.handoff_names:
                self.refused += self.enqueuer.in_claim(runs)
        started = [(run, d) for run, d in runs if run.status != RunStatus.SKIPPED]
        return Claimed(started, [run for run, _ in runs if run.status == RunStatus.SKIPPED], now)

    def committed_runs(
        self, process: SchedulerProcess, now: dt.datetime, *, start: bool = True
    ) -> list[tuple[Run, TaskDeclaration]]:
        """Return the runs of the last claim whose commit's reply was lost that the database
        holds as committed, to start now: local ones `running` on this process (their task
        code never started), handed-off ones `queued` and not yet enqueued on a backend that
        keeps its jobs elsewhere (the claim enqueues those after its commit); and the skips
        it recorded, which the claim logs and signals after its commit.

        Without this, such a run stayed `running` for as long as its process lived (nobody
        marks a live process's runs lost) and, with ``overlap: skip``, every later occurrence
        of its task was skipped for it. They start now, late, once: their start time is
        `now`, so their history, fire lag and retry say when they really ran (the caller
        beats first, so that no peer takes this process for gone after a silence that long
        while they start). Raises while the database cannot answer, and keeps them for the
        next try.

        `start` False (a process stopping): the local runs are returned as they are, for the
        caller to record as interrupted without ever starting them.
        """
        if not self.unsure:
            return []
        keys = Q()
        for run, _ in self.unsure:
            keys |= Q(task_id=run.task_id, trigger=run.trigger, scheduled_for=run.scheduled_for)
        with transaction.atomic(using=self.using):
            rows = (
                Run.objects.using(self.using)
                .select_for_update()
                .filter(keys, process=process)
                .only("pk", "task_id", "trigger", "scheduled_for", "status", "backend", "result_id")
            )
            found = {(row.task_id, row.trigger, row.scheduled_for): row for row in rows}
            committed, restarted = [], []
            for run, declaration in self.unsure:
                row = found.get((run.task_id, run.trigger, run.scheduled_for))
                if row is None:
                    continue
                run.pk = row.pk
                if row.status == RunStatus.RUNNING and not row.backend:
                    if start:
                        run.started_at = now
                        restarted.append(run.pk)
                    committed.append((run, declaration))
                elif row.status == RunStatus.QUEUED and not row.result_id:
                    committed.append((run, declaration))
                elif row.status == RunStatus.SKIPPED and run.status == RunStatus.SKIPPED:
                    committed.append((run, declaration))  # to be logged and signalled
            if restarted:
                Run.objects.using(self.using).filter(pk__in=restarted).update(started_at=now)
        attempted, self.unsure = len(self.unsure), []
        logger.warning(
            "the connection was lost while a claim of %d run(s) was committing; it had%s "
            "committed: %d run(s) %s",
            attempted,
            "" if found else " not",
            len(committed),
            "start now, late"
            if start
            else "are settled (this process is stopping: its own are recorded interrupted, "
            "never started)",
            extra={"action": "claim_commit_lost"},
        )
        return committed

    def enqueue_after_commit(self, runs: list[tuple[Run, TaskDeclaration]]) -> list[Outcome]:
        """Enqueue the queued runs on the other backends; return every refused enqueue."""
        refused, self.refused = self.refused, []
        if self.handoff_names:
            refused += self.enqueuer.after_commit(runs)
        return refused

    def _matching(self, rows: list[Task]) -> list[tuple[Task, TaskDeclaration]]:
        """Keep the tasks whose stored definition hash equals this process's declaration."""
        claimable = []
        for task in rows:
            declaration = self.declarations.get(task.name)
            if declaration is None or declaration.definition_hash != task.definition_hash:
                self._note_mismatch(task, declaration)
            else:
                claimable.append((task, declaration))
        return claimable

    def _lock_due(self, now: dt.datetime | None, limit: int, slotless: bool) -> list[Task]:
        """Lock up to `limit` tasks due at `now` (None: by the database's clock, each row with
        it as `db_now`), skipping rows another process holds, each with `busy`: whether it
        has an unfinished run. `slotless`: only handed-off tasks and `overlap: skip` ones with
        an unfinished run. One statement, compiled once per shape."""
        excluded = tuple(sorted(self.mismatched))
        names = tuple(self.handoff_names)

        def build(**at: dt.datetime) -> QuerySet[Any]:
            query = Task.objects.using(self.using).select_for_update(skip_locked=True)
            query = query.defer(*UNREAD_IN_CLAIM)
            if now is None:
                query = query.active().filter(due_at__lte=DatabaseNow())
                query = query.annotate(db_now=DatabaseNow())
            else:
                query = query.due(at["now"])
            if excluded:
                query = query.exclude(pk__in=list(excluded))
            if slotless:
                # The unfinished runs are few (at most the fleet's slots and the queued runs)
                # and indexed: the database can start from them, not from every due task.
                going = Run.objects.using(self.using).unfinished().values("task_id")
                needs_no_slot = Q(overlap=Overlap.SKIP, pk__in=going)
                if names:
                    needs_no_slot |= Q(name__in=list(names))
                query = query.filter(needs_no_slot)
            locked: QuerySet[Any] = query.annotate(busy=self._busy()).order_by("due_at")
            return locked[:limit]

        if now is None:
            key = ("claim by the database clock", excluded, names, slotless, limit)
            return self.queries.get(key, build).instances(Task)
        key = ("claim", excluded, names, slotless, limit)
        return self.queries.get(key, build, ["now"]).instances(Task, now=now)

    def _busy(self) -> Any:
        """Whether the locked task has an unfinished (queued or running) run.

        On MariaDB and MySQL one EXISTS per status, each an equality on both columns of the
        (status, task) prefix of the status index (migration 0011), by name: with the two
        statuses in one IN, MariaDB ranged over the status alone, reading every unfinished
        run of the table for each task (0.27 s a claim of 100 tasks behind 5,000 queued runs,
        against 0.01 s), or took a task's index and read its whole history. PostgreSQL and
        SQLite have a partial index of the unfinished runs by task (migration 0006).
        """
        runs = Run.objects.using(self.using).filter(task=OuterRef("pk"))
        if connections[self.using].vendor != "mysql":
            return Exists(runs.unfinished())
        each = Q()
        for status in sorted(UNFINISHED_STATUSES):
            each |= Q(UnfinishedExists(runs.filter(status=status)))
        return ExpressionWrapper(each, output_field=BooleanField())

    def _note_mismatch(self, task: Task, declaration: TaskDeclaration | None) -> None:
        self.mismatched[task.pk] = task.name
        key = (task.name, task.definition_hash)
        if key in self._mismatch_logged:
            return
        self._mismatch_logged.add(key)
        if declaration is None:
            reason = "is not declared in this process's settings"
        else:
            reason = "has a stored definition that differs from this process's settings"
        logger.warning(
            "task %s %s (stored hash %s); not claiming it: another deploy owns it",
            task.name,
            reason,
            task.definition_hash[:12],
            extra={"action": "definition_differs"},
        )

    @staticmethod
    def plan(
        task: Task,
        declaration: TaskDeclaration,
        now: dt.datetime,
        process: SchedulerProcess,
        *,
        overlapping: bool,
    ) -> tuple[dict[str, Any], Run | None]:
        """Return the task's new state and the run to insert (None when nothing is due).

        The cursor moves by this process's declaration, which the row's hash matches: a row
        whose schedule or zone was edited by hand (the hash left as it was) cannot stop the
        claim of the whole batch with an expression the engine rejects.
        """
        claimed = rules.after_claim(
            schedule=declaration.schedule,
            timezone=declaration.timezone,
            next_run_at=task.next_run_at,
            retry_at=task.retry_at,
            run_requested_at=task.run_requested_at,
            last_run_started_at=task.last_run_started_at,
            now=now,
            overlapping=overlapping,
        )
        if claimed.trigger is None or claimed.scheduled_for is None:
            return claimed.changes, None
        occurrence, attempt = rules.attempt_of(
            claimed.trigger, claimed.scheduled_for, task.retry_occurrence, task.retry_attempt
        )
        run = new_run(
            task,
            process,
            occurrence=occurrence,
            attempt=attempt,
            trigger=claimed.trigger,
            status=RunStatus.SKIPPED if claimed.skipped else RunStatus.RUNNING,
            scheduled_for=claimed.scheduled_for,
            started_at=now,
            process_label=process.label[:255],  # the host name alone may be 255 long
        )
        if claimed.skipped:
            run.finished_at = now
            run.duration = dt.timedelta(0)
            run.error = (
                "Skipped: the previous run of this task is still queued or running (overlap=skip)."
            )
        return claimed.changes, run

    def write_locked(self, planned: list[Planned]) -> list[tuple[Run, TaskDeclaration]]:
        """Advance the locked tasks and insert their runs: a few statements per batch."""
        if not planned:
            return []
        for task, _, changes, _ in planned:
            task._scheduler_wrote(changes)
        # The rows are locked by this transaction, so no compare-and-set is needed.
        fields = list(planned[0][2])
        advance = (
            Task,
            fields,
            [(task.pk, *(changes[f] for f in fields)) for task, _, changes, _ in planned],
        )
        pending = [(run, declaration) for _, declaration, _, run in planned if run is not None]
        if bulk.can_insert_new(self.using):
            # The cursors advanced in the runs' INSERT on PostgreSQL: one statement.
            return self.insert_new(pending, update_first=advance)
        bulk.update_many(*advance, self.using)
        if not pending:
            return []
        if connections[self.using].features.can_return_rows_from_bulk_insert:
            try:
                with transaction.atomic(using=self.using):
                    bulk.insert_all([run for run, _ in pending], self.using)
                return pending
            except IntegrityError:
                # One of them already fired elsewhere: find which, one at a time.
                for run, _ in pending:
                    run.pk = None
        return [(run, d) for run, d in pending if self.insert(run)]

    def write_compare_and_set(self, planned: list[Planned]) -> list[tuple[Run, TaskDeclaration]]:
        """Advance each task only if its due_at is unchanged, then insert its run.

        On SQLite select_for_update is a no-op: a second scheduler that already moved this
        task's cursor makes the conditional UPDATE match no row, and nothing fires here.
        """
        if not planned:
            return []
        if bulk.can_compare_and_set(self.using):
            fields = list(planned[0][2])
            moved = bulk.compare_and_set(
                Task,
                "due_at",
                fields,
                [(t.pk, t.due_at, *(changes[f] for f in fields)) for t, _, changes, _ in planned],
                self.using,
            )
        else:
            moved = {
                task.pk
                for task, _, changes, _ in planned
                if Task.objects.using(self.using)
                .filter(pk=task.pk, due_at=task.due_at)
                .update(**changes)
            }
        pending = []
        for task, declaration, changes, run in planned:
            if task.pk not in moved:
                logger.info(
                    "task %s was claimed by another scheduler first",
                    task.name,
                    extra={"action": "claim_lost_race"},
                )
                continue
            task._scheduler_wrote(changes)
            if run is not None:
                pending.append((run, declaration))
        if bulk.can_insert_new(self.using):
            return self.insert_new(pending)
        return [(run, d) for run, d in pending if self.insert(run)]

    def insert_new(
        self,
        pending: list[tuple[Run, TaskDeclaration]],
        *,
        update_first: tuple[type[Task], list[str], list[tuple[Any, ...]]] | None = None,
    ) -> list[tuple[Run, TaskDeclaration]]:
        """Insert the runs in one statement; the ones a unique conflict refused fired elsewhere.

        `update_first`: the tasks' update to make before inserting (bulk.insert_new())."""
        runs = [r for r, _ in pending]
        written = bulk.insert_new(runs, "task", self.using, update_first=update_first)
        inserted = {id(run) for run in written}
        for run, _ in pending:
            if id(run) not in inserted:
                self.already_fired(run)
        return [(run, d) for run, d in pending if id(run) in inserted]

    def insert(self, run: Run) -> bool:
        try:
            with transaction.atomic(using=self.using):
                run.save(force_insert=True, using=self.using)
        except IntegrityError:
            self.already_fired(run)
            return False
        return True

    def already_fired(self, run: Run) -> None:
        # "A unique-constraint conflict means another process already fired that
        # occurrence": another scheduler, or an earlier run of this task whose instant the
        # cursor came back to (a changed schedule or zone sets it to the current minute, if
        # that matches, and the minute may have fired before the deploy). The cursor still
        # moves on with this transaction.
        logger.info(
            "task %s %s occurrence %s already fired: its run is recorded, not started again",
            run.task.name,
            run.trigger,
            run.scheduled_for.isoformat(),
            extra={"action": "already_fired"},
        )
        self.conflicted.append(run)

    def give_back(self, conflicted: list[Run]) -> None:
        """Give the tasks of runs that were not inserted what their claim consumed.

        A run answers every reason its task was due for (rules.after_claim): it consumes a
        pending retry and a request, and it is the task's last start. A run the unique
        constraint refused answered nothing: its task keeps the retry of its last failure and
        the request an operator made, which fire at their own instants, and does not read as
        running. Only the reason the refused run stood for (its occurrence, that retry, that
        request) stays consumed, and the cursor stays moved on. Rare (a conflict): one
        statement per run.

        But not past an occurrence that nothing fired: a refused cron run's occurrence had
        fired before a deploy set the cursor back to it (a changed schedule or zone, in the
        minute it fired), and the claim moved the cursor past `now`. When the first claim
        after that deploy came later than the next occurrence (a scheduler that stopped
        right after starting, an outage), that occurrence was passed over without a run:
        "after downtime a task fires once". The cursor goes to it instead, due at once.
        """
        for run in conflicted:
            task = run.task
            next_run_at = task.next_run_at
            declaration = self.declarations.get(task.name)
            if run.trigger == Trigger.CRON and declaration is not None and next_run_at:
                schedule, zone = declaration.schedule, declaration.timezone
                served = served_occurrence(schedule, zone, run.scheduled_for)
                following = next_occurrence(schedule, zone, served)
                if following < next_run_at:
                    next_run_at = following
            read = task.values_read()
            retry_at = task.retry_at if run.trigger == Trigger.RETRY else read.get("retry_at")
            requested = (
                task.run_requested_at
                if run.trigger == Trigger.MANUAL
                else read.get("run_requested_at")
            )
            values = {
                "next_run_at": next_run_at,
                "retry_at": retry_at,
                "run_requested_at": requested,
                "due_at": due_at(next_run_at, retry_at, requested),
                "last_run_started_at": read.get("last_run_started_at"),
            }
            Task.objects.using(self.using).filter(pk=task.pk).update(**values)
            task._scheduler_wrote(values)


@dataclasses.dataclass(frozen=True)
class Peek:
    """What the one idle-tick read returns."""

    db_now: dt.datetime | None
    next_due: dt.datetime | None
    # (count, sum of ids) of the live processes declaring another set than ours, and the
    # newest process's id: it changes when one of them starts, stops or goes stale, and when
    # any process registers, even one that stopped before the next look (rollout.py).
    others: tuple[int, int, int]
    # An active task due before the overdue threshold awaits its task_overdue (alerts.py).
    overdue: bool = False
    # Some run is presumed lost (liveness.mark_lost).
    lost: bool = False


def peek(
    using: str,
    process: SchedulerProcess,
    mismatched: Mapping[int, str],
    *,
    with_clock: bool,
    live_since: dt.datetime,
    overdue_before: dt.datetime | None = None,
    lost_at: tuple[dt.datetime, dt.datetime] | None = None,
    cache: QueryCache | None = None,
) -> Peek:
    """Return the database clock, the earliest due_at this process may claim, who else is
    live with another declaration set, whether an active task due before `overdue_before`
    awaits its task_overdue, and whether some run is presumed lost at `lost_at` (the oldest
    heartbeat that counts, the instant), in one query.

    `live_since` is the oldest heartbeat that still counts as live. With a `cache`, the
    query is compiled once per shape (compiled.py): the loop sends it at every tick.
    """
    excluded = tuple(sorted(mismatched))
    clock = with_clock and has_clock(using)
    instants = {"live_since": live_since}
    if overdue_before is not None:
        instants["overdue_before"] = overdue_before
    if lost_at is not None:
        instants["heartbeat_before"], instants["lost_now"] = lost_at

    def build(**at: dt.datetime) -> QuerySet[Any]:
        return _peek_query(using, process, excluded, clock, at)

    key = ("peek", process.pk, process.declaration_set, excluded, clock, *sorted(instants))
    compiled = (cache or QueryCache(using)).get(key, build, list(instants))
    rows = compiled.rows(**instants)
    if not rows:
        return Peek(None, None, (0, 0, 0))
    row = rows[0]
    return Peek(
        row.get("db_now"),
        row["next_due"],
        (
            int(row["others_count"] or 0),
            int(row["others_sum"] or 0),
            int(row["newest_process"] or 0),
        ),
        bool(row.get("overdue")),
        bool(row.get("lost")),
    )


def _peek_query(
    using: str,
    process: SchedulerProcess,
    excluded: tuple[int, ...],
    clock: bool,
    at: dict[str, dt.datetime],
) -> QuerySet[Any]:
    earliest_due = (
        Task.objects.using(using).active().filter(due_at__isnull=False).order_by("due_at")
    )
    if excluded:
        earliest_due = earliest_due.exclude(pk__in=list(excluded))
    others = (
        SchedulerProcess.objects.using(using)
        .filter(stopped_at__isnull=True, last_heartbeat_at__gte=at["live_since"])
        .exclude(declaration_set__in=["", process.declaration_set])
        .order_by()
        .annotate(group=Value(1))
        .values("group")
    )
    query = (
        SchedulerProcess.objects.using(using)
        .filter(pk=process.pk)
        .annotate(
            next_due=Subquery(earliest_due.values("due_at")[:1]),
            others_count=Subquery(others.annotate(n=Count("pk")).values("n")),
            others_sum=Subquery(others.annotate(s=Sum("pk")).values("s")),
            # The primary key's index answers it at once.
            newest_process=Subquery(
                SchedulerProcess.objects.using(using).order_by("-pk").values("pk")[:1]
            ),
        )
    )
    fields = ["next_due", "others_count", "others_sum", "newest_process"]
    if "overdue_before" in at:
        query = query.annotate(overdue=any_overdue(at["overdue_before"], using))
        fields.append("overdue")
    if "lost_now" in at:
        lost = Run.objects.using(using).presumed_lost(
            process, at["heartbeat_before"], at["lost_now"]
        )
        query = query.annotate(lost=Exists(lost))
        fields.append("lost")
    if clock:
        query = query.annotate(db_now=DatabaseNow())
        fields.append("db_now")
    values: QuerySet[Any] = query.values(*fields)  # one row: this process's
    return values
