"""The task list and the task page: definitions read-only, state at a glance."""

from __future__ import annotations

import datetime as dt
import json
from typing import Any

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.auth import get_permission_codename
from django.core.exceptions import PermissionDenied
from django.db.models import Case, F, QuerySet, Value, When
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, reverse
from django.utils.html import format_html, format_html_join
from django.utils.safestring import SafeString, mark_safe
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_posixcron.admin import display, history
from django_posixcron.admin.actions import TaskStateActions
from django_posixcron.admin.display import badge, dash, muted, row_clock, when
from django_posixcron.admin.filters import HealthFilter, LastStatusFilter, StateFilter
from django_posixcron.admin.permissions import Guarded
from django_posixcron.db import app_alias
from django_posixcron.deployments import Pending, live_peers, pending_changes
from django_posixcron.models import Run, RunStatus, SchedulerProcess, Task
from django_posixcron.scheduling.rules import retry_replaced
from django_posixcron.timing import occurrences

NEXT_OCCURRENCES = 5
RECENT_RUNS = 10
# The header lists live processes; a fleet larger than this is summarised, so the list page
# never renders an unbounded list.
HEADER_PROCESSES = 20

# The sort keys of the time columns, the same on every database (each puts NULL at its own end
# by default). A task that never ran sorts as the oldest; one that will not fire (paused,
# retired) and one without a pending retry as the furthest: "next run" puts what fires first
# at the top. Sorting the other way reverses all of it.
LAST_RUN_ORDER = F("last_run_started_at").asc(nulls_first=True)
NEXT_RUN_ORDER = Case(
    When(declared=False, then=Value(None)),
    When(paused=True, then=Value(None)),
    default=F("next_run_at"),
).asc(nulls_last=True)
RETRY_ORDER = F("retry_at").asc(nulls_last=True)

DEFINITION_FIELDS = (
    "name",
    "schedule_display",
    "timezone",
    "callable_path",
    "kwargs_display",
    "retry_delay",
    "overlap",
    "timeout",
    "description",
    "definition_hash",
    "pending_change_display",
)
STATE_FIELDS = (
    "state_display",
    "last_run_display",
    "next_run_display",
    "retry_display",
    "run_requested_display",
    "last_success_display",
    "due_at_display",
    "created_display",
    "updated_display",
)


