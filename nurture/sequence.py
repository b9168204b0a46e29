"""Ending a lead's sequence: a reply, a conversion, an opt-out, a hard bounce or a complaint
(`lead_problem_record`: the one bounce and complaint record, however it was learned, with the
owner's and sender domain's rate check); and the one way back, a reactivation with a recorded
reason (never after a complaint).

Only work that has not started sending is cancelled here (QUEUED, AWAITING_APPROVAL, APPROVED),
through the state machine. Rows already DISPATCHED/GENERATING/SENDING belong to a worker; for
an opt-out the pipeline re-reads the lead's status before the LLM and again before SMTP and
cancels them itself. transition_many skips rows another transaction holds (a dispatcher claiming
them this instant): those are in flight a moment later, the same case.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from functools import partial

from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import F

from orchestrator.work import Pause, deliverability_check
from outreach.models import SUPPRESSED, Lead, LeadEvent, Outreach, State, lead_status
from outreach.services.operations import NotActionable
from outreach.services.queue import outreach_enqueue
from outreach.transitions import AT_REST, ENDED_UNSENT, transition_many

log = logging.getLogger(__name__)

SEQUENCE_KINDS = (Outreach.Kind.INTRO, Outreach.Kind.NUDGE)


def sequence_stop(*, lead_id: int, reason: str) -> list[int]:
    """Cancel the lead's intro and nudges that have not started sending; return the ids cancelled.

    Replies to the lead are not part of the sequence and are left alone.
    """
    ids = list(
        Outreach.objects.filter(lead_id=lead_id, kind__in=SEQUENCE_KINDS, state__in=AT_REST).values_list(
            "id", flat=True
        )
    )
    return transition_many(outreach_ids=ids, from_=AT_REST, to=State.CANCELLED, note=reason)


def sequence_defer(*, lead_id: int, at: datetime) -> list[int]:
    """Move the lead's queued sequence steps so the next is due no earlier than `at`, the later
    ones keeping their spacing (an out-of-office notice: write again once they are back).
    Returns the ids moved. A step already handed to a worker goes ahead as planned."""
    rows = list(
        Outreach.objects.filter(lead_id=lead_id, kind__in=SEQUENCE_KINDS, state=State.QUEUED).values_list(
            "id", "not_before"
        )
    )
    if not rows:
        return []
    shift = at - min(not_before for _, not_before in rows)
    if shift.total_seconds() <= 0:
        return []
    ids = [row_id for row_id, _ in rows]
    # Guarded on QUEUED: a row the dispatcher claimed meanwhile keeps its time.
    Outreach.objects.filter(id__in=ids, state=State.QUEUED).update(not_before=F("not_before") + shift)
    return ids


def sequence_resume(*, lead_id: int, at: datetime, source_id: int, reason: str) -> list[int]:
    """Start again the steps a reply stopped, the next due no earlier than `at`, the later ones
    keeping their spacing; the lead active again if it was only marked replied. For a reply that, read by the
    model after intake had stopped the sequence, turned out to be an out-of-office or other
    automatic notice. Cancelled rows stay cancelled (their history is kept): each unsent step
    gets a new row (`source_id`, the reply, in its key: a re-run adds none). Returns new ids."""
    with transaction.atomic():
        status = Lead.objects.select_for_update().values_list("status", flat=True).get(id=lead_id)
        if status not in (Lead.Status.REPLIED, Lead.Status.ACTIVE):
            return []  # opted out, bounced, converted meanwhile: nothing to resume
        if status == Lead.Status.REPLIED:
            Lead.objects.filter(id=lead_id).update(status=Lead.Status.ACTIVE)
            LeadEvent.objects.create(
                lead_id=lead_id, from_status=status, to_status=Lead.Status.ACTIVE, note=reason[:500]
            )
        rows = list(Outreach.objects.filter(lead_id=lead_id, kind__in=SEQUENCE_KINDS).order_by("step", "id"))
        live = {row.step for row in rows if row.state not in ENDED_UNSENT}
        last_sent = max((row.step for row in rows if row.state == State.SENT), default=-1)
        stopped = {row.step: row for row in rows if row.state == State.CANCELLED and row.step > last_sent}
        steps = sorted(step for step in stopped if step not in live)
        if not steps:
            return []
        first_due = stopped[steps[0]].not_before
        lead = Lead.objects.get(id=lead_id)
        made = []
        for step in steps:
            row = stopped[step]
            key = hashlib.sha256(f"{row.idempotency_key}|resume|{source_id}".encode()).hexdigest()
            outreach, _ = outreach_enqueue(
                lead=lead,
                kind=Outreach.Kind(row.kind),
                idempotency_key=f"resume:{key}",
                not_before=max(row.not_before, at + (row.not_before - first_due)),
                step=step,
                context=row.context if isinstance(row.context, dict) else {},
            )
            made.append(outreach.pk)
    return made


def lead_mark_converted(*, lead: Lead) -> list[int]:
    """The lead became a customer: status converted (unless opted out, which must stick), sequence stopped."""
    with transaction.atomic():
        Lead.objects.filter(id=lead.pk).exclude(status__in=SUPPRESSED).update(status=Lead.Status.CONVERTED)
        cancelled = sequence_stop(lead_id=lead.pk, reason="lead converted: sequence stopped")
    lead.refresh_from_db(fields=["status"])
    return cancelled


@dataclass(frozen=True)
class OptOut:
    lead_id: int
    email: str
    organization: str
    already: bool  # the lead had opted out before (a second click, a retried one-click POST)
    cancelled: list[int]


def lead_opt_out(*, lead_id: int, reason: str = "unsubscribe link") -> OptOut:
    """Mark the lead opted out and cancel ALL its outreach that has not started sending.

    `reason` (the link, a reply asking to stop) is written in the lead's history (LeadEvent).
    Idempotent: a second call cancels whatever was queued since (e.g. a reply) and says `already`.
    Opt-out is per lead, i.e. per organization: another organization's lead with the same
    address is a different sender's contact. Raises Lead.DoesNotExist.
    """
    with transaction.atomic():
        lead = Lead.objects.select_for_update().select_related("organization").get(id=lead_id)
        # A bounced or complained lead stays so: it counts in its owner's rates (deliverability).
        already = lead.status in SUPPRESSED
        if not already:
            Lead.objects.filter(id=lead_id).update(status=Lead.Status.OPTED_OUT)
            LeadEvent.objects.create(
                lead_id=lead_id, from_status=lead.status, to_status=Lead.Status.OPTED_OUT, note=reason
            )
        cancelled = _cancel_not_started(lead_id=lead_id, note="lead opted out")
    return OptOut(lead_id, lead.email, lead.organization.name, already, cancelled)


def lead_suppress(*, lead_id: int, status: Lead.Status, reason: str) -> list[int]:
    """A hard bounce (BOUNCED) or a spam complaint (COMPLAINED): never email the lead again.
    Its work that has not started sending is cancelled, replies included; work in flight is
    stopped by the pipeline's own status checks. A complaint outranks a bounce (it is what the
    rates must not forget). Idempotent; returns the ids cancelled."""
    with transaction.atomic():
        before = Lead.objects.select_for_update().values_list("status", flat=True).get(id=lead_id)
        if before != status and not (status == Lead.Status.BOUNCED and before == Lead.Status.COMPLAINED):
            Lead.objects.filter(id=lead_id).update(status=status)
            LeadEvent.objects.create(lead_id=lead_id, from_status=before, to_status=status, note=reason)
        return _cancel_not_started(lead_id=lead_id, note=reason)


def lead_problem_record(*, lead_id: int, status: Lead.Status, reason: str) -> list[Pause]:
    """A hard bounce or a spam complaint about one lead, however we learned it (the email
    provider's event, our SMTP server's refusal, a delivery failure notice in the lead's
    replies, decided by the rules, the model or a person): suppress the lead, then pause its
    owner or sender domain if a rate is now too high (orchestrator.controls.deliverability)."""
    owner_id = Lead.objects.values_list("owner_id", flat=True).get(pk=lead_id)
    return leads_problem_record(lead_ids=[lead_id], owner_ids=[owner_id], status=status, reason=reason)


def leads_problem_record(
    *, lead_ids: list[int], owner_ids: Iterable[int], status: Lead.Status, reason: str
) -> list[Pause]:
    """Suppress these leads, then check these owners' rates (pausing what is over), as one turn."""
    with transaction.atomic():
        cancelled = [
            outreach_id
            for lead_id in lead_ids
            for outreach_id in lead_suppress(lead_id=lead_id, status=status, reason=reason[:500])
        ]
        pauses = [p for owner_id in sorted(set(owner_ids)) for p in deliverability_check(owner_id=owner_id)]
    log.warning(
        "lead %s %s: %d queued outreach cancelled%s",
        ", ".join(map(str, lead_ids)),
        status,
        len(cancelled),
        "".join(f"; {p.scope_text()} paused: {p.reason}" for p in pauses),
        extra={"lead_ids": lead_ids},
    )
    return pauses


