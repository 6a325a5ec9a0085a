"""Task definitions, run history and live scheduler processes."""

from __future__ import annotations

import contextlib
import datetime as dt
from collections.abc import Collection, Iterable
from typing import TYPE_CHECKING, Any, Self

from django.db import models, router
from django.db.models import Q
from django.db.models.base import ModelState
from django.db.models.lookups import IsNull, LessThanOrEqual
from django.db.models.signals import post_init, pre_init
from django.utils import timezone as dj_timezone
from django.utils.translation import gettext_lazy as _

from django_posixcron.db import database_now
from django_posixcron.timing import in_zone, require_aware

if TYPE_CHECKING:
    from django_posixcron.cron import CronExpression


class Overlap(models.TextChoices):
    SKIP = "skip", _("skip")
    ALLOW = "allow", _("allow")


class Trigger(models.TextChoices):
    CRON = "cron", _("cron")
    RETRY = "retry", _("retry")
    MANUAL = "manual", _("manual")


class RunStatus(models.TextChoices):
    # Handed to a Django Tasks backend, waiting for a worker (DESIGN section 6).
    QUEUED = "queued", _("queued")
    RUNNING = "running", _("running")
    SUCCEEDED = "succeeded", _("succeeded")
    FAILED = "failed", _("failed")
    SKIPPED = "skipped", _("skipped")
    LOST = "lost", _("lost")
    INTERRUPTED = "interrupted", _("interrupted")
    TIMED_OUT = "timed_out", _("timed out")


# Not finished yet: a queued run counts as running for overlap=skip, and is never pruned.
UNFINISHED_STATUSES = frozenset({RunStatus.QUEUED, RunStatus.RUNNING})

# "A lost, interrupted or timed_out run counts as a failure."
FAILURE_STATUSES = frozenset(
    {RunStatus.FAILED, RunStatus.LOST, RunStatus.INTERRUPTED, RunStatus.TIMED_OUT}
)


def earliest(*instants: dt.datetime | None) -> dt.datetime | None:
    """Return the earliest of the given instants, ignoring None."""
    present = [i for i in instants if i is not None]
    return min(present) if present else None


def due_at(
    next_run_at: dt.datetime | None,
    retry_at: dt.datetime | None,
    run_requested_at: dt.datetime | None,
) -> dt.datetime | None:
    """Return when a task is next due: "due_at = min(next_run_at, retry_at)", and a request.

    The one formula: the claim, the outcome writes and the model compute it here.
    """
    return earliest(next_run_at, retry_at, run_requested_at)


def overdue_before(before: dt.datetime) -> Q:
    """Active tasks that should have fired before `before`.

    "A due task not claimed within POLL_INTERVAL": counted from its due time, or from when it
    was created, changed or resumed (``updated_at``) if that came later. A task resumed long
    after its due time, or created in a minute its schedule matches, has had no chance to be
    claimed yet. One rule for the queryset, the alerts and the metrics' per-row flag.
    """
    return Q(declared=True, paused=False, due_at__lt=before, updated_at__lt=before)


# The instants due_at is the earliest of.
CURSORS = ("next_run_at", "retry_at", "run_requested_at")


def _earliest_of(operands: Iterable[Any]) -> Any:
    """The earliest of `operands` (instants, None, or column expressions), NULLs ignored: an
    instant when all are values, else an expression the database computes."""
    values = [v for v in operands if v is not None]
    instants = [v for v in values if isinstance(v, dt.datetime)]
    columns = [v for v in values if not isinstance(v, dt.datetime)]
    if not columns:
        return min(instants, default=None)
    field = models.DateTimeField()
    operand_list: list[Any] = [models.Value(min(instants), output_field=field)] if instants else []
    result, *rest = operand_list + columns
    for other in rest:
        # LEAST() is not portable with NULLs (PostgreSQL ignores them, MySQL returns NULL).
        result = models.Case(
            models.When(IsNull(result, True), then=other),
            models.When(IsNull(other, True), then=result),
            models.When(LessThanOrEqual(result, other), then=result),
            default=other,
            output_field=field,
        )
    return result


