"""The LLM calls as spans (nurture.writing.generation, config.tracing), kept by an in-memory
exporter: a span per call, named and described by OpenTelemetry's GenAI conventions with the
deployment and the step, never the prompt, the draft or the lead's address."""

from __future__ import annotations

import pytest
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import StatusCode

from config import tracing
from devtools.llm_stub import LLMStub, StubResponse
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Reservation
from outreach.models import Outreach, State
from tests.factories import make_outreach

pytestmark = pytest.mark.django_db


def _dispatched(budget: Budget) -> Outreach:
    reservation = budget.reserve(requests=3, tokens=1800)
    assert isinstance(reservation, Reservation)
    return make_outreach(state=State.DISPATCHED, reservation_id=reservation.id)


def test_each_llm_call_is_a_child_span_with_deployment_step_and_tokens_never_text(
    traced: InMemorySpanExporter, budget: Budget, llm_stub: LLMStub
) -> None:
    # given a dispatched intro
    outreach = _dispatched(budget)
    # when its generation job runs (inside the job's span, as in a worker)
    with tracing.span("run/nurture.generate", {}):
        outreach_generate(outreach_id=outreach.pk, budget=budget)
    # then each of its three calls is a span under the job's, described by ids and counts
    spans = traced.get_finished_spans()
    job = next(s for s in spans if s.name == "run/nurture.generate")
    calls = [s for s in spans if s.name == "chat stub-1"]
    assert [s.attributes and s.attributes["outreach.llm.step"] for s in calls] == [
        "plan",
        "context",
        "message",
    ]
    assert all(s.parent == job.context for s in calls)
    assert dict(calls[0].attributes or {}) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "stub-1",
        "gen_ai.request.max_tokens": 200,
        "outreach.llm.deployment": "stub-1#0",  # the implicit deployment from LLM_MODEL
        "outreach.llm.step": "plan",
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 8,
        "gen_ai.response.finish_reasons": ("stop",),
        "outreach.llm.usage_estimated": False,
    }
    # and nothing the prompt or the draft said
    prompts = [m["content"] for r in llm_stub.requests for m in r.json["messages"]]
    values = [str(v) for s in spans for v in (s.attributes or {}).values()]
    assert not [v for v in values for text in [outreach.lead.email, *prompts] if text in v]


def test_a_refused_call_is_an_error_span_naming_the_failure(
    traced: InMemorySpanExporter, budget: Budget, llm_stub: LLMStub
) -> None:
    # given a provider that refuses the request
    llm_stub.push(StubResponse(status=400))
    outreach = _dispatched(budget)
    # when the job runs
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DEAD
    # then its one call is an error span carrying the exception's class
    (call,) = traced.get_finished_spans()
    assert call.status.status_code == StatusCode.ERROR
    assert [e.attributes and e.attributes["exception.type"] for e in call.events] == [
        "nurture.errors.PermanentError"
    ]
