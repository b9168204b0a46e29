"""Replies per triage class on the dashboard and in `queue_stats` (human and --json): received in
the window, awaiting approval now, decided in the window and the approval rate of those
decisions; on /metrics those awaiting now (the others are counters, PromQL's to window:
tests/orchestrator/metrics/test_owner_and_class_counters.py); each view scoped to the
organizations it is for."""

from __future__ import annotations

import html
import io
import json
import re
from datetime import timedelta
from typing import Any

import pytest
import redis
from django.core.management import call_command
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from prometheus_client.parser import text_string_to_metric_families

from orchestrator.metrics.queue_health import queue_health
from outreach.models import Organization, Outreach, ReplyClass, State
from tests.factories import logged_in, make_lead, make_org, make_owner, make_user
from tests.orchestrator.metrics_helpers import event, outreach_at

pytestmark = pytest.mark.django_db

S, Q, C = State, ReplyClass.QUESTION, ReplyClass.COMPLAINT


def _reply(org: Organization, reply_class: str, *, hours_ago: float, state: State) -> Outreach:
    lead = make_lead(owner=make_owner(organization=org))
    return outreach_at(
        lead=lead,
        kind=Outreach.Kind.REPLY,
        reply_class=reply_class,
        state=state,
        created_at=timezone.now() - timedelta(hours=hours_ago),
    )


@pytest.fixture
def two_organizations(redis_client: redis.Redis) -> tuple[Organization, Organization]:
    """Acme, in the last 24 h: 3 questions received (2 approved, 1 rejected), 2 complaints
    received (1 awaiting, 1 rejected); a question from 30 h ago approved 2 h ago; a reply not
    triaged yet. Globex: 2 complaints received (1 approved, 1 awaiting)."""
    acme, globex = make_org(name="Acme"), make_org(name="Globex")
    now = timezone.now()
    # created oldest first, as in production (the window starts on the primary key)
    decided = [
        (_reply(acme, Q, hours_ago=30, state=S.SENT), S.APPROVED),  # received before the window
        (_reply(acme, Q, hours_ago=5, state=S.APPROVED), S.APPROVED),
        (_reply(acme, Q, hours_ago=4, state=S.SENT), S.APPROVED),
        (_reply(acme, Q, hours_ago=3, state=S.REJECTED), S.REJECTED),
        (_reply(acme, C, hours_ago=3, state=S.REJECTED), S.REJECTED),
        (_reply(globex, C, hours_ago=2, state=S.APPROVED), S.APPROVED),
    ]
    _reply(acme, C, hours_ago=1, state=S.AWAITING_APPROVAL)
    _reply(acme, "", hours_ago=1, state=S.QUEUED)
    _reply(globex, C, hours_ago=1, state=S.AWAITING_APPROVAL)
    # the decisions, oldest first too
    for minutes, (reply, to) in zip((150, 140, 130, 120, 110, 100), decided, strict=True):
        event(reply, S.AWAITING_APPROVAL, to, at=now - timedelta(minutes=minutes))
    return acme, globex


# (received, awaiting, approved, rejected), written out by hand from the fixture's docstring
ACME = {Q: (3, 0, 3, 1), C: (2, 1, 0, 1)}
GLOBEX = {Q: (0, 0, 0, 0), C: (2, 1, 1, 0)}


def test_the_figures_per_class_of_one_organization_and_of_all(
    two_organizations: tuple[Organization, Organization],
) -> None:
    acme, _ = two_organizations
    scoped = {r.reply_class: r for r in queue_health(organization_ids=[acme.pk]).replies}
    everyone = {r.reply_class: r for r in queue_health().replies}
    # every class is listed (a fixed set), zeros included
    assert list(scoped) == list(ReplyClass.values)
    assert (scoped[ReplyClass.REFERRAL].received, scoped[ReplyClass.REFERRAL].approval_rate) == (0, None)
    for code, figures in ACME.items():
        r = scoped[code]
        assert (r.received, r.awaiting, r.approved, r.rejected) == figures
    assert scoped[Q].approval_rate == pytest.approx(0.75)
    assert scoped[C].approval_rate == 0.0
    for code in (Q, C):
        r = everyone[code]
        expected = tuple(a + g for a, g in zip(ACME[code], GLOBEX[code], strict=True))
        assert (r.received, r.awaiting, r.approved, r.rejected) == expected
    assert everyone[C].approval_rate == pytest.approx(0.5)