def _at_most(now: dt.datetime, field: str) -> models.Case:
    """The column `field` pulled forward to `now` if it is later or unset, else as it is."""
    later_or_unset = Q(**{f"{field}__isnull": True}) | Q(**{f"{field}__gt": now})
    return models.Case(models.When(later_or_unset, then=models.Value(now)), default=models.F(field))


class TaskQuerySet(models.QuerySet["Task"]):
    def active(self) -> TaskQuerySet:
        """Declared in settings and not paused: the tasks that may fire."""
        return self.filter(declared=True, paused=False)

    def paused(self) -> TaskQuerySet:
        return self.filter(declared=True, paused=True)

    def retired(self) -> TaskQuerySet:
        return self.filter(declared=False)

    def running(self) -> TaskQuerySet:
        """Tasks with a run started since their last one finished (see Task.is_running)."""
        return self.filter(last_run_started_at__isnull=False).filter(
            models.Q(last_run_finished_at__isnull=True)
            | models.Q(last_run_finished_at__lt=models.F("last_run_started_at"))
        )

    def due(self, now: dt.datetime | None = None) -> TaskQuerySet:
        """Active tasks whose due time has come (by default, now on this host's clock)."""
        return self.active().filter(due_at__lte=dj_timezone.now() if now is None else now)

    def failing(self) -> TaskQuerySet:
        """Declared tasks whose latest finished run was a failure."""
        return self.filter(declared=True, last_run_status__in=FAILURE_STATUSES)

    def overdue(
        self, now: dt.datetime | None = None, slack: dt.timedelta = dt.timedelta(0)
    ) -> TaskQuerySet:
        """Active tasks that should have fired more than `slack` ago (overdue_before())."""
        if now is not None:
            require_aware(now)
        if not isinstance(slack, dt.timedelta):
            raise TypeError(f"slack must be a datetime.timedelta, got {slack!r}")
        return self.filter(overdue_before((dj_timezone.now() if now is None else now) - slack))

    # State changes asked for by operators (the admin's buttons and actions alike). Each is
    # one UPDATE of its own fields only: "Writes touch only their own fields, so a concurrent
    # pause from the admin is never lost", nor an outcome written while the admin pauses.

    def pause(self, now: dt.datetime | None = None) -> int:
        """Pause the tasks that are not paused yet, and take over the scheduler's own pauses
        (pause_after_failures): the pause is the operator's from then on, its automatic
        reason gone, and no late outcome lifts it. Return how many changed."""
        return self.filter(Q(paused=False) | ~Q(paused_reason="")).update(
            paused=True, paused_reason="", updated_at=self._instant(now)
        )

    def resume(self, now: dt.datetime | None = None) -> int:
        """Resume the paused tasks; return how many were paused.

        Stamped (`now`) by default by the database's clock: a task resumed long after its
        due time is not overdue until it has had POLL_INTERVAL to be claimed, by the clock
        overdue is judged by, whatever the web host's clock says.
        """
        return self.filter(paused=True).update(
            paused=False, paused_reason="", updated_at=self._instant(now)
        )

    def _instant(self, now: dt.datetime | None) -> dt.datetime:
        """Return `now`, an aware datetime, or by default the database's clock."""
        if now is None:
            # The alias .using() or db_manager() chose, else the one the UPDATE goes to.
            return database_now(getattr(self, "_db", None) or router.db_for_write(self.model))
        require_aware(now)
        return now

    def request_run(self, now: dt.datetime | None = None) -> int:
        """Record a manual run request on each declared task; return how many had none
        pending (nor a manual run recorded at `now`); no task code runs. A retired task is
        left alone: it never fires, and its return to settings forgets a request.

        `now` defaults to the database's clock, the one the scheduler judges due-ness by, so
        a web host whose clock runs ahead cannot make the request wait, nor one behind make
        it fire before it was asked for.
        """
        now = self._instant(now)
        # A conditional UPDATE computed in the database, so a concurrent claim that moved
        # the cursor is not overwritten with a stale due_at. A request still pending keeps
        # its instant: asking twice before a scheduler picks it up asks for one run, and
        # changes nothing the second time, even when two requests race and the second one
        # read the clock a moment before the first.
        unrequested = self.filter(run_requested_at__isnull=True, declared=True)
        # A request at an instant whose manual run is already recorded (a test's fixed `now`
        # given twice) would be that occurrence again: "already fired", and dropped.
        served = Run.objects.filter(
            task=models.OuterRef("pk"), trigger=Trigger.MANUAL, scheduled_for=now
        )
        return unrequested.exclude(models.Exists(served)).update(
            run_requested_at=now, due_at=_at_most(now, "due_at")
        )


