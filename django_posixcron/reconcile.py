"""Make the Task table follow the declarations in settings: plan (pure), then apply.

"Reconcile settings into the database, in one transaction that concurrent schedulers serialise
on: create new tasks, update changed definitions, mark removed ones declared=False; never touch
paused or history."

"A process creates what is new to the database, but never retires or rewrites a definition
that another live scheduler declares differently: it defers that change, logs it once, and
applies it as soon as no live process holds the other version." `plan()` decides it from the
live peers' declarations (deployments.py), read inside the same lock.
"""

from __future__ import annotations

import contextlib
import copy
import dataclasses
import datetime as dt
import json
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from typing import Any

from django.db import IntegrityError, connections, transaction
from django.db.models import BooleanField, ExpressionWrapper, Q, TextField
from django.db.models.functions import Cast
from django.utils import timezone as dj_timezone

from django_posixcron.db import IDLE_IN_TRANSACTION_LIMIT, LockNotGranted, app_alias, database_now
from django_posixcron.declarations import TaskDeclaration, load_declarations
from django_posixcron.deployments import Peer, live_peers
from django_posixcron.log import get_logger
from django_posixcron.models import SchedulerProcess, Task
from django_posixcron.scheduling import bulk
from django_posixcron.timing import first_cursor, in_zone, require_aware, served_occurrence

logger = get_logger(__name__)

# Task fields copied from a declaration. `paused`, the cursor's runtime companions and the
# last-run summary are deliberately absent: reconciliation never touches them.
DEFINITION_FIELDS = (
    "schedule",
    "callable_path",
    "kwargs",
    "timezone",
    "retry_delay",
    "overlap",
    "timeout",
    "description",
    "definition_hash",
)
# What planning reads and writes of a stored row; the rest (run history, alert state) is
# left unread: rewriting 100,000 tasks peaks a quarter lower.
PLANNED_FIELDS = (
    "name",
    "declared",
    *DEFINITION_FIELDS,
    "next_run_at",
    "retry_at",
    "run_requested_at",
    "due_at",
    "updated_at",
)
# The definition columns compared as they are read, the keyword arguments apart.
SCALAR_FIELDS = tuple(field for field in DEFINITION_FIELDS if field != "kwargs")
_scalars = operator.attrgetter(*SCALAR_FIELDS)
# Changing either moves the cursor; any other definition change keeps it.
CURSOR_FIELDS = ("schedule", "timezone")

# Key of the PostgreSQL advisory lock: "posixcon" in ASCII, so it is recognisable in pg_locks.
PG_LOCK_KEY = 0x706F736978636F6E
MYSQL_LOCK_NAME = "django_posixcron.reconcile"
# Long enough for another scheduler to reconcile 10,000 tasks on a slow database, and a bound
# on waiting for one frozen in the middle of its reconciliation (SIGSTOP, a paused VM), which
# holds the lock until it wakes: when its heartbeat goes stale every other scheduler
# reconciles, and without a bound the whole fleet waited for it. (MySQL and PostgreSQL.)
MYSQL_LOCK_TIMEOUT = 60
BATCH_SIZE = 500
# A backend without a usable lock can still race on the unique name: re-plan and try again.
ATTEMPTS = 3


# How a change reads in the log once made, and in `runscheduler --check` before it is.
LABELS = {
    "task_created": "new task",
    "task_updated": "changed task",
    "task_retired": "retired task",
    "task_restored": "restored task",
}
PENDING_LABELS = {**LABELS, "task_retired": "task to retire", "task_restored": "task to restore"}


@dataclasses.dataclass
class Change:
    """One row to write: the task as it will be, the fields written and what changed."""

    action: str  # task_created | task_updated | task_retired | task_restored
    task: Task
    fields: tuple[str, ...] = ()
    details: tuple[str, ...] = ()

    @property
    def line(self) -> str:
        """The change as made: the log line of reconciling."""
        return self.line_for(pending=False)

    def line_for(self, *, pending: bool) -> str:
        """The change as made, or (pending) as `runscheduler --check` would make it."""
        labels = PENDING_LABELS if pending else LABELS
        return f"{labels[self.action]} {self.task.name!r}: " + "; ".join(self.details)


