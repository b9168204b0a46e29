"""Several deployments through the dispatch cycle and the worker (real PostgreSQL, Redis and an
LLM stub over HTTP): a budget per deployment reserved all or nothing (each owner's learned
estimate, per call), placement within a pool by headroom, fallbacks after the wait, a
misconfigured deployment pausing its work, and spend priced per deployment's model."""

from __future__ import annotations

import io
import json
import time
from collections import Counter
from datetime import timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.management import call_command
from django.utils import timezone
from prometheus_client import generate_latest

from config.deployments import Deployment
from devtools.llm_stub import LLMStub, StubResponse
from devtools.processes import free_port
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Limits, Reservation, reservation_ids, reservation_scopes
from orchestrator.deployments import breaker
from orchestrator.deployments.breaker import fault_reason, fault_record, healths
from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.dispatch.owner_tokens import owner_tokens_record
from orchestrator.dispatch.reads import organization_caps_load
from orchestrator.metrics.prometheus import metrics_registry
from outreach.models import Outreach, State
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.orchestrator.conftest import FakeClock

pytestmark = pytest.mark.django_db

SMALL = Deployment(name="small", model="m-small", rpm=6000, tpm=6_000_000)
LARGE = Deployment(name="large", model="m-large", rpm=6000, tpm=6_000_000)
LARGE_1 = Deployment(name="large", model="m-large", rpm=6000, tpm=6_000_000, index=1)
SPLIT = {"plan": "small", "context": "small", "message": "large"}


@pytest.fixture
def two_models(settings: Any, redis_client: Any) -> Budget:
    """Two models, the large one a pool of two; a budget whose clock stands still, so what a
    test leaves in a bucket is exactly what the cycle finds."""
    budget = Budget(redis_client=redis_client, limits=Limits(rpm=100_000, tpm=100_000_000), clock=FakeClock())
    settings.LLM_DEPLOYMENTS = (SMALL, LARGE, LARGE_1)
    settings.LLM_STEP_MODELS = SPLIT
    settings.LLM_FALLBACKS = {}
    settings.DISPATCH_MAX_IN_FLIGHT = 40
    organization_caps_load(budget=budget)  # the deployments' limits, as the cycle loads them
    return budget


def _queue(n: int) -> list[int]:
    owner = make_owner(organization=make_org(), daily_limit=500)
    return [make_outreach(lead=make_lead(owner=owner)).pk for _ in range(n)]


def _drain(budget: Budget, scope: str, *, leave: int = 0) -> None:
    """Reserve a scope's requests until `leave` whole requests are left."""
    room = int(budget.headroom(scopes=(scope,)).requests)
    if room > leave:
        budget.reserve_many(count=room - leave, requests_each=1, tokens_each=1, scopes=(scope,))


def _cycle(budget: Budget, capture: Any, *, later_s: float = 0) -> list[int]:
    with capture(execute=False):
        return dispatch_cycle(budget=budget, now=timezone.now() + timedelta(seconds=later_s)).generation


