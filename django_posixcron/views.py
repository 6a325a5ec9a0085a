"""The Prometheus metrics view; mount it and protect it as the project chooses.

It does no authentication of its own (docs/operations.rst shows a staff-only and a token
example): who may read the schedule is the project's decision.
"""

from __future__ import annotations

from django.core.exceptions import ImproperlyConfigured
from django.db import DatabaseError
from django.http import HttpRequest, HttpResponse
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_safe

MISSING_EXTRA = (
    "django_posixcron.views.metrics needs prometheus_client, which is not installed. "
    "Install the extra: pip install 'django-posixcron[prometheus]'."
)


@csrf_exempt  # it answers GET and HEAD only: a POST is a 405, not CSRF's 403
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

    from django_posixcron.db import app_alias
    from django_posixcron.management.common import read_failure
    from django_posixcron.metrics import DatabaseCollector

    registry = CollectorRegistry(auto_describe=False)
    collector = DatabaseCollector()
    registry.register(collector)
    encode, content_type = choose_encoder(request.headers.get("Accept", ""))
    try:
        body = encode(registry)
    except DatabaseError as error:
        # A failed scrape, said in one line (the scraper records it as such), rather than
        # Django's error page and a traceback at every scrape while the database is away.
        message = read_failure(app_alias(collector.using), error)
        response = HttpResponse(message, status=503, content_type="text/plain; charset=utf-8")
    else:
        response = HttpResponse(body, content_type=content_type)
    # Neither the series nor the failure may be served again from a cache.
    response["Cache-Control"] = "no-store"
    return response