@dataclasses.dataclass(frozen=True)
class Deferred:
    """A change this process leaves alone while live peers declare the stored version."""

    name: str
    stored_hash: str
    wanted_hash: str | None  # None: retiring the task
    holders: tuple[str, ...]  # labels of the live processes that hold the stored version
    holder_sets: tuple[str, ...]  # the digests they declare

    @property
    def line(self) -> str:
        change = (
            "retiring it"
            if self.wanted_hash is None
            else f"its definition {self.stored_hash[:12]} -> {self.wanted_hash[:12]}"
        )
        return (
            f"deferred task {self.name!r}: {change} waits until no live process declares the "
            f"stored version (held by {', '.join(self.holders)})"
        )


@dataclasses.dataclass
class Plan:
    """What reconciling would do: create, update (and restore), retire; the rest unchanged."""

    now: dt.datetime
    declarations: Mapping[str, TaskDeclaration]
    create: list[Change] = dataclasses.field(default_factory=list)
    update: list[Change] = dataclasses.field(default_factory=list)
    retire: list[Change] = dataclasses.field(default_factory=list)
    unchanged: list[str] = dataclasses.field(default_factory=list)  # names
    deferred: list[Deferred] = dataclasses.field(default_factory=list)

    @property
    def is_empty(self) -> bool:
        """Return True when the database already matches settings."""
        return not (self.create or self.update or self.retire)

    @property
    def changes(self) -> list[Change]:
        return [*self.create, *self.update, *self.retire]

    def counts(self) -> dict[str, int]:
        """The changes, and the declared tasks left as they were (neither rows retired
        before, nor deferred changes, which the summary counts apart): the declared tasks
        are the created, updated, restored, unchanged and deferred ones."""
        restored = sum(1 for c in self.update if c.action == "task_restored")
        deferred = {d.name for d in self.deferred}
        return {
            "created": len(self.create),
            "updated": len(self.update) - restored,
            "restored": restored,
            "retired": len(self.retire),
            "unchanged": sum(
                1 for name in self.unchanged if name in self.declarations and name not in deferred
            ),
        }

    def summary(self, *, pending: bool = False) -> str:
        """Return the counts as a sentence: what was done, or (pending) what would be."""
        counts = self.counts()
        if pending:
            words = {
                "created": "to create",
                "updated": "to update",
                "restored": "to restore",
                "retired": "to retire",
                "unchanged": "unchanged",
            }
            text = ", ".join(f"{n} {words[word]}" for word, n in counts.items())
            return f"Reconciling {self._declared()} would leave: {text}."
        text = ", ".join(f"{n} {word}" for word, n in counts.items())
        # Changes of declared tasks add up with the counts; retirements of tasks this process
        # does not declare are counted apart.
        changes = sum(1 for d in self.deferred if d.name in self.declarations)
        retirements = len(self.deferred) - changes
        if changes:
            text += f", {changes} deferred"
        if retirements:
            text += f", {retirements} retirement{'' if retirements == 1 else 's'} deferred"
        return f"Reconciled {self._declared()}: {text}."

    def _declared(self) -> str:
        count = len(self.declarations)
        return f"{count} declared task{'' if count == 1 else 's'}"

    def lines(self, *, pending: bool = False) -> list[str]:
        """Return one human-readable line per change and deferral, then the summary."""
        return [
            *(c.line_for(pending=pending) for c in self.changes),
            *(d.line for d in self.deferred),
            self.summary(pending=pending),
        ]


def _iso(instant: dt.datetime | None, tz: str) -> str:
    """Return the instant in the task's own zone, as the schedule reads it."""
    if instant is None:
        return "never"
    try:
        return in_zone(instant, tz).isoformat()
    except (ValueError, LookupError):
        return instant.isoformat()


def _new_task(declaration: TaskDeclaration, now: dt.datetime) -> Task:
    task = Task(
        name=declaration.name,
        **{field: getattr(declaration, field) for field in DEFINITION_FIELDS},
        declared=True,
        paused=False,
        next_run_at=first_cursor(declaration.schedule, declaration.timezone, now),
        created_at=now,
        updated_at=now,
    )
    task.due_at = task.compute_due_at()
    return task