@admin.register(Task)
class TaskAdmin(Guarded, TaskStateActions):
    list_display = (
        "name",
        "schedule_display",
        "zone_display",
        "state_display",
        "last_run_display",
        "next_run_display",
        "retry_display",
    )
    list_filter = (StateFilter, HealthFilter, LastStatusFilter, "timezone")
    search_fields = ("name", "callable_path", "description")
    ordering = ("name",)
    list_per_page = 100
    fieldsets = (
        (_("Definition (from settings)"), {"fields": DEFINITION_FIELDS}),
        (_("State"), {"fields": STATE_FIELDS}),
    )
    # Every field on the task page is read-only: definitions come from settings.
    readonly_fields = DEFINITION_FIELDS + STATE_FIELDS

    class Media:
        css = {"all": ("django_posixcron/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Task]:
        # Each row brings the database's clock, which "in 3 minutes" and "for 5 minutes"
        # are measured from.
        return display.with_clock(super().get_queryset(request).using(app_alias()))

    # Columns ---------------------------------------------------------------------------

    @admin.display(description=_("keyword arguments"))
    def kwargs_display(self, obj: Task) -> SafeString:
        """The kwargs as indented JSON in a box that wraps and scrolls: the one-line default
        ran off the page for a large value."""
        if not obj.kwargs:
            return format_html("<code>{}</code>", json.dumps(obj.kwargs))
        return format_html(
            '<pre class="posixcron-kwargs">{}</pre>',
            json.dumps(obj.kwargs, indent=2, ensure_ascii=False),
        )

    @admin.display(description=_("schedule"), ordering="schedule")
    def schedule_display(self, obj: Task) -> SafeString:
        return format_html(
            '{}<br><span class="posixcron-describe">{}</span>',
            display.schedule_html(obj.schedule),
            display.describe_schedule(obj.schedule),
        )

    @admin.display(description=_("time zone"), ordering="timezone")
    def zone_display(self, obj: Task) -> SafeString:
        # A zone breaks after its slashes ("America/Argentina/" over "ComodRivadavia") rather
        # than widen the table past the window.
        return format_html_join(
            mark_safe("/<wbr>"), "{}", ((part,) for part in obj.timezone.split("/"))
        )

    @admin.display(description=_("state"))
    def state_display(self, obj: Task) -> SafeString:
        state = badge(obj.state, str(display.STATE_LABELS[obj.state]))
        if obj.declared and obj.paused and obj.paused_reason:
            # "The admin shows why it is paused": a pause the scheduler made says so.
            return format_html(
                '{}<span class="posixcron-describe posixcron-paused-reason">{}</span>',
                state,
                obj.paused_reason,
            )
        return state

    def recent_runs(self, obj: Task) -> SafeString:
        """Return the strip of recent runs; on the list page only, filled for the whole page
        at once by get_changelist_instance(). In the last-run cell, so no column is added
        to a list that already fills the page's width."""
        runs = getattr(obj, "posixcron_recent_runs", None)
        return history.strip(obj, runs) if runs else mark_safe("")

    @admin.display(description=_("last run"), ordering=LAST_RUN_ORDER)
    def last_run_display(self, obj: Task) -> SafeString:
        if obj.last_run_started_at is None:
            return muted(gettext("never"))
        now = row_clock(obj)
        if obj.is_running:
            # last_run_status and last_run_finished_at still describe the previous run. A
            # handed-off run may still wait for a worker: the newest of the recent runs says.
            recent: list[Run] = getattr(obj, "posixcron_recent_runs", None) or []
            waiting = bool(recent) and recent[-1].status == RunStatus.QUEUED
            status = display.status_badge(RunStatus.QUEUED if waiting else RunStatus.RUNNING)
            took = display.elapsed(obj.last_run_started_at, now)
        else:
            status = display.status_badge(obj.last_run_status)
            assert obj.last_run_finished_at is not None
            took = display.duration(obj.last_run_finished_at - obj.last_run_started_at)
        strip = self.recent_runs(obj)
        return format_html(
            "{}<br>{} {}{}{}",
            when(obj.last_run_started_at, obj.timezone, now),
            status,
            took,
            mark_safe("<br>") if strip else "",
            strip,
        )

    @admin.display(description=_("next run"), ordering=NEXT_RUN_ORDER)
    def next_run_display(self, obj: Task) -> SafeString:
        if not obj.declared:
            return muted(gettext("never"))
        now = row_clock(obj)
        parts = []
        if obj.paused:
            # A paused task does not fire: its cursor time would be a promise it does not keep.
            parts.append(badge("paused", gettext("paused")))
        elif obj.next_run_at is not None:
            parts.append(when(obj.next_run_at, obj.timezone, now))
        if obj.run_requested_at is not None:
            requested = display.relative(obj.run_requested_at, now)
            parts.append(
                badge("requested", gettext("run requested %(when)s") % {"when": requested})
            )
        if not parts:
            return dash()
        return format_html_join(mark_safe("<br>"), "{}", ((part,) for part in parts))

    @admin.display(description=_("pending retry"), ordering=RETRY_ORDER)
    def retry_display(self, obj: Task) -> SafeString:
        if obj.retry_at is None:
            return dash()
        replaced = retry_replaced(obj.retry_at, obj.next_run_at, obj.run_requested_at)
        if not obj.declared:
            # A retired task never fires, and its return to settings forgets the retry.
            note = gettext("never: the task is retired")
        elif replaced:
            # "When the next cron occurrence comes first, it fires first and consumes the
            # retry" (a requested run too), paused or not: this one will not happen, the next
            # run takes its place.
            note = gettext("replaced by the next run, which comes first")
        elif obj.paused:
            # Kept for when the task is resumed, unless the next occurrence has passed by
            # then: that one fires first and consumes it (the trigger precedence).
            note = gettext("on hold while paused")
            if obj.next_run_at is not None:
                note = gettext(
                    "on hold while paused; resumed after %(when)s, the next run replaces it"
                ) % {"when": display.in_zone(obj.next_run_at, obj.timezone)}
        else:
            return when(obj.retry_at, obj.timezone, row_clock(obj))
        # A time that will not come, or not yet: no "in 3 minutes" beside it.
        return format_html(
            '<span class="posixcron-time">{}</span><br>{}',
            display.in_zone(obj.retry_at, obj.timezone),
            muted(note),
        )

    @admin.display(description=_("last success"))
    def last_success_display(self, obj: Task) -> SafeString:
        if obj.last_success_at is None:
            return muted(gettext("never"))
        return when(obj.last_success_at, obj.timezone, row_clock(obj))

    # The stored instants, in the task's zone like every other time on its page.
    @admin.display(description=_("due at"))
    def due_at_display(self, obj: Task) -> str:
        return "—" if obj.due_at is None else display.in_zone(obj.due_at, obj.timezone)

    @admin.display(description=_("created"))
    def created_display(self, obj: Task) -> str:
        return display.in_zone(obj.created_at, obj.timezone)

    @admin.display(description=_("updated"))
    def updated_display(self, obj: Task) -> str:
        return display.in_zone(obj.updated_at, obj.timezone)

    @admin.display(description=_("run requested"))
    def run_requested_display(self, obj: Task) -> str:
        if obj.run_requested_at is None:
            return "—"
        in_zone = display.in_zone(obj.run_requested_at, obj.timezone)
        return f"{in_zone} ({display.relative(obj.run_requested_at, row_clock(obj))})"

    @admin.display(description=_("definition change pending"))
    def pending_change_display(self, obj: Task) -> SafeString:
        change = pending_changes_by_name().get(obj.name)
        return dash() if change is None else pending_badge(change, long=True)

    def get_list_display(self, request: HttpRequest) -> Any:
        columns = list(super().get_list_display(request))
        # Set by changelist_view from the live processes its header lists anyway.
        pending: dict[str, Pending] = getattr(request, "posixcron_pending", {})
        if not pending:
            # The usual case: one declaration set live, no column.
            return columns

        @admin.display(description=_("deploy"))
        def pending_column(obj: Task) -> SafeString:
            change = pending.get(obj.name)
            return dash() if change is None else pending_badge(change)

        return [*columns, pending_column]

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

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[Any, int], set[str], list[Any]]:
        """Summarise the deletion instead of listing every run (a task may have 40,000)."""
        tasks = list(objs)
        perms_needed: set[str] = set()
        runs = Run.objects.using(app_alias()).filter(task__in=tasks)
        run_count = runs.count()
        summary: list[Any] = []
        for task in tasks:
            if not self.has_delete_permission(request, task):
                perms_needed.add(gettext("%(task)s (declared in settings)") % {"task": task.name})
            summary.append(format_html("{}: {}", str(Task._meta.verbose_name).capitalize(), task))
        if run_count:
            summary.append(display.runs_of_history(run_count))
            # The permission itself, not this site's run admin: a site without the run list
            # must not let delete_task alone take the history with it.
            codename = get_permission_codename("delete", Run._meta)
            if not request.user.has_perm(f"{Run._meta.app_label}.{codename}"):
                perms_needed.add(str(Run._meta.verbose_name_plural))
        for name in runs.unfinished().values_list("task__name", flat=True).distinct():
            # A retired task's last run may still be executing; its row must outlive it.
            still = gettext("%(task)s (a run is still queued or running)")
            perms_needed.add(still % {"task": name})
        model_count = {Task._meta.verbose_name_plural: len(tasks)}
        if run_count:
            model_count[Run._meta.verbose_name_plural] = run_count
        return summary, model_count, perms_needed, []

    # The list page ---------------------------------------------------------------------

    def get_changelist_instance(self, request: HttpRequest) -> Any:
        changelist = super().get_changelist_instance(request)
        # One query for the strips of the whole page, whatever its size; the list keeps
        # the evaluated rows, so the attributes set here are the ones it renders.
        page = list(changelist.result_list)
        # The strip is run history: shown to those who may see runs, as on the task page.
        if not request.user.has_perm(f"{Run._meta.app_label}.view_run"):
            return changelist
        recent = history.recent_runs(task.pk for task in page)
        for task in page:
            setattr(task, "posixcron_recent_runs", recent.get(task.pk, []))  # noqa: B010
        return changelist

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        if not self.has_view_or_change_permission(request):
            raise PermissionDenied  # before the header's queries, as Django's own view would
        now = display.clock()
        using = app_alias()
        live = display.live_processes(now)
        processes = list(live.order_by("hostname", "pid")[: HEADER_PROCESSES + 1])
        # A larger fleet is counted, and the process list (if this site has it) shows it. At
        # least one more: the count may miss one that went stale since the first read.
        more = max(live.count() - HEADER_PROCESSES, 1) if len(processes) > HEADER_PROCESSES else 0
        # Only live processes declaring different sets can disagree: the usual page, with
        # one set live, asks nothing more.
        if more or len({p.declaration_set for p in processes if p.declaration_set}) > 1:
            request.posixcron_pending = pending_changes_by_name(now)  # type: ignore[attr-defined]
        context = {
            "posixcron_processes": processes[:HEADER_PROCESSES],
            "posixcron_more_processes": more,
            "posixcron_processes_url": self._process_list_url(request) if more else "",
            "posixcron_failing": Task.objects.using(using).failing().count(),
            "posixcron_overdue": Task.objects.using(using)
            .overdue(now, slack=display.poll_interval())
            .count(),
            **(extra_context or {}),
        }
        return super().changelist_view(request, extra_context=context)

    def _process_list_url(self, request: HttpRequest) -> str:
        process_admin = self.admin_site._registry.get(SchedulerProcess)
        if process_admin is None or not process_admin.has_view_permission(request):
            return ""
        return reverse(
            "admin:django_posixcron_schedulerprocess_changelist", current_app=self.admin_site.name
        )

    # The task page ---------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        return self.state_urls() + super().get_urls()

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
        info = self.opts.app_label, self.opts.model_name
        # This site's pages, not the default site's: a project may serve the app on a site
        # of its own (beside /admin/, or instead of it), with or without the run list.
        site = self.admin_site.name
        run_admin = self.admin_site._registry.get(Run)
        can_view_runs = run_admin is not None and run_admin.has_view_permission(request)
        return {
            "posixcron_task": obj,
            "posixcron_upcoming": self._upcoming(obj),
            "posixcron_can_view_runs": can_view_runs,
            "posixcron_recent_runs": self._recent_runs(obj) if can_view_runs else [],
            "posixcron_chart": (
                history.chart(obj, history.chart_points(obj)) if can_view_runs else ""
            ),
            "posixcron_all_runs_url": (
                reverse("admin:django_posixcron_run_changelist", current_app=site)
                + f"?task={obj.pk}"
                if can_view_runs
                else ""
            ),
            "posixcron_can_pause": obj.declared and self.has_pause_permission(request, obj),
            "posixcron_can_resume": obj.declared and self.has_resume_permission(request, obj),
            "posixcron_can_run": obj.declared and self.has_run_permission(request, obj),
            "posixcron_pause_url": reverse(
                "admin:{}_{}_pause".format(*info), args=[obj.pk], current_app=site
            ),
            "posixcron_resume_url": reverse(
                "admin:{}_{}_resume".format(*info), args=[obj.pk], current_app=site
            ),
            "posixcron_run_url": reverse(
                "admin:{}_{}_run".format(*info), args=[obj.pk], current_app=site
            ),
        }

    def _upcoming(self, obj: Task) -> list[str]:
        """Return the next occurrences in the task's zone, each with its relative time."""
        now = row_clock(obj)
        try:
            instants = occurrences(obj.schedule, obj.timezone, now, NEXT_OCCURRENCES)
        except (ValueError, LookupError):
            return []
        return [
            f"{display.in_zone(instant, obj.timezone)} ({display.relative(instant, now)})"
            for instant in instants
        ]

    def _recent_runs(self, obj: Task) -> list[dict[str, Any]]:
        return [
            {
                "url": reverse(
                    "admin:django_posixcron_run_change",
                    args=[run.pk],
                    current_app=self.admin_site.name,
                ),
                "scheduled_for": display.in_zone(run.scheduled_for, obj.timezone),
                "trigger": run.get_trigger_display(),
                "status": display.status_badge(run.status),
                "duration": display.duration(run.duration),
                # The first line (the template truncates it): a multi-line message, or one
                # that ends with a traceback, belongs on the run's page.
                "error": next(iter(run.error.splitlines()), ""),
            }
            for run in obj.runs.using(app_alias()).order_by("-scheduled_for", "-id")[:RECENT_RUNS]
        ]


def pending_changes_by_name(now: dt.datetime | None = None) -> dict[str, Pending]:
    """Return the definition changes live schedulers disagree on, by task name.

    "Several declaration sets can be live at once": during a rollout a task may be stored at
    one version while live processes declare another; the change applies once no live
    process holds the stored one.
    """
    using = app_alias()
    peers = live_peers(using, now or display.clock(), display.process_stale_after())
    if len(peers) < 2:
        return {}
    rows = Task.objects.using(using).values_list("name", "definition_hash", "declared")
    return {change.name: change for change in pending_changes(rows, peers)}


def pending_badge(change: Pending, *, long: bool = False) -> SafeString:
    label = gettext("change pending")
    if not long:
        return format_html('<span title="{}">{}</span>', change.describe(), badge("pending", label))
    return format_html("{} {}", badge("pending", label), change.describe())
