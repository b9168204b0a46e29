"""A real browser on the queue-health page: its figures refresh by themselves (no reload) when
rows change, its links lead to the filtered admin lists behind them, and a member of another
organization sees neither the figures nor the rows of the first.

Debian's Chromium driven by Playwright (tests/e2e/conftest.py); screenshots in artifacts/e2e/browser/.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.utils import timezone
from playwright.sync_api import BrowserContext, Page, expect

from orchestrator.failures.dead_letters import dead_letter
from outreach.models import ErrorClass, Organization, Outreach, State
from outreach.transitions import transition
from tests.e2e.conftest import SHOTS
from tests.factories import make_lead, make_org, make_outreach, make_owner, make_user

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

OPERATOR = ["view_queue_health", "view_outreach", "view_deadletter"]


def _log_in(page: Page, base_url: str, user: User) -> None:
    page.goto(f"{base_url}/admin/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", "pw")  # tests.factories.make_user's password
    page.click("input[type=submit]")
    expect(page.locator("#user-tools")).to_contain_text(user.username)


def _organization(name: str, *, ready: int) -> tuple[Organization, list[Outreach]]:
    org = make_org(name=name)
    owner = make_owner(organization=org, name=f"{name} owner")
    due = timezone.now() - timedelta(minutes=3)
    rows = [
        make_outreach(lead=make_lead(owner=owner, email=f"lead{i}@{name.lower()}.example"), not_before=due)
        for i in range(ready)
    ]
    return org, rows


def test_the_dashboard_refreshes_itself_and_links_to_the_rows_behind_its_figures(
    browser: BrowserContext, live_server: Any, settings: Any
) -> None:
    # given an Acme operator, three ready intros, and the page refetching every second
    settings.DASHBOARD_REFRESH_S = 1
    acme, rows = _organization("Acme", ready=3)
    operator = make_user("acme-ops", permissions=OPERATOR, organizations=[acme])
    page = browser.new_page()
    _log_in(page, live_server.url, operator)
    page.goto(f"{live_server.url}/admin/queue-health/")
    expect(page.locator("#card-ready .qh-value")).to_have_text("3")
    expect(page.locator("#card-dead-open .qh-value")).to_have_text("0")
    page.evaluate("window.notReloaded = true")
    page.evaluate("window.readyLink = document.querySelector('#card-ready a')")

    # when one row is claimed and dies (the real dead-letter path, committed)
    transition(outreach_id=rows[0].pk, from_=State.QUEUED, to=State.DISPATCHED)
    transition(outreach_id=rows[0].pk, from_=State.DISPATCHED, to=State.GENERATING)
    dead_letter(
        outreach=rows[0],
        from_=State.GENERATING,
        failure_class=ErrorClass.POLICY,
        reason="bad link",
        job_type="generation",
    )

    # then the figures change in place, without a reload
    expect(page.locator("#card-ready .qh-value")).to_have_text("2", timeout=10_000)
    expect(page.locator("#card-dead-open .qh-value")).to_have_text("1")
    expect(page.locator('#table-queue-depth tr[data-state="queued"] td[data-tier="intro"]')).to_have_text("2")
    assert page.evaluate("window.notReloaded") is True
    # (the figure's link is the same element, updated in place, not a copy swapped in)
    assert page.evaluate("document.querySelector('#card-ready a') === window.readyLink") is True
    page.screenshot(path=SHOTS / "dashboard-refreshed.png", full_page=True)

    # when the operator presses "Ready now" and a refresh lands before they let go
    page.locator("#card-ready a").hover()
    page.mouse.down()
    stamp = page.locator("#qh-generated-at").inner_text()
    expect(page.locator("#qh-generated-at")).not_to_have_text(stamp, timeout=10_000)
    page.mouse.up()
    # then the outreach list shows the two ready rows, filtered by state and readiness
    expect(page).to_have_url(re.compile(r"/admin/outreach/outreach/\?.*state__exact=queued"))
    results = page.locator("#result_list tbody tr")
    expect(results).to_have_count(2)
    expect(page.locator("#result_list")).to_contain_text("lead1@acme.example")
    expect(page.locator("#result_list")).not_to_contain_text("lead0@acme.example")

    # when they go back and follow the queued intros of the depth table
    page.go_back()
    page.click('#table-queue-depth tr[data-state="queued"] td[data-tier="intro"] a')
    expect(page).to_have_url(re.compile(r"state__exact=queued&tier__exact=2"))
    expect(page.locator("#result_list tbody tr")).to_have_count(2)

    # and "Dead letters open": the dead-letter list filtered to the open one
    page.go_back()
    page.click("#card-dead-open a")
    expect(page).to_have_url(re.compile(r"/admin/orchestrator/deadletter/\?status__in=open%2Cescalated"))
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list")).to_contain_text("Policy check failed")
    page.screenshot(path=SHOTS / "dashboard-dead-letters.png", full_page=True)


def test_a_member_of_another_organization_sees_neither_the_figures_nor_the_rows(
    browser: BrowserContext, live_server: Any
) -> None:
    # given Acme with three ready rows and Globex with one, and Globex's operator
    _organization("Acme", ready=3)
    globex, _ = _organization("Globex", ready=1)
    operator = make_user("globex-ops", permissions=OPERATOR, organizations=[globex])
    page = browser.new_page()
    _log_in(page, live_server.url, operator)
    # when they open the dashboard
    page.goto(f"{live_server.url}/admin/queue-health/")
    # then its figures are Globex's only
    expect(page.locator("#card-ready .qh-value")).to_have_text("1")
    expect(page.locator("#table-owners")).to_contain_text("Globex owner")
    expect(page.locator("#content-main")).not_to_contain_text("Acme")
    # and the list behind a figure holds Globex's row only, even with the filter widened by hand
    page.click('#table-states tr[data-state="queued"] a')
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#result_list")).to_contain_text("lead0@globex.example")
    page.goto(f"{live_server.url}/admin/outreach/outreach/?state__exact=queued&tier__exact=2")
    expect(page.locator("#result_list tbody tr")).to_have_count(1)
    expect(page.locator("#content-main")).not_to_contain_text("acme.example")
    page.screenshot(path=SHOTS / "dashboard-tenant.png", full_page=True)