def lead_reactivate(*, lead: Lead, by: AbstractBaseUser, reason: str) -> None:
    """Set an opted-out or bounced lead back to active, recording who, when and why (LeadEvent).

    Raises NotActionable, naming the lead, for a lead that complained (a spam complaint is
    never undone here: mailing that person again is what the complaint rates punish), one that
    is not suppressed, or an empty reason. Its cancelled emails stay cancelled: nothing is sent
    until new work is queued for it. Who may call it is the caller's check (the admin asks for
    outreach.reactivate_lead); tenancy too.
    """
    why = reason.strip()
    if not why:
        raise NotActionable(f"#{lead.pk} {lead.email}: a reason is required to reactivate a lead")
    with transaction.atomic():
        status = Lead.objects.select_for_update().values_list("status", flat=True).get(id=lead.pk)
        if status == Lead.Status.COMPLAINED:
            raise NotActionable(
                f"#{lead.pk} {lead.email} complained (marked our email as spam): never reactivated"
            )
        if status not in SUPPRESSED:
            raise NotActionable(f"#{lead.pk} {lead.email} is {status}, not opted out or bounced")
        Lead.objects.filter(id=lead.pk).update(status=Lead.Status.ACTIVE)
        LeadEvent.objects.create(
            lead_id=lead.pk, from_status=status, to_status=Lead.Status.ACTIVE, note=why, actor_id=by.pk
        )