def plan(
    declarations: Mapping[str, TaskDeclaration],
    rows: Iterable[Task],
    now: dt.datetime,
    peers: Sequence[Peer] = (),
    *,
    in_place: bool = False,
) -> Plan:
    """Return what to create, update, retire, defer and leave alone; pure: no database access.

    `peers` are the other live processes and what they declare. A definition that one of them
    declares as stored is neither rewritten nor retired here: the change is deferred.

    A change's task is a copy of its row, so `rows` are left as they were; with `in_place`
    (rows read for this plan alone, as reconciling does) the row itself is changed and
    becomes the task: a copy of each would double what a deploy rewriting 100,000 tasks
    holds at once.
    """
    result = Plan(now=now, declarations=declarations)
    by_name = {row.name: row for row in rows}
    for name in sorted(declarations):
        declaration = declarations[name]
        row = by_name.pop(name, None)
        if row is None:
            task = _new_task(declaration, now)
            result.create.append(
                Change(
                    "task_created",
                    task,
                    details=(
                        f"schedule {task.schedule!r} in {task.timezone}",
                        f"callable {task.callable_path}",
                        f"next run {_iso(task.next_run_at, task.timezone)}",
                    ),
                )
            )
            continue
        # A retired row is restored whatever the peers declare: "a task that any live
        # scheduler declares never stops firing". Judged before _update() rewrites the row;
        # a peer holds only a stored hash that differs from the wanted one, which is a change.
        holders = _holders(peers, row, wanted=declaration.definition_hash) if row.declared else []
        if holders:
            result.deferred.append(_deferral(row, declaration.definition_hash, holders))
            result.unchanged.append(row.name)
            continue
        change = _update(row, declaration, now, in_place=in_place)
        if change is None:
            result.unchanged.append(row.name)
        else:
            result.update.append(change)
    for name in sorted(by_name):
        _plan_retirement(result, by_name[name], peers, in_place=in_place)
    return result


def _plan_retirement(result: Plan, row: Task, peers: Sequence[Peer], *, in_place: bool) -> None:
    """Add to `result` what becomes of a row that settings no longer declare."""
    if not row.declared:
        result.unchanged.append(row.name)
        return
    holders = _holders(peers, row, wanted=None)
    if holders:
        result.deferred.append(_deferral(row, None, holders))
        result.unchanged.append(row.name)
        return
    task = row if in_place else copy.copy(row)
    task.declared = False
    task.updated_at = result.now
    result.retire.append(
        Change(
            "task_retired",
            task,
            fields=("declared", "updated_at"),
            details=("no longer in settings; its row and history stay and it never fires",),
        )
    )


def _holders(peers: Sequence[Peer], row: Task, wanted: str | None) -> list[Peer]:
    """Return the peers that hold the stored version against the `wanted` one.

    Rewriting: the peers that declare the stored hash. Retiring (`wanted` None): the peers
    that declare the task at all, since whatever they declare must keep firing.
    """
    if wanted is None:
        return [p for p in peers if row.name in p.hashes]
    return [
        p
        for p in peers
        if p.hashes.get(row.name) == row.definition_hash and row.definition_hash != wanted
    ]


def _deferral(row: Task, wanted: str | None, holders: Sequence[Peer]) -> Deferred:
    return Deferred(
        name=row.name,
        stored_hash=row.definition_hash,
        wanted_hash=wanted,
        holders=tuple(label for p in holders for label in p.labels),
        holder_sets=tuple(p.digest for p in holders),
    )


# A changed field is named by its settings key, the name users know it by.
SETTINGS_KEYS = {"callable_path": "callable"}


def _shown(value: object) -> str:
    """A definition value as settings spell it: seconds for a delay, "none" for no value."""
    if isinstance(value, dt.timedelta):
        return f"{value.total_seconds():g} s"
    if value is None:
        return "none"
    return repr(value)


