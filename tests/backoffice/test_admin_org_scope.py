"""The approval queue is scoped to the reviewer's organizations (Organization.members).

A reviewer holding outreach.approve_outreach sees, opens and approves only drafts of owners in
organizations they belong to; another organization's draft is a 404 on GET and POST, and a
forged bulk action naming it changes nothing. Superusers see every organization.
"""

from __future__ import annotations

from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from orchestrator.failures.dead_letters import dead_letter
from outreach.models import ErrorClass, Organization, Outreach, State
from tests.factories import (
    DRAFT_BODY,
    logged_in,
    make_draft,
    make_lead,
    make_org,
    make_outreach,
    make_owner,
    make_reviewer,
    make_user,
)

pytestmark = pytest.mark.django_db

QUEUE_URL = reverse("admin:outreach_draftforapproval_changelist")


def _reviewer(name: str, *, orgs: list[Organization]) -> tuple[User, Client]:
    user = make_reviewer(name, organizations=orgs)
    return user, logged_in(user)


def _draft(org: Organization, subject: str) -> Outreach:
    lead = make_lead(owner=make_owner(organization=org, review_required=True))
    return make_draft(lead=lead, draft_subject=subject)


def _change_url(draft: Outreach) -> str:
    return reverse("admin:outreach_draftforapproval_change", args=[draft.pk])


def test_reviewer_lists_only_drafts_of_their_organizations() -> None:
    # given drafts in two organizations and a reviewer who belongs to the first
    ours, theirs = make_org(name="Ours"), make_org(name="Theirs")
    _draft(ours, "Subject for ours")
    _draft(theirs, "Subject for theirs")
    _, client = _reviewer("rev", orgs=[ours])
    # when they open the queue
    page = client.get(QUEUE_URL).content.decode()
    # then only their organization's draft is listed
    assert "Subject for ours" in page
    assert "Subject for theirs" not in page


def test_reviewer_in_two_organizations_sees_both_once() -> None:
    a, b = make_org(), make_org()
    drafts = [_draft(a, "Alpha draft"), _draft(b, "Beta draft")]
    _, client = _reviewer("rev", orgs=[a, b])
    response = client.get(QUEUE_URL)
    assert response.context["cl"].result_count == len(drafts)


def test_reviewer_gets_404_opening_or_approving_another_organizations_draft() -> None:
    # given a draft of an organization the reviewer does not belong to
    ours, theirs = make_org(), make_org()
    draft = _draft(theirs, "Not yours")
    _, client = _reviewer("rev", orgs=[ours])
    # when they open it, or post an approval to it
    opened = client.get(_change_url(draft))
    posted = client.post(
        _change_url(draft), {"draft_subject": "Hijacked", "draft_body": "Edited.", "_save": "1"}
    )
    history = client.get(reverse("admin:outreach_draftforapproval_history", args=[draft.pk]))
    # then every answer is 404 and the draft is untouched
    assert (opened.status_code, posted.status_code, history.status_code) == (404, 404, 404)
    draft.refresh_from_db()
    assert (draft.state, draft.draft_subject, draft.approved_by_id) == (
        State.AWAITING_APPROVAL,
        "Not yours",
        None,
    )


def test_forged_bulk_action_cannot_reach_another_organizations_draft() -> None:
    # given one draft in each organization and a reviewer of the first
    ours, theirs = make_org(), make_org()
    mine, other = _draft(ours, "Mine"), _draft(theirs, "Other")
    _, client = _reviewer("rev", orgs=[ours])
    # when a POST to the bulk action names both ids
    client.post(QUEUE_URL, {"action": "approve_selected", "_selected_action": [mine.pk, other.pk]})
    # then only their own draft is approved
    mine.refresh_from_db()
    other.refresh_from_db()
    assert (mine.state, other.state) == (State.APPROVED, State.AWAITING_APPROVAL)


def test_reviewer_approves_their_organizations_draft() -> None:
    org = make_org()
    draft = _draft(org, "Hello")
    user, client = _reviewer("rev", orgs=[org])
    response = client.post(
        _change_url(draft), {"draft_subject": "Hello", "draft_body": DRAFT_BODY, "_save": "1"}
    )
    assert response.status_code == 302
    draft.refresh_from_db()
    assert (draft.state, draft.approved_by_id) == (State.APPROVED, user.pk)


