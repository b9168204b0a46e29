"""Reply triage in the admin: a person reclassifies a reply (recorded: who, when, from, to;
the new class's action runs), confirms or dismisses a referral proposal (nothing exists before
that), each behind its permission and only in their organizations; and an organization's
autonomous classes are checked (complaint never, unknown classes named)."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.core.exceptions import ValidationError
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from nurture.intake.triage.reclassify import reply_reclassify
from nurture.reply_actions import ReplyTriage, reply_class_act, reply_class_record
from outreach.models import Lead, Organization, Outreach, OutreachEvent, ReferralProposal, State
from outreach.services.operations import NotActionable
from tests.factories import logged_in, make_draft, make_lead, make_org, make_outreach, make_owner, make_user

pytestmark = pytest.mark.django_db
OUTREACH_LIST = "admin:outreach_outreach_changelist"
REFERRALS = "admin:outreach_referralproposal_changelist"


def _answered_reply(organization: Organization) -> tuple[Outreach, Outreach]:
    """A reply the model read as a question, its draft waiting; the lead's nudge stopped."""
    lead = make_lead(owner=make_owner(organization=organization))
    nudge = make_outreach(
        lead=lead, kind=Outreach.Kind.NUDGE, step=1, not_before=timezone.now() + timedelta(days=2)
    )
    reply = make_draft(lead=lead, kind=Outreach.Kind.REPLY, state=State.AWAITING_APPROVAL)
    reply_class_record(outreach_id=reply.pk, triage=ReplyTriage("question", "asks a question"), by="model")
    reply.refresh_from_db()
    reply_class_act(reply=reply, triage=ReplyTriage("question", "asks a question"), sequence_stopped=False)
    return reply, nudge


def _post(client: Client, url: str, action: str, ids: list[int], **extra: Any) -> str:
    data = {"action": action, "_selected_action": ids, **extra}
    return client.post(reverse(url), data, follow=True).content.decode()


def test_reclassifying_a_waiting_reply_as_out_of_office_cancels_it_and_resumes_the_sequence() -> None:
    # given a question's draft waiting for approval, the sequence stopped
    reply, nudge = _answered_reply(make_org())
    user = make_user(organizations=[reply.lead.organization])
    # when a person says it was an out-of-office notice
    reply_reclassify(outreach_id=reply.pk, reply_class="out_of_office", by_id=user.pk)
    # then the draft never leaves, the class and who decided are kept, with the history
    reply.refresh_from_db()
    assert (reply.state, reply.reply_class, reply.reply_class_by) == (
        State.CANCELLED,
        "out_of_office",
        "person",
    )
    event = OutreachEvent.objects.filter(outreach=reply, actor=user).order_by("id").first()
    assert event is not None
    assert "question to out_of_office" in event.note
    # and the lead is active again with its next step a week out (no return date given)
    assert Lead.objects.get(pk=reply.lead_id).status == Lead.Status.ACTIVE
    resumed = Outreach.objects.get(lead_id=reply.lead_id, kind=Outreach.Kind.NUDGE, state=State.QUEUED)
    assert resumed.pk != nudge.pk
    assert resumed.not_before >= timezone.now() + timedelta(days=6)


@pytest.mark.parametrize(
    ("reply_class", "message"),
    [("interested_maybe", "is not a reply class"), ("question", "is question already")],
)
def test_reclassify_refuses_what_it_cannot_do(reply_class: str, message: str) -> None:
    reply, _ = _answered_reply(make_org())
    with pytest.raises(NotActionable, match=message):
        reply_reclassify(outreach_id=reply.pk, reply_class=reply_class, by_id=make_user().pk)


def test_the_reclassify_action_needs_its_permission_and_stays_in_the_users_organizations() -> None:
    # given replies in two organizations, and an operator of the first with the permission
    mine, _ = _answered_reply(make_org())
    theirs, _ = _answered_reply(make_org())
    permitted = make_user(
        permissions=["view_outreach", "reclassify_outreach"], organizations=[mine.lead.organization]
    )
    # when they reclassify both as an objection
    page = _post(
        logged_in(permitted),
        OUTREACH_LIST,
        "reclassify_selected",
        [mine.pk, theirs.pk],
        apply="1",
        reply_class="objection",
    )
    # then only the reply of their own organization changed
    assert "1 reclassified" in page
    assert Outreach.objects.get(pk=mine.pk).reply_class == "objection"
    assert Outreach.objects.get(pk=theirs.pk).reply_class == "question"
    # and without the permission the action is not offered
    viewer = make_user(permissions=["view_outreach"], organizations=[mine.lead.organization])
    listing = logged_in(viewer).get(reverse(OUTREACH_LIST)).content.decode()
    assert "reclassify_selected" not in listing


def test_a_referral_creates_nothing_until_a_person_with_the_permission_confirms_it() -> None:
    # given a reply that named someone else, read as a referral
    organization = make_org()
    reply, _ = _answered_reply(organization)
    reply_reclassify(outreach_id=reply.pk, reply_class="referral", by_id=make_user().pk)
    proposal = ReferralProposal.objects.get(source=reply)
    ReferralProposal.objects.filter(pk=proposal.pk).update(
        contact_email="sam@acme.example", contact_name="Sam Lee"
    )
    assert not Lead.objects.filter(email="sam@acme.example").exists()
    # when an operator without the permission tries, then it is refused outright
    viewer = make_user(permissions=["view_referralproposal"], organizations=[organization])
    assert (
        logged_in(viewer)
        .post(reverse(REFERRALS), {"action": "confirm_selected", "_selected_action": [proposal.pk]})
        .status_code
        == 403
    )
    # when one with it confirms
    confirmer = make_user(
        permissions=["view_referralproposal", "confirm_referralproposal"], organizations=[organization]
    )
    page = _post(logged_in(confirmer), REFERRALS, "confirm_selected", [proposal.pk])
    # then the contact is a lead of the same owner, nothing queued for it, and who did it is kept
    assert "1 confirmed" in page
    lead = Lead.objects.get(email="sam@acme.example")
    assert (lead.owner_id, lead.first_name, lead.last_name) == (reply.lead.owner_id, "Sam", "Lee")
    assert not Outreach.objects.filter(lead=lead).exists()
    proposal.refresh_from_db()
    assert (proposal.status, proposal.decided_by, proposal.created_lead) == ("confirmed", confirmer, lead)


@pytest.mark.parametrize(
    ("value", "message"),
    [
        (["interested", "complaint"], "complaint can never be answered without a person"),
        (["interested", "cheerful"], "Unknown reply class(es): cheerful"),
        ("interested", "Give a list of reply classes"),
    ],
)
def test_autonomous_classes_are_checked(value: Any, message: str) -> None:
    organization = make_org()
    organization.reply_autonomous_classes = value
    with pytest.raises(ValidationError) as caught:
        organization.full_clean()
    assert message in str(caught.value.message_dict["reply_autonomous_classes"])
