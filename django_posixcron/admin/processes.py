"""The scheduler processes: read-only; a row goes only once its process is gone."""

from __future__ import annotations

import datetime as dt
from typing import TYPE_CHECKING

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.translation import gettext
from django.utils.translation import gettext_lazy as _

from django_posixcron.admin.display import (
    badge,
    clock,
    dash,
    in_zone,
    process_stale_after,
    relative,
    row_clock,
    with_clock,
)
from django_posixcron.admin.permissions import Guarded
from django_posixcron.db import app_alias
from django_posixcron.models import SchedulerProcess

if TYPE_CHECKING:
    ProcessAdminBase = admin.ModelAdmin[SchedulerProcess]
else:
    # ModelAdmin is only subscriptable at run time with django-stubs-ext's monkeypatch.
    ProcessAdminBase = admin.ModelAdmin


@admin.register(SchedulerProcess)
class SchedulerProcessAdmin(Guarded, ProcessAdminBase):
    list_display = ("label", "state", "version", "started", "last_heartbeat", "stopped")
    search_fields = ("hostname",)
    readonly_fields = (
        "hostname",
        "pid_display",
        "state",
        "version",
        "started",
        "last_heartbeat",
        "stopped",
        "declaration_set",
    )
    fields = readonly_fields
    show_full_result_count = False

    class Media:
        # The state badges' colours: without it a dead process looked like a live one.
        css = {"all": ("django_posixcron/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[SchedulerProcess]:
        # Reads too on the alias of the app's rows, not the routers' read alias (DESIGN 5);
        # with the database's clock on each row, for "12 seconds ago".
        return with_clock(super().get_queryset(request).using(app_alias()))

    @admin.display(description=_("process"), ordering="hostname")
    def label(self, obj: SchedulerProcess) -> str:
        return obj.label

    @admin.display(description=_("state"))
    def state(self, obj: SchedulerProcess) -> SafeString:
        """Live, stopped, or presumed dead: the rule the schedulers judge each other by (a
        heartbeat older than the stale limit), which the task list's header counts too."""
        if obj.stopped_at is not None:
            return badge("retired", gettext("stopped"))
        if not obj.is_live(row_clock(obj), process_stale_after()):
            return badge("failure", gettext("presumed dead"))
        return badge("active", gettext("live"))

    # Process ids and times as the rest of the app shows them: a pid is an identifier, not
    # a quantity to localise ("10.466"), and a heartbeat is read to the second, with its
    # zone (the project's current one: a process has no task zone), and how long ago.
    @admin.display(description=_("pid"))
    def pid_display(self, obj: SchedulerProcess) -> str:
        return str(obj.pid)

    @admin.display(description=_("started"), ordering="started_at")
    def started(self, obj: SchedulerProcess) -> str:
        return _at(obj.started_at)

    @admin.display(description=_("last heartbeat"), ordering="last_heartbeat_at")
    def last_heartbeat(self, obj: SchedulerProcess) -> SafeString | str:
        beat = obj.last_heartbeat_at
        if beat is None:
            return dash()
        return format_html("{} ({})", _at(beat), relative(beat, row_clock(obj)))

    @admin.display(description=_("stopped"), ordering="stopped_at")
    def stopped(self, obj: SchedulerProcess) -> str:
        return _at(obj.stopped_at)

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
        using = app_alias()
        if obj is not None and (
            SchedulerProcess.objects.using(using)
            .filter(pk=obj.pk)
            .live(clock(), process_stale_after())
            .exists()
            or obj.runs.using(using).running().exists()
        ):
            return False
        return super().has_delete_permission(request, obj)


def _at(value: dt.datetime | None) -> str:
    """Return `value` to the second in the project's current time zone, with its name."""
    if value is None:
        return "—"
    return in_zone(value, timezone.get_current_timezone_name(), seconds=True)
