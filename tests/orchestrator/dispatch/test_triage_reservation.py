"""A reply's job makes one more call than an intro's (its triage call, docs/email.md "Reply
triage"): the dispatcher reserves it and routes it; an intro's reservation and route stay the
writing steps' three."""

from __future__ import annotations

from typing import Any

import pytest
import redis

from orchestrator.budget import Budget, Limits
from orchestrator.dispatch.cycle import dispatch_cycle
from outreach.models import Outreach
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("kind", "requests", "route"),
    [
        (Outreach.Kind.REPLY, 4, "triage=stub-1#0,plan=stub-1#0,context=stub-1#0,message=stub-1#0"),
        (Outreach.Kind.INTRO, 3, "plan=stub-1#0,context=stub-1#0,message=stub-1#0"),
    ],
)
def test_a_reply_reserves_and_routes_its_triage_call_an_intro_does_not(
    redis_client: redis.Redis,
    settings: Any,
    django_capture_on_commit_callbacks: Any,
    kind: Outreach.Kind,
    requests: int,
    route: str,
) -> None:
    # given one queued job of this kind, and a key with room for a few, refilling slowly (0.2
    # requests/s: the bucket refills while the cycle runs, and at 600/min a 80 ms cycle on a
    # busy machine had already given back 0.8 of a request)
    settings.LLM_MODEL, settings.LLM_DEPLOYMENTS, settings.LLM_STEP_MODELS = "stub-1", (), {}
    budget = Budget(redis_client=redis_client, limits=Limits(rpm=12, tpm=10**9, burst_ms=60_000, margin_ms=0))
    job = make_outreach(lead=make_lead(owner=make_owner(organization=make_org())), kind=kind)
    before = budget.headroom().requests
    # when a cycle dispatches it
    with django_capture_on_commit_callbacks():
        assert dispatch_cycle(budget=budget).generation == [job.pk]
    # then it reserved one request per call it makes, on the route it will call
    assert before - budget.headroom().requests == pytest.approx(requests, abs=0.5)
    assert Outreach.objects.get(pk=job.pk).llm_route == route
