"""The Prometheus metrics view; mount it and protect it as the project chooses.

It does no authentication of its own (docs/operations.rst shows a staff-only and a token
example): who may read the schedule is the project's decision.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_GET

MISSING_EXTRA = (
    "django_posixcron.views.metrics needs prometheus_client, which is not installed. "
    "Install the extra: pip install 'django-posixcron[prometheus]'."
)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Return the scheduler's series in the Prometheus text format, read from the database."""
    try:
        from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
    except ImportError as error:
        raise ImproperlyConfigured(MISSING_EXTRA) from error

    from django_posixcron.metrics import DatabaseCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    return HttpResponse(generate_latest(registry), content_type=CONTENT_TYPE_LATEST)