def _cancel_not_started(*, lead_id: int, note: str) -> list[int]:
    ids = list(Outreach.objects.filter(lead_id=lead_id, state__in=AT_REST).values_list("id", flat=True))
    return transition_many(outreach_ids=ids, from_=AT_REST, to=State.CANCELLED, note=note)


def lead_get(*, lead_id: int) -> Lead:
    """The lead behind an unsubscribe link, for the confirmation page. Raises Lead.DoesNotExist."""
    return Lead.objects.select_related("organization").get(id=lead_id)


@dataclass(frozen=True)
class Gate:
    """May a sequence email go ahead now? `wait` and `stop` say why not. `lead_status`: the
    lead's status the gate read (None for a reply, which it lets go unread)."""

    go: bool
    stop: bool = False
    reason: str = ""
    lead_status: str | None = None


GO = Gate(go=True)


def sequence_gate(*, outreach: Outreach) -> Gate:
    """Checked by the pipeline before writing and before sending a sequence email.

    Replies always go. An intro or nudge stops when the lead is no longer active (replied,
    converted, opted out: a reply or conversion may land while it is in flight). A nudge waits
    until the step before it was sent (nudges are created up front with their due time, and an
    owner's intro backlog can outlast the nudge delay), and stops if that step never will be.
    """
    if outreach.kind == Outreach.Kind.REPLY:
        return GO
    status = lead_status(lead_id=outreach.lead_id)
    gate = partial(Gate, lead_status=status)  # every answer says what it read
    if status != Lead.Status.ACTIVE:
        return gate(go=False, stop=True, reason=f"lead {status}: sequence stopped")
    if outreach.step == 0:
        return gate(go=True)
    previous = (
        # The newest row of the step: a step stopped by a reply and started again
        # (sequence_resume) has a cancelled row and its new one.
        Outreach.objects.filter(lead_id=outreach.lead_id, kind__in=SEQUENCE_KINDS, step=outreach.step - 1)
        .order_by("-id")
        .values_list("state", flat=True)
        .first()
    )
    if previous is None or previous == State.SENT:
        return gate(go=True)
    if previous in ENDED_UNSENT:
        return gate(
            go=False, stop=True, reason=f"step {outreach.step - 1} ended {previous}: sequence stopped"
        )
    return gate(go=False, reason=f"waiting for step {outreach.step - 1} to be sent")