def _update(
    row: Task, declaration: TaskDeclaration, now: dt.datetime, *, in_place: bool
) -> Change | None:
    """Return the change that brings `row` in line with `declaration`, or None."""
    decimals = keeps_exact_decimals(row._state.db)
    changed = [
        field
        for field in DEFINITION_FIELDS
        if not (
            same_json(row.kwargs, declaration.kwargs, decimals=decimals)
            if field == "kwargs"
            else getattr(row, field) == getattr(declaration, field)
        )
    ]
    restoring = not row.declared
    # A new zone or schedule, a return to settings, or a lost cursor: start again from now.
    # "A new task, or one whose schedule or zone changed, gets its cursor from now."
    recursor = restoring or row.next_run_at is None or any(f in CURSOR_FIELDS for f in changed)
    retimed = None if recursor else _retimed(row.schedule, row.timezone, row.next_run_at, now)
    if not changed and not recursor and retimed is None:
        return None
    details = [
        f"{SETTINGS_KEYS.get(field, field)} {_shown(getattr(row, field))} -> "
        f"{_shown(getattr(declaration, field))}"
        for field in changed
        if field != "definition_hash"
    ]
    if changed and not details:
        if not same_json(row.kwargs, declaration.kwargs):
            # A number of the kwargs that jsonb keeps as it would keep the new one (1e16
            # declared where 10000000000000000 was): the hash says so, the column cannot.
            details.append(
                f"kwargs {_shown(declaration.kwargs)} (stored with the database's numbers)"
            )
        else:
            # Only the hash differs: what changed is declared but has no column of its own.
            details.append(_unstored_now(declaration))
    task = row if in_place else copy.copy(row)
    fields = [*changed, "updated_at"]
    for field in changed:
        setattr(task, field, getattr(declaration, field))
    if restoring:
        task.declared = True
        # A retry owed, or a run requested, before the task left settings belongs to its
        # previous life: it must not fire the moment the task comes back.
        task.retry_at = None
        task.run_requested_at = None
        # So do its failures in a row: the first failures of the new life open an episode
        # of their own (task_failing, pause_after_failures), and the overdue alert rearms.
        task.retry_occurrence = None
        task.retry_attempt = 0
        task.consecutive_failures = 0
        task.failing_signalled = False
        task.overdue_signalled_for = None
        fields += [
            "declared",
            "retry_at",
            "run_requested_at",
            "retry_occurrence",
            "retry_attempt",
            "consecutive_failures",
            "failing_signalled",
            "overdue_signalled_for",
        ]
        details.insert(0, "declared again")
    if recursor:
        task.next_run_at = first_cursor(declaration.schedule, declaration.timezone, now)
        task.due_at = task.compute_due_at()
        fields += ["next_run_at", "due_at"]
        details.append(f"next run {_iso(task.next_run_at, task.timezone)}")
    elif retimed is not None:
        details.append(
            f"next run {_iso(row.next_run_at, row.timezone)} -> {_iso(retimed, row.timezone)}: "
            f"the rules of {row.timezone} on this host put that occurrence at another instant "
            "(zone data updated, or hosts with different zone data)"
        )
        task.next_run_at = retimed
        task.due_at = task.compute_due_at()
        fields += ["next_run_at", "due_at"]
    task.updated_at = now
    return Change(
        "task_restored" if restoring else "task_updated",
        task,
        fields=tuple(fields),
        details=tuple(details),
    )


def _retimed(
    schedule: str, tz: str, cursor: dt.datetime | None, now: dt.datetime
) -> dt.datetime | None:
    """Return where a future cursor belongs under this host's rules of its zone, or None
    where it is an occurrence here (or has passed: the claim serves it, see served_occurrence).

    A cursor is stored as an instant, computed by the zone rules of the process that stored
    it. After a tzdata update, the same wall-clock occurrence falls at another instant: a
    restart moves the cursor there, so that it fires on time by the rules the host now has
    rather than up to an hour off.
    """
    if cursor is None or cursor <= now:
        return None
    served = served_occurrence(schedule, tz, cursor)
    return None if served == cursor else served


def _unstored_now(declaration: TaskDeclaration) -> str:
    """Describe the declared keys the hash covers and no column stores (the hand-off, the
    run context), for a change line that would otherwise name nothing."""
    if declaration.enqueue is None:
        handoff = "enqueue off"
    else:
        handoff = (
            f"enqueue {declaration.enqueue.as_dict()!r}, "
            f"start_deadline {declaration.start_deadline.total_seconds():g} s"
        )
    return (
        f"enqueue, start_deadline or takes_context changed (now {handoff}, "
        f"takes_context {declaration.takes_context!r})"
    )


