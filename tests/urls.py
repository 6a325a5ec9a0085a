from django.contrib import admin
from django.urls import path
from health_check.views import HealthCheckView

from django_posixcron import views

urlpatterns = [
    path("admin/", admin.site.urls),
    path("metrics", views.metrics),
    path(
        "health/",
        HealthCheckView.as_view(
            checks=["django_posixcron.contrib.health_check.SchedulerHealthCheck"]
        ),
    ),
]