class Task(models.Model):
    """One row per declared name: the definition from settings plus runtime state."""

    # Definition, copied from settings by reconciliation; never edited in the admin.
    name = models.CharField(_("name"), max_length=100, unique=True)
    schedule = models.CharField(_("schedule"), max_length=255)
    callable_path = models.CharField(_("callable"), max_length=255)
    kwargs = models.JSONField(_("keyword arguments"), default=dict, blank=True)
    timezone = models.CharField(_("time zone"), max_length=64)
    retry_delay = models.DurationField(_("retry delay"))
    overlap = models.CharField(
        _("overlap"), max_length=8, choices=Overlap.choices, default=Overlap.SKIP
    )
    timeout = models.DurationField(_("timeout"), null=True, blank=True)
    description = models.TextField(_("description"), blank=True)
    definition_hash = models.CharField(_("definition hash"), max_length=64)
    declared = models.BooleanField(
        _("declared"),
        default=True,
        help_text=_("False once the task has left settings: it keeps its history, never fires."),
    )

    # Runtime state.
    paused = models.BooleanField(_("paused"), default=False)
    next_run_at = models.DateTimeField(_("next run at"), null=True, blank=True)
    retry_at = models.DateTimeField(_("retry at"), null=True, blank=True)
    run_requested_at = models.DateTimeField(_("run requested at"), null=True, blank=True)
    # min(next_run_at, retry_at, run_requested_at): the one hot query reads only this.
    due_at = models.DateTimeField(_("due at"), null=True, blank=True)

    last_run_status = models.CharField(
        _("last run status"), max_length=16, choices=RunStatus.choices, blank=True
    )
    last_run_started_at = models.DateTimeField(_("last run started"), null=True, blank=True)
    last_run_finished_at = models.DateTimeField(_("last run finished"), null=True, blank=True)
    # The finish of the latest succeeded run, kept with the task so that pruning or deleting
    # runs never loses it: "no success for two hours" must still fire after a month of
    # failures. Written with each outcome (outcomes.py).
    last_success_at = models.DateTimeField(_("last success"), null=True, blank=True)
    # The duration and the fire lag (start minus scheduled time) of the latest finished run,
    # kept for the same reason: the metrics read them from the history while it holds runs
    # of the task, and from here once pruning or a delete has taken them all (a monthly task
    # with HISTORY_DAYS 30). Written with each outcome (outcomes.py).
    last_duration = models.DurationField(_("last duration"), null=True, blank=True)
    last_fire_lag = models.DurationField(_("last fire lag"), null=True, blank=True)

    # The new columns have database defaults too: a scheduler of the previous release, still
    # running while this one's migration is applied (a rolling deploy), inserts rows without
    # them, and so may any outside tool.
    # The run a pending retry retries: its occurrence, and its attempt (the retry is the next).
    retry_occurrence = models.DateTimeField(_("retry of occurrence"), null=True, blank=True)
    retry_attempt = models.PositiveIntegerField(_("retry of attempt"), default=0, db_default=0)
    # Alerting: the failures in a row (a success ends the episode), whether this episode's
    # task_failing was sent, the due time task_overdue was sent for, and why a pause was made.
    consecutive_failures = models.PositiveIntegerField(
        _("failures in a row"), default=0, db_default=0
    )
    failing_signalled = models.BooleanField(_("failing signalled"), default=False, db_default=False)
    overdue_signalled_for = models.DateTimeField(_("overdue signalled for"), null=True, blank=True)
    paused_reason = models.CharField(
        _("paused because"), max_length=255, blank=True, default="", db_default=""
    )

    created_at = models.DateTimeField(_("created"), default=dj_timezone.now, editable=False)
    updated_at = models.DateTimeField(_("updated"), default=dj_timezone.now)

    objects = TaskQuerySet.as_manager()

    # (field names, values) as last loaded, saved or refreshed; None before either.
    _loaded: tuple[Any, Any] | None = None
    # What the scheduler has written to the row since (by attname): the claim's cursors, an
    # outcome's retry and streak. The database's values too, for changed_fields().
    _written: dict[str, Any] | None = None

    class Meta:
        verbose_name = _("task")
        verbose_name_plural = _("tasks")
        ordering = ["name"]
        indexes = [
            # The claim query: due_at <= now AND paused = false AND declared = true ORDER BY
            # due_at. A plain index, because MariaDB has no partial indexes and Django warns
            # (models.W037) about conditional ones there.
            models.Index(fields=["due_at"], name="posixcron_task_due_at"),
        ]
        permissions = [
            ("pause_task", _("Can pause tasks")),
            ("resume_task", _("Can resume tasks")),
            ("run_task", _("Can request an immediate run of a task")),
        ]

    def __str__(self) -> str:
        return self.name

    # -- save() writes what the caller changed ------------------------------------------------
    #
    # The scheduler writes a task's runtime state (cursor, retry, last run, alerts) from other
    # processes, with conditional UPDATEs of its own fields only. A plain save() of an instance
    # loaded before would write every field back: `task.paused = True; task.save()` in a shell
    # or a view, a second after a failure, would clear the retry it recorded ("every failure is
    # retried") and move the cursor back to an occurrence that already fired. So a save() of a
    # loaded task writes only the fields that differ from what was loaded (or last saved or
    # refreshed), as `update_fields`; an explicit `update_fields` is obeyed as given.

    def save(self, *args: Any, **kwargs: Any) -> None:
        for name in CURSORS:
            # A cursor set as Django's DateTimeField accepts it (an ISO string, a date): as
            # the instant it stands for, since due_at is computed from it here.
            value = getattr(self, name)
            if isinstance(value, str | dt.date) and not isinstance(value, dt.datetime):
                field = self._meta.get_field(name)
                assert isinstance(field, models.DateTimeField)
                setattr(self, name, field.to_python(value))
        if (
            self._loaded is not None
            and not args
            and kwargs.get("update_fields") is None
            and not kwargs.get("force_insert")
            and not self._state.adding
            and kwargs.get("using") in (None, self._state.db)
        ):
            changed = self.changed_fields()
            if set(CURSORS) & set(changed):
                # "due_at = min(next_run_at, retry_at)": the claim reads only due_at. From
                # the values changed here and the columns' own for the others: a scheduler
                # may have written those since this instance was read (a failure's retry),
                # and a due_at from the stale ones would hold that retry back.
                self.due_at = _earliest_of(
                    getattr(self, name) if name in changed else models.F(name) for name in CURSORS
                )
                changed.append("due_at")
            if "paused" in changed:
                # As pause() and resume(): the overdue clock counts from a resume, by the
                # database's clock.
                self.updated_at = database_now(self._state.db or router.db_for_write(Task))
                changed.append("updated_at")
                if not self.paused and "paused_reason" not in changed:
                    self.paused_reason = ""
                    changed.append("paused_reason")
            # Nothing changed: Django skips a save with empty update_fields, signals included.
            kwargs["update_fields"] = list(dict.fromkeys(changed))
        super().save(*args, **kwargs)
        if isinstance(self.due_at, models.Expression):
            self.refresh_from_db(fields=["due_at"])  # computed by the database
        # What was written is what the database holds; a field changed and not written
        # (left out of an explicit update_fields) stays changed for the next save().
        self._snapshot(kwargs.get("update_fields"))

    @classmethod
    def from_db(
        cls, db: str | None, field_names: Collection[str], values: Collection[Any], **kwargs: Any
    ) -> Self:
        # Django 6.1 passes fetch_mode=... on every QuerySet iteration: it alone keeps the
        # fast path (set on the state as Model.from_db() sets it); any other keyword does not.
        fetch_mode = kwargs.get("fetch_mode")
        if (
            kwargs.keys() - {"fetch_mode"}
            or pre_init.has_listeners(cls)
            or post_init.has_listeners(cls)
        ):
            instance = super().from_db(db, field_names, values, **kwargs)
        else:
            # The instance Model.from_db() builds, without its constructor: the claim builds
            # thousands a second, and the constructor (a deferral marker per column not read,
            # found by a list search, then an attribute set per column) cost a tenth of the
            # loop's time in a burst (profiled). Unless someone listens to pre_init or
            # post_init for tasks, which then get the constructor as before. Columns not read
            # stay out of __dict__: deferred, loaded on first access as Django loads them.
            instance = cls.__new__(cls)
            state = instance._state = ModelState()
            state.adding, state.db = False, db
            if fetch_mode is not None:
                state.fetch_mode = fetch_mode
            instance.__dict__.update(zip(field_names, values, strict=True))
        # Kept as given; compared in save().
        instance._loaded = (field_names, values)
        return instance

    def refresh_from_db(self, *args: Any, **kwargs: Any) -> None:
        super().refresh_from_db(*args, **kwargs)
        self._snapshot(kwargs.get("fields", args[1] if len(args) > 1 else None))

    def changed_fields(self) -> list[str]:
        """Return the fields whose value differs from the one loaded, saved or refreshed, or
        written by the scheduler since."""
        if self._loaded is None:
            return []
        values = self.__dict__
        baseline = self.values_read()
        if self._written is not None:
            baseline.update(self._written)
        changed = [
            name
            for name, value in baseline.items()
            if name != "id" and name in values and values[name] != value
        ]
        # A field left unread (deferred) and then set: changed, as Django's save() counts it
        # loaded (the claim leaves paused_reason and the description unread).
        changed += [
            f.attname
            for f in self._meta.concrete_fields
            if f.attname in values and f.attname not in baseline
        ]
        return changed

    def _scheduler_wrote(self, values: dict[str, Any]) -> None:
        """Set `values` (by attname), which the scheduler has just written to this task's row,
        and take them as the database's.

        The scheduler's own instances reach signal receivers (``run.task``, task_failing's
        ``task``): a receiver's ``task.paused = True; task.save()`` must write the pause
        alone, not the values the claim and the outcome set here (written already, or since
        overtaken by a later write of theirs: a failure's retry, the streak). Kept as given,
        not copied: the claim builds thousands a second.
        """
        self.__dict__.update(values)
        self._written = values if self._written is None else {**self._written, **values}

    def values_read(self) -> dict[str, Any]:
        """Return the values (by attname) this instance was read with, before any change to
        it: loaded, or taken as the database's by save() or refresh_from_db()."""
        return dict(zip(*self._loaded, strict=True)) if self._loaded is not None else {}

    def _snapshot(self, fields: Iterable[str] | None) -> None:
        """Take the current values of `fields` (all when None) as the database's."""
        wanted = None if fields is None else set(fields)
        attnames = [
            f.attname for f in self._meta.concrete_fields if wanted is None or f.name in wanted
        ]
        loaded = self.values_read()
        if self._written is not None:
            loaded.update(self._written)
            self._written = None
        loaded.update({name: self.__dict__[name] for name in attnames if name in self.__dict__})
        self._loaded = (list(loaded), list(loaded.values()))

    @property
    def expression(self) -> CronExpression:
        from django_posixcron.cron import CronExpression

        return CronExpression(self.schedule)

    @property
    def is_running(self) -> bool:
        """Return whether a run has started since the last one finished.

        The claim sets only last_run_started_at; last_run_status and last_run_finished_at
        keep describing the previous run until the new one's outcome is recorded.
        """
        started, finished = self.last_run_started_at, self.last_run_finished_at
        return started is not None and (finished is None or finished < started)

    @property
    def state(self) -> str:
        if not self.declared:
            return "retired"
        return "paused" if self.paused else "active"

    def compute_due_at(self) -> dt.datetime | None:
        return due_at(self.next_run_at, self.retry_at, self.run_requested_at)

    def pause(self, now: dt.datetime | None = None) -> bool:
        """Pause the task, or take over the scheduler's own pause of it; the write touches
        only `paused` and why it was paused. False if an operator's pause already held it."""
        changed = bool(self._row().pause(now))
        self.paused = True
        self.paused_reason = ""
        # Written: a save() that sets them back must see a change to write.
        self._snapshot(["paused", "paused_reason"])
        return changed

    def resume(self, now: dt.datetime | None = None) -> bool:
        """Resume the task; the write touches only `paused` and why it was paused. False if
        it was not paused."""
        changed = bool(self._row().resume(now))
        self.paused = False
        self.paused_reason = ""
        self._snapshot(["paused", "paused_reason"])
        return changed

    def request_run(self, now: dt.datetime | None = None) -> bool:
        """Record a manual run request that the scheduler fires at its next tick; a request
        still pending is kept as it is (and False returned), and so is a retired task or one
        whose manual run at `now` is already recorded (TaskQuerySet.request_run)."""
        row = self._row()
        if now is None:
            now = database_now(row.db)
        changed = bool(row.request_run(now))
        if changed:
            self.run_requested_at = now
            self.due_at = earliest(self.due_at, now)
            self._snapshot(["run_requested_at", "due_at"])
        return changed

    def _row(self) -> TaskQuerySet:
        """Return this task's row on the database a save() of it would write to."""
        if self.pk is None:
            raise ValueError(
                f"Task {self.name!r} is not saved: pause(), resume() and request_run() change "
                "its row in the database; save it first (reconciling settings does)."
            )
        alias = router.db_for_write(Task, instance=self)
        return Task.objects.db_manager(alias).filter(pk=self.pk)