@contextlib.contextmanager
def _serialised(alias: str) -> Iterator[None]:
    """Open the one transaction that concurrent reconciliations take turns on."""
    connection = connections[alias]
    if connection.vendor == "mysql":
        # A named lock, taken before the transaction starts so that the rows read after it
        # include whatever the previous holder committed. It lives with the session: a
        # process cut off while holding it (a partition) left it on the server, outside any
        # transaction, until wait_timeout (8 hours by default), and no other scheduler could
        # start. While it is held, the server ends the session after a short silence.
        with connection.cursor() as cursor:
            cursor.execute(f"SET SESSION wait_timeout = {IDLE_IN_TRANSACTION_LIMIT:d}")
            cursor.execute("SELECT GET_LOCK(%s, %s)", [MYSQL_LOCK_NAME, MYSQL_LOCK_TIMEOUT])
            (got,) = cursor.fetchone()
        if got != 1:
            _default_wait_timeout(connection)
            # An OperationalError, as PostgreSQL's lock timeout is: the caller backs off and
            # tries again (at start-up too), rather than exiting into a restart loop.
            raise LockNotGranted(
                f"Another process held the reconcile lock for {MYSQL_LOCK_TIMEOUT} s."
            )
        try:
            with transaction.atomic(using=alias):
                yield
        finally:
            with connection.cursor() as cursor:
                cursor.execute("SELECT RELEASE_LOCK(%s)", [MYSQL_LOCK_NAME])
            _default_wait_timeout(connection)
        return
    with transaction.atomic(using=alias):
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                # For the lock and the rows locked after it, for this transaction only.
                cursor.execute(f"SET LOCAL lock_timeout = '{MYSQL_LOCK_TIMEOUT * 1000:d}ms'")
                cursor.execute("SELECT pg_advisory_xact_lock(%s)", [PG_LOCK_KEY])
        # SQLite: with "transaction_mode": "IMMEDIATE" (the documented setting) or
        # "EXCLUSIVE", BEGIN takes the write lock, which serialises writers.
        yield


def _default_wait_timeout(connection: Any) -> None:
    """Give the session the server's wait_timeout back (the connection may live on)."""
    with connection.cursor() as cursor:
        cursor.execute("SET SESSION wait_timeout = DEFAULT")


def _chunks(items: Sequence[Any], size: int = BATCH_SIZE) -> Iterator[Sequence[Any]]:
    for start in range(0, len(items), size):
        yield items[start : start + size]


@dataclasses.dataclass(frozen=True)
class Peers:
    """Which live processes reconciling must respect: all but `process`, by the stale rule."""

    process: SchedulerProcess
    stale_after: dt.timedelta

    def read(self, alias: str) -> list[Peer]:
        # Liveness by the database's clock, as the stale rule is judged everywhere.
        return live_peers(alias, database_now(alias), self.stale_after, exclude=self.process.pk)


def _replan(
    declarations: Mapping[str, TaskDeclaration],
    now: dt.datetime,
    alias: str,
    peers: Peers | None = None,
) -> Plan:
    """Plan from rows read inside the lock, with the rows to update locked.

    Full rows are loaded only for tasks that may change: a task whose stored hash equals its
    declaration's, which is declared and has a cursor that is an occurrence under this host's
    zone rules (or has passed: _stored_under_other_rules), is unchanged by definition. Building
    10,000 model instances (and parsing their timestamps) would cost more than the whole
    reconciliation target for a restart with no change. Every definition column is compared
    too, not only the hash: a row edited by hand (a database shell, a data migration) with
    its hash left as it was is rewritten from settings, as `--check` reports it, rather than
    left with an expression or a zone nothing can evaluate, or a timeout, overlap or retry
    delay the loop would go by.
    """
    tasks = Task.objects.using(alias)
    # The keyword arguments as the database's text: decoding 100,000 JSON values through the
    # field tripled the cost of a restart with nothing changed.
    summary = tasks.annotate(
        has_cursor=ExpressionWrapper(Q(next_run_at__isnull=False), output_field=BooleanField()),
        kwargs_text=Cast("kwargs", TextField()),
    ).values_list("pk", "name", "declared", "has_cursor", "kwargs_text", *SCALAR_FIELDS)
    decimals = keeps_exact_decimals(alias)
    unchanged: list[str] = []
    candidates: list[int] = []
    retimed = _stored_under_other_rules(tasks, declarations, now)
    for pk, name, declared, has_cursor, kwargs_text, *stored in summary:
        declaration = declarations.get(name)
        if declaration is None:
            if declared:
                candidates.append(pk)
            else:
                unchanged.append(name)
        elif (
            declared
            and has_cursor
            and pk not in retimed
            and tuple(stored) == _scalars(declaration)
            and _same_kwargs(kwargs_text, declaration.kwargs, decimals=decimals)
        ):
            unchanged.append(name)
        else:
            candidates.append(pk)
    rows: list[Task] = []
    # Lock what will be rewritten, so a concurrent claim or run-now request cannot slip a new
    # due_at between our read and our write.
    for chunk in _chunks(candidates):
        rows.extend(tasks.select_for_update().filter(pk__in=chunk).only(*PLANNED_FIELDS))
    settled = set(unchanged)
    pending = {name: d for name, d in declarations.items() if name not in settled}
    # Read inside the lock: a peer that registered before taking it is seen by us, and we by
    # any peer reconciling after us.
    result = plan(pending, rows, now, peers.read(alias) if peers and rows else (), in_place=True)
    result.declarations = declarations
    result.unchanged = sorted([*unchanged, *result.unchanged])
    return result


