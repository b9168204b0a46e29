"""Deployments in the provider's dialect, through the real generation service (called as the task
calls it) over HTTP to llm_sim in its dialect modes, with the real budget and breaker in Redis.

Before dialects every call sent `max_tokens` with `Authorization: Bearer` to
`{base_url}/chat/completions`: a reasoning model answered 400 unsupported_parameter and Azure
401/404, and every job was dead-lettered as a 400.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
import yaml
from django.utils import timezone
from prometheus_client import generate_latest

from config.deployments import deployments_parse
from devtools.llm_sim import LLMSim
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Reservation
from orchestrator.deployments.breaker import healths
from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.dispatch.reads import organization_caps_load
from orchestrator.metrics.prometheus import metrics_registry
from orchestrator.models import DeadLetter
from outreach.models import Outreach, State
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = pytest.mark.django_db


@pytest.fixture
def start_sim() -> Iterator[Any]:
    started: list[LLMSim] = []

    def start(**config: Any) -> LLMSim:
        sim = LLMSim(rpm=6000, tpm=6_000_000, **config)
        sim.start()
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


def _deploy(settings: Any, **entry: Any) -> None:
    """One deployment, parsed from LLM_DEPLOYMENTS text as at start-up."""
    settings.LLM_API_KEY = "sk-default-unused"
    settings.LLM_DEPLOYMENTS = deployments_parse(
        json.dumps([{"name": "writer", "rpm": 6000, "tpm": 6_000_000, **entry}])
    )
    settings.LLM_STEP_MODELS, settings.LLM_FALLBACKS = {}, {}


def _dispatched(budget: Budget, n: int = 1) -> list[Outreach]:
    owner = make_owner(organization=make_org())
    found = []
    for _ in range(n):
        reservation = budget.reserve(requests=3, tokens=1800)
        assert isinstance(reservation, Reservation)
        found.append(
            make_outreach(lead=make_lead(owner=owner), state=State.DISPATCHED, reservation_id=reservation.id)
        )
    return found


def _drafted(outreach: Outreach, budget: Budget, capture: Any) -> Outreach:
    with capture():  # the send task, enqueued on commit, is not this test's
        assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DISPATCHED
    outreach.refresh_from_db()
    return outreach


def test_a_reasoning_model_deployment_writes_drafts(
    budget: Budget, settings: Any, start_sim: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given a reasoning model (it refuses max_tokens) behind the openai preset
    sim = start_sim(dialect="reasoning")
    _deploy(settings, model="o3-mini", base_url=sim.base_url, dialect="openai")
    (outreach,) = _dispatched(budget)
    # when the generation runs
    outreach = _drafted(outreach, budget, django_capture_on_commit_callbacks)
    # then its three calls were answered and the draft is written
    assert outreach.draft_subject
    assert outreach.draft_body
    assert (outreach.llm_calls, outreach.attempts) == (3, 0)
    stats = sim.stats()
    assert (stats["completed"], stats["unsupported_parameter"]) == (3, 0)


def test_an_azure_deployment_writes_drafts(
    budget: Budget, settings: Any, start_sim: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given classic Azure OpenAI serving the deployment gpt4o-prod (api-key and api-version required)
    sim = start_sim(dialect="azure", models=(("gpt4o-prod", 6000, 6_000_000),))
    _deploy(settings, model="gpt4o-prod", base_url=sim.base_url, api_key="azure-key-1", dialect="azure")
    (outreach,) = _dispatched(budget)
    # when the generation runs
    outreach = _drafted(outreach, budget, django_capture_on_commit_callbacks)
    # then the calls went to the deployment's URL with the key header and the version
    assert outreach.draft_subject
    assert outreach.draft_body
    assert outreach.llm_calls == 3
    stats = sim.stats()
    assert (stats["completed"], stats["unauthorized"], stats["not_found"], stats["unknown_model"]) == (
        3,
        0,
        0,
        0,
    )
    assert stats["models"]["gpt4o-prod"]["admitted"] == 3


def test_max_tokens_sent_to_a_reasoning_model_opens_the_breaker_and_dead_letters_nothing(
    budget: Budget, settings: Any, start_sim: Any
) -> None:
    # given a reasoning model configured as a generic server (it sends max_tokens)
    sim = start_sim(dialect="reasoning")
    _deploy(settings, model="o3-mini", base_url=sim.base_url)
    settings.LLM_FAULT_THRESHOLD = 2
    jobs = _dispatched(budget, 3)
    # when its jobs run
    states = [outreach_generate(outreach_id=o.pk, budget=budget) for o in jobs]
    # then each is back in the queue, uncharged, saying which deployment and which parameter
    assert states == [State.QUEUED] * 3
    rows = Outreach.objects.filter(pk__in=[o.pk for o in jobs])
    assert set(rows.values_list("state", "attempts", "reservation_id")) == {(State.QUEUED, 0, "")}
    assert set(rows.values_list("blocked_reason", flat=True)) == {
        "deployment 'writer#0' misconfigured: 400 unsupported_parameter 'max_tokens'; check "
        "LLM_DEPLOYMENTS (its dialect/token_param)"
    }
    assert not DeadLetter.objects.exists()
    # and the deployment's breaker is open, its gauge (labelled with its name) at 1
    (deployment,) = settings.LLM_DEPLOYMENTS
    assert healths(client=budget._redis, deployments=[deployment])["writer#0"].state == "open"
    exported = generate_latest(metrics_registry()).decode()
    assert 'llm_deployment_breaker_open{deployment="writer#0",model="o3-mini"} 1.0' in exported
    assert sim.stats()["unsupported_parameter"] == 3  # one refused call a job, no retry loop


@pytest.mark.parametrize(
    ("entry", "expected"),
    [
        # the Azure deployment's name is wrong: 404 DeploymentNotFound
        ({"model": "gpt4o-typo", "dialect": "azure"}, "404 DeploymentNotFound"),
        # the key sent as a bearer token: Azure answers 401 (its code repeats the status)
        ({"model": "gpt4o-prod", "dialect": "azure", "auth": "bearer"}, "401;"),
        # no api-version (a generic server's dialect on Azure's path): 404 Resource not found
        (
            {
                "model": "gpt4o-prod",
                "auth": "api-key",
                "path": "/openai/deployments/{model}/chat/completions",
            },
            "404;",
        ),
    ],
)
def test_a_wrong_azure_deployment_is_a_configuration_fault_not_a_dead_letter(
    budget: Budget, settings: Any, start_sim: Any, entry: dict[str, Any], expected: str
) -> None:
    sim = start_sim(dialect="azure", models=(("gpt4o-prod", 6000, 6_000_000),))
    _deploy(settings, base_url=sim.base_url, api_key="azure-key-1", **entry)
    (outreach,) = _dispatched(budget)
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.QUEUED
    outreach.refresh_from_db()
    assert outreach.attempts == 0
    assert outreach.blocked_reason.startswith(f"deployment 'writer#0' misconfigured: {expected}")
    assert not DeadLetter.objects.exists()


def test_an_alert_rule_names_the_deployment_whose_breaker_is_open() -> None:
    # the gauge the misconfigured test reads is the one the example rule watches, by deployment
    rules = yaml.safe_load((Path(__file__).parents[2] / "docs/prometheus/alerts.yml").read_text())
    (rule,) = [
        r for g in rules["groups"] for r in g["rules"] if r["alert"] == "OutreachLLMDeploymentBreakerOpen"
    ]
    assert rule["expr"] == "max by (deployment, model) (llm_deployment_breaker_open) == 1"
    assert "{{ $labels.deployment }}" in rule["annotations"]["summary"]


def test_a_reasoning_model_misconfigured_with_a_fallback_has_its_work_written_there(
    budget: Budget, settings: Any, start_sim: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given a reasoning model sent max_tokens (misconfigured), falling back to a generic model
    reasoning, generic = start_sim(dialect="reasoning"), start_sim()
    settings.LLM_API_KEY, settings.LLM_FAULT_THRESHOLD, settings.DISPATCH_MAX_IN_FLIGHT = "sk-1", 1, 40
    settings.LLM_DEPLOYMENTS = deployments_parse(
        json.dumps(
            [
                {
                    "name": "reasoner",
                    "model": "o3-mini",
                    "rpm": 6000,
                    "tpm": 6_000_000,
                    "base_url": reasoning.base_url,
                },
                {
                    "name": "backup",
                    "model": "sim-1",
                    "rpm": 6000,
                    "tpm": 6_000_000,
                    "base_url": generic.base_url,
                },
            ]
        )
    )
    settings.LLM_STEP_MODELS, settings.LLM_FALLBACKS = {}, {"reasoner": "backup"}
    organization_caps_load(budget=budget)
    owner = make_owner(organization=make_org(), daily_limit=500)
    outreach = make_outreach(lead=make_lead(owner=owner))
    # when it is dispatched and run: refused, the breaker opens
    with django_capture_on_commit_callbacks():
        assert dispatch_cycle(budget=budget).generation == [outreach.pk]
    assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.QUEUED
    # and the next cycle places it again, once its recheck time has passed
    with django_capture_on_commit_callbacks():
        later = timezone.now() + timedelta(seconds=10)
        assert dispatch_cycle(budget=budget, now=later).generation == [outreach.pk]
    with django_capture_on_commit_callbacks():
        assert outreach_generate(outreach_id=outreach.pk, budget=budget) == State.DISPATCHED
    # then it ran on the fallback and its draft is written; nothing is dead-lettered
    outreach.refresh_from_db()
    assert outreach.llm_route == "plan=backup#0,context=backup#0,message=backup#0 fallback reasoner->backup"
    assert outreach.draft_body
    assert outreach.attempts == 0
    assert not DeadLetter.objects.exists()
    assert (reasoning.stats()["unsupported_parameter"], generic.stats()["completed"]) == (1, 3)
