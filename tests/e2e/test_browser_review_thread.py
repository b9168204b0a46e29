"""A reviewer in a real browser reads the conversation a reply draft answers: our emails and
the prospect's messages in order, the quoted text folded until opened, the prospect's HTML shown
as text; and the approval list says what the prospect wrote. No workers: the page only reads.
"""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.utils import timezone
from playwright.sync_api import BrowserContext, expect

from outreach.models import Outreach, ReplyClass, State
from tests.e2e.conftest import ARTIFACTS
from tests.factories import make_draft, make_lead, make_org, make_outreach, make_owner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PASSWORD = "correct-horse-battery"


def test_a_reviewer_reads_the_thread_of_a_reply_draft_in_the_browser(
    browser: BrowserContext, live_server: Any
) -> None:
    # given a reviewer of an organization and a reply draft: we emailed the lead, who answered
    # (quoting us, with HTML in the text) and wrote once more before our answer was written
    reviewer = User.objects.create_user("reviewer", password=PASSWORD, is_staff=True)
    reviewer.user_permissions.add(
        *Permission.objects.filter(codename__in=["approve_outreach", "view_outreach"])
    )
    org = make_org()
    org.members.add(reviewer)
    lead = make_lead(owner=make_owner(organization=org, review_required=True))
    make_outreach(
        lead=lead,
        state=State.SENT,
        sent_at=timezone.now() - timedelta(days=1),
        draft_subject="Reporting at Acme",
        draft_body="Hi Pat,\nWould a short call help?",
    )
    draft = make_draft(
        lead=lead,
        kind=Outreach.Kind.REPLY,
        reply_class=ReplyClass.QUESTION,
        reply_class_reason="asks about a pilot",
        context={
            "inbound": {
                "subject": "Re: Reporting at Acme",
                "body": "<b>Yes</b>, what does a pilot cost?\n\nOn Mon, Sam wrote:\n> Would a short call help?",
                "message_id": "<q1@prospect.example>",
            },
            "joined": [
                {"subject": "Re: Reporting at Acme", "body": "And how long is it?", "message_id": "<q2@p>"}
            ],
        },
    )
    page = browser.new_page()
    page.goto(f"{live_server.url}/admin/login/")
    page.fill("#id_username", "reviewer")
    page.fill("#id_password", PASSWORD)
    page.click("input[type=submit]")

    # when the reviewer opens the approval queue
    page.goto(f"{live_server.url}/admin/outreach/draftforapproval/")
    row = page.locator("#result_list tbody tr")
    # then the row says what the prospect wrote last and the class with its reason
    expect(row).to_have_count(1)
    expect(row.locator(".field-prospect_wrote")).to_have_text("And how long is it?")
    expect(row.locator(".field-triage")).to_contain_text("asks about a pilot")

    # when they open the draft
    row.locator("th a").click()
    conversation = page.locator("#conversation")
    messages = conversation.locator(".thread-message")
    # then the thread is there in order: our email, their message, the one that joined
    expect(messages).to_have_count(3)
    expect(messages.nth(0)).to_contain_text("We sent")
    expect(messages.nth(0)).to_contain_text("Would a short call help?")
    expect(messages.nth(1)).to_contain_text("<b>Yes</b>, what does a pilot cost?")  # text, not bold
    expect(conversation.locator("b")).to_have_count(0)
    expect(messages.nth(2)).to_contain_text("And how long is it?")
    expect(messages.nth(2)).to_contain_text("joined this reply")
    # the quote is folded until opened
    quote = messages.nth(1).locator("details.thread-quote")
    expect(quote.locator("pre")).to_be_hidden()
    quote.locator("summary").click()
    expect(quote.locator("pre")).to_be_visible()
    expect(quote.locator("pre")).to_contain_text("On Mon, Sam wrote:")
    page.screenshot(path=ARTIFACTS / "browser" / "review-thread.png", full_page=True)
    assert Outreach.objects.get(pk=draft.pk).state == State.AWAITING_APPROVAL
