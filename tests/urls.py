from django.contrib import admin
from django.urls import path
from health_check.views import HealthCheckView

from django_posixcron import views
from django_posixcron.admin.processes import SchedulerProcessAdmin
from django_posixcron.admin.runs import RunAdmin
from django_posixcron.admin.tasks import TaskAdmin
from django_posixcron.models import Run, SchedulerProcess, Task

# A project may serve the app on an admin site of its own, beside the default one (an
# operators' site), and one that leaves the run list out.
ops_site = admin.AdminSite(name="ops")
ops_site.register(Task, TaskAdmin)
ops_site.register(Run, RunAdmin)
ops_site.register(SchedulerProcess, SchedulerProcessAdmin)
tasks_only_site = admin.AdminSite(name="tasks_only")
tasks_only_site.register(Task, TaskAdmin)

urlpatterns = [
    path("admin/", admin.site.urls),
    path("ops/", ops_site.urls),
    path("tasks-only/", tasks_only_site.urls),
    path("metrics", views.metrics),
    path(
        "health/",
        HealthCheckView.as_view(
            checks=["django_posixcron.contrib.health_check.SchedulerHealthCheck"]
        ),
    ),
]