class RunQuerySet(models.QuerySet["Run"]):
    def running(self) -> RunQuerySet:
        return self.filter(status=RunStatus.RUNNING)

    def queued(self) -> RunQuerySet:
        return self.filter(status=RunStatus.QUEUED)

    def unfinished(self) -> RunQuerySet:
        """Queued or running: the runs overlap=skip waits for."""
        return self.filter(status__in=UNFINISHED_STATUSES)

    def finished(self) -> RunQuerySet:
        """Runs with an outcome: the ones history pruning and the admin may delete."""
        return self.exclude(status__in=UNFINISHED_STATUSES)

    def handed_off(self) -> RunQuerySet:
        return self.exclude(backend="")

    def local(self) -> RunQuerySet:
        return self.filter(backend="")

    def orphaned(self, own: SchedulerProcess, heartbeat_before: dt.datetime) -> RunQuerySet:
        """Running runs of other processes that stopped, went silent, or left no row.

        Only runs executed by schedulers: a handed-off run lives by its worker's heartbeat
        (silent_workers), never by the scheduler that queued it.
        """
        return self.filter(orphaned_q(own, heartbeat_before))

    def silent_workers(self, heartbeat_before: dt.datetime) -> RunQuerySet:
        """Handed-off runs whose worker stopped heartbeating while running them."""
        return self.filter(silent_worker_q(heartbeat_before))

    def past_start_deadline(self, now: dt.datetime) -> RunQuerySet:
        """Queued runs no worker started before their start_deadline."""
        return self.filter(past_start_deadline_q(now))

    def presumed_lost(
        self, own: SchedulerProcess, heartbeat_before: dt.datetime, now: dt.datetime
    ) -> RunQuerySet:
        """The three above in one query: what a tick marks lost."""
        return self.filter(
            orphaned_q(own, heartbeat_before)
            | silent_worker_q(heartbeat_before)
            | past_start_deadline_q(now)
        )


