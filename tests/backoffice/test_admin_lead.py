"""The lead admin (backoffice/admin/leads.py): "Mark converted" stops a lead's sequence, and the lead form
keeps a lead's owner inside its organization."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from outreach.models import Lead, Organization, Outreach, State
from tests.factories import make_lead, make_org, make_outreach, make_owner
from tests.security.admin_forms import form_values, superuser_client

pytestmark = pytest.mark.django_db


def _member(orgs: list[Organization], *codenames: str) -> Client:
    user = User.objects.create_user("member", password="pw", is_staff=True)
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="outreach", codename__in=codenames)
    )
    user.organizations.add(*orgs)
    client = Client()
    client.force_login(user)
    return client


def test_mark_converted_action_stops_the_sequence() -> None:
    # given a lead with a queued nudge, and an operator
    lead = make_lead()
    nudge = make_outreach(lead=lead, kind=Outreach.Kind.NUDGE, step=1)
    client = superuser_client()
    # when the operator marks the lead converted from the lead list
    response = client.post(
        reverse("admin:outreach_lead_changelist"), {"action": "mark_converted", "_selected_action": [lead.pk]}
    )
    # then the lead is converted and its pending nudge cancelled
    assert response.status_code == 302
    lead.refresh_from_db()
    nudge.refresh_from_db()
    assert (lead.status, nudge.state) == (Lead.Status.CONVERTED, State.CANCELLED)


def test_member_cannot_move_a_lead_to_another_organizations_owner() -> None:
    # given a member who may change leads, their lead, and an owner of another organization
    ours, theirs = make_org(), make_org()
    lead = make_lead(owner=make_owner(organization=ours))
    stranger = make_owner(organization=theirs)
    client = _member([ours], "view_lead", "change_lead")
    url = reverse("admin:outreach_lead_change", args=[lead.pk])
    # when they post the lead with the other organization's owner (a raw id field: any id can be typed)
    data = form_values(client, url) | {"owner": stranger.pk}
    response = client.post(url, data)
    # then the form refuses the owner and the lead keeps its own
    assert response.status_code == 200
    assert "owner" in response.context["adminform"].form.errors
    lead.refresh_from_db()
    assert lead.owner_id != stranger.pk


def test_lead_form_refuses_an_owner_of_another_organization_even_for_a_superuser() -> None:
    # given a superuser, a lead and an owner of another organization
    ours, theirs = make_org(), make_org()
    lead = make_lead(owner=make_owner(organization=ours))
    stranger = make_owner(organization=theirs, name="Stranger")
    client = superuser_client()
    url = reverse("admin:outreach_lead_change", args=[lead.pk])
    # when they post the lead with that owner
    response = client.post(url, form_values(client, url) | {"owner": stranger.pk})
    # then the form names the owner's organization and the lead keeps its own
    errors = response.context["adminform"].form.errors
    assert "Stranger works for" in str(errors["owner"])
    lead.refresh_from_db()
    assert lead.owner_id != stranger.pk
