"""Plain factory functions for tests: real rows in the test database, sensible defaults."""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterable
from datetime import date, time, timedelta
from typing import Any

from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from orchestrator.budget import Budget, Reservation
from outreach.models import Lead, Mailbox, Organization, Outreach, Owner, State, owner_daily_sends_record

_seq = itertools.count(1)

# A draft that passes nurture.writing.draft_policy.check_draft (so a reviewer may approve it as it stands), and
# an edit of it that does too. Tests about a bad draft spell out their own text.
DRAFT_SUBJECT = "Quick question about your reporting"
DRAFT_BODY = "Hi Pat,\n\nWould a short call next week help your team ship reports faster?\n\nBest,\nSam"
EDITED_BODY = "Hi Pat,\n\nEdited by a person in the approval queue before sending.\n\nBest,\nSam"
REVIEWER_PERMISSIONS = ("approve_outreach", "view_outreach")


def make_user(
    username: str | None = None,
    *,
    staff: bool = True,
    permissions: Iterable[str] = (),
    organizations: Iterable[Organization] = (),
    superuser: bool = False,
) -> User:
    """A user (password "pw") holding `permissions` (codenames) in `organizations`."""
    username = username or f"user{next(_seq)}"
    if superuser:
        return User.objects.create_superuser(username, password="pw")
    user = User.objects.create_user(username, password="pw", is_staff=staff)
    codenames = set(permissions)
    granted = list(Permission.objects.filter(codename__in=codenames))
    assert {p.codename for p in granted} == codenames, f"unknown permission in {sorted(codenames)}"
    user.user_permissions.add(*granted)
    user.organizations.add(*organizations)
    return user


def make_reviewer(username: str | None = None, *, organizations: Iterable[Organization] = ()) -> User:
    """Staff who may approve drafts (and only that), of `organizations`."""
    return make_user(username, permissions=REVIEWER_PERMISSIONS, organizations=organizations)


def logged_in(user: User, **client_options: Any) -> Client:
    client = Client(**client_options)
    client.force_login(user)
    return client


def make_org(**overrides: Any) -> Organization:
    return Organization.objects.create(**{"name": f"Org {next(_seq)}", **overrides})


def _owner_fields() -> dict[str, Any]:
    return {
        "name": f"Owner {next(_seq)}",
        "kind": Owner.Kind.AGENT,
        "daily_limit": 50,
        "hours_start": time(0, 0),
        "hours_end": time(0),  # midnight: round the clock
        "working_days": "1234567",
        "timezone": "UTC",
    }


def make_owner(*, organization: Organization | None = None, **overrides: Any) -> Owner:
    fields = {**_owner_fields(), "organization": organization or make_org()}
    return Owner.objects.create(**{**fields, **overrides})


def make_mailbox(owner: Owner, address: str, *, cap: int = 50) -> Mailbox:
    """A mailbox of `owner` (on its organization), warmed up, `cap` a day, no spacing between sends."""
    box = Mailbox.objects.create(
        organization=owner.organization,
        address=address,
        daily_cap=cap,
        ramp_from=date(2026, 1, 1),
        min_spacing_s=0,
        max_spacing_s=0,
    )
    box.owners.add(owner)
    return box


def make_owners(
    count: int, *, each: Callable[[int], dict[str, Any]] | None = None, **overrides: Any
) -> list[Owner]:
    """`count` owners as make_owner makes them, in one INSERT: `overrides` for all of them,
    `each(i)` for the i-th (an organization is required, in one or the other)."""
    return Owner.objects.bulk_create(
        Owner(**{**_owner_fields(), **overrides, **(each(i) if each else {})}) for i in range(count)
    )


def make_lead(*, owner: Owner | None = None, **overrides: Any) -> Lead:
    owner = owner or make_owner()
    n = next(_seq)
    fields: dict[str, Any] = {
        "organization_id": owner.organization_id,
        "owner": owner,
        "email": f"lead{n}@prospect.example",
        "first_name": "Pat",
        "last_name": f"Lead{n}",
        "company": "Acme",
        "title": "CTO",
    }
    return Lead.objects.create(**{**fields, **overrides})


def make_lead_with_history(
    *,
    emailed: bool = True,
    message_domain: str = "us",
    nudge_waiting: bool = False,
    states: Iterable[State] = (),
    sender_email: str = "",
    **lead_fields: Any,
) -> Lead:
    """A lead of an organization of its own (sending from `sender_email`, if given).

    `emailed`: we emailed it twice, the intro three days ago (Message-ID <intro@message_domain>)
    and, the latest, a first nudge an hour ago (<nudge-1@message_domain>). `nudge_waiting`: the
    second nudge queued four days out. `states`: then one outreach in each of these states.
    """
    organization = make_org(**({"sender_email": sender_email} if sender_email else {}))
    lead = make_lead(owner=make_owner(organization=organization), **lead_fields)
    now = timezone.now()
    if emailed:
        intro_id, nudge_id = f"<intro@{message_domain}>", f"<nudge-1@{message_domain}>"
        make_outreach(lead=lead, state=State.SENT, sent_at=now - timedelta(days=3), message_id=intro_id)
        make_outreach(
            lead=lead,
            kind=Outreach.Kind.NUDGE,
            step=1,
            state=State.SENT,
            sent_at=now - timedelta(hours=1),
            message_id=nudge_id,
        )
    if nudge_waiting:
        make_outreach(lead=lead, kind=Outreach.Kind.NUDGE, step=2, not_before=now + timedelta(days=4))
    for state in states:
        make_outreach(lead=lead, state=state)
    return lead


def make_outreach(*, lead: Lead | None = None, state: State = State.QUEUED, **overrides: Any) -> Outreach:
    lead = lead or make_lead()
    kind = overrides.pop("kind", Outreach.Kind.INTRO)
    now = timezone.now()
    fields: dict[str, Any] = {
        "lead": lead,
        "owner_id": lead.owner_id,
        "kind": kind,
        "tier": Outreach.KIND_TIER[kind],
        "state": state,
        "not_before": now,
        "idempotency_key": f"test:{next(_seq)}",
        "state_changed_at": now,
    }
    outreach = Outreach.objects.create(**{**fields, **overrides})
    if outreach.state == State.SENT and outreach.sent_at:  # as the SENT transition counts it
        owner_daily_sends_record(owner_id=outreach.owner_id, sent_at=outreach.sent_at)
    return outreach


def make_dispatched_reply(*, budget: Budget, body: str, **organization: Any) -> Outreach:
    """A reply of an autonomous owner's lead (its organization made with `organization`),
    dispatched with a reservation for its four calls (triage and the three writing ones), not
    classified yet: what the generation job of a triage test picks up."""
    owner = make_owner(organization=make_org(**organization), review_required=False)
    reservation = budget.reserve(requests=4, tokens=2400)
    assert isinstance(reservation, Reservation), reservation
    return make_outreach(
        lead=make_lead(owner=owner, status=Lead.Status.REPLIED),
        kind=Outreach.Kind.REPLY,
        state=State.DISPATCHED,
        reservation_id=reservation.id,
        context={"inbound": {"subject": "Re: hi", "body": body, "message_id": f"<i{next(_seq)}@x>"}},
    )


def make_draft(
    *, lead: Lead | None = None, state: State = State.AWAITING_APPROVAL, **overrides: Any
) -> Outreach:
    """An outreach with a written draft that passes the policy, by default awaiting approval."""
    fields = {"draft_subject": DRAFT_SUBJECT, "draft_body": DRAFT_BODY, **overrides}
    return make_outreach(lead=lead, state=state, **fields)