def orphaned_q(own: SchedulerProcess, heartbeat_before: dt.datetime) -> Q:
    return (
        Q(status=RunStatus.RUNNING, backend="")
        & ~Q(process_id=own.pk)
        & (
            Q(process__isnull=True)
            | Q(process__last_heartbeat_at__lt=heartbeat_before)
            | Q(process__stopped_at__isnull=False)
        )
    )


def silent_worker_q(heartbeat_before: dt.datetime) -> Q:
    return (
        Q(status=RunStatus.RUNNING)
        & ~Q(backend="")
        & (Q(heartbeat_at__isnull=True) | Q(heartbeat_at__lt=heartbeat_before))
    )


def past_start_deadline_q(now: dt.datetime) -> Q:
    return Q(status=RunStatus.QUEUED, start_deadline_at__lt=now)


class Run(models.Model):
    """One execution (or recorded skip) of a task."""

    # No index of its own: the unique constraint and posixcron_run_task_sched both lead with
    # the task, and serve every lookup by task (the admin, the overlap check, the cascade on
    # delete). A third index on the column cost one more index write for every run inserted,
    # given its outcome (which changes indexed columns) or deleted.
    task = models.ForeignKey(
        Task,
        on_delete=models.CASCADE,
        related_name="runs",
        verbose_name=_("task"),
        db_index=False,
    )
    trigger = models.CharField(_("trigger"), max_length=8, choices=Trigger.choices)
    status = models.CharField(_("status"), max_length=16, choices=RunStatus.choices)
    # The occurrence instant (cron), or the retry or manual-request instant.
    scheduled_for = models.DateTimeField(_("scheduled for"))
    started_at = models.DateTimeField(_("started"), null=True, blank=True)
    finished_at = models.DateTimeField(_("finished"), null=True, blank=True)
    duration = models.DurationField(_("duration"), null=True, blank=True)
    error = models.TextField(_("error"), blank=True)
    traceback = models.TextField(_("traceback"), blank=True)
    process = models.ForeignKey(
        "SchedulerProcess",
        on_delete=models.SET_NULL,
        null=True,
        blank=True,
        related_name="runs",
        verbose_name=_("scheduler process"),
    )
    # host:pid, kept when the process row is gone.
    process_label = models.CharField(_("process"), max_length=255, blank=True)
    # The cron occurrence the run serves (a retry's: the one whose failure it retries; a
    # manual run's: its request instant), and its attempt at it (see DESIGN section 6).
    occurrence = models.DateTimeField(_("occurrence"), null=True, blank=True)
    attempt = models.PositiveIntegerField(_("attempt"), default=1, db_default=1)
    # Hand-off to Django Tasks: the backend alias and the id of its result (empty for a run
    # executed by a scheduler), when a queued run is lost if no worker started it, the worker
    # running it (host:pid) and its last heartbeat for this run.
    backend = models.CharField(_("backend"), max_length=100, blank=True, default="", db_default="")
    result_id = models.CharField(
        _("backend result id"), max_length=255, blank=True, default="", db_default=""
    )
    start_deadline_at = models.DateTimeField(_("start deadline"), null=True, blank=True)
    worker = models.CharField(_("worker"), max_length=255, blank=True, default="", db_default="")
    heartbeat_at = models.DateTimeField(_("worker heartbeat"), null=True, blank=True)

    objects = RunQuerySet.as_manager()

    class Meta:
        verbose_name = _("run")
        verbose_name_plural = _("runs")
        ordering = ["-scheduled_for", "-id"]
        constraints = [
            # Exactly-once per occurrence is a property of the database, not of a lock.
            models.UniqueConstraint(
                fields=["task", "trigger", "scheduled_for"],
                name="posixcron_run_once_per_occurrence",
            ),
        ]
        indexes = [
            models.Index(fields=["task", "-scheduled_for"], name="posixcron_run_task_sched"),
            models.Index(fields=["status", "process"], name="posixcron_run_status_proc"),
            # Not declared here: posixcron_run_unfinished, on task_id where the run is queued
            # or running, made by migration 0006 on PostgreSQL and SQLite only (MariaDB has no
            # partial indexes, and declared here it would be a full index and a warning).
            models.Index(fields=["scheduled_for"], name="posixcron_run_scheduled_for"),
            # History pruning: runs that finished more than HISTORY_DAYS ago.
            models.Index(fields=["finished_at"], name="posixcron_run_finished_at"),
        ]

    def __str__(self) -> str:
        # The task's name when the task came with the run (the admin's pages select it),
        # else its id: printing a run never costs a query.
        # With its task, the instant in the task's zone, as the admin shows every time of a
        # run (its page's breadcrumb, the delete confirmation and messages print the run).
        which: object = self.task_id
        when = self.scheduled_for
        if Run.task.field.is_cached(self):
            which = self.task.name
            # A zone this host lacks; an instant near year 9999 whose wall time is past it.
            with contextlib.suppress(ValueError, LookupError, OverflowError):
                when = in_zone(when, self.task.timezone)
        return f"{which}:{self.trigger}@{when.isoformat()}"


