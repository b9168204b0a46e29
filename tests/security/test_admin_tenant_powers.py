"""What a tenant's staff may do beyond seeing their organization (tests/security/test_tenancy_walk.py):
actions need the permission they declare; organization-wide settings need
outreach.change_organization_settings; a sender address needs a domain a superuser verified;
no tenant can make themselves a superuser, nor touch groups, the beat schedule or new
organizations. And `queue_stats --org` names one organization only.
"""

from __future__ import annotations

import io
from typing import Any

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from outreach.models import Lead, Organization, VerifiedDomain
from tests.factories import logged_in, make_lead, make_org, make_owner, make_user
from tests.security.admin_forms import form_errors, form_values, superuser_client

pytestmark = pytest.mark.django_db

LEADS_URL = reverse("admin:outreach_lead_changelist")


def _tenant(org: Organization, *codenames: str) -> tuple[User, Client]:
    user = make_user("tenant", permissions=codenames, organizations=[org])
    return user, logged_in(user)


def _org_url(org: Organization) -> str:
    return reverse("admin:outreach_organization_change", args=[org.pk])


# --- actions declare their permission --------------------------------------------------------


def test_a_view_only_user_neither_sees_nor_runs_mark_converted() -> None:
    # given a lead and a member of its organization who may only view leads
    lead = make_lead()
    _, client = _tenant(lead.organization, "view_lead")
    # when they open the list and post the action anyway
    form = client.get(LEADS_URL).context["action_form"]  # None: no action at all for them
    offered = [] if form is None else [name for name, _ in form.fields["action"].choices]
    client.post(LEADS_URL, {"action": "mark_converted", "_selected_action": [lead.pk]})
    # then it was not offered and did nothing
    assert "mark_converted" not in offered
    lead.refresh_from_db()
    assert lead.status == Lead.Status.ACTIVE


def test_a_user_who_may_change_leads_marks_them_converted() -> None:
    lead = make_lead()
    _, client = _tenant(lead.organization, "view_lead", "change_lead")
    client.post(LEADS_URL, {"action": "mark_converted", "_selected_action": [lead.pk]})
    lead.refresh_from_db()
    assert lead.status == Lead.Status.CONVERTED


# --- organization-wide settings --------------------------------------------------------------


def test_without_the_settings_permission_caps_domains_and_sender_are_read_only() -> None:
    # given a member who may change their organization, but not its settings
    org = make_org(name="Acme", llm_rpm=60, allowed_link_domains="acme.example")
    _, client = _tenant(org, "view_organization", "change_organization")
    url = _org_url(org)
    # when they post new caps, link domains and sender beside a new name
    fields = client.get(url).context["adminform"].form.fields
    forged = {"llm_rpm": 6000, "llm_tpm": 9_000_000, "allowed_link_domains": "evil.example"}
    response = client.post(url, form_values(client, url) | forged | {"sender_email": "x@evil.example"})
    # then the settings were not in the form and did not change; the rest did save
    assert response.status_code == 302
    assert not {"llm_rpm", "llm_tpm", "allowed_link_domains", "sender_email"} & set(fields)
    org.refresh_from_db()
    assert (org.llm_rpm, org.llm_tpm, org.allowed_link_domains, org.sender_email) == (
        60,
        None,
        "acme.example",
        "",
    )


def test_with_the_settings_permission_a_member_changes_the_caps(settings: Any) -> None:
    settings.LLM_CALLS_PER_OUTREACH, settings.LLM_EST_TOKENS_PER_CALL = 3, 1000
    org = make_org(name="Acme")
    _, client = _tenant(org, "view_organization", "change_organization", "change_organization_settings")
    url = _org_url(org)
    response = client.post(url, form_values(client, url) | {"llm_rpm": 30, "llm_tpm": 30_000})
    assert response.status_code == 302, response.content.decode()[:2000]
    org.refresh_from_db()
    assert (org.llm_rpm, org.llm_tpm) == (30, 30_000)


