"""Pausing and resuming in the admin (backoffice.admin.pauses): the Pause admin, the Pause /
Resume actions of organizations and owners, their permissions and their tenancy."""

from __future__ import annotations

from collections.abc import Mapping

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from orchestrator.controls import pauses
from orchestrator.models import Pause
from outreach.models import Organization
from outreach.tiers import Tier
from tests.factories import logged_in, make_org, make_owner, make_user

pytestmark = pytest.mark.django_db

PAUSES = reverse("admin:orchestrator_pause_changelist")
ADD_PAUSE = reverse("admin:orchestrator_pause_add")
OWNERS = reverse("admin:outreach_owner_changelist")
ORGANIZATIONS = reverse("admin:outreach_organization_changelist")
OPERATOR = ("view_pause", "add_pause", "change_pause", "view_owner", "view_organization")


def _operator(org: Organization, *codenames: str, name: str = "op") -> tuple[User, Client]:
    user = make_user(name, permissions=codenames or OPERATOR, organizations=[org])
    return user, logged_in(user)


def _post(client: Client, url: str, data: Mapping[str, object]) -> str:
    response = client.post(url, data, follow=True)
    assert response.status_code == 200
    return response.content.decode()


def test_pause_and_resume_an_owner_from_the_owner_list() -> None:
    # given an operator of Acme and one of its owners
    org = make_org(name="Acme")
    ann = make_owner(organization=org, name="Ann")
    user, client = _operator(org)
    # when they choose "Pause selected", the page asks for a tier and a reason
    page = _post(client, OWNERS, {"action": "pause_selected", "_selected_action": [ann.pk]})
    assert 'name="reason"' in page
    # when they confirm with a reason
    page = _post(
        client,
        OWNERS,
        {
            "action": "pause_selected",
            "_selected_action": [ann.pk],
            "apply": "1",
            "tier": "",
            "reason": "new copy",
        },
    )
    # then Ann is paused, by them, and the list says so
    stop = Pause.objects.get(owner=ann, resumed_at__isnull=True)
    assert (stop.created_by, stop.reason, stop.organization) == (user, "new copy", org)
    assert "1 paused (owner Ann)." in page
    # when they resume her
    page = _post(client, OWNERS, {"action": "resume_pauses_selected", "_selected_action": [ann.pk]})
    stop.refresh_from_db()
    assert stop.resumed_by == user
    assert "1 pause(s) resumed (owner Ann)." in page
    # and resuming again says there was nothing to resume
    page = _post(client, OWNERS, {"action": "resume_pauses_selected", "_selected_action": [ann.pk]})
    assert "0 pause(s) resumed; 1 skipped: not paused (Ann (AI agent))." in page


def test_pause_an_organizations_nudges_from_the_organization_list() -> None:
    org = make_org(name="Acme")
    _, client = _operator(org)
    data = {
        "action": "pause_selected",
        "_selected_action": [org.pk],
        "apply": "1",
        "tier": str(Tier.NUDGE.value),
    }
    assert "organization Acme, tier nudge" in _post(client, ORGANIZATIONS, data)
    assert Pause.objects.filter(organization=org, owner=None, tier=Tier.NUDGE, resumed_at=None).count() == 1


def test_the_pause_admin_adds_a_pause_lists_it_and_resumes_it() -> None:
    org = make_org(name="Acme")
    ann = make_owner(organization=org, name="Ann")
    user, client = _operator(org)
    _post(
        client,
        ADD_PAUSE,
        {"organization": org.pk, "owner": ann.pk, "tier": "", "sender_domain": "", "reason": "r"},
    )
    stop = Pause.objects.get(owner=ann)
    assert stop.created_by == user
    assert "owner Ann" in client.get(PAUSES).content.decode()
    page = _post(client, PAUSES, {"action": "resume_selected", "_selected_action": [stop.pk]})
    assert "1 pause(s) resumed" in page
    stop.refresh_from_db()
    assert stop.resumed_by == user


def test_an_owner_of_another_organization_is_refused_on_the_add_form() -> None:
    org = make_org(name="Acme")
    elsewhere = make_owner(organization=make_org(name="Other"), name="Zed")
    _, client = _operator(org)
    page = _post(client, ADD_PAUSE, {"organization": org.pk, "owner": elsewhere.pk, "reason": "x"})
    assert "Select a valid choice" in page
    assert not Pause.objects.exists()


def test_only_a_superuser_may_pause_a_tier_everywhere() -> None:
    _, client = _operator(make_org())
    page = _post(client, ADD_PAUSE, {"tier": str(Tier.NUDGE.value), "reason": "x"})
    assert "only a superuser may set one" in page
    assert not Pause.objects.exists()
    root = logged_in(make_user("root", superuser=True))
    _post(root, ADD_PAUSE, {"tier": str(Tier.NUDGE.value), "reason": "x"})
    assert Pause.objects.filter(organization=None, tier=Tier.NUDGE).count() == 1


def test_a_member_of_another_organization_cannot_see_or_resume_its_pauses() -> None:
    # given a pause of organization A's owner, and a global pause, and an operator of B
    org_a = make_org(name="Acme")
    ann = make_owner(organization=org_a, name="Ann")
    theirs, _ = pauses.pause(owner=ann, reason="A's business")
    everywhere, _ = pauses.pause(sender_domain="mail.example.com")
    _, client = _operator(make_org(name="Other"))
    # then neither is listed nor opens
    listing = client.get(PAUSES).content.decode()
    assert "owner Ann" not in listing
    assert "mail.example.com" not in listing
    assert client.get(reverse("admin:orchestrator_pause_change", args=[theirs.pk])).status_code == 404
    # and a forged resume of either, or of A's owner from the owner list, does nothing
    _post(client, PAUSES, {"action": "resume_selected", "_selected_action": [theirs.pk, everywhere.pk]})
    _post(client, OWNERS, {"action": "resume_pauses_selected", "_selected_action": [ann.pk]})
    assert Pause.objects.filter(resumed_at__isnull=True).count() == 2


def test_a_member_of_another_organization_cannot_pause_its_owner() -> None:
    ann = make_owner(organization=make_org(name="Acme"), name="Ann")
    _, client = _operator(make_org(name="Other"))
    _post(
        client,
        OWNERS,
        {"action": "pause_selected", "_selected_action": [ann.pk], "apply": "1", "reason": "x"},
    )
    _post(client, ADD_PAUSE, {"owner": ann.pk, "reason": "x"})
    assert not Pause.objects.exists()


def test_pausing_needs_add_pause_and_resuming_change_pause() -> None:
    org = make_org()
    ann = make_owner(organization=org)
    stop, _ = pauses.pause(owner=ann)
    _, client = _operator(org, "view_pause", "view_owner")
    owners_page = client.get(OWNERS).content.decode()
    assert 'value="pause_selected"' not in owners_page
    assert 'value="resume_pauses_selected"' not in owners_page
    assert client.get(ADD_PAUSE).status_code == 403
    _post(client, PAUSES, {"action": "resume_selected", "_selected_action": [stop.pk]})
    _post(client, OWNERS, {"action": "resume_pauses_selected", "_selected_action": [ann.pk]})
    stop.refresh_from_db()
    assert stop.resumed_at is None


def test_saving_a_past_pauses_page_does_not_pause_again() -> None:
    org = make_org()
    stop, _ = pauses.pause(organization=org)
    pauses.resume(pauses=[stop], by=None)
    _, client = _operator(org)
    response = client.post(reverse("admin:orchestrator_pause_change", args=[stop.pk]), {"_save": "1"})
    assert response.status_code == 302
    assert pauses.active() == []
