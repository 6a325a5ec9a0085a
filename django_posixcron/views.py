"""The Prometheus metrics view; mount it and protect it as the project chooses.

It does no authentication of its own (docs/operations.rst shows a staff-only and a token
example): who may read the schedule is the project's decision.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.http import HttpRequest, HttpResponse
from django.views.decorators.http import require_safe

MISSING_EXTRA = (
    "django_posixcron.views.metrics needs prometheus_client, which is not installed. "
    "Install the extra: pip install 'django-posixcron[prometheus]'."
)


@require_safe
def metrics(request: HttpRequest) -> HttpResponse:
    """Return the scheduler's series, read from the database, in the format the scraper asks.

    The Prometheus text format, or OpenMetrics when the Accept header prefers it, chosen by
    prometheus_client as its own handlers choose; never cached on the way.
    """
    try:
        from prometheus_client import CollectorRegistry
        from prometheus_client.exposition import choose_encoder
    except ImportError as error:
        raise ImproperlyConfigured(MISSING_EXTRA) from error

    from django_posixcron.metrics import DatabaseCollector

    registry = CollectorRegistry(auto_describe=False)
    registry.register(DatabaseCollector())
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    response = HttpResponse(encode(registry), content_type=content_type)
    response["Cache-Control"] = "no-store"
    return response
