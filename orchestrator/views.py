"""The queue-health dashboard (inside the admin, staff only) and the Prometheus endpoint.

Thin: both read `orchestrator.metrics.queue_health()`, the one source of the figures.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib import admin
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from orchestrator.metrics import queue_health
from orchestrator.metrics.dashboard import dashboard_context
from orchestrator.metrics.prometheus import metrics_registry

REGISTRY = metrics_registry()


@require_GET
def queue_health_page(request: HttpRequest) -> HttpResponse:
    """Wrapped in `admin.site.admin_view` (urls.py): anonymous and non-staff go to the admin login."""
    context = {
        **admin.site.each_context(request),
        "title": "Queue health",
        **dashboard_context(health=queue_health()),
    }
    return TemplateResponse(request, "admin/orchestrator/queue_health.html", context)


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format. Open by default (scraped on the internal port, like any exporter);
    with METRICS_TOKEN set, a scrape needs `Authorization: Bearer <token>` (or a staff session)."""
    if not _may_scrape(request):
        return HttpResponse(
            "metrics need a bearer token\n", status=401, headers={"WWW-Authenticate": "Bearer"}
        )
    return HttpResponse(generate_latest(REGISTRY), content_type=CONTENT_TYPE_LATEST)


def _may_scrape(request: HttpRequest) -> bool:
    token = getattr(settings, "METRICS_TOKEN", "")
    if not token or getattr(request.user, "is_staff", False):
        return True
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    return hmac.compare_digest(given.encode(), token.encode())  # constant time: no timing oracle
