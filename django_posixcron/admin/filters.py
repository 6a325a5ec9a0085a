"""The list filters of the task and run lists."""

from __future__ import annotations

from typing import Any, cast

from django.contrib import admin
from django.contrib.admin.options import IncorrectLookupParameters
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from django_posixcron.admin.display import STATE_LABELS, clock, poll_interval
from django_posixcron.admin.lookups import as_pk
from django_posixcron.db import app_alias
from django_posixcron.models import RunStatus, Task, TaskQuerySet

# The run list's task filter offers at most this many tasks (10,000 would not be a menu);
# past it, the operator narrows by searching the task name or from the task's own page.
TASK_FILTER_CHOICES = 50


class StateFilter(admin.SimpleListFilter):
    title = _("state")
    parameter_name = "state"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return list(STATE_LABELS.items())

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        tasks = cast(TaskQuerySet, queryset)
        value = self.value()
        if value == "active":
            return tasks.active()
        if value == "paused":
            return tasks.paused()
        if value == "retired":
            return tasks.retired()
        return queryset


class LastStatusFilter(admin.SimpleListFilter):
    """The last run's status as the list's rows show it: "running" (a run started after the
    last one finished), else the status the last run finished with."""

    title = _("last run status")
    # Django's own parameter for a plain field filter, so existing links keep working.
    parameter_name = "last_run_status__exact"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        # A queued run (handed to a worker) is in progress too: "running" finds its task. A
        # skipped occurrence is recorded as a run but is never the task's last run (the run
        # it was skipped for is): offered, it would always find nothing.
        finals = [
            (value, label)
            for value, label in RunStatus.choices
            if value not in (RunStatus.RUNNING, RunStatus.QUEUED, RunStatus.SKIPPED)
        ]
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
        # last_run_status is the previous run's while one is in progress, and the row shows
        # that task as running: it is found under "running" only.
        running = Task.objects.running().values("pk")
        return queryset.filter(last_run_status=value).exclude(pk__in=running)


class HealthFilter(admin.SimpleListFilter):
    """The header's "failing" and "overdue" counts link here."""

    title = _("health")
    parameter_name = "health"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[str, Any]]:
        return [("failing", _("failing")), ("overdue", _("overdue"))]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        tasks = cast(TaskQuerySet, queryset)
        value = self.value()
        if value == "failing":
            return tasks.failing()
        if value == "overdue":
            return tasks.overdue(clock(), slack=poll_interval())
        return queryset


class RunTaskFilter(admin.SimpleListFilter):
    """Filter runs by task without turning 10,000 tasks into one menu."""

    title = _("task")
    parameter_name = "task"

    def lookups(self, request: HttpRequest, model_admin: Any) -> list[tuple[Any, Any]]:
        tasks = Task.objects.using(app_alias())
        choices = list(tasks.order_by("name").values_list("pk", "name")[:TASK_FILTER_CHOICES])
        selected = as_pk(self.value() or "")
        if selected is not None and all(pk != selected for pk, _name in choices):
            choices += list(tasks.filter(pk=selected).values_list("pk", "name"))
        return [(str(pk), name) for pk, name in choices]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any] | None:
        value = self.value()
        if not value:
            return queryset
        task_id = as_pk(value)
        if task_id is None:
            raise IncorrectLookupParameters(value)
        return queryset.filter(task_id=task_id)
