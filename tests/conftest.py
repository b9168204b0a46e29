from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import hypothesis
import pytest
import redis
from django.conf import settings
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from config import tracing
from devtools.llm_stub import LLMStub
from devtools.smtp_sink import SMTPSink
from orchestrator.budget import Budget, Limits

# Property tests check what the code does with the examples, not how fast this machine draws
# them: on a loaded CI runner (load average 10 on 2 cores) drawing the examples may pass
# Hypothesis' time budget, and its "too slow" health check would fail a correct test.
hypothesis.settings.register_profile(
    "outreach", suppress_health_check=[hypothesis.HealthCheck.too_slow], deadline=None
)
hypothesis.settings.load_profile("outreach")

# The reply webhook's signing secret in tests: `webhook_secret` sets it, tests sign with it.
WEBHOOK_SECRET = "test-webhook-secret"


@pytest.fixture(autouse=True)
def dispatcher_starts_afresh() -> None:
    """Each test's dispatcher is a new process's: nothing learned from another test's cycles
    (cycle.window's last cycle sizes and orders the next window), no cursor it wrote
    (cycle.cursor_state writes what changed since) and no owners or organizations' caps it read
    (reads keeps them while the owners' version holds)."""
    from orchestrator.dispatch import reads
    from orchestrator.dispatch.cycle import cursor_state, window

    window._last = window._LastCycle()
    cursor_state._written = cursor_state._Written()
    reads._kept.clear()


@pytest.fixture
def redis_client() -> Iterator[redis.Redis]:
    """The test Redis database (REDIS_URL, db 15 by default), emptied before and after."""
    client = redis.Redis.from_url(settings.REDIS_URL)
    client.flushdb()
    yield client
    client.flushdb()


@pytest.fixture
def budget(redis_client: redis.Redis) -> Budget:
    """A real budget in the test Redis with roomy limits: for tests about the pipeline or the
    dispatcher, not the bucket (those build their own)."""
    return Budget(redis_client=redis_client, limits=Limits(rpm=100_000, tpm=100_000_000, burst_ms=60_000))


@pytest.fixture
def webhook_secret(settings: Any) -> str:
    """The reply webhook verifies signatures made with WEBHOOK_SECRET (nurture.intake.replies)."""
    settings.WEBHOOK_SECRET = WEBHOOK_SECRET
    return WEBHOOK_SECRET


@pytest.fixture
def smtp_sink(settings: Any) -> Iterator[SMTPSink]:
    """A real SMTP server; Django's SMTP backend pointed at it.

    The backend is set explicitly because Django's test environment swaps in the locmem
    backend, and these tests are about what really crosses the wire.
    """
    sink = SMTPSink().start()
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", sink.port
    settings.EMAIL_USE_TLS, settings.EMAIL_HOST_USER, settings.EMAIL_HOST_PASSWORD = False, "", ""
    settings.EMAIL_TIMEOUT = 5
    yield sink
    sink.stop()


@pytest.fixture
def llm_stub(settings: Any) -> Iterator[LLMStub]:
    """A real HTTP server speaking chat completions; nurture.writing.llm pointed at it."""
    stub = LLMStub().start()
    settings.LLM_BASE_URL, settings.LLM_API_KEY = stub.base_url, "sk-test"
    settings.LLM_MODEL, settings.LLM_TIMEOUT_S = "stub-1", 5.0
    yield stub
    stub.stop()


@pytest.fixture
def traced(monkeypatch: pytest.MonkeyPatch) -> InMemorySpanExporter:
    """config.tracing's own spans (the LLM calls, each dispatched outreach's trace) kept in
    memory, as if OTEL_EXPORTER_OTLP_ENDPOINT were set; the libraries are not instrumented in
    this process (that is process-wide and for good: tests/e2e/test_tracing.py covers it)."""
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    monkeypatch.setattr(tracing, "_tracer", provider.get_tracer("tests"))
    return exporter
