"""The scheduler processes: read-only; a row goes only once its process is gone."""

from __future__ import annotations

from typing import TYPE_CHECKING

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils.translation import gettext_lazy as _

from django_posixcron.admin.display import clock, process_stale_after
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
    list_display = ("label", "version", "started_at", "last_heartbeat_at", "stopped_at")
    search_fields = ("hostname",)
    readonly_fields = (
        "hostname",
        "pid",
        "version",
        "started_at",
        "last_heartbeat_at",
        "stopped_at",
        "declaration_set",
    )
    show_full_result_count = False

    def get_queryset(self, request: HttpRequest) -> QuerySet[SchedulerProcess]:
        # Reads too on the alias of the app's rows, not the routers' read alias (DESIGN 5).
        return super().get_queryset(request).using(app_alias())

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
