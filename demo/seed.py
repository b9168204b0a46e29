"""Demo data: agents and sellers with different hours, limits and review settings, and leads
with their intro outreach queued. Idempotent: re-seeding creates nothing new."""

from __future__ import annotations

import random
from datetime import time

from django.contrib.auth.models import Permission, User
from django.db import transaction
from django.utils import timezone

from outreach.idempotency import intro_key
from outreach.models import Lead, Organization, Outreach, Owner, State
from outreach.services.owners import OwnerSpec, owner_upsert

ORG = "Demo Co"
OWNERS = [
    # name, spec, share of the leads
    (
        OwnerSpec(
            "Atlas (AI agent)",
            "agent",
            400,
            time(0),
            time(0),  # to midnight: round the clock
            "UTC",
            working_days="1234567",
            weight=2,
            organization=ORG,
        ),
        0.40,
    ),
    (
        OwnerSpec(
            "Nova (AI agent)",
            "agent",
            300,
            time(0),
            time(0),  # to midnight: round the clock
            "America/New_York",
            working_days="1234567",
            organization=ORG,
        ),
        0.30,
    ),
    (
        OwnerSpec(
            "Maria (seller)",
            "human",
            60,
            time(0),
            time(0),  # to midnight: round the clock
            "Europe/Berlin",
            working_days="1234567",
            review_required=True,
            organization=ORG,
        ),
        0.18,
    ),
    (
        OwnerSpec(
            "Kenji (seller)",
            "human",
            40,
            time(9),
            time(18),
            "Asia/Tokyo",
            review_required=True,
            organization=ORG,
        ),
        0.12,
    ),
]
FIRST = [
    "Ada",
    "Grace",
    "Alan",
    "Edsger",
    "Barbara",
    "Ken",
    "Radia",
    "Linus",
    "Margaret",
    "Donald",
    "Frances",
    "Tim",
]
LAST = [
    "Lovelace",
    "Hopper",
    "Turing",
    "Dijkstra",
    "Liskov",
    "Thompson",
    "Perlman",
    "Torvalds",
    "Hamilton",
    "Knuth",
]
COMPANIES = [
    "Acme Robotics",
    "Globex",
    "Initech",
    "Umbrella Analytics",
    "Hooli",
    "Stark Logistics",
    "Wayne Foods",
]
TITLES = ["CTO", "VP Engineering", "Head of Sales", "COO", "Data Lead", "Founder", "IT Director"]
ZONES = ["Europe/Berlin", "America/New_York", "America/Los_Angeles", "Asia/Tokyo", "Europe/London", "UTC"]


def seed_users() -> None:
    """admin/admin (superuser) and reviewer/reviewer (staff who may approve drafts)."""
    if not User.objects.filter(username="admin").exists():
        User.objects.create_superuser("admin", "admin@example.com", "admin")
    if not User.objects.filter(username="reviewer").exists():
        reviewer = User.objects.create_user("reviewer", "reviewer@example.com", "reviewer", is_staff=True)
        reviewer.user_permissions.add(
            *Permission.objects.filter(codename__in=["approve_outreach", "view_outreach"])
        )


def seed_demo(*, leads: int, seed: int = 7) -> list[Owner]:
    """Owners and `leads` leads, each with an intro queued now."""
    seed_users()
    owners = [owner_upsert(spec=spec)[0] for spec, _ in OWNERS]
    org = Organization.objects.get(name=ORG)
    org.members.add(*User.objects.filter(username="reviewer"))  # the reviewer approves Demo Co's drafts
    if org.allowed_link_domains != "example.com":
        org.allowed_link_domains, org.sender_email = "example.com", "sales@example.com"
        org.save(update_fields=["allowed_link_domains", "sender_email"])
    rng = random.Random(seed)
    weights = [share for _, share in OWNERS]
    with transaction.atomic():
        rows = [_lead(org=org, owner=rng.choices(owners, weights)[0], n=n, rng=rng) for n in range(leads)]
        Lead.objects.bulk_create(rows, ignore_conflicts=True, batch_size=1000)
        created = Lead.objects.filter(organization=org, outreach__isnull=True)
        now = timezone.now()
        Outreach.objects.bulk_create(
            (
                Outreach(
                    lead=lead,
                    owner_id=lead.owner_id,
                    kind=Outreach.Kind.INTRO,
                    tier=Outreach.KIND_TIER[Outreach.Kind.INTRO],
                    state=State.QUEUED,
                    not_before=now,
                    idempotency_key=intro_key(lead_id=lead.pk),
                    state_changed_at=now,
                )
                for lead in created.iterator()
            ),
            ignore_conflicts=True,
            batch_size=1000,
        )
    return owners


def _lead(*, org: Organization, owner: Owner, n: int, rng: random.Random) -> Lead:
    first, last = rng.choice(FIRST), rng.choice(LAST)
    return Lead(
        organization=org,
        owner=owner,
        email=f"{first.lower()}.{last.lower()}.{n}@prospect.example",
        first_name=first,
        last_name=last,
        company=rng.choice(COMPANIES),
        title=rng.choice(TITLES),
        timezone=rng.choice(ZONES),
    )