def _stored_under_other_rules(
    tasks: Any, declarations: Mapping[str, TaskDeclaration], now: dt.datetime
) -> set[int]:
    """Return the ids of declared tasks whose future cursor is not an occurrence under this
    host's rules of their zone (see _retimed): one query for the distinct (schedule, zone,
    cursor) triples, which tasks sharing a schedule share, and one more only if some are.

    Reading every task's cursor instead doubled the cost of a restart with nothing changed
    (parsing 10,000 timestamps); the triples are as many as the schedules in most task sets.
    Triples of a schedule or zone that no declaration has are skipped: such a task is
    rewritten from settings anyway, and its stored expression may not even parse.
    """
    declared = {(d.schedule, d.timezone) for d in declarations.values()}
    triples = (
        tasks.filter(declared=True, next_run_at__gt=now)
        .order_by()
        .values_list("schedule", "timezone", "next_run_at")
        .distinct()
    )
    moved = [
        (schedule, tz, cursor)
        for schedule, tz, cursor in triples
        if (schedule, tz) in declared and _retimed(schedule, tz, cursor, now) is not None
    ]
    ids: set[int] = set()
    for chunk in _chunks(moved, 100):
        match = Q()
        for schedule, tz, cursor in chunk:
            match |= Q(schedule=schedule, timezone=tz, next_run_at=cursor)
        ids.update(tasks.filter(match, declared=True).values_list("pk", flat=True))
    return ids


def _same_kwargs(text: str | None, declared: Mapping[str, Any], *, decimals: bool) -> bool:
    """Return True when the stored JSON text holds the declared keyword arguments."""
    if text == "{}":
        return not declared
    try:
        return text is not None and same_json(json.loads(text), declared, decimals=decimals)
    except ValueError:
        return False


def keeps_exact_decimals(alias: str | None) -> bool:
    """Whether the database behind `alias` keeps JSON numbers as exact decimals (jsonb)."""
    return alias is not None and connections[alias].vendor == "postgresql"


def same_json(stored: Any, declared: Any, *, decimals: bool = False) -> bool:
    """Return True when a stored JSON value is the declared one, as the database keeps it.

    Types count: ``True``, ``1`` and ``1.0`` are different arguments to a callable, though
    Python finds them equal. One exception, with `decimals` (PostgreSQL's jsonb keeps numbers
    as exact decimals): a declared ``1e100`` comes back as the integer 10**100, and such a
    float is compared with the integer as a float, so the task is not rewritten at every
    start-up. SQLite and MariaDB keep the text as written.
    """
    kind = type(declared)
    if type(stored) is not kind:
        # Only a float JSON writes with an exponent (1e+100, 1.5e+20) comes back without
        # a decimal point: a declared 2.0 is stored as 2.0, and a stored 2 is a change.
        if decimals and kind is float and type(stored) is int and "e" in repr(declared):
            try:
                return bool(float(stored) == declared)
            except OverflowError:
                return False
        return False
    if kind is dict:
        if stored.keys() != declared.keys():
            return False
        for key, value in stored.items():
            expected = declared[key]
            # Most arguments are strings: compared here, without a call each.
            if type(value) is str and type(expected) is str:
                if value != expected:
                    return False
            elif not same_json(value, expected, decimals=decimals):
                return False
        return True
    if kind is list:
        return len(stored) == len(declared) and all(
            same_json(value, expected, decimals=decimals)
            for value, expected in zip(stored, declared, strict=True)
        )
    return bool(stored == declared)


