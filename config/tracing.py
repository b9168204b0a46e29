"""Optional tracing: OpenTelemetry spans for Django, Celery, psycopg and the LLM calls, exported
over OTLP (HTTP/protobuf), on only when OTEL_EXPORTER_OTLP_ENDPOINT is set.

Off (the default) nothing of OpenTelemetry is imported or configured: `span` and `trace_start`
hand back a shared no-op, so the pipeline pays a function call per LLM call and per dispatched
outreach. On, `tracing_setup` runs once per process that does work, after that process exists
(a span processor's export thread does not survive a fork): the web process in config.wsgi, a
threads or solo worker when it starts, each prefork child as it starts (never the prefork
parent, which runs no task), and beat (config.celery's signals). Everything else is the SDK's
standard OTEL_* variables (headers, sampler, batch sizes, resource attributes).

One trace per dispatched outreach, from dispatch to send. A dispatch cycle publishes hundreds
of jobs; made children of the cycle's span they would make one trace of the whole cycle, too
large for a trace viewer to show and sampled all or nothing. So each outreach the cycle
publishes starts a trace of its own (`trace_start`: root span `outreach.dispatch`, attribute
`outreach.id`) with a span link back to the cycle's span. Celery's instrumentation carries the
context in the task's message headers, so that trace goes on through the generation job, its
LLM calls and database turns, the send it publishes and the send job. A draft that waits for
review is sent by a later cycle's dispatch: a trace of its own, like any re-dispatch.

Attributes carry ids, names and counts, never prompt or draft text or an email address.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, Protocol

from config.env import env_str

log = logging.getLogger(__name__)

AttributeValue = str | int | float | bool | Sequence[str]


Attributes = Mapping[str, AttributeValue | None]


class SpanNotes(Protocol):
    def set(self, attributes: Attributes) -> None: ...


class _Off:
    def set(self, attributes: Attributes) -> None:
        del attributes


class _On:
    def __init__(self, span: Any) -> None:
        self._span = span

    def set(self, attributes: Attributes) -> None:
        self._span.set_attributes(_attributes(attributes))


_OFF = _Off()
# Set by tracing_setup when tracing is on; None: off, and nothing of OpenTelemetry imported.
_tracer: Any = None
_provider: Any = None


def tracing_enabled() -> bool:
    """Tracing is asked for: an OTLP endpoint is set (the SDK reads it and the rest)."""
    return bool(env_str("OTEL_EXPORTER_OTLP_ENDPOINT", ""))


def tracing_setup(*, process: str) -> bool:
    """Trace this process (`process`: web, beat, worker-<queues>) if tracing is enabled; True
    when it is on. Idempotent: a second call in the same process changes nothing."""
    if _tracer is not None:
        return True
    if not tracing_enabled():
        return False
    from opentelemetry import trace
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    # OTEL_SERVICE_NAME wins; else one service per process kind, so a trace shows which hop ran
    # where. OTEL_RESOURCE_ATTRIBUTES is merged in by Resource.create.
    service = env_str("OTEL_SERVICE_NAME", "") or f"outreach-{process}"
    resource = Resource.create({"service.name": service, "outreach.process": process})
    provider = TracerProvider(resource=resource)
    provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter()))
    trace.set_tracer_provider(provider)
    # Every task registered, as in a worker: Celery's instrumentation ends a publish's span only
    # for a task this process knows, and the web process loads the task modules only on use.
    # (Celery's current app is config.celery's, which imports this module: hence not by name.)
    from celery import current_app

    current_app.loader.import_default_modules()
    tracing_instrument(provider)
    log.info("tracing on: %s exports to OTLP", service)
    return True


def tracing_instrument(provider: Any) -> None:
    """Instrument the libraries with `provider`, and make it the tracer of `span`/`trace_start`.

    Django's middleware is added to settings.MIDDLEWARE, so in the web process this runs before
    the WSGI handler loads its middleware (config.wsgi). psycopg: every connection opened after
    this, Django's and psycopg_pool's alike (both open them through psycopg.Connection.connect).
    """
    global _tracer, _provider
    from opentelemetry.instrumentation.celery import CeleryInstrumentor
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor

    DjangoInstrumentor().instrument(
        tracer_provider=provider,
        response_hook=_request_url_redacted,
        excluded_urls=env_str("OTEL_PYTHON_DJANGO_EXCLUDED_URLS", DJANGO_EXCLUDED_URLS),
    )
    CeleryInstrumentor().instrument(tracer_provider=provider)
    # Statements without their parameters (no lead data in spans); no SQL comments appended.
    PsycopgInstrumentor().instrument(tracer_provider=provider, capture_parameters=False)
    _provider, _tracer = provider, provider.get_tracer("outreach")


# Requests not traced (regular expressions searched in the URL): the probes and the scrapes,
# a span every few seconds per replica that says nothing about an outreach.
DJANGO_EXCLUDED_URLS = "/healthz$,/readyz$,/metrics$"
# The request attributes that hold its URL (the older and the stable HTTP conventions).
_URL_ATTRIBUTES = ("http.url", "http.target", "url.full", "url.path", "url.query")


def _request_url_redacted(span: Any, request: Any, response: Any) -> None:
    """A request's span keeps its route (`/unsubscribe/<str:token>/`), never its URL: a path
    holds an unsubscribe token (a lead's one-click opt-out), a query string the admin's searches
    (email addresses). Django's instrumentation records the URL as the request starts; this
    runs as it ends, and overwrites each URL attribute it set."""
    del response
    if not span.is_recording():
        return
    match = getattr(request, "resolver_match", None)
    route = "/" + match.route if match is not None and match.route else "(unmatched)"
    recorded = getattr(span, "attributes", None) or {}
    span.set_attributes({key: route for key in _URL_ATTRIBUTES if key in recorded})


def tracing_shutdown() -> None:
    """Export what is buffered before the process ends (a prefork child exits without atexit)."""
    if _provider is not None:
        _provider.shutdown()


@contextmanager
def span(name: str, attributes: Attributes) -> Iterator[SpanNotes]:
    """A child span of the current one around the block; the block may add attributes with
    `notes.set({...})`. An exception leaving the block is recorded on the span and marks it as an
    error. Off: a no-op."""
    if _tracer is None:
        yield _OFF
        return
    with _tracer.start_as_current_span(name, attributes=_attributes(attributes)) as current:
        yield _On(current)


@contextmanager
def trace_start(name: str, attributes: Attributes) -> Iterator[SpanNotes]:
    """A root span (a new trace) around the block, linked to the current span if there is one:
    what the block publishes belongs to the new trace. Off: a no-op."""
    if _tracer is None:
        yield _OFF
        return
    from opentelemetry import context, trace

    parent = trace.get_current_span().get_span_context()
    links = [trace.Link(parent)] if parent.is_valid else []
    with _tracer.start_as_current_span(
        name, context=context.Context(), links=links, attributes=_attributes(attributes)
    ) as current:
        yield _On(current)


def _attributes(attributes: Attributes) -> dict[str, AttributeValue]:
    # None: not known (a provider that sent no finish reason), left out rather than sent empty.
    return {key: value for key, value in attributes.items() if value is not None}
