"""Operators' actions on outreach in the admin (backoffice.actions): each behind its own
permission, per-row reports, and never another organization's rows."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from outreach.models import Organization, Outreach, OutreachEvent, State
from tests.factories import logged_in, make_draft, make_lead, make_org, make_outreach, make_owner, make_user

pytestmark = pytest.mark.django_db

OUTREACH_LIST = reverse("admin:outreach_outreach_changelist")
QUEUE_LIST = reverse("admin:outreach_draftforapproval_changelist")
VERBS = {
    "cancel_selected": "cancelled",
    "retry_now_selected": "due now (the next dispatch cycle takes them)",
    "reject_selected": "rejected",
}


def _operator(org: Organization, *codenames: str, name: str = "op") -> tuple[User, Client]:
    user = make_user(name, permissions=["view_outreach", *codenames], organizations=[org])
    return user, logged_in(user)


def _act(client: Client, url: str, action: str, ids: list[int], **extra: str) -> str:
    response = client.post(url, {"action": action, "_selected_action": ids, **extra}, follow=True)
    assert response.status_code == 200
    return response.content.decode()


def _state(outreach: Outreach) -> str:
    outreach.refresh_from_db()
    return outreach.state


def test_cancel_cancels_work_at_rest_and_says_per_row_what_it_skipped_and_why() -> None:
    # given an operator allowed to cancel, with queued, approved, sent and in-flight work
    org = make_org()
    owner = make_owner(organization=org)
    queued = make_outreach(lead=make_lead(owner=owner))
    approved = make_draft(lead=make_lead(owner=owner), state=State.APPROVED)
    sent = make_outreach(lead=make_lead(owner=owner), state=State.SENT)
    flying = make_outreach(lead=make_lead(owner=owner), state=State.GENERATING)
    user, client = _operator(org, "cancel_outreach")
    # when they cancel all four
    page = _act(client, OUTREACH_LIST, "cancel_selected", [queued.pk, approved.pk, sent.pk, flying.pk])
    # then the two at rest are cancelled, by them, and the others are named with their reason
    assert [_state(o) for o in (queued, approved, sent, flying)] == [
        State.CANCELLED,
        State.CANCELLED,
        State.SENT,
        State.GENERATING,
    ]
    assert (
        f"2 cancelled; 2 skipped: #{sent.pk} is already sent; #{flying.pk} is in flight (generating)" in page
    )
    assert OutreachEvent.objects.get(outreach=queued, to_state=State.CANCELLED).actor == user


def test_retry_now_makes_queued_work_due_and_keeps_its_attempts() -> None:
    org = make_org()
    backing_off = make_outreach(
        lead=make_lead(owner=make_owner(organization=org)),
        not_before=timezone.now() + timedelta(hours=2),
        attempts=2,
        blocked_reason="backoff after a transient failure",
    )
    dead = make_outreach(lead=make_lead(owner=make_owner(organization=org)), state=State.DEAD)
    _, client = _operator(org, "retry_outreach")
    before = timezone.now()
    page = _act(client, OUTREACH_LIST, "retry_now_selected", [backing_off.pk, dead.pk])
    backing_off.refresh_from_db()
    assert before <= backing_off.not_before <= timezone.now()
    assert (backing_off.state, backing_off.attempts, backing_off.blocked_reason) == (State.QUEUED, 2, "")
    assert f"1 due now (the next dispatch cycle takes them); 1 skipped: #{dead.pk} is dead" in page
    assert OutreachEvent.objects.filter(outreach=backing_off, note="retry now").count() == 1


def test_reassign_asks_for_an_owner_of_the_same_organization_only_and_moves_the_work() -> None:
    # given two owners of one organization and an owner of another
    org = make_org(name="Acme")
    ann, bob = make_owner(organization=org, name="Ann"), make_owner(organization=org, name="Bob")
    stranger = make_owner(organization=make_org(name="Other"), name="Zed")
    work = make_outreach(lead=make_lead(owner=ann))
    _, client = _operator(org, "reassign_outreach")
    # when the operator starts the action, the page offers only Acme's owners
    page = _act(client, OUTREACH_LIST, "reassign_selected", [work.pk])
    assert 'id="action-form"' in page
    assert "Bob" in page
    assert "Zed" not in page
    # when a forged post names the other organization's owner, it is refused in words
    page = _act(client, OUTREACH_LIST, "reassign_selected", [work.pk], apply="1", owner=str(stranger.pk))
    assert "only owners of this organization may take its work" in page
    work.refresh_from_db()
    assert work.owner == ann
    # when they choose Bob, the work is Bob's, and its history says who moved it from whom
    page = _act(client, OUTREACH_LIST, "reassign_selected", [work.pk], apply="1", owner=str(bob.pk))
    work.refresh_from_db()
    assert (work.owner, work.state) == (bob, State.QUEUED)
    assert "1 reassigned to Bob." in page
    assert OutreachEvent.objects.filter(outreach=work, note="reassigned from Ann to Bob").exists()


def test_a_superuser_cannot_reassign_across_organizations_in_one_go() -> None:
    a, b = make_outreach(), make_outreach()
    client = logged_in(make_user("root", superuser=True))
    page = _act(client, OUTREACH_LIST, "reassign_selected", [a.pk, b.pk])
    assert "one organization at a time" in page


def test_reject_with_a_reason_stores_it_on_the_draft_and_in_its_history() -> None:
    org = make_org()
    drafts = [make_draft(lead=make_lead(owner=make_owner(organization=org))) for _ in range(2)]
    _, client = _operator(org, "approve_outreach", "reject_outreach")
    ids = [d.pk for d in drafts]
    # when the reviewer asks to reject, a reason is asked for first, and a blank one refused
    assert 'name="reason"' in _act(client, QUEUE_LIST, "reject_selected", ids)
    assert "This field is required" in _act(client, QUEUE_LIST, "reject_selected", ids, apply="1", reason=" ")
    assert {_state(d) for d in drafts} == {State.AWAITING_APPROVAL}
    # when they give one
    page = _act(client, QUEUE_LIST, "reject_selected", ids, apply="1", reason="wrong tone")
    # then both are rejected with it
    assert "2 rejected." in page
    assert set(Outreach.objects.filter(pk__in=ids).values_list("state", "rejected_reason")) == {
        (State.REJECTED, "wrong tone")
    }
    assert OutreachEvent.objects.filter(outreach_id__in=ids, note="rejected: wrong tone").count() == 2


@pytest.mark.parametrize(
    ("action", "codename", "url"),
    [
        ("cancel_selected", "cancel_outreach", OUTREACH_LIST),
        ("retry_now_selected", "retry_outreach", OUTREACH_LIST),
        ("reassign_selected", "reassign_outreach", OUTREACH_LIST),
        ("reject_selected", "reject_outreach", QUEUE_LIST),
    ],
)
def test_each_action_needs_its_own_permission(action: str, codename: str, url: str) -> None:
    # given an operator holding every action's permission but this one
    org = make_org()
    work = make_draft(lead=make_lead(owner=make_owner(organization=org)))
    others = {"cancel_outreach", "retry_outreach", "reassign_outreach", "reject_outreach"} - {codename}
    _, client = _operator(org, "approve_outreach", *others)
    # then the action is not offered, and a forged post of it does nothing
    assert f'value="{action}"' not in client.get(url).content.decode()
    _act(client, url, action, [work.pk], apply="1", reason="r", owner=str(work.owner_id))
    assert _state(work) == State.AWAITING_APPROVAL


@pytest.mark.parametrize(
    ("action", "url", "extra"),
    [
        ("cancel_selected", OUTREACH_LIST, {}),
        ("retry_now_selected", OUTREACH_LIST, {}),
        ("reject_selected", QUEUE_LIST, {"apply": "1", "reason": "spam"}),
    ],
)
def test_a_member_of_another_organization_cannot_act_on_its_rows(
    action: str, url: str, extra: dict[str, str]
) -> None:
    # given a draft of organization A and an operator of organization B with every permission
    theirs = make_draft(lead=make_lead(owner=make_owner(organization=make_org())), not_before=timezone.now())
    if action == "retry_now_selected":
        Outreach.objects.filter(pk=theirs.pk).update(state=State.QUEUED)
    before = Outreach.objects.values_list("state", "not_before").get(pk=theirs.pk)
    codenames = [
        "approve_outreach",
        "cancel_outreach",
        "retry_outreach",
        "reassign_outreach",
        "reject_outreach",
    ]
    _, client = _operator(make_org(), *codenames)
    # when they post the action naming its id
    page = _act(client, url, action, [theirs.pk], **extra)
    # then nothing changed, and the report says it was not theirs
    assert Outreach.objects.values_list("state", "not_before").get(pk=theirs.pk) == before
    assert f"0 {VERBS[action]}; 1 skipped: #{theirs.pk} is not in your organizations." in page


def test_a_member_of_another_organization_cannot_reassign_its_rows() -> None:
    org_a = make_org()
    ann, bob = make_owner(organization=org_a), make_owner(organization=org_a)
    theirs = make_outreach(lead=make_lead(owner=ann))
    _, client = _operator(make_org(), "reassign_outreach")
    page = _act(client, OUTREACH_LIST, "reassign_selected", [theirs.pk], apply="1", owner=str(bob.pk))
    theirs.refresh_from_db()
    assert theirs.owner == ann
    assert "Nothing selected is in your organizations." in page
