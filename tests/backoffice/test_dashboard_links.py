"""Every figure of the queue-health page that counts rows links to the admin list of exactly
those rows, and a member of one organization sees neither another's figures nor its rows."""

from __future__ import annotations

import html
import re
from datetime import timedelta

import pytest
import redis
from django.contrib import admin
from django.test import Client
from django.urls import include, path, reverse
from django.utils import timezone

from orchestrator.failures.dead_letters import dead_letter_replay
from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, Organization, Outreach, State
from tests.factories import logged_in, make_lead, make_org, make_outreach, make_owner, make_user
from tests.orchestrator.metrics_helpers import dead_letter_row

urlpatterns = [path("", include("backoffice.urls")), path("admin/", admin.site.urls)]
pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

PAGE = "orchestrator:queue-health"
OPERATOR = ["view_queue_health", "view_outreach", "view_deadletter"]
# A number that links somewhere: <a href="...">3</a> or <a class="qh-value" href="...">3</a>.
LINKED_NUMBER = re.compile(r'<a (?:class="qh-value" )?href="(/admin/[^"]+)">(\d+)</a>')
S, INTRO, REPLY = State, Outreach.Kind.INTRO, Outreach.Kind.REPLY


def _organization_with_work(name: str) -> Organization:
    """Two ready intros, a reply not due yet, one deferred intro, one generating, one sent,
    two open dead letters (policy, exhausted) and a replayed one (back in the queue)."""
    org = make_org(name=name)
    owner = make_owner(organization=org, name=f"{name} owner")
    now = timezone.now()

    def row(**fields: object) -> Outreach:
        return make_outreach(lead=make_lead(owner=owner), **fields)  # type: ignore[arg-type]

    row(kind=INTRO, not_before=now - timedelta(minutes=5))
    row(kind=INTRO, not_before=now - timedelta(minutes=1))
    row(kind=REPLY, not_before=now + timedelta(hours=1))
    row(kind=INTRO, not_before=now - timedelta(minutes=1), blocked_reason="owner daily limit reached")
    row(kind=INTRO, state=S.GENERATING)
    row(kind=INTRO, state=S.SENT, sent_at=now)
    for failure in (ErrorClass.POLICY, ErrorClass.EXHAUSTED, ErrorClass.POLICY):
        dead_letter_row(row(kind=INTRO, state=S.DEAD), failure_class=failure, reason=f"{name} failed")
    dead_letter_replay(dead_letter=DeadLetter.objects.filter(reason=f"{name} failed").latest("pk"))
    return org


@pytest.fixture
def two_organizations(redis_client: redis.Redis) -> tuple[Organization, Organization]:
    return _organization_with_work("Acme"), _organization_with_work("Globex")


def _page(client: Client) -> str:
    response = client.get(reverse(PAGE))
    assert response.status_code == 200
    return response.content.decode()


def _linked_figures(page: str) -> list[tuple[str, int]]:
    return [(html.unescape(url), int(n)) for url, n in LINKED_NUMBER.findall(page)]


def _rows_behind(client: Client, url: str) -> list[int]:
    response = client.get(url)
    assert response.status_code == 200, url  # an unknown filter is a 302 to ?e=1
    return [obj.pk for obj in response.context["cl"].result_list]


def test_each_linked_figure_is_the_count_of_the_list_behind_it(
    two_organizations: tuple[Organization, Organization],
) -> None:
    # given an operator of Acme
    acme, _ = two_organizations
    client = logged_in(make_user("acme-ops", permissions=OPERATOR, organizations=[acme]))
    # when every linked figure of the dashboard is followed
    figures = _linked_figures(_page(client))
    # then each list answers and holds as many rows as the figure said
    assert len(figures) >= 30
    for url, figure in figures:
        assert len(_rows_behind(client, url)) == figure, url


