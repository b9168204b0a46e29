"""Which mailbox an email leaves from, and how much room an owner's mailboxes have today.

An owner's active mailboxes (outreach.models.Mailbox) take its sends in turn: each send takes
the next one with room today (its cap, or its warm-up step: `ramp_cap`) whose spacing since its
last send has passed; the counting is atomic in Redis (orchestrator.budget.mailboxes). A
mailbox on a paused sender domain is left out. An owner with no mailbox sends from its
organization's sender address (the default mailbox) and is bounded by the sender domain's day
only, as before mailboxes.

Before the mailbox, two rules of the organization hold a send (`mailbox_take`): the recipient's
business hours (`business_hours_next`, in the lead's time zone) and the recipient domain's
day (`Organization.recipient_domain_daily_cap`). A held send goes back to APPROVED with
`not_before` and the reason it waits (nurture.mail.sending), never busy-looping in a worker.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from zoneinfo import ZoneInfo

from orchestrator.budget import Budget, MailboxGrant, MailboxTerms, SendDenied, ramp_cap, spacing_draw
from orchestrator.budget.mailboxes import MAILBOXES_PAUSED
from orchestrator.controls.deliverability import mailbox_rates
from orchestrator.controls.pauses import PauseScope, paused_sender_domains
from outreach.models import Mailbox, Outreach, Prepared

# A send held by a paused mailbox is looked at again after this long (a resume is a person's act).
PAUSED_WAIT_MS = 15 * 60_000
WORKDAYS = range(5)  # Monday to Friday: business hours are on working days


def business_hours_next(*, now: datetime, zone: str, start: int, end: int) -> datetime | None:
    """None when `now` is inside business hours (`start` <= hour < `end`, Monday to Friday, in
    `zone`); otherwise when they next open (an aware datetime)."""
    local = now.astimezone(ZoneInfo(zone))
    if local.weekday() in WORKDAYS and start <= local.hour < end:
        return None
    day = local.date() if local.hour < start else local.date() + timedelta(days=1)
    while day.weekday() not in WORKDAYS:
        day += timedelta(days=1)
    opening = datetime(day.year, day.month, day.day, start, tzinfo=ZoneInfo(zone))
    return opening.astimezone(UTC)


# One owner's mailboxes, in mailboxes_of's order.
_OWNER_MAILBOXES = Prepared(lambda owner: Mailbox.objects.filter(owners=owner).order_by("pk"))


def mailboxes_of(*, owner_ids: Iterable[int]) -> dict[int, list[Mailbox]]:
    """Each owner's mailboxes, paused ones included, in a stable order; owners with none are absent.
    One query (the send path asks for every email, and most owners may have no mailbox), each
    mailbox loaded once however many owners it serves (a team's shared mailbox: thousands).
    One owner's (what every send asks) runs SQL compiled once (outreach.models.prepared)."""
    owner_ids = list(owner_ids)
    if len(owner_ids) == 1:
        theirs = _OWNER_MAILBOXES.all(owner=owner_ids[0])
        return {owner_ids[0]: theirs} if theirs else {}
    links = list(
        Mailbox.owners.through.objects.filter(owner_id__any=owner_ids)
        .order_by("mailbox_id")
        .values_list("owner_id", "mailbox_id")
    )
    if not links:
        return {}
    boxes = Mailbox.objects.in_bulk({mailbox_id for _, mailbox_id in links})
    found: dict[int, list[Mailbox]] = {}
    for owner_id, mailbox_id in links:
        found.setdefault(owner_id, []).append(boxes[mailbox_id])
    return found


def mailboxes_usable(
    boxes: Iterable[Mailbox], *, paused: set[tuple[str, int | None]] | None = None
) -> list[Mailbox]:
    """The active ones not on a paused sender domain (`paused`: paused_sender_domains(), read
    here when not given; a caller judging many owners reads it once)."""
    active = [box for box in boxes if box.active]
    if not active:
        return []
    paused = paused_sender_domains() if paused is None else paused
    return [
        box
        for box in active
        if (box.domain, None) not in paused and (box.domain, box.organization_id) not in paused
    ]


def mailbox_terms(*, mailboxes: Iterable[Mailbox], today: date) -> list[MailboxTerms]:
    """What the send budget takes of each mailbox: its cap today and a spacing drawn for this send."""
    return [
        MailboxTerms(
            id=box.pk,
            address=box.address,
            cap_today=mailbox_cap_today(mailbox=box, today=today),
            spacing_ms=spacing_draw(min_s=box.min_spacing_s, max_s=box.max_spacing_s),
        )
        for box in mailboxes
    ]


def mailbox_cap_today(*, mailbox: Mailbox, today: date) -> int:
    return ramp_cap(
        daily_cap=mailbox.daily_cap,
        ramp_start=mailbox.ramp_start,
        ramp_step=mailbox.ramp_step,
        ramp_from=mailbox.ramp_from,
        today=today,
    )


def mailbox_take(
    *, outreach: Outreach, budget: Budget, scopes: list[PauseScope] | None = None
) -> MailboxGrant | SendDenied:
    """The mailbox this email leaves from, or why it waits (business hours, the recipient
    domain's day, every mailbox full or too recently used). `outreach` has its lead's
    organization loaded; on a grant from one of the owner's mailboxes, `outreach.mailbox` is
    that mailbox. `scopes`: the active pauses (orchestrator.controls.pauses), read here when
    not given and needed."""
    organization = outreach.lead.organization
    now_ms = budget.clock_ms()
    now = datetime.fromtimestamp(now_ms / 1000, UTC)
    start, end = organization.business_hours_start, organization.business_hours_end
    if start is not None and end is not None:
        opening = business_hours_next(now=now, zone=outreach.lead.timezone, start=start, end=end)
        if opening is not None:
            reason = f"recipient's business hours {start}-{end} {outreach.lead.timezone}: waits until {opening:%Y-%m-%d %H:%M} UTC"
            return SendDenied(max(1, int((opening - now).total_seconds() * 1000)), reason)
    every = mailboxes_of(owner_ids=[outreach.owner_id]).get(outreach.owner_id, [])
    boxes = mailboxes_usable(every, paused=None if scopes is None else paused_sender_domains(scopes))
    if outreach.mailbox_id is not None:  # a resend leaves from the mailbox of its first try
        boxes = [box for box in boxes if box.pk == outreach.mailbox_id]
        if not boxes:
            return SendDenied(PAUSED_WAIT_MS, f"mailbox {outreach.mailbox} is paused")
    elif every and not boxes:
        return SendDenied(PAUSED_WAIT_MS, MAILBOXES_PAUSED)
    taken = budget.mailbox_reserve(
        owner_id=outreach.owner_id,
        organization_id=organization.pk,
        mailboxes=mailbox_terms(mailboxes=boxes, today=now.date()),
        recipient_domain=outreach.lead.email.rpartition("@")[2],
        recipient_cap=organization.recipient_domain_daily_cap,
    )
    if isinstance(taken, MailboxGrant) and taken.mailbox_id is not None:
        outreach.mailbox = next(box for box in boxes if box.pk == taken.mailbox_id)
    return taken


def mailbox_room_today(
    *,
    owner_ids: Collection[int],
    budget: Budget,
    scopes: list[PauseScope] | None = None,
    mailboxes: Mapping[int, Sequence[Mailbox]] | None = None,
) -> dict[int, dict[str, int] | None]:
    """THE per-owner mailbox room for today, for the LLM admission check: for each owner, per
    sender domain of its usable mailboxes (active, domain not paused), the sum over those
    mailboxes of min(cap, warm-up step) minus what each sent today (never below 0); None for an
    owner with no mailbox (it sends from the organization's sender address: only that sender
    domain's day bounds it). An owner whose mailboxes are all paused has {} (no room).
    `scopes`: the active pauses (orchestrator.controls.pauses), read here when not given and
    needed. `mailboxes`: each owner's mailboxes as `mailboxes_of` gives them (at least these
    owners'), when the caller keeps them (the dispatcher: orchestrator.dispatch.reads.active_owners);
    read here when not given."""
    today = datetime.fromtimestamp(budget.clock_ms() / 1000, UTC).date()
    every = mailboxes_of(owner_ids=owner_ids) if mailboxes is None else mailboxes
    usable = _usable_of(owner_ids, every=every, scopes=scopes)
    usage = budget.mailbox_usage(mailbox_ids=sorted(b.pk for b in usable))
    left = {
        b.pk: (b.domain, max(0, mailbox_cap_today(mailbox=b, today=today) - usage[b.pk].sent_today))
        for b in usable
    }
    room: dict[int, dict[str, int] | None] = {}
    for owner_id in owner_ids:
        if owner_id not in every:
            room[owner_id] = None
            continue
        by_domain: dict[str, int] = {}
        for b in every[owner_id]:
            if b.pk in left:
                domain, n = left[b.pk]
                by_domain[domain] = by_domain.get(domain, 0) + n
        room[owner_id] = by_domain
    return room


def mailbox_domains(
    *,
    owner_ids: Collection[int],
    mailboxes: Mapping[int, Sequence[Mailbox]],
    scopes: list[PauseScope] | None = None,
) -> dict[int, tuple[str, ...] | None]:
    """Per owner, the sender domains of its usable mailboxes (those `mailbox_room_today` would
    count, sorted): where its mail leaves from; None for an owner with no mailbox (its
    organization's sender), () when every one is paused. No usage read: for the owners whose
    work only counts on those domains' days (the dispatcher's owners not judged)."""
    usable = {b.pk for b in _usable_of(owner_ids, every=mailboxes, scopes=scopes)}
    return {
        owner_id: (
            None
            if owner_id not in mailboxes
            else tuple(sorted({b.domain for b in mailboxes[owner_id] if b.pk in usable}))
        )
        for owner_id in owner_ids
    }


def _usable_of(
    owner_ids: Collection[int], *, every: Mapping[int, Sequence[Mailbox]], scopes: list[PauseScope] | None
) -> list[Mailbox]:
    """The usable mailboxes (`mailboxes_usable`) of these owners, each judged once, not once
    per owner it serves (a team's shared mailbox: thousands)."""
    distinct = {b.pk: b for owner_id in owner_ids for b in every.get(owner_id, ())}
    return mailboxes_usable(distinct.values(), paused=paused_sender_domains(scopes) if distinct else set())


@dataclass(frozen=True)
class MailboxStatus:
    """One mailbox as the dashboard, the admin and queue_stats show it."""

    id: int
    address: str
    organization: str
    owners: str
    sent_today: int
    cap: int
    ramp_cap: int  # today's warm-up step (= cap once warmed up)
    next_send_at: datetime | None  # None: may send now
    bounce_rate: float | None
    complaint_rate: float | None
    active: bool
    paused_reason: str


def mailbox_status(
    *,
    budget: Budget,
    organization_ids: Collection[int] | None = None,
    mailbox_ids: Collection[int] | None = None,
) -> list[MailboxStatus]:
    """Every mailbox of these organizations (None: all), by address."""
    rows = Mailbox.objects.select_related("organization").prefetch_related("owners").order_by("address")
    if organization_ids is not None:
        rows = rows.filter(organization_id__in=organization_ids)
    if mailbox_ids is not None:
        rows = rows.filter(pk__in=mailbox_ids)
    boxes = list(rows)
    now_ms = budget.clock_ms()
    today = datetime.fromtimestamp(now_ms / 1000, UTC).date()
    usage = budget.mailbox_usage(mailbox_ids=[b.pk for b in boxes])
    found = []
    for box in boxes:
        rates = mailbox_rates(mailbox=box)
        next_ms = usage[box.pk].next_at_ms
        found.append(
            MailboxStatus(
                id=box.pk,
                address=box.address,
                organization=box.organization.name,
                owners=", ".join(sorted(o.name for o in box.owners.all())),
                sent_today=usage[box.pk].sent_today,
                cap=box.daily_cap,
                ramp_cap=mailbox_cap_today(mailbox=box, today=today),
                next_send_at=datetime.fromtimestamp(next_ms / 1000, UTC) if next_ms > now_ms else None,
                bounce_rate=rates.bounce_rate,
                complaint_rate=rates.complaint_rate,
                active=box.active,
                paused_reason=box.paused_reason,
            )
        )
    return found
