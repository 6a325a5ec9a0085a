"""The operators' view: tasks, their state and history; pause, resume and run now."""

from __future__ import annotations

import datetime as dt
import logging
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin, messages
from django.contrib.admin.options import IncorrectLookupParameters
from django.contrib.admin.utils import unquote
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.http import (
    Http404,
    HttpRequest,
    HttpResponse,
    HttpResponseNotAllowed,
    HttpResponseRedirect,
)
from django.urls import URLPattern, path, reverse
from django.utils import timezone
from django.utils.formats import date_format
from django.utils.functional import cached_property
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.timesince import timesince, timeuntil
from django.utils.translation import gettext, ngettext
from django.utils.translation import gettext_lazy as _

from django_posixcron.conf import poll_interval_or_default
from django_posixcron.models import (
    FAILURE_STATUSES,
    Run,
    RunStatus,
    SchedulerProcess,
    Task,
    TaskQuerySet,
)
from django_posixcron.scheduler import stale_after
from django_posixcron.timing import expression, occurrences, zone

if TYPE_CHECKING:
    TaskAdminBase = admin.ModelAdmin[Task]
    RunAdminBase = admin.ModelAdmin[Run]
    ProcessAdminBase = admin.ModelAdmin[SchedulerProcess]
    PaginatorBase = Paginator[Any]
else:
    # ModelAdmin is only subscriptable at run time with django-stubs-ext's monkeypatch.
    TaskAdminBase = RunAdminBase = ProcessAdminBase = admin.ModelAdmin
    PaginatorBase = Paginator

logger = logging.getLogger(__name__)

NEXT_OCCURRENCES = 5
RECENT_RUNS = 10
# The header lists live processes; a fleet larger than this is summarised, so the list page
# never renders an unbounded list.
HEADER_PROCESSES = 20
# The run list's task filter offers at most this many tasks (10,000 would not be a menu);
# past it, the operator narrows by searching the task name or from the task's own page.
TASK_FILTER_CHOICES = 50

# The run list counts at most this many rows ("more than 10,000 runs"): an exact COUNT(*) of a
# million-row history on every page view is a full scan on PostgreSQL.
RUN_COUNT_CAP = 10_000
# Runs are deleted in batches of this size, so a bulk delete never holds one huge transaction.
RUN_DELETE_BATCH = 1000

PAUSE_PERMISSION = "django_posixcron.pause_task"
RUN_PERMISSION = "django_posixcron.run_task"


def _poll_interval() -> dt.timedelta:
    return dt.timedelta(seconds=poll_interval_or_default())


def _stale_after() -> dt.timedelta:
    """Return the heartbeat age past which the scheduler itself counts a process as dead."""
    return stale_after(poll_interval_or_default())


def _in_zone(value: dt.datetime, tz: str) -> str:
    """Return `value` as wall-clock time in zone `tz`, with the zone's abbreviation."""
    try:
        local = timezone.localtime(value, zone(tz))
    except (ValueError, LookupError):
        # A retired task may carry a zone this Python no longer knows; UTC still says when.
        local = timezone.localtime(value, dt.UTC)
    # Cron occurrences fall on whole minutes; retries and manual runs do not, and "15:15"
    # for a run 20 s after the 15:15 failure it retries would hide what happened.
    if local.second or local.microsecond:
        return date_format(local, "Y-m-d H:i:s T")
    return date_format(local, "Y-m-d H:i T")


def _relative(value: dt.datetime, now: dt.datetime) -> str:
    """Return "in 3 minutes", "5 minutes ago", "in 20 seconds" or "now"."""
    gap = abs(value - now)
    if gap < dt.timedelta(seconds=1):
        return gettext("now")
    if gap < dt.timedelta(minutes=1):
        seconds = int(gap.total_seconds())
        if value > now:
            return ngettext("in %(n)d second", "in %(n)d seconds", seconds) % {"n": seconds}
        return ngettext("%(n)d second ago", "%(n)d seconds ago", seconds) % {"n": seconds}
    if value > now:
        return gettext("in %(delta)s") % {"delta": timeuntil(value, now, depth=1)}
    return gettext("%(delta)s ago") % {"delta": timesince(value, now, depth=1)}


