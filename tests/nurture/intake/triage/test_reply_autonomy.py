"""What an autonomous owner answers alone is the organization's list of classes: an empty list
sends every answer to a person, and a class the model makes up is "other", which always goes
to one (nurture.reply_actions.reply_needs_person)."""

from __future__ import annotations

import json

import pytest

from devtools.llm_stub import LLMStub, StubRequest, StubResponse
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget
from outreach.models import Outreach, State
from tests.factories import make_dispatched_reply

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(("classes", "state"), [([], State.AWAITING_APPROVAL), (None, State.DISPATCHED)])
def test_with_no_class_answered_alone_an_interested_reply_waits_for_a_person(
    budget: Budget, llm_stub: LLMStub, classes: list[str] | None, state: State
) -> None:
    # given an autonomous owner whose organization answers no class alone (or keeps the default)
    org = {} if classes is None else {"reply_autonomous_classes": classes}
    reply = make_dispatched_reply(budget=budget, body="Interested! Let's book a call next week.", **org)
    # when its lead's interested reply is classified and answered
    assert outreach_generate(outreach_id=reply.pk, budget=budget) == state
    # then with [] the draft waits in the approval queue; by default it goes out alone
    row = Outreach.objects.get(pk=reply.pk)
    assert (row.reply_class, row.reply_class_by) == ("interested", "model")
    assert row.draft_body
    assert len(llm_stub.requests) == 4  # the triage call and the three writing calls


def test_a_class_the_model_makes_up_waits_for_a_person(budget: Budget, llm_stub: LLMStub) -> None:
    # given a model that answers a class outside the list, for an autonomous owner's lead
    def vip(request: StubRequest) -> StubResponse:
        return StubResponse(text=json.dumps({"class": "vip", "reason": "an important customer"}))

    llm_stub.triage = vip
    reply = make_dispatched_reply(budget=budget, body="Interested! Let's book a call next week.")
    # when the reply is classified and answered
    state = outreach_generate(outreach_id=reply.pk, budget=budget)
    # then it is "other", saying why, and its draft waits for a person
    row = Outreach.objects.get(pk=reply.pk)
    assert (state, row.state) == (State.AWAITING_APPROVAL, State.AWAITING_APPROVAL)
    assert (row.reply_class, row.reply_class_by) == ("other", "model")
    assert "outside the list" in row.reply_class_reason
    assert row.draft_body
