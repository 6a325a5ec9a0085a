"""The run history: read-only, filterable, fast on a million rows, deletable in batches."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, cast

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ORDER_VAR, ChangeList
from django.core.exceptions import ImproperlyConfigured
from django.core.paginator import Paginator
from django.db import connections
from django.db.models import Prefetch, QuerySet
from django.http import HttpRequest, HttpResponse
from django.urls import URLPattern, reverse
from django.utils.functional import cached_property
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator, smart_split, unescape_string_literal
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_posixcron.admin.actions import delete_selected
from django_posixcron.admin.display import (
    dash,
    duration,
    in_zone,
    runs_of_history,
    status_badge,
)
from django_posixcron.admin.filters import RunTaskFilter
from django_posixcron.admin.permissions import Guarded
from django_posixcron.db import app_alias
from django_posixcron.models import UNFINISHED_STATUSES, Run, Task

if TYPE_CHECKING:
    RunAdminBase = admin.ModelAdmin[Run]
    PaginatorBase = Paginator[Any]
else:
    # ModelAdmin is only subscriptable at run time with django-stubs-ext's monkeypatch.
    RunAdminBase = admin.ModelAdmin
    PaginatorBase = Paginator

# The run list counts at most this many rows ("more than 10,000 runs"): an exact COUNT(*) of a
# million-row history on every page view is a full scan on PostgreSQL.
RUN_COUNT_CAP = 10_000
# A search matching more tasks than this filters the runs by a subquery of them.
SEARCH_TASKS = 1000

# How much of a run's error the list shows under its status, and in the hover over it.
ERROR_ON_LIST = 100
ERROR_TITLE_ON_LIST = 2000


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


class RunChangeList(ChangeList):
    """Sorts only by the columns offered for sorting, whatever the URL asks (a link copied
    from another database's admin, or typed)."""

    def get_ordering(self, request: HttpRequest, queryset: QuerySet[Any]) -> list[Any]:
        # The URL's sorts on columns not offered are dropped before anything reads them (the
        # headers too): none left, the list's own order.
        asked = self.params.get(ORDER_VAR)
        if asked and self.sortable_by is not None:
            kept = [part for part in asked.split(".") if self._offered(part)]
            if kept:
                self.params[ORDER_VAR] = ".".join(kept)
            else:
                del self.params[ORDER_VAR]
        ordering = cast("list[Any]", super().get_ordering(request, queryset))
        # Django breaks ties by "-pk" whatever the first key's direction: ascending by
        # scheduled time, no index serves "scheduled_for, -id", and MariaDB sorted the whole
        # history (2.5-4 s at 1.5 million runs). The tie-break follows the first key.
        if len(ordering) > 1 and ordering[-1] == "-pk" and ordering[0] == "scheduled_for":
            ordering[-1] = "pk"
        return ordering

    def _offered(self, part: str) -> bool:
        try:
            name = self.list_display[int(part.rpartition("-")[2])]
        except (IndexError, ValueError):
            return True  # Django's own handling of a malformed value
        return self.sortable_by is None or name in self.sortable_by


@admin.register(Run)
class RunAdmin(Guarded, RunAdminBase):
    list_display = (
        "scheduled_for_display",
        "task_link",
        "trigger",
        "status_and_error",
        "started_display",
        "duration_display",
        "where_display",
    )
    list_display_links = ("scheduled_for_display",)
    list_filter = (RunTaskFilter, "status", "trigger")
    # The tasks come by a second query (get_queryset): joined, MariaDB read the task table
    # first and sorted every run of the history for each page (1.3 s with 430,000 runs).
    list_select_related = ()
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
    # Django's delete_selected, by the same name, confirming with a count; see actions.py.
    actions = (delete_selected,)
    fields = (
        "task",
        "trigger",
        "status_display",
        "scheduled_for_display",
        "occurrence_display",
        "attempt",
        "started_display",
        "finished_display",
        "duration_display",
        "process_label",
        "backend_display",
        "result_id",
        "worker",
        "heartbeat_display",
        "start_deadline_display",
        "error_display",
        "traceback_display",
    )
    readonly_fields = (*fields, "task_name")

    class Media:
        css = {"all": ("django_posixcron/admin.css",)}

    def get_urls(self) -> list[URLPattern]:
        urls = super().get_urls()
        # The list's Delete selected runs commits each batch of its own (see actions.py): a
        # request Django wraps in one transaction (ATOMIC_REQUESTS on the runs' database)
        # would hold every deleted row until the last batch.
        try:
            alias = app_alias()
        except ImproperlyConfigured:
            return urls  # posixcron.E036 says why
        changelist = f"{self.opts.app_label}_{self.opts.model_name}_changelist"
        for url in urls:
            if url.name == changelist:
                view = url.callback
                view._non_atomic_requests = {  # type: ignore[attr-defined]
                    *getattr(view, "_non_atomic_requests", ()),
                    alias,
                }
        return urls

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Run], search_term: str
    ) -> tuple[QuerySet[Run], bool]:
        """Search by task name as Django does (each word, anywhere in the name), through the
        matching tasks' ids.

        Searched through the join, MariaDB read the tasks first and sorted every run of the
        matching ones for each page (3.7 s for one task's name, 22 s for a word in 1,200
        names, at 1.5 million runs); by the tasks' ids, a list of runs of a few tasks is what
        the task filter already reads.
        """
        if not search_term or "\x00" in search_term:
            # Guarded's NUL guard, which this search does not go through: PostgreSQL refuses
            # NUL in a query, and no name holds it (an autocomplete on runs passes it on).
            return (queryset.none() if search_term else queryset), False
        tasks = Task.objects.using(app_alias())
        for bit in smart_split(search_term):
            if bit.startswith(('"', "'")) and bit[0] == bit[-1]:
                bit = unescape_string_literal(bit)
            tasks = tasks.filter(name__icontains=bit)
        ids = list(tasks.values_list("pk", flat=True)[: SEARCH_TASKS + 1])
        if len(ids) > SEARCH_TASKS:  # a word in most names: as a subquery, not a long list
            return queryset.filter(task_id__in=tasks.values("pk")), False
        return queryset.filter(task_id__in=ids), False

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return RunChangeList

    def get_sortable_by(self, request: HttpRequest) -> Any:
        sortable = super().get_sortable_by(request)
        if connections[app_alias()].vendor != "mysql":
            return sortable
        # Sorted by the task's name, MariaDB joins the tasks first and sorts the whole
        # history, text columns included, for each page: 40-73 s with 1.5 million runs
        # (measured; PostgreSQL walks its indexes in 0.14 s). There the column is not
        # offered for sorting: filter by task instead.
        return [name for name in sortable if name not in ("task_link", "task_name")]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Run]:
        # The run page's title, breadcrumb and History name the run by its task's name; the
        # list names each run's task: one query for the page's tasks, after the runs, on the
        # runs' database (Django would ask the routers' db_for_read: a replica, whose rows
        # may be behind or others, and which may be down while this database answers).
        using = app_alias()
        tasks = Prefetch("task", queryset=Task.objects.using(using))
        return super().get_queryset(request).using(using).prefetch_related(tasks)

    @admin.display(description=_("task"), ordering="task__name")
    def task_link(self, obj: Run) -> SafeString:
        return format_html(
            '<a href="{}">{}</a>',
            reverse(
                "admin:django_posixcron_task_change",
                args=[obj.task_id],
                current_app=self.admin_site.name,
            ),
            obj.task.name,
        )

    @admin.display(description=_("task"), ordering="task__name")
    def task_name(self, obj: Run) -> str:
        return obj.task.name

    def _links_tasks(self, request: HttpRequest) -> bool:
        """Whether the task pages are there for this user to open: a site without them, or
        a user without the view permission on tasks, got a link to each run's task that
        answered 404 or 403."""
        task_admin = self.admin_site._registry.get(Task)
        return task_admin is not None and task_admin.has_view_permission(request)

    def get_list_display(self, request: HttpRequest) -> Any:
        columns = list(super().get_list_display(request))
        if self._links_tasks(request):
            return columns
        return ["task_name" if column == "task_link" else column for column in columns]

    def get_fields(self, request: HttpRequest, obj: Run | None = None) -> Any:
        fields = list(super().get_fields(request, obj))
        if self._links_tasks(request):
            return fields
        return ["task_name" if field == "task" else field for field in fields]

    @admin.display(description=_("scheduled for"), ordering="scheduled_for")
    def scheduled_for_display(self, obj: Run) -> str:
        return in_zone(obj.scheduled_for, obj.task.timezone)

    @admin.display(description=_("occurrence"))
    def occurrence_display(self, obj: Run) -> str:
        # The cron occurrence the run serves (a retry's is the one it retries).
        return in_zone(obj.occurrence, obj.task.timezone) if obj.occurrence else "—"

    @admin.display(description=_("started"), ordering="started_at")
    def started_display(self, obj: Run) -> str:
        return in_zone(obj.started_at, obj.task.timezone) if obj.started_at else "—"

    @admin.display(description=_("finished"))
    def finished_display(self, obj: Run) -> str:
        return in_zone(obj.finished_at, obj.task.timezone) if obj.finished_at else "—"

    @admin.display(description=_("ran on"))
    def where_display(self, obj: Run) -> str:
        """The scheduler process that ran it; for a handed-off run, the worker, or the
        backend it waits on (the scheduler that queued it is on the run's page)."""
        if not obj.backend:
            return obj.process_label
        if obj.worker:
            return gettext("%(worker)s (worker)") % {"worker": obj.worker}
        return gettext("backend %(backend)s") % {"backend": obj.backend}

    @admin.display(description=_("status"), ordering="status")
    def status_display(self, obj: Run) -> SafeString:
        return status_badge(obj.status)

    @admin.display(description=_("status"), ordering="status")
    def status_and_error(self, obj: Run) -> SafeString:
        """The status, and on the list why a run failed: the error's first line, shortened
        (the whole of it on hover and on the run's page), so a list filtered to failures
        says what went wrong without opening each run."""
        if not obj.error:
            return status_badge(obj.status)
        lines = obj.error.strip().splitlines()
        return format_html(
            '{}<br><span class="posixcron-describe posixcron-run-error" title="{}">{}</span>',
            status_badge(obj.status),
            # Up to 64 KB each: a page of 100 failures would weigh megabytes.
            Truncator(obj.error).chars(ERROR_TITLE_ON_LIST),
            Truncator(lines[0] if lines else "").chars(ERROR_ON_LIST),
        )

    @admin.display(description=_("backend"))
    def backend_display(self, obj: Run) -> str:
        # Handed to a Django Tasks backend (DESIGN section 6), or run by the scheduler.
        return obj.backend or gettext("— (run by the scheduler)")

    @admin.display(description=_("worker heartbeat"))
    def heartbeat_display(self, obj: Run) -> str:
        return in_zone(obj.heartbeat_at, obj.task.timezone) if obj.heartbeat_at else "—"

    @admin.display(description=_("start deadline"))
    def start_deadline_display(self, obj: Run) -> str:
        deadline = obj.start_deadline_at
        return in_zone(deadline, obj.task.timezone) if deadline else "—"

    @admin.display(description=_("duration"), ordering="duration")
    def duration_display(self, obj: Run) -> str:
        return duration(obj.duration) or "—"

    @admin.display(description=_("error"))
    def error_display(self, obj: Run) -> SafeString:
        if not obj.error:
            return dash()
        return format_html('<pre class="posixcron-error">{}</pre>', obj.error)

    @admin.display(description=_("traceback"))
    def traceback_display(self, obj: Run) -> SafeString:
        if not obj.traceback:
            return dash()
        return format_html('<pre class="posixcron-traceback">{}</pre>', obj.traceback)

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
                    "when": in_zone(run.scheduled_for, run.task.timezone),
                },
            )
        return super().change_view(request, object_id, form_url, extra_context=context)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        # History is a record of what happened; only the scheduler writes it.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Run | None = None) -> bool:
        # A running run is still executing (a queued one waits for a worker): deleted, its
        # outcome would have no row to land on, and its task would read "running" until the
        # next run. The bulk action skips it.
        if obj is not None and obj.status in UNFINISHED_STATUSES:
            return False
        return super().has_delete_permission(request, obj)

    def get_deleted_objects(
        self, objs: Any, request: HttpRequest
    ) -> tuple[list[Any], dict[Any, int], set[str], list[Any]]:
        """Summarise the deletion of one run as its count, like the bulk action does."""
        count = objs.count() if isinstance(objs, QuerySet) else len(objs)
        perms_needed: set[str] = set()
        if not self.has_delete_permission(request):
            perms_needed.add(str(Run._meta.verbose_name_plural))
        summary = [runs_of_history(count)]
        return summary, {Run._meta.verbose_name_plural: count}, perms_needed, []