def _duration(delta: dt.timedelta | None) -> str:
    """Return a short human duration: "0.25 s", "42 s", "3 min 5 s", "2 h 4 min"."""
    if delta is None:
        return ""
    seconds = delta.total_seconds()
    if seconds < 10:
        return gettext("%(seconds).2f s") % {"seconds": seconds}
    whole = int(seconds)
    if whole < 60:
        return gettext("%(seconds)d s") % {"seconds": whole}
    if whole < 3600:
        return gettext("%(minutes)d min %(seconds)d s") % {
            "minutes": whole // 60,
            "seconds": whole % 60,
        }
    return gettext("%(hours)d h %(minutes)d min") % {
        "hours": whole // 3600,
        "minutes": whole % 3600 // 60,
    }


def _when(value: dt.datetime, tz: str, now: dt.datetime) -> SafeString:
    """Return the wall-clock time in zone `tz` above its relative form ("in 3 minutes")."""
    return format_html(
        '<span class="posixcron-time">{}</span><br><span class="posixcron-muted">{}</span>',
        _in_zone(value, tz),
        _relative(value, now),
    )


def _badge(kind: str, label: str) -> SafeString:
    return format_html('<span class="posixcron-badge posixcron-{}">{}</span>', kind, label)


def status_badge(status: str) -> SafeString:
    """Return the coloured badge for a run status."""
    if not status:
        return format_html("{}", "—")
    kind = "failure" if status in FAILURE_STATUSES else status
    return _badge(kind, str(RunStatus(status).label) if status in RunStatus.values else status)


STATE_LABELS = {"active": _("active"), "paused": _("paused"), "retired": _("retired")}


def describe_schedule(schedule: str) -> str:
    """Return the schedule's plain-English description, or why there is none."""
    try:
        return expression(schedule).describe()
    except ValueError as exc:
        # Only a retired task can hold a schedule the engine now rejects: checks refuse
        # declared ones. The page must still render.
        return gettext("Invalid schedule: %(error)s") % {"error": exc}


class StateFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return list(STATE_LABELS.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        if value == "active":
            return queryset.filter(declared=True, paused=False)
        if value == "paused":
            return queryset.filter(declared=True, paused=True)
        if value == "retired":
            return queryset.filter(declared=False)
        return queryset


class LastStatusFilter(admin.SimpleListFilter):
    """The last run's status, with "running" (a run started after the last one finished)."""

    title = _("last run status")
    # Django's own parameter for a plain field filter, so existing links keep working.
    parameter_name = "last_run_status__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        finals = [(value, label) for value, label in RunStatus.choices if value != "running"]
        return [("running", RunStatus.RUNNING.label), *finals, ("never", _("never run"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        if not value:
            return queryset
        if value == "never":
            return queryset.filter(last_run_started_at__isnull=True)
        if value == "running":
            return cast(TaskQuerySet, queryset).running()
        if value not in RunStatus.values:
            raise IncorrectLookupParameters(value)
        return queryset.filter(last_run_status=value)


class HealthFilter(admin.SimpleListFilter):
    """The header's "failing" and "overdue" counts link here."""

    title = _("health")
    parameter_name = "health"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("failing", _("failing")), ("overdue", _("overdue"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        if value == "failing":
            return queryset.filter(pk__in=Task.objects.failing().values("pk"))
        if value == "overdue":
            overdue = Task.objects.overdue(timezone.now(), slack=_poll_interval())
            return queryset.filter(pk__in=overdue.values("pk"))
        return queryset


DEFINITION_FIELDS = (
    "name",
    "schedule_display",
    "timezone",
    "callable_path",
    "kwargs",
    "retry_delay",
    "overlap",
    "timeout",
    "description",
    "definition_hash",
)
STATE_FIELDS = (
    "state_display",
    "last_run_display",
    "next_run_display",
    "retry_display",
    "run_requested_display",
    "due_at",
    "created_at",
    "updated_at",
)


@admin.register(Task)
class TaskAdmin(TaskAdminBase):
    list_display = (
        "name",
        "schedule_display",
        "timezone",
        "state_display",
        "last_run_display",
        "next_run_display",
        "retry_display",
    )
    list_filter = (StateFilter, HealthFilter, LastStatusFilter, "timezone")
    search_fields = ("name", "callable_path", "description")
    ordering = ("name",)
    list_per_page = 100
    actions = ("pause_selected", "resume_selected", "run_selected")
    fieldsets = (
        (_("Definition (from settings)"), {"fields": DEFINITION_FIELDS}),
        (_("State"), {"fields": STATE_FIELDS}),
    )
    # Every field on the task page is read-only: definitions come from settings.
    readonly_fields = DEFINITION_FIELDS + STATE_FIELDS

    class Media:
        css = {"all": ("django_posixcron/admin.css",)}

    # Columns ---------------------------------------------------------------------------

    @admin.display(description=_("schedule"), ordering="schedule")
    def schedule_display(self, obj: Task) -> SafeString:
        return format_html(
            '<code class="posixcron-schedule">{}</code>'
            '<br><span class="posixcron-describe">{}</span>',
            obj.schedule,
            describe_schedule(obj.schedule),
        )

    @admin.display(description=_("state"))
    def state_display(self, obj: Task) -> SafeString:
        return _badge(obj.state, str(STATE_LABELS[obj.state]))

    @admin.display(description=_("last run"), ordering="last_run_started_at")
    def last_run_display(self, obj: Task) -> SafeString:
        if obj.last_run_started_at is None:
            return format_html('<span class="posixcron-muted">{}</span>', gettext("never"))
        now = timezone.now()
        if obj.is_running:
            # last_run_status and last_run_finished_at still describe the previous run.
            badge = status_badge(RunStatus.RUNNING)
            took = gettext("for %(elapsed)s") % {"elapsed": timesince(obj.last_run_started_at, now)}
        else:
            badge = status_badge(obj.last_run_status)
            assert obj.last_run_finished_at is not None
            took = _duration(obj.last_run_finished_at - obj.last_run_started_at)
        return format_html(
            "{}<br>{} {}", _when(obj.last_run_started_at, obj.timezone, now), badge, took
        )

    @admin.display(description=_("next run"), ordering="next_run_at")
    def next_run_display(self, obj: Task) -> SafeString:
        if not obj.declared:
            return format_html('<span class="posixcron-muted">{}</span>', gettext("never"))
        now = timezone.now()
        parts = []
        if obj.paused:
            # A paused task does not fire: its cursor time would be a promise it does not keep.
            parts.append(_badge("paused", gettext("paused")))
        elif obj.next_run_at is not None:
            parts.append(_when(obj.next_run_at, obj.timezone, now))
        if obj.run_requested_at is not None:
            parts.append(
                _badge(
                    "requested",
                    gettext("run requested %(when)s")
                    % {"when": _relative(obj.run_requested_at, now)},
                )
            )
        if not parts:
            return format_html("{}", "—")
        return format_html_join(mark_safe("<br>"), "{}", ((part,) for part in parts))

    @admin.display(description=_("pending retry"), ordering="retry_at")
    def retry_display(self, obj: Task) -> SafeString:
        if obj.retry_at is None:
            return format_html("{}", "—")
        return _when(obj.retry_at, obj.timezone, timezone.now())

    @admin.display(description=_("run requested"))
    def run_requested_display(self, obj: Task) -> str:
        if obj.run_requested_at is None:
            return "—"
        when = _in_zone(obj.run_requested_at, obj.timezone)
        return f"{when} ({_relative(obj.run_requested_at, timezone.now())})"

    # Permissions -----------------------------------------------------------------------

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        # Definitions come from settings; state changes go through the pause, resume and
        # run-now views, each behind its own permission.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        # A declared task would be recreated by the next reconciliation; only retired ones,
        # which settings no longer name, can go (with their history).
        if obj is not None and obj.declared:
            return False
        return super().has_delete_permission(request, obj)

    def has_pause_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        return request.user.has_perm(PAUSE_PERMISSION) and self.has_view_permission(request)

    def has_run_permission(self, request: HttpRequest, obj: Task | None = None) -> bool:
        return request.user.has_perm(RUN_PERMISSION) and self.has_view_permission(request)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[Any, int], set[str], list[Any]]:
        """Summarise the deletion instead of listing every run (a task may have 40,000)."""
        tasks = list(objs)
        perms_needed: set[str] = set()
        run_count = Run.objects.filter(task__in=tasks).count()
        summary: list[Any] = []
        for task in tasks:
            if not self.has_delete_permission(request, task):
                perms_needed.add(gettext("%(task)s (declared in settings)") % {"task": task.name})
            summary.append(format_html("{}: {}", str(Task._meta.verbose_name).capitalize(), task))
        if run_count:
            summary.append(
                ngettext("%(count)d run of history", "%(count)d runs of history", run_count)
                % {"count": run_count}
            )
            run_admin = self.admin_site._registry.get(Run)
            if run_admin is not None and not run_admin.has_delete_permission(request):
                perms_needed.add(str(Run._meta.verbose_name_plural))
        model_count = {Task._meta.verbose_name_plural: len(tasks)}
        if run_count:
            model_count[Run._meta.verbose_name_plural] = run_count
        return summary, model_count, perms_needed, []

    # List page -------------------------------------------------------------------------

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        now = timezone.now()
        processes = list(
            SchedulerProcess.objects.live(now, _stale_after()).order_by("hostname", "pid")[
                : HEADER_PROCESSES + 1
            ]
        )
        context = {
            "posixcron_processes": processes[:HEADER_PROCESSES],
            "posixcron_more_processes": len(processes) > HEADER_PROCESSES,
            "posixcron_failing": Task.objects.failing().count(),
            "posixcron_overdue": Task.objects.overdue(now, slack=_poll_interval()).count(),
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra_context=context)

    # Actions ---------------------------------------------------------------------------

    @admin.action(description=_("Pause selected tasks"), permissions=["pause"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        self._bulk_pause(request, queryset, paused=True)

    @admin.action(description=_("Resume selected tasks"), permissions=["pause"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        self._bulk_pause(request, queryset, paused=False)

    def _bulk_pause(self, request: HttpRequest, queryset: QuerySet[Task], *, paused: bool) -> None:
        retired = queryset.filter(declared=False).count()
        # One UPDATE touching only `paused`, so a concurrent claim or outcome is never lost.
        changed = (
            queryset.filter(declared=True)
            .exclude(paused=paused)
            .update(paused=paused, updated_at=timezone.now())
        )
        action = "admin_pause" if paused else "admin_resume"
        logger.info(
            "Tasks %s from the admin count=%d user=%s",
            "paused" if paused else "resumed",
            changed,
            request.user.get_username(),
            extra={"action": action},
        )
        if paused:
            text = ngettext("Paused %(count)d task.", "Paused %(count)d tasks.", changed)
        else:
            text = ngettext("Resumed %(count)d task.", "Resumed %(count)d tasks.", changed)
        self.message_user(request, text % {"count": changed}, messages.SUCCESS)
        if retired:
            self._warn_retired(request, retired)

    @admin.action(description=_("Run selected tasks now"), permissions=["run"])
    def run_selected(self, request: HttpRequest, queryset: QuerySet[Task]) -> None:
        now = timezone.now()
        retired = queryset.filter(declared=False).count()
        requested = 0
        paused = 0
        for task in queryset.filter(declared=True).only("pk", "name", "paused", "due_at"):
            task.request_run(now)
            requested += 1
            paused += task.paused
            logger.info(
                "Run requested from the admin task=%s user=%s",
                task.name,
                request.user.get_username(),
                extra={"action": "admin_run_now"},
            )
        self.message_user(
            request,
            ngettext(
                "Requested a run of %(count)d task: a scheduler starts it at its next tick.",
                "Requested a run of %(count)d tasks: a scheduler starts them at its next tick.",
                requested,
            )
            % {"count": requested},
            messages.SUCCESS,
        )
        if paused:
            self._warn_paused(request, paused)
        if retired:
            self._warn_retired(request, retired)

    def _warn_retired(self, request: HttpRequest, count: int) -> None:
        self.message_user(
            request,
            ngettext(
                "Left %(count)d retired task alone: it is no longer in settings and never runs.",
                "Left %(count)d retired tasks alone: they are no longer in settings and never run.",
                count,
            )
            % {"count": count},
            messages.WARNING,
        )

    def _warn_paused(self, request: HttpRequest, count: int) -> None:
        self.message_user(
            request,
            ngettext(
                "%(count)d of them is paused: its run starts once it is resumed.",
                "%(count)d of them are paused: their runs start once they are resumed.",
                count,
            )
            % {"count": count},
            messages.WARNING,
        )

    # Task page -------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        info = self.opts.app_label, self.opts.model_name
        wrap = self.admin_site.admin_view
        custom = [
            path(
                "<path:object_id>/pause/",
                wrap(self.pause_view),
                name="{}_{}_pause".format(*info),
            ),
            path(
                "<path:object_id>/resume/",
                wrap(self.resume_view),
                name="{}_{}_resume".format(*info),
            ),
            path(
                "<path:object_id>/run/",
                wrap(self.run_view),
                name="{}_{}_run".format(*info),
            ),
        ]
        return custom + super().get_urls()

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        obj = self.get_object(request, unquote(object_id))
        if obj is not None and self.has_view_permission(request, obj):
            context.update(self._task_page_context(request, obj))
        return super().change_view(request, object_id, form_url, extra_context=context)

    def _task_page_context(self, request: HttpRequest, obj: Task) -> dict[str, Any]:
        now = timezone.now()
        try:
            upcoming = [
                _in_zone(instant, obj.timezone) + " (" + _relative(instant, now) + ")"
                for instant in occurrences(obj.schedule, obj.timezone, now, NEXT_OCCURRENCES)
            ]
        except (ValueError, LookupError):
            upcoming = []
        run_admin = self.admin_site._registry.get(Run)
        can_view_runs = run_admin is not None and run_admin.has_view_permission(request)
        recent: list[dict[str, Any]] = []
        if can_view_runs:
            for run in obj.runs.order_by("-scheduled_for", "-id")[:RECENT_RUNS]:
                recent.append(
                    {
                        "url": reverse("admin:django_posixcron_run_change", args=[run.pk]),
                        "scheduled_for": _in_zone(run.scheduled_for, obj.timezone),
                        "trigger": run.get_trigger_display(),
                        "status": status_badge(run.status),
                        "duration": _duration(run.duration),
                        "error": run.error,
                    }
                )
        info = self.opts.app_label, self.opts.model_name
        return {
            "posixcron_task": obj,
            "posixcron_upcoming": upcoming,
            "posixcron_can_view_runs": can_view_runs,
            "posixcron_recent_runs": recent,
            "posixcron_all_runs_url": reverse("admin:django_posixcron_run_changelist")
            + f"?task={obj.pk}",
            "posixcron_can_pause": obj.declared and self.has_pause_permission(request, obj),
            "posixcron_can_run": obj.declared and self.has_run_permission(request, obj),
            "posixcron_pause_url": reverse("admin:{}_{}_pause".format(*info), args=[obj.pk]),
            "posixcron_resume_url": reverse("admin:{}_{}_resume".format(*info), args=[obj.pk]),
            "posixcron_run_url": reverse("admin:{}_{}_run".format(*info), args=[obj.pk]),
        }

    def _state_change(
        self,
        request: HttpRequest,
        object_id: str,
        allowed: Callable[[HttpRequest, Task | None], bool],
        change: Callable[[Task], str],
    ) -> HttpResponse:
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        if not allowed(request, None):
            raise PermissionDenied
        obj = self.get_object(request, unquote(object_id))
        if obj is None:
            raise Http404
        if not obj.declared:
            self._warn_retired(request, 1)
        else:
            self.log_change(request, obj, change(obj))
        return HttpResponseRedirect(
            reverse(f"admin:{self.opts.app_label}_{self.opts.model_name}_change", args=[obj.pk])
        )

    def pause_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._pause_view(request, object_id, paused=True)

    def resume_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        return self._pause_view(request, object_id, paused=False)

    def _pause_view(self, request: HttpRequest, object_id: str, *, paused: bool) -> HttpResponse:
        def change(task: Task) -> str:
            if paused:
                task.pause()
                done, history = gettext("Paused %(task)s."), gettext("Paused.")
            else:
                task.resume()
                done, history = gettext("Resumed %(task)s."), gettext("Resumed.")
            logger.info(
                "Task %s from the admin task=%s user=%s",
                "paused" if paused else "resumed",
                task.name,
                request.user.get_username(),
                extra={"action": "admin_pause" if paused else "admin_resume"},
            )
            self.message_user(request, done % {"task": task.name}, messages.SUCCESS)
            return history

        return self._state_change(request, object_id, self.has_pause_permission, change)

    def run_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        def change(task: Task) -> str:
            # Never runs task code here: the request is a timestamp a scheduler claims.
            task.request_run(timezone.now())
            logger.info(
                "Run requested from the admin task=%s user=%s",
                task.name,
                request.user.get_username(),
                extra={"action": "admin_run_now"},
            )
            self.message_user(
                request,
                gettext("Requested a run of %(task)s: a scheduler starts it at its next tick.")
                % {"task": task.name},
                messages.SUCCESS,
            )
            if task.paused:
                self._warn_paused(request, 1)
            return gettext("Requested a run.")

        return self._state_change(request, object_id, self.has_run_permission, change)


class RunTaskFilter(admin.SimpleListFilter):
    """Filter runs by task without turning 10,000 tasks into one menu."""

    title = _("task")
    parameter_name = "task"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, Any]]:
        choices = list(
            Task.objects.order_by("name").values_list("pk", "name")[:TASK_FILTER_CHOICES]
        )
        value = self.value()
        if value and value.isdigit() and all(str(pk) != value for pk, _name in choices):
            choices += list(Task.objects.filter(pk=int(value)).values_list("pk", "name"))
        return [(str(pk), name) for pk, name in choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        if not value:
            return queryset
        if not value.isdigit():
            raise IncorrectLookupParameters(value)
        return queryset.filter(task_id=int(value))


class CappedPaginator(PaginatorBase):
    """A paginator that counts at most RUN_COUNT_CAP rows; `capped` says it stopped there."""

    cap = RUN_COUNT_CAP
    capped = False

    @cached_property
    def count(self) -> int:
        # COUNT(*) over a LIMIT subquery: it stops reading after cap + 1 rows.
        rows = cast("QuerySet[Any]", self.object_list)
        counted = rows.order_by()[: self.cap + 1].count()
        self.capped = counted > self.cap
        return min(counted, self.cap)


@admin.register(Run)
class RunAdmin(RunAdminBase):
    list_display = (
        "scheduled_for_display",
        "task_link",
        "trigger",
        "status_display",
        "started_display",
        "duration_display",
        "process_label",
    )
    list_display_links = ("scheduled_for_display",)
    list_filter = (RunTaskFilter, "status", "trigger")
    list_select_related = ("task",)
    search_fields = ("task__name",)
    # Drawn by the posixcron_date_hierarchy tag (templates/admin/django_posixcron/run/), which
    # probes the scheduled_for index per period instead of a DISTINCT over the whole history.
    date_hierarchy = "scheduled_for"
    # A million runs: never count the whole table, not for "N total", not for the pages,
    # not for the filters' facet counts.
    show_full_result_count = False
    paginator = CappedPaginator
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    fields = (
        "task",
        "trigger",
        "status_display",
        "scheduled_for_display",
        "started_display",
        "finished_display",
        "duration_display",
        "process_label",
        "error_display",
        "traceback_display",
    )
    readonly_fields = fields

    class Media:
        css = {"all": ("django_posixcron/admin.css",)}

    @admin.display(description=_("task"), ordering="task__name")
    def task_link(self, obj: Run) -> SafeString:
        return format_html(
            '<a href="{}">{}</a>',
            reverse("admin:django_posixcron_task_change", args=[obj.task_id]),
            obj.task.name,
        )

    @admin.display(description=_("scheduled for"), ordering="scheduled_for")
    def scheduled_for_display(self, obj: Run) -> str:
        return _in_zone(obj.scheduled_for, obj.task.timezone)

    @admin.display(description=_("started"), ordering="started_at")
    def started_display(self, obj: Run) -> str:
        return _in_zone(obj.started_at, obj.task.timezone) if obj.started_at else "—"

    @admin.display(description=_("finished"))
    def finished_display(self, obj: Run) -> str:
        return _in_zone(obj.finished_at, obj.task.timezone) if obj.finished_at else "—"

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        context = dict(extra_context or {})
        run = self.get_object(request, unquote(object_id))
        if run is not None:
            # Run.__str__ is an identifier for logs; operators read the task and the time.
            context.setdefault(
                "subtitle",
                gettext("%(task)s, %(trigger)s run scheduled for %(when)s")
                % {
                    "task": run.task.name,
                    "trigger": run.get_trigger_display(),
                    "when": _in_zone(run.scheduled_for, run.task.timezone),
                },
            )
        return super().change_view(request, object_id, form_url, extra_context=context)

    @admin.display(description=_("status"), ordering="status")
    def status_display(self, obj: Run) -> SafeString:
        return status_badge(obj.status)

    @admin.display(description=_("duration"), ordering="duration")
    def duration_display(self, obj: Run) -> str:
        return _duration(obj.duration) or "—"

    @admin.display(description=_("error"))
    def error_display(self, obj: Run) -> SafeString:
        if not obj.error:
            return format_html("{}", "—")
        return format_html('<pre class="posixcron-error">{}</pre>', obj.error)

    @admin.display(description=_("traceback"))
    def traceback_display(self, obj: Run) -> SafeString:
        if not obj.traceback:
            return format_html("{}", "—")
        return format_html('<pre class="posixcron-traceback">{}</pre>', obj.traceback)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        # History is a record of what happened; only the scheduler writes it.
        return False

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[Any, int], set[str], list[Any]]:
        """Summarise the deletion: "Delete selected" over a year of history is 500,000 runs."""
        count = objs.count() if isinstance(objs, QuerySet) else len(objs)
        perms_needed: set[str] = set()
        if not self.has_delete_permission(request):
            perms_needed.add(str(Run._meta.verbose_name_plural))
        summary = [
            ngettext("%(count)d run of history", "%(count)d runs of history", count)
            % {"count": count}
        ]
        return summary, {Run._meta.verbose_name_plural: count}, perms_needed, []

    def log_deletions(self, request: HttpRequest, queryset: QuerySet[Run]) -> list[Any]:
        """Log one line for a bulk delete, not one admin LogEntry per run."""
        if not isinstance(queryset, QuerySet):
            # One run deleted from its own page: the usual admin history entry.
            return list(super().log_deletions(request, queryset))
        logger.info(
            "Runs deleted from the admin count=%d user=%s",
            queryset.count(),
            request.user.get_username(),
            extra={"action": "admin_delete_runs"},
        )
        return []

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[Run]) -> None:
        """Delete in batches, so no single transaction holds a million row locks."""
        while True:
            batch = list(queryset.order_by("pk").values_list("pk", flat=True)[:RUN_DELETE_BATCH])
            if not batch:
                return
            Run.objects.filter(pk__in=batch).delete()


@admin.register(SchedulerProcess)
class SchedulerProcessAdmin(ProcessAdminBase):
    list_display = ("label", "version", "started_at", "last_heartbeat_at", "stopped_at")
    search_fields = ("hostname",)
    readonly_fields = (
        "hostname",
        "pid",
        "version",
        "started_at",
        "last_heartbeat_at",
        "stopped_at",
    )
    show_full_result_count = False

    @admin.display(description=_("process"), ordering="hostname")
    def label(self, obj: SchedulerProcess) -> str:
        return obj.label

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(
        self, request: HttpRequest, obj: SchedulerProcess | None = None
    ) -> bool:
        return False

    def has_delete_permission(
        self, request: HttpRequest, obj: SchedulerProcess | None = None
    ) -> bool:
        # Deleting a live process's row would orphan its running runs, which other
        # schedulers then mark lost and retry while they still run: only stopped or dead
        # processes that own no running run can go.
        if obj is not None and (
            SchedulerProcess.objects.filter(pk=obj.pk).live(timezone.now(), _stale_after()).exists()
            or obj.runs.filter(status=RunStatus.RUNNING).exists()
        ):
            return False
        return super().has_delete_permission(request, obj)
