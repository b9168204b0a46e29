"""A real browser against a live server and real workers: an approver edits and approves a draft
in the admin, the email arrives in the SMTP sink, and the queue-health dashboard draws its charts.

Debian's Chromium (/usr/bin/chromium, installed by scripts/ensure_chromium.sh) driven by
Playwright; never a browser Playwright downloads. Screenshots and a Playwright trace are kept in
artifacts/e2e/browser/.
"""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from playwright.sync_api import BrowserContext, Page, expect

from devtools.llm_stub import LLMStub
from devtools.processes import ProcessGroup
from devtools.smtp_sink import SMTPSink
from outreach.models import Outreach, OutreachEvent, State
from tests.e2e.conftest import ARTIFACTS, start_pipeline, wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

SHOTS = ARTIFACTS / "browser"
PASSWORD = "correct-horse-battery"
EDITED_BODY = "Hi Pat,\n\nEdited by a person in the approval queue before sending.\n\nBest,\nSam"


def _staff_user(username: str, *, codenames: list[str]) -> User:
    user = User.objects.create_user(username, password=PASSWORD, is_staff=True)
    user.user_permissions.add(*Permission.objects.filter(codename__in=codenames))
    return user


def _log_in(page: Page, base_url: str, user: User, *, shot: str | None = None) -> None:
    page.goto(f"{base_url}/admin/login/")
    page.fill("#id_username", user.username)
    page.fill("#id_password", PASSWORD)
    if shot:
        _shot(page, shot)
    page.click("input[type=submit]")
    expect(page.locator("#user-tools")).to_contain_text(user.username)


def _shot(page: Page, name: str) -> None:
    page.screenshot(path=SHOTS / f"{name}.png", full_page=True)


def _state(outreach_id: int) -> str:
    return Outreach.objects.values_list("state", flat=True).get(pk=outreach_id)


def test_approver_edits_and_approves_a_draft_in_the_browser_and_sees_the_dashboard(
    browser: BrowserContext, live_server: Any, stack: ProcessGroup, llm_stub: LLMStub, smtp_sink: SMTPSink
) -> None:
    # given a reviewer (also an operator: the dashboard has its own permission), a
    # review-required owner and one intro drafted by the real pipeline
    reviewer = _staff_user("reviewer", codenames=["approve_outreach", "view_outreach", "view_queue_health"])
    org = make_org()
    org.members.add(reviewer)  # reviewers approve the drafts of their own organizations only
    owner = make_owner(organization=org, review_required=True, name="Sam Seller")
    lead = make_lead(owner=owner)
    outreach_id = make_outreach(lead=lead).pk
    start_pipeline(stack)
    wait_until(
        lambda: _state(outreach_id) == State.AWAITING_APPROVAL, timeout_s=45, what="the draft", group=stack
    )
    llm_calls = len(llm_stub.requests)
    page = browser.new_page()

    # when the reviewer logs in, opens the queue and the draft, edits the body and approves
    _log_in(page, live_server.url, reviewer, shot="login")
    page.get_by_role("link", name="Approval queue").first.click()
    expect(page).to_have_url(re.compile(r"/admin/outreach/draftforapproval/$"))
    rows = page.locator("#result_list tbody tr")
    expect(rows).to_have_count(1)
    expect(rows.first).to_contain_text(lead.email)
    _shot(page, "queue")
    rows.first.locator("th a").click()
    expect(page.locator(".field-lead_context")).to_contain_text(lead.email)
    page.fill("textarea[name=draft_body]", EDITED_BODY)
    _shot(page, "draft")
    page.click("input[name=_approve]")
    expect(page.locator(".messagelist")).to_contain_text("changed successfully")
    _shot(page, "after-approve")

    # then the edited email arrives, with no further LLM call, recorded as edited by the reviewer
    wait_until(lambda: len(smtp_sink.messages) == 1, timeout_s=30, what="the approved email", group=stack)
    email = smtp_sink.messages[0].message
    assert email["To"] == lead.email
    assert email.get_content().strip().splitlines() == EDITED_BODY.splitlines()
    wait_until(lambda: _state(outreach_id) == State.SENT, timeout_s=15, what="state SENT", group=stack)
    assert len(llm_stub.requests) == llm_calls
    assert OutreachEvent.objects.filter(
        outreach_id=outreach_id, to_state=State.APPROVED, note="edited and approved", actor=reviewer
    ).exists()

    # when the reviewer opens the queue-health dashboard from the admin index
    page.goto(f"{live_server.url}/admin/")
    page.click("#queue-health-link")

    # then the server-drawn charts are there and the sent figure counts the email
    for chart in ("chart-budget-requests", "chart-budget-tokens", "chart-latency", "chart-owner-share"):
        expect(page.locator(f"svg#{chart}")).to_be_visible()
    expect(page.locator("#budget svg")).to_have_count(2)
    expect(page.locator("#card-sent .qh-value")).to_have_text("1")
    expect(page.locator("#table-owners")).to_contain_text("Sam Seller")
    _shot(page, "dashboard")


def test_staff_without_the_approve_permission_gets_403_on_the_approval_queue(
    browser: BrowserContext, live_server: Any
) -> None:
    # given a staff user who may view outreach but not approve it
    viewer = _staff_user("viewer", codenames=["view_outreach"])
    page = browser.new_page()
    _log_in(page, live_server.url, viewer)
    # when they open the approval queue by its address
    response = page.goto(f"{live_server.url}/admin/outreach/draftforapproval/")
    # then the admin refuses it
    assert response is not None
    assert response.status == 403
    expect(page.locator("body")).to_contain_text("Forbidden")
    _shot(page, "forbidden")