def test_reviewer_without_organizations_sees_an_empty_queue() -> None:
    _draft(make_org(), "Somebody's")
    _, client = _reviewer("rev", orgs=[])
    response = client.get(QUEUE_URL)
    assert response.status_code == 200
    assert response.context["cl"].result_count == 0


def test_membership_does_not_replace_the_permission() -> None:
    # given a staff member of the organization without outreach.approve_outreach
    org = make_org()
    draft = _draft(org, "Hello")
    client = logged_in(make_user("staff", organizations=[org]))
    # then the queue and the draft are refused
    assert client.get(QUEUE_URL).status_code == 403
    assert client.post(_change_url(draft), {"draft_subject": "x", "draft_body": "y"}).status_code == 403


def test_superuser_sees_every_organization() -> None:
    _draft(make_org(), "First org")
    _draft(make_org(), "Second org")
    client = logged_in(make_user("root", superuser=True))
    page = client.get(QUEUE_URL).content.decode()
    assert "First org" in page
    assert "Second org" in page


def test_demo_reviewer_may_approve_demo_drafts() -> None:
    # given the demo's seed
    from demo.seed import ORG, seed_demo

    seed_demo(leads=5)
    reviewer = User.objects.get(username="reviewer")
    # then the reviewer belongs to the demo organization and sees its drafts
    assert list(reviewer.organizations.values_list("name", flat=True)) == [ORG]
    owner = Organization.objects.get(name=ORG).owners.filter(review_required=True).first()
    assert owner is not None
    draft = make_draft(lead=make_lead(owner=owner), draft_subject="Demo draft")
    client = Client()
    client.force_login(reviewer)
    assert client.get(_change_url(draft)).status_code == 200


@pytest.mark.parametrize("object_id", ["99999999999999999999", "-1", "abc"])
def test_odd_draft_ids_are_not_found_never_a_500(object_id: str) -> None:
    _, client = _reviewer("rev", orgs=[make_org()])
    url = f"/admin/outreach/draftforapproval/{object_id}/change/"
    assert client.get(url).status_code == 302  # the admin's "perhaps it was deleted" redirect
    assert client.post(url, {"draft_subject": "x", "draft_body": "y"}).status_code == 302


# --- every other admin list: outreach, leads, owners, dead letters, organizations -------------


def _member(orgs: list[Organization], *codenames: str) -> Client:
    return logged_in(make_user("member", permissions=codenames, organizations=orgs))


def _one_of_each(org: Organization, tag: str) -> dict[str, Any]:
    """A row of every scoped model in `org`, keyed by admin model name."""
    owner = make_owner(organization=org, name=f"owner-{tag}")
    lead = make_lead(owner=owner, email=f"{tag}@lead.example")
    outreach = make_outreach(lead=lead, state=State.GENERATING)
    letter = dead_letter(
        outreach=outreach,
        from_=State.GENERATING,
        failure_class=ErrorClass.PERMANENT,
        reason=f"HTTP 400 for {tag}",
        job_type="generation",
    )
    return {"organization": org, "owner": owner, "lead": lead, "outreach": outreach, "deadletter": letter}


SCOPED = ["organization", "owner", "lead", "outreach", "deadletter"]


def _admin_url(row: Any, view: str, args: list[int] | None = None) -> str:
    # Each admin lives in the app that owns its behaviour; the URL names the model's own app.
    return reverse(f"admin:{row._meta.app_label}_{row._meta.model_name}_{view}", args=args)


@pytest.mark.parametrize("model", SCOPED)
def test_member_lists_and_opens_only_their_organizations_rows(model: str) -> None:
    # given one row of each kind in two organizations, and a member of the first
    ours, theirs = make_org(name="Ours"), make_org(name="Theirs")
    mine, other = _one_of_each(ours, "ours"), _one_of_each(theirs, "theirs")
    client = _member([ours], f"view_{model}")
    # when they open the list, and each row
    listed = client.get(_admin_url(mine[model], "changelist"))
    opened_mine = client.get(_admin_url(mine[model], "change", args=[mine[model].pk]))
    opened_other = client.get(_admin_url(other[model], "change", args=[other[model].pk]))
    # then only their organization's row is there; the other is a 404
    assert listed.status_code == 200
    assert [row.pk for row in listed.context["cl"].result_list] == [mine[model].pk]
    assert (opened_mine.status_code, opened_other.status_code) == (200, 404)
