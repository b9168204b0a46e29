"""Health endpoints for load balancers and orchestrators: unauthenticated, JSON, cheap.

- `GET /healthz`: the process is alive and serving. No I/O, so a slow database never gets a
  healthy web process restarted.
- `GET /readyz`: this process can do its work: the database answers and has every migration
  applied, Redis (budget, locks) answers, the Celery broker accepts a connection. 200 when all
  are well, else 503; the answer names each check and says "ok" or "fail", nothing more. Each
  check has a short timeout.

The probe is public, so what went wrong goes to the log only (logger `config.health`, with the
exception): an error's text names hosts, ports, database and user names, and a driver may quote
its connection string.

Served by a middleware placed first, before the host check, the HTTPS redirect and sessions: a
probe addresses the container by IP (`Host: 10.0.3.7:8000`), which ALLOWED_HOSTS rightly
refuses for everything else, and it speaks plain HTTP inside the private network.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.conf import settings
from django.db import DEFAULT_DB_ALIAS, connections
from django.db.migrations.executor import MigrationExecutor
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.cache import add_never_cache_headers

from config import redis_client

log = logging.getLogger(__name__)
CHECK_TIMEOUT_S = 2
# Migrations, once all applied, stay applied for the life of this process (a release that adds
# one starts new processes), so the migration graph is loaded from disk once, not per probe.
_migrated = False


class HealthCheckMiddleware:
    """Answers /healthz and /readyz itself; every other request passes on."""

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponse]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponse:
        probe = PROBES.get(request.path)
        if probe is None:
            return self.get_response(request)
        if request.method not in ("GET", "HEAD"):
            response: HttpResponse = JsonResponse({"error": "method not allowed"}, status=405)
            response["Allow"] = "GET, HEAD"
        else:
            response = probe()
        add_never_cache_headers(response)
        return response


def healthz() -> JsonResponse:
    return JsonResponse({"status": "ok"})


def readyz() -> JsonResponse:
    checks = {name: "ok" if _passes(name, check) else "fail" for name, check in CHECKS.items()}
    ready = all(result == "ok" for result in checks.values())
    return JsonResponse(
        {"status": "ok" if ready else "unavailable", "checks": checks}, status=200 if ready else 503
    )


def _passes(name: str, check: Callable[[], object]) -> bool:
    try:
        check()
    except Exception:  # a probe reports every failure; it never raises
        log.warning("readiness check %s failed", name, exc_info=True)
        return False
    return True


def _database() -> None:
    global _migrated
    connection = connections[DEFAULT_DB_ALIAS]
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
    if not _migrated:
        executor = MigrationExecutor(connection)
        pending = executor.migration_plan(executor.loader.graph.leaf_nodes())
        if pending:
            raise RuntimeError(f"{len(pending)} migration(s) not applied: run `python manage.py migrate`")
        _migrated = True


def _redis() -> None:
    client = redis_client.connect(settings.REDIS_URL, timeout_s=CHECK_TIMEOUT_S)  # its own: closed after
    try:
        client.ping()
    finally:
        client.close()


def _broker() -> None:
    from config.celery import app

    with app.connection_for_write() as connection:
        connection.ensure_connection(max_retries=1, timeout=CHECK_TIMEOUT_S)


CHECKS: dict[str, Callable[[], None]] = {"database": _database, "redis": _redis, "broker": _broker}

PROBES: dict[str, Callable[[], JsonResponse]] = {"/healthz": healthz, "/readyz": readyz}