def test_the_reply_quiet_period_is_an_organization_setting() -> None:
    # given a member who may change their organization but not its settings, and one who may
    org = make_org(name="Acme")
    url = _org_url(org)
    _, plain = _tenant(org, "view_organization", "change_organization")
    # when the first posts a quiet period of their own
    assert "reply_quiet_s" not in plain.get(url).context["adminform"].form.fields
    response = plain.post(url, form_values(plain, url) | {"reply_quiet_s": 5})
    # then it is not theirs to set: the organization keeps REPLY_QUIET_S
    assert response.status_code == 302
    org.refresh_from_db()
    assert org.reply_quiet_s is None
    # when a member with the settings permission sets one out of range, then a good one
    user = make_user(
        "settings",
        permissions=["view_organization", "change_organization", "change_organization_settings"],
        organizations=[org],
    )
    client = logged_in(user)
    refused = client.post(url, form_values(client, url) | {"reply_quiet_s": 3601})
    assert "reply_quiet_s" in form_errors(refused), form_errors(refused)
    saved = client.post(url, form_values(client, url) | {"reply_quiet_s": 5})
    # then only the good one is kept
    assert saved.status_code == 302
    org.refresh_from_db()
    assert org.reply_quiet_s == 5


def test_the_reply_triage_choices_are_organization_settings() -> None:
    # given a member who may change their organization but not its settings, and one who may
    org = make_org(name="Acme")
    url = _org_url(org)
    _, plain = _tenant(org, "view_organization", "change_organization")
    # when the first posts "objection" among the classes answered alone, and the polite close
    fields = plain.get(url).context["adminform"].form.fields
    assert {"reply_autonomous_classes", "reply_objection_close"}.isdisjoint(fields)
    widened = {
        "reply_autonomous_classes": '["interested", "question", "objection"]',
        "reply_objection_close": "on",
    }
    response = plain.post(url, form_values(plain, url) | widened)
    # then neither is theirs to set: the organization keeps the defaults
    assert response.status_code == 302
    org.refresh_from_db()
    assert (org.reply_autonomous_classes, org.reply_objection_close) == (["interested", "question"], False)
    # when a member with the settings permission lets complaints be answered alone, then sets
    # no class at all answered alone, with the polite close
    user = make_user(
        "settings",
        permissions=["view_organization", "change_organization", "change_organization_settings"],
        organizations=[org],
    )
    client = logged_in(user)
    refused = client.post(url, form_values(client, url) | {"reply_autonomous_classes": '["complaint"]'})
    assert "reply_autonomous_classes" in form_errors(refused), form_errors(refused)
    saved = client.post(
        url, form_values(client, url) | {"reply_autonomous_classes": "[]", "reply_objection_close": "on"}
    )
    # then only the good one is kept
    assert saved.status_code == 302, form_errors(saved)
    org.refresh_from_db()
    assert (org.reply_autonomous_classes, org.reply_objection_close) == ([], True)


def test_without_the_settings_permission_an_owners_weight_is_read_only() -> None:
    # given an owner and a member who may change owners but not organization settings
    owner = make_owner(weight=1)
    _, client = _tenant(owner.organization, "view_owner", "change_owner")
    url = reverse("admin:outreach_owner_change", args=[owner.pk])
    # when they post a weight of 50 (a bigger share of the shared LLM budget)
    response = client.post(url, form_values(client, url) | {"weight": 50, "daily_limit": 7})
    # then the weight stays, the rest saves
    assert response.status_code == 302, response.content.decode()[:2000]
    owner.refresh_from_db()
    assert (owner.weight, owner.daily_limit) == (1, 7)


# --- the sender address ----------------------------------------------------------------------


def test_a_sender_on_an_unverified_domain_is_refused_naming_the_field() -> None:
    # given an organization that verified acme.example, and another that verified rival.example
    org = make_org(name="Acme")
    VerifiedDomain.objects.create(organization=org, domain="acme.example")
    VerifiedDomain.objects.create(organization=make_org(name="Rival"), domain="rival.example")
    client = superuser_client()
    url = _org_url(org)
    # when someone sets its sender on the other organization's domain
    response = client.post(url, form_values(client, url) | {"sender_email": "ceo@rival.example"})
    # then the form says which field and why, and nothing is saved
    errors = form_errors(response)
    assert list(errors) == ["sender_email"]
    assert "sender_email: rival.example is not a verified domain" in errors["sender_email"][0]
    org.refresh_from_db()
    assert org.sender_email == ""