def test_queue_stats_prints_and_exports_the_classes(
    two_organizations: tuple[Organization, Organization],
) -> None:
    out = io.StringIO()
    call_command("queue_stats", "--json", "--org", "Acme", stdout=out)
    figures = json.loads(out.getvalue())["reply_classes"]
    assert figures["question"] == {
        "reply_class": "question",
        "label": "Question",
        "received": 3,
        "awaiting": 0,
        "approved": 3,
        "rejected": 1,
        "approval_rate": 0.75,
    }
    assert figures["complaint"]["awaiting"] == 1
    human = io.StringIO()
    call_command("queue_stats", "--org", "Acme", stdout=human)
    lines = [line for line in human.getvalue().splitlines() if line.strip("│ ").startswith("question")]
    assert len(lines) == 1
    assert [cell.strip() for cell in lines[0].strip("│").split("│")] == [
        "question",
        "3",
        "0",
        "3 / 1",
        "75.0%",
    ]


def test_the_dashboard_shows_a_row_per_class_linking_to_the_queue_filtered_by_it(
    two_organizations: tuple[Organization, Organization],
) -> None:
    acme, _ = two_organizations
    client = logged_in(
        make_user("ops", permissions=["view_queue_health", "view_outreach"], organizations=[acme])
    )
    page = client.get(reverse("orchestrator:queue-health")).content.decode()
    row = page[page.index('<tr data-reply-class="complaint">') :]
    row = row[: row.index("</tr>")]
    cells = [cell.split(">")[-1] for cell in row.replace("</a>", "").split("</td>")[:-1]]
    assert cells == ["2", "1", "0 / 1", "0.0%"]
    # the figure is the list behind it
    (link,) = re.findall(r'href="([^"]+)"', row)
    assert len(client.get(html.unescape(link)).context["cl"].result_list) == 1


def _samples(text: str) -> dict[tuple[str, str], float]:
    return {
        (s.name, s.labels.get("reply_class", "")): s.value
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if "reply_class" in s.labels and not s.name.endswith("_total")
    }


def test_metrics_per_class_with_class_codes_as_labels_scoped_for_a_member(
    two_organizations: tuple[Organization, Organization], settings: Any
) -> None:
    acme, _ = two_organizations
    settings.METRICS_TOKEN = "s3cret"
    member = make_user("member", permissions=["view_queue_health"], organizations=[acme])
    as_member = _samples(logged_in(member).get(reverse("orchestrator:metrics")).content.decode())
    as_scraper = _samples(
        Client().get(reverse("orchestrator:metrics"), HTTP_AUTHORIZATION="Bearer s3cret").content.decode()
    )
    # awaiting approval now: every class, zeros included, of the member's organization only
    assert as_member[("outreach_replies_awaiting_approval", "complaint")] == 1
    assert as_member[("outreach_replies_awaiting_approval", "question")] == 0
    assert as_scraper[("outreach_replies_awaiting_approval", "complaint")] == 2
    assert {label for name, label in as_scraper if name == "outreach_replies_awaiting_approval"} == set(
        ReplyClass.values
    )
    # no window per class: received and decided are counters (increase() over them is PromQL's)
    assert {name for name, _ in as_scraper} == {"outreach_replies_awaiting_approval"}
    # the labels are the class codes and nothing else
    assert {label for _, label in as_scraper} <= set(ReplyClass.values)