class OverdueAlert(models.Model):
    """One row per overdue episode signalled: the task and the due time it was overdue for.

    Inserting the row is how one scheduler of the fleet wins the episode and sends
    ``task_overdue``: the insert touches no task row, so a task whose row another transaction
    holds locked (a scheduler frozen in the middle of its claim) is still signalled once. The
    foreign key has no database constraint for the same reason: checking it would wait for
    that lock. Rows of episodes that ended are pruned by the scheduler.
    """

    # The unique constraint's index (task first) serves every lookup by task.
    task = models.ForeignKey(
        Task, on_delete=models.CASCADE, db_constraint=False, db_index=False, related_name="+"
    )
    due_at = models.DateTimeField(_("due at"))
    signalled_at = models.DateTimeField(_("signalled"), default=dj_timezone.now)

    class Meta:
        verbose_name = _("overdue alert")
        verbose_name_plural = _("overdue alerts")
        constraints = [
            models.UniqueConstraint(fields=["task", "due_at"], name="posixcron_overdue_once"),
        ]

    def __str__(self) -> str:
        return f"task {self.task_id} overdue for {self.due_at.isoformat()}"


class SchedulerProcessQuerySet(models.QuerySet["SchedulerProcess"]):
    def live(self, now: dt.datetime, stale_after: dt.timedelta) -> SchedulerProcessQuerySet:
        return self.filter(stopped_at__isnull=True, last_heartbeat_at__gte=now - stale_after)