def test_a_sender_on_a_verified_domain_is_saved_and_used_as_from() -> None:
    org = make_org(name="Acme")
    VerifiedDomain.objects.create(organization=org, domain="Acme.Example")
    _, client = _tenant(org, "view_organization", "change_organization", "change_organization_settings")
    url = _org_url(org)
    response = client.post(url, form_values(client, url) | {"sender_email": "sales@acme.example"})
    assert response.status_code == 302, response.content.decode()[:2000]
    org.refresh_from_db()
    assert org.sender_email == "sales@acme.example"


def test_verified_domains_are_kept_by_superusers_only() -> None:
    # given a tenant holding every model permission
    org = make_org()
    domain = VerifiedDomain.objects.create(organization=org, domain="acme.example")
    tenant, client = _tenant(org)
    tenant.user_permissions.add(*Permission.objects.all())
    # when they open or add verified domains, even their own
    answers = [
        client.get(reverse("admin:outreach_verifieddomain_changelist")).status_code,
        client.get(reverse("admin:outreach_verifieddomain_add")).status_code,
        client.post(
            reverse("admin:outreach_verifieddomain_add"), {"organization": org.pk, "domain": "gmail.com"}
        ).status_code,
        client.get(reverse("admin:outreach_verifieddomain_change", args=[domain.pk])).status_code,
    ]
    # then every answer is a refusal
    assert answers == [403, 403, 403, 403]
    assert list(VerifiedDomain.objects.values_list("domain", flat=True)) == ["acme.example"]


# --- users -----------------------------------------------------------------------------------


def test_a_tenant_cannot_make_themselves_a_superuser() -> None:
    org = make_org()
    tenant, client = _tenant(org)
    tenant.user_permissions.add(*Permission.objects.all())
    url = reverse("admin:auth_user_change", args=[tenant.pk])
    values = {k: v for k, v in form_values(client, url).items() if k not in ("date_joined", "last_login")}
    joined = {
        "date_joined_0": f"{tenant.date_joined:%Y-%m-%d}",
        "date_joined_1": f"{tenant.date_joined:%H:%M:%S}",
    }
    forged = {"is_superuser": "on", "user_permissions": [], "first_name": "Pat"}
    response = client.post(url, values | joined | forged)
    assert response.status_code == 302, form_errors(response)
    tenant.refresh_from_db()
    assert (tenant.is_superuser, tenant.first_name, tenant.user_permissions.count()) == (
        False,
        "Pat",
        Permission.objects.count(),
    )


def test_a_user_a_tenant_adds_joins_their_organizations() -> None:
    # given a tenant who may add users
    org = make_org()
    _, client = _tenant(org, "add_user", "change_user", "view_user")
    # when they add a colleague
    response = client.post(
        reverse("admin:auth_user_add"),
        {"username": "colleague", "password1": "a-long-pass-phrase-9", "password2": "a-long-pass-phrase-9"},
    )
    # then the colleague is a member of the tenant's organization (so the tenant still sees them)
    assert response.status_code == 302, response.content.decode()[:2000]
    assert list(User.objects.get(username="colleague").organizations.all()) == [org]


def _tenant_admin(org: Organization) -> Client:
    _, client = _tenant(org, "view_user", "change_user", "delete_user")
    return client


def _shared_and_superuser_members(org: Organization) -> list[User]:
    """A colleague who is also staff of another organization, and a superuser added as a member."""
    shared = make_user("shared", organizations=[org, make_org()])
    root = make_user("platform-admin", superuser=True)
    root.organizations.add(org)
    return [shared, root]


