"""One walk over every registered admin page as a tenant: nothing of another organization shows.

The walk runs as three users, each holding EVERY model permission (not superusers): a tenant
administrator, a staff member of one organization (the strongest non-superuser there is); a
user shared between two organizations (sees both, nothing of a third); and the tenant
administrator again, facing a colleague shared with another organization and a superuser
member, whom they may neither reset, deactivate nor delete. For each model in admin.site._registry the
walk opens the changelist, the changelist under each choice of each filter, a search, the add
page, the change page of the tenant's own row (its form widgets list organizations, owners and
users), the autocomplete endpoint of every relation, and posts every action against the other
organization's row. It also opens the other organization's row (change, history, delete): each
must be 404, 403 or a redirect. No page may contain the other organization's identifying strings.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib import admin
from django.contrib.auth.models import Permission, User
from django.db import models
from django.forms.models import model_to_dict
from django.test import Client
from django.urls import NoReverseMatch, reverse
from django.utils import timezone

from backoffice.tenancy import OrganizationScopedAdmin
from orchestrator.controls import pauses
from orchestrator.failures.dead_letters import dead_letter
from orchestrator.models import DeadLetter, Pause
from outreach.models import (
    AssignmentBatch,
    AssignmentItem,
    DraftForApproval,
    ErrorClass,
    Lead,
    Mailbox,
    Organization,
    Outreach,
    Owner,
    ReferralProposal,
    State,
    UnverifiedInbound,
    VerifiedDomain,
)
from tests.factories import logged_in, make_draft, make_lead, make_org, make_outreach, make_owner, make_user

pytestmark = pytest.mark.django_db

# Every string that identifies the other organization (compared lower-case): its name, its
# owners' names, its leads' emails (and its domain), its members' and sellers' user names.
THEIRS = ("zephyrine", "quillon", "zqmember", "zqseller")
OUR_APPS = ("backoffice",)  # every ModelAdmin of ours lives in the admin layer


def _world(tag: str, *, org_name: str, owner_name: str, member: str, seller: str) -> dict[type, Any]:
    """One row of every organization-bound model in a new organization, keyed by admin model."""
    org = make_org(name=org_name)
    member_user = make_user(member, staff=False, organizations=[org])
    seller_user = make_user(seller, staff=False)
    owner = make_owner(organization=org, name=owner_name, user=seller_user, review_required=True)
    lead = make_lead(owner=owner, email=f"{tag}-lead@{tag}.example", first_name=tag, last_name=tag)
    draft = make_draft(lead=lead, draft_subject=f"{tag} subject")
    failed = make_outreach(
        lead=make_lead(owner=owner, email=f"{tag}-dead@{tag}.example"), state=State.SENDING
    )
    letter = dead_letter(
        outreach=failed,
        from_=State.SENDING,
        failure_class=ErrorClass.PERMANENT,
        reason=f"recipient refused: {tag}-dead@{tag}.example",
        job_type="send",
    )
    batch = AssignmentBatch.objects.create(
        organization=org,
        file_name=f"{tag}.csv",
        file_sha256="0" * 64,
        rows=1,
        children_total=1,
        created_at=timezone.now(),
    )
    item = AssignmentItem.objects.create(
        batch=batch, line=2, email=f"{tag}-item@{tag}.example", timezone="UTC", owner=owner, lead=lead
    )
    domain = VerifiedDomain.objects.create(organization=org, domain=f"{tag}.example")
    mailbox = Mailbox.objects.create(organization=org, address=f"{tag}-box@{tag}.example")
    mailbox.owners.add(owner)
    return {
        Mailbox: mailbox,
        Organization: org,
        Owner: owner,
        Lead: lead,
        Outreach: draft,
        DraftForApproval: DraftForApproval.objects.get(pk=draft.pk),
        DeadLetter: letter,
        AssignmentBatch: batch,
        AssignmentItem: item,
        VerifiedDomain: domain,
        User: member_user,
        Pause: pauses.pause(owner=owner, reason=f"{tag} reason")[0],
        UnverifiedInbound: UnverifiedInbound.objects.create(
            organization=org,
            lead=lead,
            key=f"reply:<{tag}@{tag}.example>",
            message_id=f"<{tag}@{tag}.example>",
            sender=f"{tag}-stranger@{tag}.example",
            subject=f"{tag} subject",
            reason=UnverifiedInbound.Reason.SENDER_NOT_LEAD,
        ),
        ReferralProposal: ReferralProposal.objects.create(
            organization=org,
            lead=lead,
            source=draft,
            contact_email=f"{tag}-referred@{tag}.example",
            contact_name=f"{tag} referred",
        ),
    }


def _url(model: type[models.Model], view: str, *args: Any) -> str | None:
    try:
        return reverse(f"admin:{model._meta.app_label}_{model._meta.model_name}_{view}", args=args)
    except NoReverseMatch:
        return None


def _leaks(response: Any) -> list[str]:
    text = response.content.decode(errors="replace").lower()
    return [s for s in THEIRS if s in text]


class Walk:
    def __init__(self, client: Client) -> None:
        self.client, self.pages = client, 0
        self.leaks: list[str] = []

    def get(self, url: str, data: dict[str, Any] | None = None) -> Any:
        response = self.client.get(url, data or {})
        self.pages += 1
        assert response.status_code < 500, f"{url} {data}: {response.status_code}"
        self.leaks += [f"{url} {data or ''}: {s}" for s in _leaks(response)]
        return response

    def post(self, url: str, data: dict[str, Any]) -> Any:
        response = self.client.post(url, data)
        self.pages += 1
        assert response.status_code < 500, f"POST {url} {data}: {response.status_code}"
        self.leaks += [f"POST {url} {data}: {s}" for s in _leaks(response)]
        return response


def _changelist(walk: Walk, model: type[models.Model]) -> None:
    url = _url(model, "changelist")
    assert url
    response = walk.get(url)
    if response.status_code != 200:
        return
    cl = response.context["cl"]
    for spec in cl.filter_specs:
        for choice in spec.choices(cl):
            walk.get(url + choice["query_string"])
    walk.get(url, {"q": "e"})
    # A search for their name finds nothing (the page echoes the term, so count, not text).
    found = walk.client.get(url, {"q": THEIRS[0]})
    if found.status_code == 200 and found.context["cl"].result_count:
        walk.leaks.append(f"{url}?q={THEIRS[0]} finds their rows")


def _autocomplete(walk: Walk, model: type[models.Model]) -> None:
    for field in model._meta.get_fields():
        related = getattr(field, "related_model", None)
        if not field.concrete or not field.is_relation or related not in admin.site._registry:
            continue
        for term in ("", "e", THEIRS[0], THEIRS[1]):
            params = {
                "app_label": model._meta.app_label,
                "model_name": model._meta.model_name,
                "field_name": field.name,
                "term": term,
            }
            walk.get(reverse("admin:autocomplete"), params)


def _actions(walk: Walk, model: type[models.Model], theirs: models.Model) -> None:
    model_admin = admin.site._registry[model]
    url = _url(model, "changelist")
    assert url
    before = model_to_dict(theirs)
    for name in _declared_actions(model_admin):
        walk.post(url, {"action": name, "_selected_action": [theirs.pk]})
    fresh = model._default_manager.filter(pk=theirs.pk).first()
    if fresh is None or model_to_dict(fresh) != before:
        walk.leaks.append(f"an action on {model.__name__} changed their row")


def _declared_actions(model_admin: admin.ModelAdmin) -> dict[str, Any]:
    """Every action of the admin by name, the site-wide ones (delete_selected) included."""
    found: dict[str, Any] = dict(admin.site.actions)
    for action in model_admin.actions or ():
        func = getattr(model_admin, action) if isinstance(action, str) else action
        found[getattr(func, "__name__", str(action))] = func
    return found


def _walk(walk: Walk, *, ours: list[dict[type, Any]], theirs: dict[type, Any]) -> None:
    """Every registered admin page, as `walk`'s user: their own rows' pages, and every way in
    to `theirs` (change, history, delete, each action), which must stay closed."""
    for model in admin.site._registry:
        _changelist(walk, model)
        if add := _url(model, "add"):
            walk.get(add)
        _autocomplete(walk, model)
        for world in ours:
            if model in world:
                walk.get(_url(model, "change", world[model].pk) or "")
        if model not in theirs:
            continue
        row = theirs[model]
        for view in ("change", "history", "delete"):
            url = _url(model, view, row.pk)
            if url:
                status = walk.get(url).status_code
                # then another organization's row is not there for them
                if status not in (302, 403, 404):
                    walk.leaks.append(f"{url}: {status}, their row is reachable")
        _actions(walk, model, row)
    walk.get(reverse("orchestrator:queue-health"))


def _everything(user: User) -> Client:
    user.user_permissions.add(*Permission.objects.all())
    return logged_in(user)


def _other_world() -> dict[type, Any]:
    return _world(
        "zephyrine",
        org_name="Zephyrine Quarry",
        owner_name="Quillon Thrace",
        member="zqmember",
        seller="zqseller",
    )


def test_a_tenant_with_every_permission_sees_nothing_of_another_organization(redis_client: Any) -> None:
    # given two organizations with a row of every kind, and a staff member of the first holding
    # every model permission
    ours = _world(
        "harbor", org_name="Harbor Alpha", owner_name="Marlo Fenn", member="hamember", seller="haseller"
    )
    theirs = _other_world()
    walk = Walk(_everything(make_user("tenant", organizations=[ours[Organization]])))
    scoped = [m for m, a in admin.site._registry.items() if isinstance(a, OrganizationScopedAdmin)]
    assert set(scoped) <= set(theirs), f"the walk has no row of {set(scoped) - set(theirs)}"

    # when they walk every registered admin page
    _walk(walk, ours=[ours], theirs=theirs)

    # then no page showed anything of the other organization
    assert walk.pages > 100
    assert walk.leaks == [], "\n".join(walk.leaks)


def test_a_user_shared_by_two_organizations_sees_both_and_nothing_of_a_third(redis_client: Any) -> None:
    # given three organizations, and a member of the first two holding every model permission
    first = _world(
        "harbor", org_name="Harbor Alpha", owner_name="Marlo Fenn", member="hamember", seller="haseller"
    )
    second = _world(
        "bramble", org_name="Bramble Isle", owner_name="Odile Varga", member="brmember", seller="brseller"
    )
    theirs = _other_world()
    shared = make_user("shared", organizations=[first[Organization], second[Organization]])
    walk = Walk(_everything(shared))

    # when they walk every registered admin page
    _walk(walk, ours=[first, second], theirs=theirs)

    # then both of their organizations' rows are there, and nothing of the third
    owners = walk.client.get(reverse("admin:outreach_owner_changelist")).content.decode()
    assert "Marlo Fenn" in owners
    assert "Odile Varga" in owners
    assert walk.pages > 100
    assert walk.leaks == [], "\n".join(walk.leaks)


def test_a_tenant_administrator_cannot_change_a_shared_user_or_a_superuser_member(redis_client: Any) -> None:
    # given a tenant administrator (every permission in one organization), a colleague shared
    # with another organization, and a superuser who is also a member of theirs
    ours = _world(
        "harbor", org_name="Harbor Alpha", owner_name="Marlo Fenn", member="hamember", seller="haseller"
    )
    theirs = _other_world()
    shared = make_user("sharedmember", organizations=[ours[Organization], theirs[Organization]])
    root = make_user("rootmember", superuser=True)
    root.organizations.add(ours[Organization])
    walk = Walk(_everything(make_user("tenantadmin", organizations=[ours[Organization]])))
    before = {u.pk: (u.password, u.is_active, u.is_staff) for u in (shared, root)}

    # when they walk every admin page, then post a password reset, a deactivation and a delete
    # to each of those two users
    _walk(walk, ours=[ours], theirs=theirs)
    for user in (shared, root):
        walk.post(
            reverse("admin:auth_user_password_change", args=[user.pk]),
            {"password1": "Taken-0ver!x", "password2": "Taken-0ver!x"},
        )
        walk.post(reverse("admin:auth_user_delete", args=[user.pk]), {"post": "yes"})
        walk.post(
            reverse("admin:auth_user_changelist"),
            {"action": "delete_selected", "_selected_action": [user.pk], "post": "yes"},
        )

    # then nothing of the other organization showed, and both users are as they were
    assert walk.leaks == [], "\n".join(walk.leaks)
    after = {u.pk: (u.password, u.is_active, u.is_staff) for u in User.objects.filter(pk__in=before)}
    assert after == before


def test_every_action_declares_the_permission_it_needs() -> None:
    # Django runs an action without `permissions` for anyone who may view the list. Our admins
    # only: django_celery_beat's are the platform operators' (and a tenant is not given them).
    ours = [a for a in admin.site._registry.values() if type(a).__module__.split(".")[0] in OUR_APPS]
    assert len(ours) >= 9
    undeclared = [
        f"{type(model_admin).__name__}.{name}"
        for model_admin in ours
        for name, func in _declared_actions(model_admin).items()
        if not getattr(func, "allowed_permissions", ())
    ]
    assert undeclared == []