class SchedulerProcess(models.Model):
    """One row per `runscheduler` process, so runs owned by a dead process can be found."""

    hostname = models.CharField(_("host"), max_length=255)
    pid = models.PositiveIntegerField(_("pid"))
    started_at = models.DateTimeField(_("started"), default=dj_timezone.now)
    last_heartbeat_at = models.DateTimeField(_("last heartbeat"), default=dj_timezone.now)
    stopped_at = models.DateTimeField(_("stopped"), null=True, blank=True)
    version = models.CharField(_("version"), max_length=32, blank=True)
    # The digest of the DeclarationSet this process declares: "each scheduler records what it
    # declares with its process row". Empty for a process that declared nothing (--once of an
    # older version, a row written by hand).
    declaration_set = models.CharField(_("declaration set"), max_length=64, blank=True)

    objects = SchedulerProcessQuerySet.as_manager()

    class Meta:
        verbose_name = _("scheduler process")
        verbose_name_plural = _("scheduler processes")
        ordering = ["-last_heartbeat_at"]
        indexes = [
            models.Index(fields=["last_heartbeat_at"], name="posixcron_proc_heartbeat"),
        ]

    def __str__(self) -> str:
        return self.label

    @property
    def label(self) -> str:
        return f"{self.hostname}:{self.pid}"

    def is_live(self, now: dt.datetime, stale_after: dt.timedelta) -> bool:
        """Whether this row counts as a live process at `now`: the rule of live()."""
        beat = self.last_heartbeat_at
        return self.stopped_at is None and beat is not None and beat >= now - stale_after


