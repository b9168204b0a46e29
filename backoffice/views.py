"""The queue-health dashboard (inside the admin) and the Prometheus endpoint.

A session needs orchestrator.view_queue_health (superusers have it; organization members do
not by default). Unless a superuser, the dashboard's figures are of the user's organizations
only (their rows, owners, dead letters: see queue_health), and each links to the admin list
behind it, scoped the same way; the shared LLM budget and in-flight sizing are system-wide.
/metrics shows everything to the operators' scraper (its token) and superusers; a member's
session allowed on the dashboard gets its organizations' figures only.

Thin: both read `orchestrator.metrics.queue_health.queue_health()`, the one source of the figures.
"""

from __future__ import annotations

import hmac

from django.conf import settings
from django.contrib import admin
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse
from django.template.response import TemplateResponse
from django.views.decorators.http import require_GET
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from backoffice.dashboard import dashboard_context
from orchestrator.metrics.prometheus import metrics_registry, platform_exposition
from orchestrator.metrics.queue_health import queue_health
from outreach.models import Organization

REGISTRY = metrics_registry()


VIEW_PERMISSION = "orchestrator.view_queue_health"


@require_GET
def queue_health_page(request: HttpRequest) -> HttpResponse:
    """Wrapped in `admin.site.admin_view` (urls.py): anonymous and non-staff go to the admin login,
    staff without the permission get 403."""
    if not request.user.has_perm(VIEW_PERMISSION):
        raise PermissionDenied
    organizations = _organizations_of(request)
    context = {
        **admin.site.each_context(request),
        "title": "Queue health",
        **dashboard_context(health=queue_health(organization_ids=organizations)),
        "scoped": organizations is not None,
        "refresh_seconds": settings.DASHBOARD_REFRESH_S,
    }
    return TemplateResponse(request, "admin/orchestrator/queue_health.html", context)


def _organizations_of(request: HttpRequest) -> list[int] | None:
    """None (everything) for a superuser; otherwise the organizations the user is a member of,
    as in every admin page (backoffice.admin.outreach.OrganizationScopedAdmin)."""
    if request.user.is_superuser:
        return None
    return list(Organization.objects.filter(members=request.user.pk).values_list("pk", flat=True))


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text format. A scrape needs `Authorization: Bearer <METRICS_TOKEN>` (or a
    session allowed to see the dashboard): settings require the token outside debug, so only
    a debug process (the demo, development) with no token set answers anyone."""
    if _platform_scrape(request):
        return HttpResponse(platform_exposition(registry=REGISTRY), content_type=CONTENT_TYPE_LATEST)
    if request.user.has_perm(VIEW_PERMISSION):  # a member's session: their organizations' figures
        scoped = metrics_registry(organization_ids=_organizations_of(request))
        return HttpResponse(generate_latest(scoped), content_type=CONTENT_TYPE_LATEST)
    return HttpResponse("metrics need a bearer token\n", status=401, headers={"WWW-Authenticate": "Bearer"})


def _platform_scrape(request: HttpRequest) -> bool:
    """Every organization's figures: the scraper's token, a superuser's session, or a debug
    process without a token (the demo)."""
    token = getattr(settings, "METRICS_TOKEN", "")
    if request.user.is_superuser:
        return True
    if not token:
        return not request.user.is_authenticated  # a debug process: the demo's anonymous scraper
    given = request.headers.get("Authorization", "").removeprefix("Bearer ").strip()
    return hmac.compare_digest(given.encode(), token.encode())  # constant time: no timing oracle
