"""The review page of a reply draft shows the conversation it answers, escaped and with quotes
folded; the approval list shows what the prospect wrote and the triage's class, filterable;
another organization's conversation is never shown."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from outreach.models import Lead, Organization, Outreach, ReplyClass, State, TriageBy
from tests.factories import (
    logged_in,
    make_draft,
    make_lead,
    make_org,
    make_outreach,
    make_owner,
    make_reviewer,
)

pytestmark = pytest.mark.django_db

QUEUE = "admin:outreach_draftforapproval_changelist"
HOSTILE = '<script>alert("x")</script><b>bold</b>'


def _conversation(*, organization: Organization, words: str) -> tuple[Lead, Outreach]:
    """A lead we emailed twice, who answered the first, then wrote the reply under review (and
    once more, joined); our answer to it awaits approval."""
    lead = make_lead(owner=make_owner(organization=organization, review_required=True))
    now = timezone.now()
    make_outreach(
        lead=lead,
        state=State.SENT,
        sent_at=now - timedelta(days=3),
        draft_subject="Reporting at Acme",
        draft_body="Hi Pat, would a call help?",
    )
    earlier = make_outreach(
        lead=lead,
        kind=Outreach.Kind.REPLY,
        state=State.CANCELLED,
        context={
            "inbound": {"subject": "Re: Reporting at Acme", "body": "Who are you?", "message_id": "<1@p>"}
        },
    )
    # created_at is auto_now_add: it arrived two days ago
    Outreach.objects.filter(pk=earlier.pk).update(created_at=now - timedelta(days=2))
    make_outreach(
        lead=lead,
        kind=Outreach.Kind.NUDGE,
        step=1,
        state=State.SENT,
        sent_at=now - timedelta(days=1),
        draft_subject="Following up",
        draft_body="Just checking in.",
    )
    draft = make_draft(
        lead=lead,
        kind=Outreach.Kind.REPLY,
        reply_class=ReplyClass.QUESTION,
        reply_class_reason="asks what a pilot costs",
        reply_class_by=TriageBy.MODEL,
        context={
            "inbound": {
                "subject": "Re: Following up",
                "body": f"{words} {HOSTILE}\n\nOn Mon, Sam <sam@seller.example> wrote:\n> Just checking in.",
                "message_id": "<2@p>",
            },
            "joined": [
                {"subject": "Re: Following up", "body": "Also: is there a pilot?", "message_id": "<3@p>"}
            ],
        },
    )
    return lead, draft


def _page(client: Client, draft: Outreach) -> str:
    response = client.get(reverse("admin:outreach_draftforapproval_change", args=[draft.pk]))
    assert response.status_code == 200
    return response.content.decode()


def test_the_review_page_shows_the_thread_in_order_escaped_with_quotes_folded() -> None:
    # given a reply draft in a conversation, the prospect's message carrying HTML
    org = make_org()
    _, draft = _conversation(organization=org, words="What does a pilot cost?")
    # when its reviewer opens it
    page = _page(logged_in(make_reviewer(organizations=[org])), draft)
    # then every message is there, oldest first: ours, theirs, ours, theirs, the joined one
    conversation = page[page.index('id="conversation"') :]
    order = [
        "Hi Pat, would a call help?",
        "Who are you?",
        "Just checking in.",
        "What does a pilot cost?",
        "Also: is there a pilot?",
    ]
    positions = [conversation.index(text) for text in order]
    assert positions == sorted(positions)
    assert "joined this reply" in conversation
    # the quote is folded in <details>, kept, not deleted
    quote = conversation[conversation.index("<details") : conversation.index("</details>")]
    assert "On Mon, Sam &lt;sam@seller.example&gt; wrote:" in quote
    assert "&gt; Just checking in." in quote
    # the hostile HTML is text: escaped, never markup
    assert HOSTILE not in page
    assert "<b>bold</b>" not in page
    assert "&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&lt;b&gt;bold&lt;/b&gt;" in conversation
    # and the triage's class and reason are there too
    assert "Question" in page
    assert "asks what a pilot costs" in page


def test_the_list_shows_what_the_prospect_wrote_and_the_class_and_filters_by_class() -> None:
    # given a question and a complaint awaiting approval, and an intro draft
    org = make_org()
    _, question = _conversation(organization=org, words="What does a pilot cost?")
    lead = make_lead(owner=make_owner(organization=org))
    make_draft(
        lead=lead,
        kind=Outreach.Kind.REPLY,
        reply_class=ReplyClass.COMPLAINT,
        reply_class_reason="threatens to report as spam <i>now</i>",
        context={
            "inbound": {"subject": "Re: x", "body": "This is spam.\n> quoted stuff", "message_id": "<9@p>"}
        },
    )
    make_draft(lead=make_lead(owner=make_owner(organization=org)), draft_subject="An intro")
    client = logged_in(make_reviewer(organizations=[org]))
    # when the reviewer opens the queue
    page = client.get(reverse(QUEUE)).content.decode()
    # then each reply shows the prospect's latest words (the joined message: the last written),
    # quotes stripped, and its class with the reason
    assert "Also: is there a pilot?" in page
    assert "This is spam." in page
    assert "quoted stuff" not in page
    assert "threatens to report as spam &lt;i&gt;now&lt;/i&gt;" in page  # the model's words, escaped
    assert "Complaint, legal or pricing negotiation" in page
    # when they filter by class
    filtered = client.get(reverse(QUEUE), {"reply_class__exact": ReplyClass.COMPLAINT}).content.decode()
    # then only the complaint is listed
    assert "This is spam." in filtered
    assert "Also: is there a pilot?" not in filtered
    assert "An intro" not in filtered
    assert f"/{question.pk}/change/" not in filtered


def test_a_reviewer_of_one_organization_never_sees_anothers_conversation() -> None:
    # given a reply draft in each of two organizations
    mine, theirs = make_org(), make_org()
    _, own = _conversation(organization=mine, words="Mine: pricing?")
    _, other = _conversation(organization=theirs, words="Theirs: secret plans")
    client = logged_in(make_reviewer(organizations=[mine]))
    # then the other's is not listed, not by filter either, and its page is a 404
    assert "Theirs: secret plans" not in client.get(reverse(QUEUE)).content.decode()
    filtered = client.get(reverse(QUEUE), {"reply_class__exact": ReplyClass.QUESTION}).content.decode()
    assert f"/{own.pk}/change/" in filtered
    assert f"/{other.pk}/change/" not in filtered
    response = client.get(reverse("admin:outreach_draftforapproval_change", args=[other.pk]))
    assert response.status_code == 404
    assert "secret plans" not in response.content.decode()


def test_the_outreach_page_shows_the_class_and_its_reason_and_its_list_filters_by_class() -> None:
    org = make_org()
    _, draft = _conversation(organization=org, words="Pricing?")
    client = logged_in(make_reviewer(organizations=[org]))
    page = client.get(reverse("admin:outreach_outreach_change", args=[draft.pk])).content.decode()
    assert "Question" in page
    assert "asks what a pilot costs" in page
    assert "Model" in page
    listed = client.get(
        reverse("admin:outreach_outreach_changelist"), {"reply_class__exact": ReplyClass.QUESTION}
    ).content.decode()
    assert f"/{draft.pk}/change/" in listed
