"""Tracing through the real pipeline: beat, the orchestrator (prefork), generation and send
(threads) workers as the recipe runs them, each exporting over OTLP/HTTP to a receiver in this
test (a worker in another process cannot share an in-memory exporter), following one outreach
from its dispatch to its send in one trace (config.tracing)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from devtools.llm_stub import LLMStub
from devtools.otlp_sink import OTLPSink, ReceivedSpan
from devtools.processes import ProcessGroup
from outreach.models import Outreach, State
from tests.e2e.conftest import start_pipeline, wait_until
from tests.factories import make_outreach

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


@pytest.fixture
def otlp_sink() -> Iterator[OTLPSink]:
    sink = OTLPSink().start()
    yield sink
    sink.stop()


def _root(spans: list[ReceivedSpan], outreach_id: int) -> ReceivedSpan | None:
    roots = [
        s for s in spans if s.name == "outreach.dispatch" and s.attributes.get("outreach.id") == outreach_id
    ]
    return roots[0] if roots else None


def _trace_complete(spans: list[ReceivedSpan], outreach_id: int) -> bool:
    root = _root(spans, outreach_id)
    if root is None:
        return False
    names = {s.name for s in spans if s.trace_id == root.trace_id}
    cycles = [
        s for s in spans if s.name == "run/orchestrator.dispatch" and (s.trace_id, s.span_id) in root.links
    ]
    beat = {s.span_id for s in spans if s.service == "outreach-beat"}
    return "run/nurture.send" in names and any(cycle.parent_id in beat for cycle in cycles)


def test_one_trace_follows_an_outreach_from_dispatch_through_its_llm_calls_to_its_send(
    otlp_sink: OTLPSink, stack: ProcessGroup, llm_stub: LLMStub
) -> None:
    # (the sink first, so it outlives the workers: their last spans are exported as they stop)
    # given an autonomous owner's intro, and every process of the pipeline traced to the sink
    outreach = make_outreach()
    stack.env.update(OTEL_EXPORTER_OTLP_ENDPOINT=otlp_sink.endpoint, OTEL_BSP_SCHEDULE_DELAY="100")
    # when beat and the workers run until it is sent
    start_pipeline(stack)
    wait_until(
        lambda: Outreach.objects.get(pk=outreach.pk).state == State.SENT,
        timeout_s=60,
        what="the email",
        group=stack,
    )
    spans = otlp_sink.wait_for(lambda s: _trace_complete(s, outreach.pk), timeout_s=20)
    # then one trace, rooted at the outreach's dispatch in the orchestrator's prefork child and
    # linked to the cycle that dispatched it, holds its generation, LLM calls and send
    root = _root(spans, outreach.pk)
    assert root is not None
    assert root.parent_id == ""
    assert root.service == "outreach-worker-orchestrator"
    cycle = next(
        s for s in spans if s.name == "run/orchestrator.dispatch" and (s.trace_id, s.span_id) in root.links
    )
    assert cycle.trace_id != root.trace_id
    (publish,) = [s for s in spans if s.span_id == cycle.parent_id]  # the cycle beat published
    assert (publish.service, publish.name) == ("outreach-beat", "apply_async/orchestrator.dispatch")
    trace = {s.span_id: s for s in spans if s.trace_id == root.trace_id}
    by_name = {s.name: s for s in trace.values()}
    generate, send = by_name["run/nurture.generate"], by_name["run/nurture.send"]
    assert (generate.service, send.service) == ("outreach-worker-generation", "outreach-worker-send")
    # each hop the child of the one before: dispatch -> publish -> generate -> publish -> send
    assert _ancestry(trace, send) == [
        "run/nurture.send",
        "apply_async/nurture.send",
        "run/nurture.generate",
        "apply_async/nurture.generate",
        "outreach.dispatch",
    ]
    # the three LLM calls, children of the generation job, described without their text
    calls = [s for s in trace.values() if s.attributes.get("gen_ai.operation.name") == "chat"]
    assert sorted(s.attributes["outreach.llm.step"] for s in calls) == ["context", "message", "plan"]
    assert {s.parent_id for s in calls} == {generate.span_id}
    assert all(s.attributes["gen_ai.usage.input_tokens"] == 12 for s in calls)
    assert all(s.attributes["outreach.llm.deployment"] for s in calls)
    # the database turns of both jobs are in the trace too (psycopg)
    queries = [s for s in trace.values() if s.attributes.get("db.system") == "postgresql"]
    assert {s.service for s in queries} >= {"outreach-worker-generation", "outreach-worker-send"}
    assert not any(s.error for s in trace.values())
    # and no span anywhere carries the lead's address, the prompt or the draft
    words = (outreach.lead.email, llm_stub.default.text, "Hi there")
    values = [str(v) for s in spans for v in s.attributes.values()]
    assert not [v for v in values for word in words if word and word in v]


def _ancestry(trace: dict[str, ReceivedSpan], span: ReceivedSpan) -> list[str]:
    names = [span.name]
    while span.parent_id:
        span = trace[span.parent_id]
        names.append(span.name)
    return names