def _write(result: Plan, alias: str) -> None:
    if result.create:
        created = [c.task for c in result.create]
        if bulk.can_insert_new(alias):
            # The set-based insert of the claim: a column with one value for every task (most
            # of a generated task set) sent once, the others as arrays, and plain values
            # prepared without Django's generic conversion. bulk_create() prepared and quoted
            # every value of every row: 100,000 new tasks took twice as long.
            inserted = bulk.insert_new(created, "name", alias)
            if len(inserted) != len(created):
                # A task of that name was created meanwhile (no working lock): plan again.
                raise IntegrityError(
                    f"{len(created) - len(inserted)} of the tasks to create exist already"
                )
        else:
            Task.objects.using(alias).bulk_create(created, batch_size=BATCH_SIZE)
    by_fields: dict[tuple[str, ...], list[Task]] = {}
    for change in result.update:
        by_fields.setdefault(tuple(sorted(set(change.fields))), []).append(change.task)
    for fields, tasks in by_fields.items():
        # One UPDATE ... FROM (VALUES / unnest) per chunk of rows, not Django's bulk_update(),
        # whose CASE WHEN per row and field made rewriting 100,000 tasks take 70 s more.
        bulk.update_many(
            Task, list(fields), [(t.pk, *(getattr(t, f) for f in fields)) for t in tasks], alias
        )
    retire_ids = [c.task.pk for c in result.retire]
    for chunk in _chunks(retire_ids):
        Task.objects.using(alias).filter(pk__in=chunk).update(declared=False, updated_at=result.now)


def _log(result: Plan, logged: set[tuple[str, str, str | None]] | None = None) -> None:
    for deferred in result.deferred:
        # "It defers that change, logs it once": a process re-planning while the rollout goes
        # on does not repeat itself.
        key = (deferred.name, deferred.stored_hash, deferred.wanted_hash)
        if logged is not None:
            if key in logged:
                continue
            logged.add(key)
        logger.info(
            "task_deferred name=%s %s",
            deferred.name,
            deferred.line,
            extra={"action": "task_deferred", "task": deferred.name},
        )
    for change in result.changes:
        logger.info(
            "%s name=%s %s",
            change.action,
            change.task.name,
            "; ".join(change.details),
            extra={"action": change.action, "task": change.task.name},
        )
    logger.info("%s", result.summary(), extra={"action": "reconciled", "counts": result.counts()})


def _apply(
    declarations: Mapping[str, TaskDeclaration],
    now: dt.datetime,
    alias: str,
    peers: Peers | None = None,
    logged: set[tuple[str, str, str | None]] | None = None,
) -> Plan:
    for attempt in range(1, ATTEMPTS + 1):
        try:
            with _serialised(alias):
                result = _replan(declarations, now, alias, peers)
                if not result.is_empty:
                    _write(result, alias)
        except IntegrityError:
            # Only reachable without a working lock (e.g. SQLite in deferred mode): another
            # process created a task first. Its rows are committed now, so plan again.
            if attempt == ATTEMPTS:
                raise
            logger.warning(
                "reconcile_conflict attempt=%d: another process reconciled at the same time; "
                "planning again",
                attempt,
                extra={"action": "reconcile_conflict"},
            )
            continue
        _log(result, logged)
        return result
    raise AssertionError("unreachable")


def apply(plan: Plan, using: str | None = None) -> Plan:
    """Apply `plan` in one serialised transaction and return what was actually done.

    The rows are read again inside the lock and the plan recomputed from the same
    declarations and `now`, so a process that waited for another one's reconciliation does
    not create or rewrite what that one already did.
    """
    return _apply(plan.declarations, plan.now, app_alias(using))


def reconcile(
    *,
    now: dt.datetime | None = None,
    declarations: Mapping[str, TaskDeclaration] | None = None,
    check_only: bool = False,
    using: str | None = None,
    peers: Peers | None = None,
    logged: set[tuple[str, str, str | None]] | None = None,
) -> Plan:
    """Bring the Task table in line with settings (or only plan it when `check_only`).

    `using` overrides the alias the routers choose for the app's models. A scheduler passes
    `peers` (itself and the stale rule), so that what other live processes declare defers the
    changes that would take it from them; `logged` remembers the deferrals already logged.
    `check_only` reports the drift against settings alone, whoever is live.
    """
    if now is not None:
        require_aware(now)
    alias = app_alias(using)
    now = now or dj_timezone.now()
    if declarations is None:
        declarations = load_declarations()
    if check_only:
        return plan(declarations, Task.objects.using(alias).all(), now)
    return _apply(declarations, now, alias, peers, logged)
