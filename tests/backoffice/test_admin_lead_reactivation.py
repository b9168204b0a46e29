"""Out of opted-out, bounced or complained through the lead admin (backoffice/admin/leads.py):
only with outreach.reactivate_lead and a reason, recorded with who and when, never for a lead
that complained, never for another organization's lead; the change form cannot do it at all."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from outreach.models import Lead, LeadEvent, Organization
from tests.factories import logged_in, make_lead, make_org, make_owner, make_user
from tests.security.admin_forms import form_values, superuser_client

pytestmark = pytest.mark.django_db

LEAD_LIST = reverse("admin:outreach_lead_changelist")
SUPPRESSED = [Lead.Status.OPTED_OUT, Lead.Status.BOUNCED, Lead.Status.COMPLAINED]
REACTIVABLE = [Lead.Status.OPTED_OUT, Lead.Status.BOUNCED]


def _operator(org: Organization, *codenames: str) -> tuple[User, Client]:
    user = make_user(permissions=["view_lead", "change_lead", *codenames], organizations=[org])
    return user, logged_in(user)


def _lead(org: Organization, status: Lead.Status) -> Lead:
    return make_lead(owner=make_owner(organization=org), status=status)


def _reactivate(client: Client, ids: list[int], **extra: str) -> str:
    data = {"action": "reactivate_selected", "_selected_action": ids, **extra}
    response = client.post(LEAD_LIST, data, follow=True)
    assert response.status_code == 200
    return response.content.decode()


def _status(lead: Lead) -> str:
    lead.refresh_from_db()
    return lead.status


@pytest.mark.parametrize("status", SUPPRESSED)
def test_without_the_permission_the_action_is_not_offered_and_a_forged_post_changes_nothing(
    status: Lead.Status,
) -> None:
    # given an operator who may change leads, but not reactivate them
    org = make_org()
    lead = _lead(org, status)
    _, client = _operator(org)
    # then the lead list does not offer the action, and posting it anyway does nothing
    assert 'value="reactivate_selected"' not in client.get(LEAD_LIST).content.decode()
    _reactivate(client, [lead.pk], apply="1", reason="they asked")
    assert _status(lead) == status
    assert not LeadEvent.objects.filter(lead=lead).exists()


@pytest.mark.parametrize("status", SUPPRESSED)
@pytest.mark.parametrize("who", ["member with change_lead", "superuser"])
def test_the_change_form_cannot_move_a_suppressed_lead_back_to_active(status: Lead.Status, who: str) -> None:
    # given a suppressed lead, and someone who may edit it (a superuser holds every permission)
    org = make_org()
    lead = _lead(org, status)
    client = superuser_client() if who == "superuser" else _operator(org)[1]
    url = reverse("admin:outreach_lead_change", args=[lead.pk])
    # then the form shows the status without a field for it
    form = client.get(url).context["adminform"].form
    assert "status" not in form.fields
    # when a crafted POST sets it to active along with a harmless edit
    response = client.post(url, form_values(client, url) | {"status": "active", "first_name": "Patricia"})
    # then the edit is saved and the status is not
    assert response.status_code == 302
    lead.refresh_from_db()
    assert (lead.first_name, lead.status) == ("Patricia", status)


@pytest.mark.parametrize("status", REACTIVABLE)
def test_with_the_permission_and_a_reason_the_lead_is_active_again_and_the_reason_kept(
    status: Lead.Status,
) -> None:
    org = make_org()
    lead = _lead(org, status)
    user, client = _operator(org, "reactivate_lead")
    # when they choose the action, a reason is asked for first
    page = _reactivate(client, [lead.pk])
    assert 'id="action-form"' in page
    assert 'name="reason"' in page
    assert _status(lead) == status
    # when they give it
    page = _reactivate(client, [lead.pk], apply="1", reason="Pat asked by phone to hear from us again")
    # then the lead is active, and its history says who, when and why
    assert "1 reactivated." in page
    assert _status(lead) == Lead.Status.ACTIVE
    event = LeadEvent.objects.get(lead=lead)
    assert (event.from_status, event.to_status, event.actor, event.note) == (
        status,
        Lead.Status.ACTIVE,
        user,
        "Pat asked by phone to hear from us again",
    )
    assert event.at is not None
    # and the lead's page shows it
    page = client.get(reverse("admin:outreach_lead_change", args=[lead.pk])).content.decode()
    assert "Pat asked by phone to hear from us again" in page


@pytest.mark.parametrize("reason", ["", "   "])
def test_with_the_permission_but_no_reason_it_is_refused_in_words(reason: str) -> None:
    org = make_org()
    lead = _lead(org, Lead.Status.OPTED_OUT)
    _, client = _operator(org, "reactivate_lead")

    page = _reactivate(client, [lead.pk], apply="1", reason=reason)

    assert "Give the reason: a reactivation is kept with who did it and why." in page
    assert _status(lead) == Lead.Status.OPTED_OUT
    assert not LeadEvent.objects.exists()


@pytest.mark.parametrize("who", ["member with reactivate_lead", "superuser"])
def test_a_lead_that_complained_is_never_reactivated(who: str) -> None:
    # given a lead that marked our email as spam, and someone holding the permission
    org = make_org()
    complained = _lead(org, Lead.Status.COMPLAINED)
    client = superuser_client() if who == "superuser" else _operator(org, "reactivate_lead")[1]
    # when they ask for it alone, even with a crafted post carrying a reason
    page = _reactivate(client, [complained.pk], apply="1", reason="they said sorry")
    # then it is refused, in words
    assert "Nothing selected can be reactivated" in page
    assert _status(complained) == Lead.Status.COMPLAINED
    # when it is selected beside an opted-out lead, only that one comes back
    opted = _lead(org, Lead.Status.OPTED_OUT)
    page = _reactivate(client, [complained.pk, opted.pk], apply="1", reason="they said sorry")
    assert (
        f"1 reactivated; 1 skipped: #{complained.pk} {complained.email} complained (marked our email as "
        "spam): never reactivated." in page
    )
    assert (_status(complained), _status(opted)) == (Lead.Status.COMPLAINED, Lead.Status.ACTIVE)
    assert list(LeadEvent.objects.values_list("lead_id", flat=True)) == [opted.pk]


def test_another_organizations_lead_is_not_visible_nor_reactivated() -> None:
    # given an operator of A with the permission, and an opted-out lead of B
    ours, theirs = make_org(), make_org()
    their_lead = _lead(theirs, Lead.Status.OPTED_OUT)
    our_lead = _lead(ours, Lead.Status.OPTED_OUT)
    _, client = _operator(ours, "reactivate_lead")
    # then B's lead is neither listed nor openable
    assert their_lead.email not in client.get(LEAD_LIST).content.decode()
    assert client.get(reverse("admin:outreach_lead_change", args=[their_lead.pk])).status_code == 404
    # when a forged post names it beside their own
    page = _reactivate(client, [their_lead.pk, our_lead.pk], apply="1", reason="asked again")
    # then only their own comes back, and B's is reported as not theirs
    assert f"1 reactivated; 1 skipped: #{their_lead.pk} is not in your organizations." in page
    assert (_status(their_lead), _status(our_lead)) == (Lead.Status.OPTED_OUT, Lead.Status.ACTIVE)


def test_a_lead_that_is_not_suppressed_is_skipped_with_its_reason() -> None:
    org = make_org()
    active, opted = _lead(org, Lead.Status.ACTIVE), _lead(org, Lead.Status.OPTED_OUT)
    _, client = _operator(org, "reactivate_lead")

    page = _reactivate(client, [active.pk, opted.pk], apply="1", reason="asked again")

    assert (
        f"1 reactivated; 1 skipped: #{active.pk} {active.email} is active, not opted out or bounced." in page
    )
