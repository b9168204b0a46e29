"""The queue-health page in the admin (staff only) and the Prometheus /metrics endpoint."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
import redis
from django.contrib import admin
from django.test import Client
from django.urls import include, path, reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.dispatch.inflight import call_latency_record
from orchestrator.metrics.budget_use import budget_sample_record
from outreach.models import ErrorClass, Organization, State
from outreach.transitions import transition
from tests.factories import logged_in, make_lead, make_org, make_outreach, make_owner, make_user
from tests.orchestrator.metrics_helpers import dead_letter_row, event, outreach_at

# The wiring config/urls.py gets: orchestrator's URLs before the admin's catch-all.
urlpatterns = [path("", include("backoffice.urls")), path("admin/", admin.site.urls)]
pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

PAGE = "orchestrator:queue-health"
CHARTS = ("chart-budget-requests", "chart-budget-tokens", "chart-latency", "chart-owner-share")


def _client(*, staff: bool, may_view: bool = True) -> Client:
    """A session of a user with the dashboard permission (unless may_view=False), a member of
    every organization there is (a member sees only their organizations' owners' names)."""
    permissions = ["view_queue_health"] if may_view else []
    user = make_user(f"user-{staff}-{may_view}", staff=staff, permissions=permissions)
    user.organizations.add(*Organization.objects.all())
    return logged_in(user)


@pytest.fixture
def some_work(redis_client: redis.Redis) -> None:
    now = timezone.now()
    owner = make_owner(name="Agent <Smith>")
    make_outreach(lead=make_lead(owner=owner), not_before=now - timedelta(minutes=3))
    sent = outreach_at(created_at=now - timedelta(minutes=10), lead=make_lead(owner=owner), state=State.SENT)
    event(sent, State.QUEUED, State.DISPATCHED, at=now - timedelta(minutes=9))
    event(sent, State.SENDING, State.SENT, at=now - timedelta(minutes=8))
    dead = make_outreach(state=State.DEAD)
    event(dead, State.GENERATING, State.DEAD, at=now - timedelta(minutes=1), error_class=ErrorClass.POLICY)
    dead_letter_row(dead, failure_class=ErrorClass.POLICY, reason="link to an unknown domain")
    budget_sample_record(now=now - timedelta(minutes=2))
    budget_sample_record(now=now - timedelta(minutes=1))
    for _ in range(3):
        call_latency_record(step="plan", seconds=0.5)


def test_staff_see_the_dashboard_with_svg_charts_and_tables(some_work: None) -> None:
    response = _client(staff=True).get(reverse(PAGE))
    assert response.status_code == 200
    html = response.content.decode()
    assert "<h1>Queue health</h1>" in html
    for chart in CHARTS:
        assert f'<svg id="{chart}"' in html
    assert html.count('class="qh-bar"') >= 3  # budget samples, owner bars, latency bars
    for table in (
        "table-queue-depth",
        "table-states",
        "table-budget-now",
        "table-latency",
        "table-owners",
        "table-outcomes",
        "table-dead-letters",
        "table-deferred",
        "table-in-flight",
        "table-step-latency",
    ):
        assert f'id="{table}"' in html
    assert "link to an unknown domain" in html
    assert "Agent &lt;Smith&gt;" in html  # owner names are escaped in tables and charts
    assert "Agent <Smith>" not in html
    assert "<script" not in html.split('id="content-main"')[1]  # server-side charts, no JavaScript


def test_dashboard_renders_on_an_empty_database(redis_client: redis.Redis) -> None:
    html = _client(staff=True).get(reverse(PAGE)).content.decode()
    assert "No samples yet" in html
    assert "No dead letters." in html


def test_non_staff_and_anonymous_users_are_sent_to_the_admin_login(redis_client: redis.Redis) -> None:
    for client in (_client(staff=False), Client()):
        response = client.get(reverse(PAGE))
        assert response.status_code == 302
        assert response["Location"].startswith(reverse("admin:login"))


def test_admin_index_links_to_the_dashboard_for_staff(redis_client: redis.Redis) -> None:
    html = _client(staff=True).get(reverse("admin:index")).content.decode()
    assert f'href="{reverse(PAGE)}" id="queue-health-link"' in html


def test_staff_without_the_dashboard_permission_get_403_and_no_link(some_work: None, settings: Any) -> None:
    # an organization's reviewer is staff, but the dashboard shows every organization's owners
    client = _client(staff=True, may_view=False)
    assert client.get(reverse(PAGE)).status_code == 403
    assert "queue-health-link" not in client.get(reverse("admin:index")).content.decode()
    settings.METRICS_TOKEN = "s3cret"
    assert client.get(reverse("orchestrator:metrics")).status_code == 401


def _scrape(client: Client, **headers: Any) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = client.get(reverse("orchestrator:metrics"), **headers)
    assert response.status_code == 200
    assert response["Content-Type"].startswith("text/plain")
    families = text_string_to_metric_families(response.content.decode())
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in families
        for sample in family.samples
    }


def test_metrics_are_scraped_and_parse_as_prometheus_text(some_work: None) -> None:
    samples = _scrape(Client())
    assert samples[("outreach_state_rows", (("state", "queued"),))] == 1
    assert samples[("outreach_state_rows", (("state", "rejected"),))] == 0
    assert samples[("outreach_queue_depth", (("state", "queued"), ("tier", "intro")))] == 1
    assert samples[("outreach_dead_letters_open", (("class", "policy"),))] == 1
    assert ("outreach_window_dead", ()) not in samples  # PromQL's: increase(outreach_dead_letters_total[24h])
    assert samples[("outreach_oldest_ready_age_seconds", (("tier", "intro"),))] == pytest.approx(180, abs=10)
    # the owners' sent and dispatched are counters (the history written here counted nothing)
    assert not [name for name, labels in samples if dict(labels).get("period")]
    assert samples[("llm_budget_up", ())] == 1
    assert samples[("llm_budget_limit_rpm", ())] > 0
    assert samples[("outreach_llm_in_flight", ())] == 0
    assert samples[("outreach_llm_in_flight_target", ())] >= 1
    assert samples[("outreach_llm_call_latency_seconds", (("quantile", "0.95"), ("step", "plan")))] == 0.5


def test_dashboard_shows_in_flight_against_the_target(some_work: None) -> None:
    html = _client(staff=True).get(reverse(PAGE)).content.decode()
    assert 'id="card-llm-in-flight"' in html
    assert '<tr data-step="plan"><th scope="row">plan</th><td class="num">3</td>' in html


def test_metrics_token_when_set_is_required(redis_client: redis.Redis, settings: Any) -> None:
    settings.METRICS_TOKEN = "s3cret"
    url = reverse("orchestrator:metrics")
    assert Client().get(url).status_code == 401
    assert Client().get(url, HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    assert _scrape(Client(), HTTP_AUTHORIZATION="Bearer s3cret")[("llm_budget_up", ())] == 1
    assert _client(staff=True).get(url).status_code == 200  # a session allowed on the dashboard may look too


def test_a_members_session_on_metrics_sees_only_its_organizations(
    redis_client: redis.Redis, settings: Any
) -> None:
    # given two organizations with an owner, queued work (one row claimed) and a spend cap
    # each, and a member of the first allowed on the dashboard (the documented way to give a
    # tenant the figures)
    settings.METRICS_TOKEN = "s3cret"
    ours, theirs = (
        make_org(name="Ours Inc", daily_spend_cap=5),
        make_org(name="Theirs Ltd", daily_spend_cap=7),
    )
    owners = {}
    for org, name in ((ours, "Our Agent"), (theirs, "Their Agent")):
        owners[name] = make_owner(organization=org, name=name)
        make_outreach(lead=make_lead(owner=owners[name]))
        claimed = make_outreach(lead=make_lead(owner=owners[name]))
        transition(outreach_id=claimed.pk, from_=State.QUEUED, to=State.DISPATCHED)
    member = make_user("member", permissions=["view_queue_health"], organizations=[ours])
    # when the member's session and the scraper's token read /metrics
    as_member = logged_in(member).get(reverse("orchestrator:metrics")).content.decode()
    as_scraper = _scrape(Client(), HTTP_AUTHORIZATION="Bearer s3cret")
    # then the member sees their organization's figures and nothing of the other's
    assert "Ours Inc" in as_member
    assert f'outreach_owner_dispatched_total{{owner_id="{owners["Our Agent"].pk}"}} 1.0' in as_member
    assert "Theirs Ltd" not in as_member
    assert "Their Agent" not in as_member
    samples = [s for f in text_string_to_metric_families(as_member) for s in f.samples]
    assert str(theirs.pk) not in {s.labels.get("organization_id") for s in samples}
    assert str(owners["Their Agent"].pk) not in {s.labels.get("owner_id") for s in samples}
    # and the scraper still sees every organization
    organizations = {dict(labels).get("organization") for _, labels in as_scraper}
    assert {"Ours Inc", "Theirs Ltd"} <= organizations
