"""An objection gets no answer unless its organization chose a polite close; then the close is
written (told to be one) and waits for a person unless "objection" may be answered alone."""

from __future__ import annotations

import pytest

from devtools.llm_stub import LLMStub
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget
from outreach.models import Outreach, State
from tests.factories import make_dispatched_reply

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("org", "state", "calls"),
    [
        ({}, State.CANCELLED, 1),  # the default: the triage call only, no answer
        ({"reply_objection_close": True}, State.AWAITING_APPROVAL, 4),
        ({"reply_objection_close": True, "reply_autonomous_classes": ["objection"]}, State.DISPATCHED, 4),
    ],
)
def test_an_objection_is_closed_politely_only_when_the_organization_says_so(
    budget: Budget, llm_stub: LLMStub, org: dict[str, object], state: State, calls: int
) -> None:
    reply = make_dispatched_reply(budget=budget, body="Not interested, thanks.", **org)
    assert outreach_generate(outreach_id=reply.pk, budget=budget) == state
    assert len(llm_stub.requests) == calls
    assert Outreach.objects.get(pk=reply.pk).reply_class == "objection"
    if calls > 1:
        plan_prompt = llm_stub.requests[1].json["messages"][-1]["content"]
        assert "polite close" in plan_prompt