def test_the_links_filter_by_state_tier_readiness_and_status(
    two_organizations: tuple[Organization, Organization],
) -> None:
    acme, _ = two_organizations
    client = logged_in(make_user("acme-ops", permissions=OPERATOR, organizations=[acme]))
    page = _page(client)
    mine = Outreach.objects.filter(owner__organization=acme)
    now = timezone.now()
    # queued intros per tier: the two ready, the deferred one and the replayed one
    intro_queued = re.search(r'<tr data-state="queued">.*?data-tier="intro"><a href="([^"]+)">(\d+)<', page)
    assert intro_queued is not None
    assert intro_queued.group(2) == "4"
    expected = mine.filter(state=S.QUEUED, tier=Outreach.KIND_TIER[INTRO]).values_list("pk", flat=True)
    assert sorted(_rows_behind(client, html.unescape(intro_queued.group(1)))) == sorted(expected)
    # ready now: due rows only (the reply due in an hour is not among them)
    ready = re.search(r'id="card-ready"><a class="qh-value" href="([^"]+)">(\d+)<', page)
    assert ready is not None
    assert ready.group(2) == "4"
    expected = mine.filter(state=S.QUEUED, not_before__lte=now).values_list("pk", flat=True)
    assert sorted(_rows_behind(client, html.unescape(ready.group(1)))) == sorted(expected)
    # dead letters open: the open ones, not the replayed one
    dead = re.search(r'id="card-dead-open"><a class="qh-value" href="([^"]+)">(\d+)<', page)
    assert dead is not None
    assert dead.group(2) == "2"
    open_letters = DeadLetter.objects.filter(
        outreach__owner__organization=acme, status=DeadLetter.Status.OPEN
    )
    assert sorted(_rows_behind(client, html.unescape(dead.group(1)))) == sorted(
        open_letters.values_list("pk", flat=True)
    )
    # the oldest open dead letter's age is shown (and links to the open ones)
    assert re.search(r'id="card-dead-oldest"><a class="qh-value" href="[^"]+">\d+ s<', page)


def test_a_member_of_another_organization_sees_only_their_own_figures(
    two_organizations: tuple[Organization, Organization],
) -> None:
    # given Globex's operator, and one more queued intro for Acme only
    acme, globex = two_organizations
    make_outreach(lead=make_lead(owner=acme.owners.get()), not_before=timezone.now() - timedelta(minutes=1))
    client = logged_in(make_user("globex-ops", permissions=OPERATOR, organizations=[globex]))
    # when they open the dashboard
    page = _page(client)
    # then the figures are Globex's (4 ready, not Acme's 5 or the sum), no Acme names or reasons
    assert re.search(r'id="card-ready"><a class="qh-value" href="[^"]+">4<', page)
    assert re.search(r'id="card-dead-open"><a class="qh-value" href="[^"]+">2<', page)
    assert re.search(r'<tr data-state="sent">.*?>1</a>', page)
    assert "Acme" not in page
    # and no link leads to an Acme row
    acme_rows = set(Outreach.objects.filter(owner__organization=acme).values_list("pk", flat=True))
    acme_letters = set(
        DeadLetter.objects.filter(outreach__owner__organization=acme).values_list("pk", flat=True)
    )
    for url, figure in _linked_figures(page):
        rows = set(_rows_behind(client, url))
        assert len(rows) == figure, url
        assert not rows & (acme_letters if "deadletter" in url else acme_rows), url


def test_a_superuser_sees_every_organization(two_organizations: tuple[Organization, Organization]) -> None:
    page = _page(logged_in(make_user("root", superuser=True)))
    assert re.search(r'id="card-ready"><a class="qh-value" href="[^"]+">8<', page)
    assert "Acme owner" in page
    assert "Globex owner" in page


def test_the_page_refetches_itself_at_the_configured_interval(
    redis_client: redis.Redis, settings: object
) -> None:
    settings.DASHBOARD_REFRESH_S = 7  # type: ignore[attr-defined]
    page = _page(logged_in(make_user("root", superuser=True)))
    assert 'id="content-main" class="queue-health" data-refresh-seconds="7"' in page
    assert "fetch(window.location.href" in page
