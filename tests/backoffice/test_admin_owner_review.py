"""Turning an owner's review off lets its drafts go out unread: it takes the approve permission
in the admin, and who did it and when is recorded and shown."""

from __future__ import annotations

from typing import Any

import pytest
from django.urls import reverse

from outreach.models import Owner
from tests.factories import logged_in, make_owner, make_user

pytestmark = pytest.mark.django_db


def _form(owner: Owner, **changes: Any) -> dict[str, Any]:
    data = {
        "organization": owner.organization_id,
        "name": owner.name,
        "kind": owner.kind,
        "user": "",
        "daily_limit": owner.daily_limit,
        "hours_start": owner.hours_start.strftime("%H:%M"),
        "hours_end": owner.hours_end.strftime("%H:%M"),
        "working_days": owner.working_days,
        "timezone": owner.timezone,
        "weight": owner.weight,
        "draft_ahead_days": owner.draft_ahead_days,
        "active": "on",
        "nudge_days": "",
        "review_required": "on",
        **changes,
    }
    return {key: value for key, value in data.items() if value is not None}


def _editor(owner: Owner, *, can_approve: bool) -> Any:
    permissions = ["view_owner", "change_owner"] + (["approve_outreach"] if can_approve else [])
    user = make_user(permissions=permissions, organizations=[owner.organization])
    return user, logged_in(user)


def test_editor_without_approve_permission_cannot_turn_review_off() -> None:
    # given an owner under review and a staff member who may edit owners but not approve drafts
    owner = make_owner(review_required=True)
    _, client = _editor(owner, can_approve=False)
    url = reverse("admin:outreach_owner_change", args=[owner.pk])
    # when they save the form with review unticked (and a new daily limit)
    client.post(url, _form(owner, review_required=None, daily_limit=7))
    # then review is still required; the rest of the change went through
    owner.refresh_from_db()
    assert (owner.review_required, owner.daily_limit) == (True, 7)
    assert owner.review_disabled_at is None


def test_approver_turns_review_off_and_who_and_when_are_recorded_and_shown() -> None:
    # given an owner under review and a user holding the approve permission
    owner = make_owner(review_required=True)
    user, client = _editor(owner, can_approve=True)
    url = reverse("admin:outreach_owner_change", args=[owner.pk])
    # when they untick review
    response = client.post(url, _form(owner, review_required=None))
    # then it is off, with who, when and how recorded, and the change page shows it
    assert response.status_code == 302
    owner.refresh_from_db()
    assert owner.review_required is False
    assert (owner.review_disabled_by_id, owner.review_disabled_via) == (user.pk, "admin")
    assert owner.review_disabled_at is not None
    page = client.get(url).content.decode()
    assert "Review disabled by" in page
    assert user.username in page


def test_editor_without_approve_permission_may_turn_review_on() -> None:
    owner = make_owner(review_required=False)
    _, client = _editor(owner, can_approve=False)
    client.post(reverse("admin:outreach_owner_change", args=[owner.pk]), _form(owner))
    owner.refresh_from_db()
    assert owner.review_required is True