class DeclarationSet(models.Model):
    """The definition hash of every task one settings module declares, stored once.

    The processes of one deploy declare the same set, so a fleet of tens of processes running
    two versions stores two rows, whatever the number of tasks; a process names its set by
    digest. Rows no process names any more are pruned with the process rows.
    """

    digest = models.CharField(_("digest"), max_length=64, unique=True)
    # {task name: definition hash}
    hashes = models.JSONField(_("definition hashes"), default=dict)
    created_at = models.DateTimeField(_("created"), default=dj_timezone.now)

    class Meta:
        verbose_name = _("declaration set")
        verbose_name_plural = _("declaration sets")

    def __str__(self) -> str:
        return f"{self.digest[:12]} ({len(self.hashes)} tasks)"


class RunCount(models.Model):
    """How many runs of a task reached a final status by a trigger, ever.

    Incremented in the transaction that writes the status, never decremented: the
    ``posixcron_runs_total`` counter "never goes down, whatever deletes Run rows: pruning, the
    admin, the ORM". Keyed by task name, not by a foreign key, so deleting a task's row does
    not take its count with it either.
    """

    task_name = models.CharField(_("task"), max_length=100)
    trigger = models.CharField(_("trigger"), max_length=8, choices=Trigger.choices)
    status = models.CharField(_("status"), max_length=16, choices=RunStatus.choices)
    count = models.BigIntegerField(_("count"), default=0)

    class Meta:
        verbose_name = _("run count")
        verbose_name_plural = _("run counts")
        constraints = [
            models.UniqueConstraint(
                fields=["task_name", "trigger", "status"], name="posixcron_runcount_key"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.task_name}:{self.trigger}:{self.status}={self.count}"
