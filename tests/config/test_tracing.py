"""Tracing (config.tracing): off and imported by nothing unless OTEL_EXPORTER_OTLP_ENDPOINT is
set; on, the web process's requests are traced, and each outreach a dispatch cycle publishes
starts a trace of its own linked to the cycle's. The trace across the workers:
tests/e2e/test_tracing.py."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from config import tracing
from devtools.otlp_sink import OTLPSink
from orchestrator.budget import Budget
from orchestrator.dispatch.cycle import dispatch_cycle
from tests.factories import make_lead, make_org, make_outreach, make_owner

ROOT = Path(__file__).resolve().parents[2]

# The web process as gunicorn starts it (config.wsgi), a request through its handler, then what
# was set up: run in a fresh interpreter, as tracing is set up once per process.
WEB = """
import json, sys
import config.wsgi
from django.conf import settings
from django.test import Client
from config import celery, tracing

from opentelemetry import trace  # redis-py imports the API (and the SDK's metrics) if installed

client = Client(HTTP_HOST="localhost")
status = client.get("/no-such-page?q=ann@prospect.example").status_code
client.get("/unsubscribe/secret-token/")
client.get("/healthz")  # a probe: not traced
tracing.tracing_shutdown()  # exports what the request made
ours = ("opentelemetry.instrumentation", "opentelemetry.exporter", "opentelemetry.sdk.trace")
print(json.dumps({
    "status": status,
    "modules": [prefix for prefix in ours if any(m.startswith(prefix) for m in sys.modules)],
    "provider": type(trace.get_tracer_provider()).__name__,
    "tasks_known": "nurture.send" in celery.app.tasks,  # the web's publish spans can end
    "middleware": [m for m in settings.MIDDLEWARE if "opentelemetry" in m],
    "worker": tracing.tracing_setup(process="worker-generation"),
}))
"""


def _web(**env: str) -> dict[str, Any]:
    environment = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    environment.update(DJANGO_SETTINGS_MODULE="config.settings", DJANGO_DEBUG="1", **env)
    result = subprocess.run(
        [sys.executable, "-c", WEB], cwd=ROOT, env=environment, capture_output=True, text=True, timeout=60
    )
    assert result.returncode == 0, result.stderr[-3000:]
    return dict(json.loads(result.stdout.strip().splitlines()[-1]))


def test_without_the_endpoint_nothing_of_opentelemetry_is_imported_or_set_up() -> None:
    # given no OTEL_EXPORTER_OTLP_ENDPOINT
    # when the web process starts and serves a request, and a worker would set tracing up
    started = _web()
    # then no instrumentation, exporter or tracer provider is loaded or set, no middleware
    # added, and tracing says off (redis-py loads OpenTelemetry's metrics API on its own when it
    # is installed, and uses it only if the application turns its observability on)
    assert started == {
        "status": 404,
        "modules": [],
        "provider": "ProxyTracerProvider",
        "tasks_known": False,
        "middleware": [],
        "worker": False,
    }


def test_with_the_endpoint_the_web_process_exports_its_requests_over_otlp() -> None:
    # given a receiver, and OTEL_EXPORTER_OTLP_ENDPOINT pointing at it
    sink = OTLPSink().start()
    try:
        # when the web process starts and serves a request
        started = _web(OTEL_EXPORTER_OTLP_ENDPOINT=sink.endpoint)
    finally:
        sink.stop()
    # then Django's middleware traces it and its span reaches the receiver as outreach-web's
    assert started["status"] == 404
    assert started["middleware"] == [
        "opentelemetry.instrumentation.django.middleware.otel_middleware._DjangoMiddleware"
    ]
    assert started["worker"] is True  # set up once: a second call is a no-op that says on
    assert started["provider"] == "TracerProvider"
    assert started["tasks_known"] is True
    assert started["modules"] == [
        "opentelemetry.instrumentation",
        "opentelemetry.exporter",
        "opentelemetry.sdk.trace",
    ]
    spans = [s for s in sink.received() if s.name.startswith("GET")]
    requests = {s.attributes["http.url"]: s for s in spans}
    assert sorted(requests) == ["(unmatched)", "/unsubscribe/<str:token>/"]
    assert len(spans) == 2  # and none for the health probe
    assert {s.service for s in requests.values()} == {"outreach-web"}
    assert requests["(unmatched)"].attributes["http.status_code"] == 404
    # and no URL, with its query (an admin's search) or its path (an unsubscribe token), is kept
    values = [str(value) for s in requests.values() for value in s.attributes.values()]
    assert not [v for v in values if "prospect.example" in v or "secret-token" in v]


@pytest.mark.django_db
def test_each_dispatched_outreach_starts_a_trace_linked_to_the_cycle(
    traced: InMemorySpanExporter, budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given two owners' intros
    org = make_org()
    ids = {make_outreach(lead=make_lead(owner=make_owner(organization=org))).pk for _ in range(2)}
    # when a cycle runs inside a span (the dispatch task's, in a worker)
    with tracing.span("run/orchestrator.dispatch", {}), django_capture_on_commit_callbacks(execute=True):
        report = dispatch_cycle(budget=budget)
    # then each published outreach has a root span of its own, linked to the cycle's span
    assert set(report.generation) == ids
    spans = traced.get_finished_spans()
    cycle = next(s for s in spans if s.name == "run/orchestrator.dispatch")
    roots = [s for s in spans if s.name == "outreach.dispatch"]
    assert {s.attributes["outreach.id"] for s in roots if s.attributes} == ids
    assert all(s.parent is None for s in roots)
    assert len({s.context.trace_id for s in [cycle, *roots]}) == 3
    assert all([link.context for link in s.links] == [cycle.context] for s in roots)
    assert {s.attributes["celery.task_name"] for s in roots if s.attributes} == {"nurture.generate"}