def test_each_job_reserves_on_every_deployment_it_uses_all_or_nothing(
    two_models: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given room for 3 message calls in the whole large pool, plenty on small, 10 queued
    budget = two_models
    _drain(budget, "dep:large:0", leave=1)
    _drain(budget, "dep:large:1", leave=2)
    small_before = budget.headroom(scopes=("dep:small:0",)).requests
    ids = _queue(10)
    # when a cycle runs
    claimed = _cycle(budget, django_capture_on_commit_callbacks)
    # then 3 jobs went, each holding one reservation per deployment it uses, and small was
    # charged for those 3 jobs only (2 calls each): nothing held for the 7 that could not go
    assert len(claimed) == 3
    for row in Outreach.objects.filter(pk__in=claimed):
        scopes = sorted(reservation_scopes(rid)[0] for rid in reservation_ids(row.reservation_id))
        route = dict(part.split("=") for part in row.llm_route.split(","))
        assert scopes == sorted(["dep:small:0", route["message"].replace("large#", "dep:large:")])
    used = small_before - budget.headroom(scopes=("dep:small:0",)).requests
    assert used == 6  # 3 jobs x 2 calls
    assert Counter(Outreach.objects.filter(pk__in=ids).values_list("state", flat=True)) == {
        State.DISPATCHED: 3,
        State.QUEUED: 7,
    }


def test_a_pool_places_its_work_on_the_deployment_with_most_headroom(
    two_models: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    # given large#0 with room for 2 message calls and large#1 for 6
    budget = two_models
    _drain(budget, "dep:large:0", leave=2)
    _drain(budget, "dep:large:1", leave=6)
    _queue(20)
    # when a cycle runs
    claimed = _cycle(budget, django_capture_on_commit_callbacks)
    # then every call the pool could take was placed, the roomier deployment's first
    routes = Counter(
        route.split("message=")[1]
        for route in Outreach.objects.filter(pk__in=claimed).values_list("llm_route", flat=True)
    )
    assert routes == {"large#1": 6, "large#0": 2}


def test_a_misconfigured_deployment_shifts_its_work_to_the_pool_in_one_cycle(
    two_models: Budget, django_capture_on_commit_callbacks: Any, llm_stub: LLMStub, settings: Any
) -> None:
    # given large#0 answering 404 model_not_found: its jobs fail until its breaker opens
    budget = two_models
    settings.LLM_FAULT_THRESHOLD = 2
    settings.LLM_DEPLOYMENTS = (SMALL, LARGE, LARGE_1)
    ids = _queue(12)
    first = _cycle(budget, django_capture_on_commit_callbacks)
    on_0 = list(
        Outreach.objects.filter(pk__in=first, llm_route__endswith="message=large#0").values_list(
            "pk", flat=True
        )
    )
    assert on_0  # placement used both
    not_found = json.dumps({"error": {"message": "no such model", "code": "model_not_found"}})
    for pk in on_0[:2]:
        llm_stub.push(StubResponse(), StubResponse(), StubResponse(status=404, body=not_found))
        outreach_generate(outreach_id=pk, budget=budget)
    # then those jobs are back in the queue, uncharged, saying which deployment and what to do
    back = Outreach.objects.filter(pk__in=on_0[:2])
    assert set(back.values_list("state", "attempts")) == {(State.QUEUED, 0)}
    assert set(back.values_list("blocked_reason", flat=True)) == {
        "deployment 'large#0' misconfigured: 404 model_not_found; check LLM_DEPLOYMENTS"
    }
    assert healths(client=budget._redis, deployments=[LARGE])["large#0"].state == "open"
    # and the next cycle places nothing on large#0: its pool's other deployment takes the work
    Outreach.objects.filter(state=State.DISPATCHED).update(
        state=State.QUEUED, reservation_id="", llm_route=""
    )
    second = _cycle(budget, django_capture_on_commit_callbacks, later_s=10)
    routes = set(Outreach.objects.filter(pk__in=second).values_list("llm_route", flat=True))
    assert len(second) == 12
    assert {r.split("message=")[1] for r in routes} == {"large#1"}
    assert not Outreach.objects.filter(pk__in=ids, state=State.DEAD).exists()


def test_a_half_open_deployment_gets_one_probe_job_and_the_cycle_marks_it_probing(
    two_models: Budget, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    # given large#0's breaker opened by a fault a probe interval ago (half open)
    budget = two_models
    settings.LLM_FAULT_THRESHOLD, settings.LLM_FAULT_PROBE_S = 1, 30.0
    fault_record(deployment=LARGE, reason=fault_reason(deployment=LARGE, status=404, code="model_not_found"))
    budget._redis.hincrby(breaker.KEY_PREFIX + LARGE.scope, "opened_ms", -31_000)  # opened 31 s earlier
    assert healths(client=budget._redis, deployments=[LARGE])["large#0"].state == "half_open"
    ids = _queue(6)
    # when a cycle runs
    claimed = _cycle(budget, django_capture_on_commit_callbacks)
    # then one job (the probe) runs its message step on large#0, the rest on large#1, and the
    # breaker says a probe is out, so the next cycle sends it nothing more
    routes = Counter(
        route.split("message=")[1]
        for route in Outreach.objects.filter(pk__in=claimed).values_list("llm_route", flat=True)
    )
    assert sorted(claimed) == sorted(ids)
    assert routes == {"large#0": 1, "large#1": 5}
    assert healths(client=budget._redis, deployments=[LARGE])["large#0"].state == "probing"


def test_a_pool_without_room_for_longer_than_the_wait_runs_on_its_fallback(
    two_models: Budget, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    # given a large model with no room at all, falling back to small after 0.5 s
    budget = two_models
    settings.LLM_DEPLOYMENTS = (SMALL, LARGE)
    settings.LLM_FALLBACKS, settings.LLM_FALLBACK_AFTER_S = {"large": "small"}, 0.5
    _drain(budget, "dep:large:0")
    ids = _queue(4)
    # when a cycle runs before the wait is over: nothing goes (the large model's room may come back)
    assert _cycle(budget, django_capture_on_commit_callbacks) == []
    # and one after it
    time.sleep(0.6)
    claimed = _cycle(budget, django_capture_on_commit_callbacks)
    # then the message steps run on small, and the outreach says so
    assert sorted(claimed) == sorted(ids)
    assert set(Outreach.objects.filter(pk__in=ids).values_list("llm_route", flat=True)) == {
        "plan=small#0,context=small#0,message=small#0 fallback large->small"
    }


def test_queue_stats_and_metrics_show_each_deployment_and_its_breaker(
    settings: Any, redis_client: Any
) -> None:
    # given two models, the large one misconfigured (its breaker opened by 3 refusals)
    settings.LLM_DEPLOYMENTS, settings.LLM_STEP_MODELS = (SMALL, LARGE), SPLIT
    settings.LLM_FAULT_THRESHOLD = 3
    reason = fault_reason(deployment=LARGE, status=404, code="model_not_found")
    for _ in range(3):
        fault_record(deployment=LARGE, reason=reason)
    # when an operator asks
    out = io.StringIO()
    call_command("queue_stats", "--json", stdout=out)
    shown = json.loads(out.getvalue())["deployments"]
    exported = generate_latest(metrics_registry()).decode()
    # then each deployment is listed with its limits, headroom and breaker
    assert [(d["label"], d["model"], d["limit_rpm"], d["breaker"]) for d in shown] == [
        ("small#0", "m-small", 6000, "closed"),
        ("large#0", "m-large", 6000, "open"),
    ]
    assert (
        shown[1]["reason"] == "deployment 'large#0' misconfigured: 404 model_not_found; check LLM_DEPLOYMENTS"
    )
    assert shown[0]["headroom_requests"] > 0
    assert 'llm_deployment_breaker_open{deployment="large#0",model="m-large"} 1.0' in exported
    assert 'llm_deployment_limit_rpm{deployment="small#0",model="m-small"} 6000.0' in exported


def test_a_misconfigured_model_with_a_fallback_runs_its_steps_there_at_once(
    two_models: Budget, django_capture_on_commit_callbacks: Any, settings: Any
) -> None:
    # given the large model's only deployment misconfigured (breaker open), falling back to small
    budget = two_models
    settings.LLM_DEPLOYMENTS, settings.LLM_FALLBACKS = (SMALL, LARGE), {"large": "small"}
    settings.LLM_FAULT_THRESHOLD = 1
    fault_record(deployment=LARGE, reason=fault_reason(deployment=LARGE, status=401, code="invalid_api_key"))
    ids = _queue(3)
    # when a cycle runs (no wait: a failing model is not coming back within it)
    claimed = _cycle(budget, django_capture_on_commit_callbacks)
    # then every job runs all its steps on small, and says it fell back
    assert sorted(claimed) == sorted(ids)
    assert set(Outreach.objects.filter(pk__in=ids).values_list("llm_route", flat=True)) == {
        "plan=small#0,context=small#0,message=small#0 fallback large->small"
    }


def test_an_owners_learned_estimate_is_reserved_per_call_on_each_deployment_its_job_uses(
    two_models: Budget, redis_client: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given an owner whose jobs used 3,000 tokens (1,000 a call), plan and context on small,
    # message on large
    budget = two_models
    (pk,) = _queue(1)
    owner_tokens_record(owner_id=Outreach.objects.get(pk=pk).owner_id, settled=3_000, counted=3_000)
    # when a cycle runs
    assert _cycle(budget, django_capture_on_commit_callbacks) == [pk]
    # then small holds its two calls' share of the estimate and large its one call's, not
    # LLM_EST_TOKENS_PER_CALL (600) a call
    row = Outreach.objects.get(pk=pk)
    held = {
        reservation_scopes(rid)[0]: _held_tokens(redis_client, budget, rid)
        for rid in reservation_ids(row.reservation_id)
    }
    assert held == {"dep:small:0": 2_000, "dep:large:0": 1_000}


def test_a_deployment_refusing_a_costly_pick_makes_the_cheaper_picks_after_it_wait(
    two_models: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given 1,500 tokens left on small: the costly owner's two calls there (2 x 1,000) do not
    # fit, the cheap owner's (2 x 334) would; the costly owner first in the round
    budget = two_models
    settings.LLM_EST_TOKENS_PER_CALL = 100
    assert isinstance(
        budget.reserve(
            requests=1, tokens=budget.largest_tokens(scopes=("dep:small:0",)) - 1_500, scopes=("dep:small:0",)
        ),
        Reservation,
    )
    (costly,) = _queue(1)
    (cheap,) = _queue(1)
    owner_tokens_record(owner_id=Outreach.objects.get(pk=costly).owner_id, settled=3_000, counted=3_000)
    owner_tokens_record(owner_id=Outreach.objects.get(pk=cheap).owner_id, settled=1_000, counted=1_000)
    # when a cycle runs
    claimed = _cycle(budget, django_capture_on_commit_callbacks)
    # then small refused the costly job and the cheap one after it waits too, holding nothing
    assert claimed == []
    assert set(Outreach.objects.filter(pk__in=[costly, cheap]).values_list("state", "reservation_id")) == {
        (State.QUEUED, "")
    }


def test_each_call_is_priced_at_the_model_of_the_deployment_it_ran_on(
    two_models: Budget, llm_stub: LLMStub, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given prices for both models (none for LLM_MODEL) and a job placed on small and large
    budget = two_models
    settings.LLM_PRICES = {"m-small": (Decimal("1"), Decimal("2")), "m-large": (Decimal("10"), Decimal("20"))}
    (pk,) = _queue(1)
    assert _cycle(budget, django_capture_on_commit_callbacks) == [pk]
    # when the worker writes it (the stub: 12 prompt and 8 completion tokens a call)
    with django_capture_on_commit_callbacks():
        outreach_generate(outreach_id=pk, budget=budget)
    # then small's two calls cost (24 x 1 + 16 x 2) / 1,000 and large's one (12 x 10 + 8 x 20) / 1,000
    row = Outreach.objects.get(pk=pk)
    assert (row.llm_input_tokens, row.llm_output_tokens) == (36, 24)
    assert row.llm_cost == Decimal("0.056") + Decimal("0.280")


def _held_tokens(client: Any, budget: Budget, reservation_id: str) -> int:
    raw = client.hget(budget.key("res"), reservation_id)
    assert isinstance(raw, bytes), raw
    return int(raw.decode().split(":")[1])


def test_a_deployment_that_is_down_shifts_its_work_to_its_pool_in_one_cycle(
    two_models: Budget, django_capture_on_commit_callbacks: Any, llm_stub: LLMStub, settings: Any
) -> None:
    # given a pool of two whose second deployment refuses connections (nothing listens there)
    budget = two_models
    settings.LLM_FAULT_THRESHOLD = 2
    down = Deployment(
        name="large",
        model="m-large",
        rpm=6000,
        tpm=6_000_000,
        index=1,
        base_url=f"http://127.0.0.1:{free_port()}/v1",
    )
    settings.LLM_DEPLOYMENTS = (SMALL, LARGE, down)
    ids = _queue(12)
    first = _cycle(budget, django_capture_on_commit_callbacks)
    on_down = list(
        Outreach.objects.filter(pk__in=first, llm_route__endswith="message=large#1").values_list(
            "pk", flat=True
        )
    )
    assert len(on_down) >= 2  # placement used both
    # when two of its jobs reach their message call there (plan and context answer on small)
    for pk in on_down[:2]:
        llm_stub.push(StubResponse(), StubResponse())
        outreach_generate(outreach_id=pk, budget=budget)
    # then they are ordinary transient failures, retried later, and its breaker is open
    failed = Outreach.objects.filter(pk__in=on_down[:2])
    assert set(failed.values_list("state", "error_class")) == {(State.QUEUED, "transient")}
    health = healths(client=budget._redis, deployments=[down])["large#1"]
    assert (health.state, health.reason) == (
        "open",
        "deployment 'large#1' failing: unreachable; its work goes to its pool or fallback",
    )
    # and the next cycle places every job on the deployment that answers
    Outreach.objects.filter(state=State.DISPATCHED).update(
        state=State.QUEUED, reservation_id="", llm_route=""
    )
    Outreach.objects.filter(pk__in=ids).update(not_before=timezone.now())  # their backoff over
    second = _cycle(budget, django_capture_on_commit_callbacks, later_s=10)
    routes = set(Outreach.objects.filter(pk__in=second).values_list("llm_route", flat=True))
    assert len(second) == 12
    assert {r.split("message=")[1] for r in routes} == {"large#0"}
    assert not Outreach.objects.filter(pk__in=ids, state=State.DEAD).exists()


def test_a_lone_deployment_that_is_down_keeps_retrying_without_a_breaker(
    two_models: Budget, django_capture_on_commit_callbacks: Any, llm_stub: LLMStub, settings: Any
) -> None:
    # given the large model's only deployment down and no fallback: nowhere else to go
    budget = two_models
    settings.LLM_FAULT_THRESHOLD = 1
    down = Deployment(
        name="large", model="m-large", rpm=6000, tpm=6_000_000, base_url=f"http://127.0.0.1:{free_port()}/v1"
    )
    settings.LLM_DEPLOYMENTS = (SMALL, down)
    ids = _queue(1)
    assert _cycle(budget, django_capture_on_commit_callbacks) == ids
    llm_stub.push(StubResponse(), StubResponse())
    outreach_generate(outreach_id=ids[0], budget=budget)
    # then the job retries as before, and its breaker stays closed
    assert Outreach.objects.get(pk=ids[0]).state == State.QUEUED
    assert healths(client=budget._redis, deployments=[down])["large#0"].state == "closed"
