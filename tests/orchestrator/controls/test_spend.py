"""LLM spend: prices (LLM_PRICES), the cost each written outreach records, and an organization's
daily spend cap holding its LLM work QUEUED, saying why, until the next UTC day. Real PostgreSQL,
Redis and a scripted provider over HTTP."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from config.env import env_prices
from devtools.llm_stub import LLMStub
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Reservation
from orchestrator.controls.spend import llm_cost, spend_day
from orchestrator.dispatch.cycle import dispatch_cycle
from outreach.models import Outreach, State
from tests.factories import logged_in, make_lead, make_org, make_outreach, make_owner, make_user
from tests.security.admin_forms import form_values, superuser_client

PRICES = {"gpt-4o-mini": (Decimal("0.00015"), Decimal("0.0006"))}


def test_prices_parse_per_model_and_bad_entries_name_the_variable(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLM_PRICES", "gpt-4o-mini=0.00015/0.0006, gpt-4o=0.0025/0.01")
    assert env_prices("LLM_PRICES") == {
        "gpt-4o-mini": (Decimal("0.00015"), Decimal("0.0006")),
        "gpt-4o": (Decimal("0.0025"), Decimal("0.01")),
    }
    for bad in ("gpt-4o-mini=0.00015", "gpt-4o=-1/2", "=1/2", "gpt-4o=a/b"):
        monkeypatch.setenv("LLM_PRICES", bad)
        with pytest.raises(ImproperlyConfigured, match=r"LLM_PRICES: .* should be model=input/output"):
            env_prices("LLM_PRICES")


def test_cost_prices_input_and_output_apart_and_unpriced_models_cost_nothing() -> None:
    # 1,200 in at $0.00015/1k + 300 out at $0.0006/1k = 0.00018 + 0.00018
    assert llm_cost(prices=PRICES, model="gpt-4o-mini", input_tokens=1_200, output_tokens=300) == Decimal(
        "0.000360"
    )
    assert llm_cost(prices=PRICES, model="sim-1", input_tokens=1_200, output_tokens=300) == 0


@pytest.mark.django_db
def test_a_written_outreach_records_its_tokens_apart_and_its_cost(
    settings: Any, budget: Budget, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given prices for the configured model and a dispatched outreach
    settings.LLM_MODEL, settings.LLM_PRICES = "gpt-4o-mini", PRICES
    reservation = budget.reserve(requests=3, tokens=1_800)
    assert isinstance(reservation, Reservation)
    outreach = make_outreach(state=State.DISPATCHED, reservation_id=reservation.id)
    # when the worker writes it
    with django_capture_on_commit_callbacks():
        outreach_generate(outreach_id=outreach.pk, budget=budget)
    # then input and output tokens are kept apart, priced, and the day is stamped
    outreach.refresh_from_db()
    assert outreach.llm_input_tokens > 0
    assert outreach.llm_output_tokens > 0
    assert outreach.llm_input_tokens + outreach.llm_output_tokens == outreach.tokens_used
    assert outreach.llm_cost == llm_cost(
        prices=PRICES,
        model="gpt-4o-mini",
        input_tokens=outreach.llm_input_tokens,
        output_tokens=outreach.llm_output_tokens,
    )
    assert outreach.llm_cost > 0
    assert outreach.generated_at is not None


@pytest.mark.django_db
def test_work_beyond_the_daily_spend_cap_waits_with_the_reason_and_resumes_the_next_utc_day(
    budget: Budget, redis_client: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given an organization capped at $1.00 a day that spent $1.20 today, with an intro queued
    # and an approved draft waiting (sending costs no LLM)
    now = datetime(2026, 11, 23, 15, 0, tzinfo=UTC)
    org = make_org(daily_spend_cap=Decimal("1.00"))
    owner = make_owner(organization=org)
    make_outreach(
        lead=make_lead(owner=owner),
        state=State.SENT,
        llm_cost=Decimal("1.2"),
        generated_at=now - timedelta(hours=2),
    )
    queued = make_outreach(lead=make_lead(owner=owner), not_before=now - timedelta(hours=1))
    approved = make_outreach(
        lead=make_lead(owner=owner),
        state=State.APPROVED,
        state_changed_at=now,
        not_before=now - timedelta(hours=1),
    )
    other = make_outreach(lead=make_lead(owner=make_owner()), not_before=now - timedelta(hours=1))
    # when the dispatcher runs today
    with django_capture_on_commit_callbacks(execute=False):
        report = dispatch_cycle(budget=budget, now=now)
    # then the capped organization's LLM work waits, saying why, while its approved draft is sent
    # and another organization's work goes
    queued.refresh_from_db()
    assert queued.state == State.QUEUED
    assert queued.blocked_reason == "daily spend cap $1.00 reached, resumes 00:00 UTC"
    assert report.send == [approved.pk]
    assert report.generation == [other.pk]
    # when the next UTC day begins
    _, tomorrow = spend_day(now)
    with django_capture_on_commit_callbacks(execute=False):
        report = dispatch_cycle(budget=budget, now=tomorrow + timedelta(minutes=1))
    # then it is dispatched, its reason cleared (beside the others, recovered as stuck by then)
    queued.refresh_from_db()
    assert queued.pk in report.generation
    assert (queued.state, queued.blocked_reason) == (State.DISPATCHED, "")


@pytest.mark.django_db
def test_the_spend_cap_is_edited_with_the_settings_permission() -> None:
    org = make_org(name="Spender")
    client = superuser_client()
    url = reverse("admin:outreach_organization_change", args=[org.pk])
    response = client.post(url, form_values(client, url) | {"daily_spend_cap": "25.50"})
    assert response.status_code == 302, response.content.decode()[:2000]
    org.refresh_from_db()
    assert org.daily_spend_cap == Decimal("25.50")
    assert Outreach.objects.count() == 0


@pytest.mark.django_db
def test_spend_per_owner_and_organization_in_queue_stats_json_and_metrics(
    settings: Any, budget: Budget, redis_client: Any
) -> None:
    # given two drafts written today by one owner of a capped organization, one yesterday
    settings.METRICS_TOKEN = "t"
    now = timezone.now()
    org = make_org(name="Spender", daily_spend_cap=Decimal("5"))
    owner = make_owner(organization=org, name="Sam")
    for cost, when in (
        (Decimal("0.25"), now),
        (Decimal("0.5"), now),
        (Decimal("9"), now - timedelta(days=1)),
    ):
        make_outreach(lead=make_lead(owner=owner), state=State.SENT, llm_cost=cost, generated_at=when)
    # when queue_stats --json runs and /metrics is scraped
    out = io.StringIO()
    call_command("queue_stats", "--json", stdout=out)
    spend = json.loads(out.getvalue())["spend"]
    metrics = Client().get(reverse("orchestrator:metrics"), HTTP_AUTHORIZATION="Bearer t").content.decode()
    # then today's spend is there per owner and per organization, with the cap
    assert [(o["name"], o["drafts"], o["dollars"]) for o in spend["owners"]] == [("Sam", 2, 0.75)]
    assert [(o["name"], o["dollars"], o["cap"]) for o in spend["organizations"]] == [("Spender", 0.75, 5.0)]
    assert (
        f'outreach_organization_llm_spend_today_dollars{{organization="Spender",organization_id="{org.pk}"}} 0.75'
        in metrics
    )
    assert (
        f'outreach_organization_daily_spend_cap_dollars{{organization="Spender",organization_id="{org.pk}"}} 5.0'
        in metrics
    )


@pytest.mark.django_db
def test_the_dashboard_shows_todays_spend_against_the_cap(redis_client: Any) -> None:
    # given a capped organization that spent $0.75 today
    org = make_org(name="Spender", daily_spend_cap=Decimal("5"))
    owner = make_owner(organization=org, name="Sam")
    make_outreach(
        lead=make_lead(owner=owner), state=State.SENT, llm_cost=Decimal("0.75"), generated_at=timezone.now()
    )
    other = make_owner(organization=make_org(name="Elsewhere"), name="Olga")
    make_outreach(
        lead=make_lead(owner=other), state=State.SENT, llm_cost=Decimal("2"), generated_at=timezone.now()
    )
    user = make_user("watcher", staff=True, permissions=["view_queue_health"])
    user.organizations.add(org)
    # when its member opens the queue-health page
    html = logged_in(user).get(reverse("orchestrator:queue-health")).content.decode()
    # then the spend table shows the organization against its cap, and the owner
    table = html.split('id="table-spend"')[1].split("</table>")[0]
    assert '<tr data-spend="organization"><th scope="row">Spender' in table
    assert '<td class="num">$0.75</td><td class="num">$5.00</td>' in table
    assert '<tr data-spend="owner"><th scope="row">Sam' in table
    # and nothing of an organization the user is not a member of
    assert "Elsewhere" not in table
    assert "Olga" not in table
