"""Draft expiry (orchestrator.controls.draft_expiry): drafts awaiting approval past their organization's
draft_expiry_days are cancelled with the reason in their history, and can never be approved
afterwards; organizations without the setting keep their drafts; tenants see only their own."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.conf import settings
from django.urls import reverse
from django.utils import timezone

from nurture.review import draft_approve
from orchestrator.controls.draft_expiry import drafts_expire
from orchestrator.tasks import expire_drafts
from outreach.models import Organization, Outreach, OutreachEvent, State
from outreach.transitions import TransitionLost
from tests.factories import logged_in, make_draft, make_lead, make_org, make_owner, make_reviewer

pytestmark = pytest.mark.django_db

NOW = timezone.now()
DAY = timedelta(days=1)


def _draft(org: Organization, *, waited: timedelta, state: State = State.AWAITING_APPROVAL) -> Outreach:
    lead = make_lead(owner=make_owner(organization=org, review_required=True))
    return make_draft(lead=lead, state=state, state_changed_at=NOW - waited)


def _state(outreach: Outreach) -> str:
    outreach.refresh_from_db()
    return outreach.state


def test_a_draft_waiting_longer_than_its_organizations_expiry_is_cancelled_with_the_reason() -> None:
    # given an organization whose drafts expire after 7 days, one draft 8 days old and one 6
    org = make_org(draft_expiry_days=7)
    stale, fresh = _draft(org, waited=8 * DAY), _draft(org, waited=6 * DAY)
    # when expiry runs
    expired = drafts_expire(now=NOW)
    # then the stale one is cancelled with the reason in its history, the fresh one waits on
    assert expired == {org.pk: 1}
    assert (_state(stale), _state(fresh)) == (State.CANCELLED, State.AWAITING_APPROVAL)
    event = OutreachEvent.objects.get(outreach=stale)
    assert (event.from_state, event.to_state) == (State.AWAITING_APPROVAL, State.CANCELLED)
    assert event.note == "expired: waited more than 7 day(s) for approval (organization setting)"


def test_drafts_of_an_organization_without_expiry_wait_for_ever() -> None:
    # given an organization with no expiry and a draft a year old
    draft = _draft(make_org(), waited=365 * DAY)
    # when expiry runs
    expired = drafts_expire(now=NOW)
    # then nothing moved
    assert expired == {}
    assert _state(draft) == State.AWAITING_APPROVAL


def test_only_drafts_awaiting_approval_expire() -> None:
    # given old outreach in other states in an organization with a 1-day expiry
    org = make_org(draft_expiry_days=1)
    approved = _draft(org, waited=30 * DAY, state=State.APPROVED)
    queued = _draft(org, waited=30 * DAY, state=State.QUEUED)
    # when expiry runs
    drafts_expire(now=NOW)
    # then they are untouched
    assert (_state(approved), _state(queued)) == (State.APPROVED, State.QUEUED)


def test_each_organization_uses_its_own_age() -> None:
    # given two organizations (3 and 10 days) with a draft 5 days old each
    short, long = make_org(draft_expiry_days=3), make_org(draft_expiry_days=10)
    in_short, in_long = _draft(short, waited=5 * DAY), _draft(long, waited=5 * DAY)
    # when expiry runs
    drafts_expire(now=NOW)
    # then only the short-expiry organization's draft is cancelled
    assert (_state(in_short), _state(in_long)) == (State.CANCELLED, State.AWAITING_APPROVAL)


def test_an_expired_draft_can_never_be_approved() -> None:
    # given a draft that expired
    org = make_org(draft_expiry_days=2)
    draft = _draft(org, waited=3 * DAY)
    drafts_expire(now=NOW)
    reviewer = make_reviewer(organizations=[org])
    # when a reviewer approves it (a page opened before it expired)
    with pytest.raises(TransitionLost):
        draft_approve(outreach=draft, by=reviewer)
    # then it stays cancelled, and the approval queue no longer lists or opens it
    assert _state(draft) == State.CANCELLED
    client = logged_in(reviewer)
    assert (
        draft.draft_subject
        not in client.get(reverse("admin:outreach_draftforapproval_changelist")).content.decode()
    )
    response = client.post(
        reverse("admin:outreach_draftforapproval_change", args=[draft.pk]),
        {"draft_subject": draft.draft_subject, "draft_body": draft.draft_body, "_approve": "1"},
    )
    assert response.status_code == 302  # "perhaps it was deleted": back to the queue
    assert _state(draft) == State.CANCELLED


def test_the_beat_task_expires_drafts_and_is_scheduled() -> None:
    # given a stale draft
    draft = _draft(make_org(draft_expiry_days=1), waited=2 * DAY)
    # when the scheduled task runs (called directly, as a worker would)
    expire_drafts()
    # then the draft is cancelled, and beat runs the task on the orchestrator queue
    assert _state(draft) == State.CANCELLED
    entry: dict[str, Any] = settings.CELERY_BEAT_SCHEDULE["drafts-expire"]
    assert entry["task"] == "orchestrator.expire_drafts"
    assert entry["schedule"] == settings.DRAFT_EXPIRY_INTERVAL_S
    assert entry["options"]["queue"] == "orchestrator"


def test_a_member_of_another_organization_cannot_see_its_expired_drafts() -> None:
    # given an expired draft in organization A and a viewer of outreach in organization B
    org_a, org_b = make_org(name="A", draft_expiry_days=1), make_org(name="B")
    draft = _draft(org_a, waited=2 * DAY)
    drafts_expire(now=NOW)
    viewer = make_reviewer(organizations=[org_b])
    client = logged_in(viewer)
    # when they list cancelled outreach and open A's by its address
    listed = client.get(reverse("admin:outreach_outreach_changelist"), {"state__exact": "cancelled"})
    opened = client.get(reverse("admin:outreach_outreach_change", args=[draft.pk]))
    # then A's draft is neither listed nor opened (A's own member does see it)
    assert listed.status_code == 200
    assert listed.context["cl"].result_count == 0
    assert opened.status_code == 404
    own = logged_in(make_reviewer(organizations=[org_a]))
    assert (
        own.get(reverse("admin:outreach_outreach_changelist"), {"state__exact": "cancelled"})
        .context["cl"]
        .result_count
        == 1
    )