def test_a_tenant_admin_cannot_change_a_shared_user_or_a_superuser_member() -> None:
    # given a tenant's user administrator, a user shared with another organization, a superuser member
    org = make_org()
    client, platform = _tenant_admin(org), superuser_client()
    for user in _shared_and_superuser_members(org):
        url = reverse("admin:auth_user_change", args=[user.pk])
        values = {
            k: v for k, v in form_values(platform, url).items() if k not in ("date_joined", "last_login")
        }
        joined = {
            "date_joined_0": f"{user.date_joined:%Y-%m-%d}",
            "date_joined_1": f"{user.date_joined:%H:%M:%S}",
        }
        # when the tenant deactivates them, resets their password and deletes them
        changed = client.post(url, values | joined | {"is_active": ""})
        password = client.post(
            reverse("admin:auth_user_password_change", args=[user.pk]),
            {"password1": "taken-over-pass-9", "password2": "taken-over-pass-9"},
        )
        deleted = client.post(reverse("admin:auth_user_delete", args=[user.pk]), {"post": "yes"})
        bulk = client.post(
            reverse("admin:auth_user_changelist"),
            {"action": "delete_selected", "_selected_action": [user.pk], "post": "yes"},
        )
        # then every request is refused and the account is as it was
        assert (changed.status_code, password.status_code, deleted.status_code) == (403, 403, 403), user
        assert bulk.status_code in (200, 302, 403)
        user.refresh_from_db()
        assert (user.is_active, user.check_password("pw")) == (True, True), user.username


def test_a_tenant_admin_still_manages_a_colleague_of_their_own_organizations_only() -> None:
    # given a colleague who is a member of the tenant's organizations and of nothing else
    org = make_org()
    client = _tenant_admin(org)
    colleague = make_user("colleague", organizations=[org])
    # when the tenant resets the colleague's password
    response = client.post(
        reverse("admin:auth_user_password_change", args=[colleague.pk]),
        {"password1": "a-new-pass-phrase-9", "password2": "a-new-pass-phrase-9"},
    )
    # then it is changed
    assert response.status_code == 302
    colleague.refresh_from_db()
    assert colleague.check_password("a-new-pass-phrase-9")


# --- queue_stats --org -----------------------------------------------------------------------


def test_queue_stats_for_one_organization_names_only_its_owners(redis_client: Any) -> None:
    # given active owners in two organizations
    make_owner(organization=make_org(name="Acme"), name="Acme Agent")
    make_owner(organization=make_org(name="Rival"), name="Rival Agent")
    # when an operator scopes queue_stats to Acme, and runs it unscoped
    scoped, everything = io.StringIO(), io.StringIO()
    call_command("queue_stats", "--org", "Acme", stdout=scoped)
    call_command("queue_stats", stdout=everything)
    # then the scoped one names Acme's owner only; the unscoped one both
    assert "Acme Agent" in scoped.getvalue()
    assert "Rival Agent" not in scoped.getvalue()
    assert "Acme Agent" in everything.getvalue()
    assert "Rival Agent" in everything.getvalue()


def test_queue_stats_refuses_an_unknown_organization() -> None:
    with pytest.raises(CommandError, match="no organization named 'Nope'"):
        call_command("queue_stats", "--org", "Nope", stdout=io.StringIO())


# --- platform records ------------------------------------------------------------------------


def test_platform_records_are_for_superusers_only() -> None:
    # given a tenant holding every model permission
    tenant, client = _tenant(make_org())
    tenant.user_permissions.add(*Permission.objects.all())
    # when they open groups, the beat schedule, or add an organization
    urls = [
        reverse("admin:auth_group_changelist"),
        reverse("admin:auth_group_add"),
        reverse("admin:django_celery_beat_periodictask_changelist"),
        reverse("admin:django_celery_beat_crontabschedule_changelist"),
        reverse("admin:outreach_organization_add"),
    ]
    # then each is refused; a superuser still reaches them
    assert [client.get(url).status_code for url in urls] == [403] * len(urls)
    root = superuser_client()
    assert [root.get(url).status_code for url in urls] == [200] * len(urls)
