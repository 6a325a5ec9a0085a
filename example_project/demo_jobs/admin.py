from django.contrib import admin

from example_project.demo_jobs.models import Heartbeat


@admin.register(Heartbeat)
class HeartbeatAdmin(admin.ModelAdmin):  # type: ignore[type-arg]
    list_display = ["created_at", "host", "pid"]
    list_filter = ["host"]
