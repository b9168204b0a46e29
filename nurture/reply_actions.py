"""What a reply's class does: the one table of actions, for rules, the model and a person.

Shared by the three places a class is decided: intake (nurture.intake.triage, the rules), the
reply's generation job (nurture.writing.triage, the model) and a person reclassifying a reply
(nurture.intake.triage.reclassify). The classes are outreach.models.triage.ReplyClass.

  interested, question   answered; alone only if the class is in the organization's
                         reply_autonomous_classes (and the owner is autonomous), else approval
  complaint, other       a draft is written and always waits for a person (NEVER_ALONE)
  objection              the sequence stops; no answer unless the organization chose a polite
                         close (reply_objection_close), which goes through approval unless
                         "objection" is in reply_autonomous_classes
  out_of_office          no answer; the sequence is not stopped: its next step moves to the
                         day after the return date (OUT_OF_OFFICE_DEFAULT_DAYS when none given)
  auto_reply             no answer; the sequence goes on as planned
  unsubscribe            no answer; the lead opts out (nurture.sequence.lead_opt_out)
  bounce_notice          no answer; bounce handling, as for the email provider's hard bounce
                         (nurture.sequence.lead_problem_record: the lead suppressed, its owner
                         and sender domain paused if the bounce rate is now too high)
  referral               no answer; the sequence stops, and the contact named becomes a
                         referral proposal a person confirms (nothing is mailed before that)
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from typing import Any

from django.db import transaction
from django.db.models import Case, F, Value, When
from django.utils import timezone

from nurture.sequence import (
    lead_opt_out,
    lead_problem_record,
    sequence_defer,
    sequence_resume,
    sequence_stop,
)
from outreach.counters import counters_add, reply_classified
from outreach.models import NEVER_ALONE, Lead, Organization, Outreach, ReplyClass, State, TriageBy
from outreach.services.referrals import referral_propose
from outreach.transitions import update_in_place

C = ReplyClass
OUT_OF_OFFICE_DEFAULT_DAYS = 7
# Classes whose reply gets a draft (objection only with the organization's polite close).
ANSWERED: frozenset[str] = frozenset({C.INTERESTED, C.QUESTION, C.COMPLAINT, C.OTHER})
# Classes that leave the lead's sequence running (moved, for an out-of-office).
SEQUENCE_GOES_ON: frozenset[str] = frozenset({C.OUT_OF_OFFICE, C.AUTO_REPLY})
_REASON_CHARS = 300


@dataclass(frozen=True)
class ReplyTriage:
    """A reply's class, why, and what it told us (a return date, a contact to refer to)."""

    reply_class: str
    reason: str
    return_date: date | None = None
    referral_email: str = ""
    referral_name: str = ""


def reply_answered(*, reply_class: str, organization: Organization) -> bool:
    """Does a reply of this class get a draft written?"""
    return reply_class in ANSWERED or (reply_class == C.OBJECTION and organization.reply_objection_close)


def reply_needs_person(*, reply_class: str, organization: Organization, review_required: bool) -> bool:
    """Must a person approve the answer? Always for a reviewed owner; for an autonomous one
    unless the organization lets the class be answered alone (never complaint or other). A
    reply with no class (written before triage existed) follows its owner as before."""
    if review_required:
        return True
    if not reply_class:
        return False
    allowed = (
        organization.reply_autonomous_classes
        if isinstance(organization.reply_autonomous_classes, list)
        else []
    )
    return reply_class in NEVER_ALONE or reply_class not in allowed


def resume_at(*, return_date: date | None, now: datetime) -> datetime:
    """When the sequence writes again after an out-of-office: the day after the return date
    (midnight UTC), else OUT_OF_OFFICE_DEFAULT_DAYS from now; never in the past."""
    if return_date is None:
        return now + timedelta(days=OUT_OF_OFFICE_DEFAULT_DAYS)
    after = datetime.combine(return_date + timedelta(days=1), time.min, tzinfo=UTC)
    return max(after, now)


def reply_class_record(
    *, outreach_id: int, triage: ReplyTriage, by: str, actor_id: int | None = None
) -> bool:
    """Keep the class, its reason and who decided on the reply, with a note in its history, and
    count the decision (outreach.counters.reply_classified: a person's counts under the new
    class) in the same transaction. False: the row is gone (nothing written or counted)."""
    note = f"triage by {by}: {triage.reply_class} ({triage.reason})"[:500]
    with transaction.atomic():
        written = update_in_place(
            outreach_id=outreach_id,
            states=list(State),
            note=note,
            actor_id=actor_id,
            reply_class=triage.reply_class,
            reply_class_reason=triage.reason[:_REASON_CHARS],
            reply_class_by=by,
        )
        if written:
            organization_id = Outreach.objects.values_list("owner__organization_id", flat=True).get(
                pk=outreach_id
            )
            counters_add(
                reply_classified(organization_id=organization_id, reply_class=triage.reply_class, by=by)
            )
    return written


def reply_class_reopened() -> dict[str, Any]:
    """Update values that empty the reply's class, its reason and who decided, when the model
    decided it (else each keeps its value): for a message joining the reply after it was
    classified (nurture.intake.replies, nurture.writing.generation). The model read the
    messages before that one, so the next job classifies the whole turn again (one more triage
    call); a rule's class (its reply joins nothing) and a person's reclassification stay."""
    return {
        name: Case(When(reply_class_by=TriageBy.MODEL, then=Value("")), default=F(name))
        for name in ("reply_class", "reply_class_reason", "reply_class_by")
    }


def reply_class_act(*, reply: Outreach, triage: ReplyTriage, sequence_stopped: bool) -> str:
    """Do to the lead and its sequence what the class says (the reply's own state is the
    caller's); `sequence_stopped`: intake stopped it already (the model's and a person's case).
    Returns what was done, for the reply's history."""
    lead_id, cls = reply.lead_id, triage.reply_class
    if cls == C.UNSUBSCRIBE:
        inbound = reply.context.get("inbound") if isinstance(reply.context, dict) else None
        said = str(inbound.get("message_id") or "") if isinstance(inbound, dict) else ""
        lead_opt_out(
            lead_id=lead_id, reason=f"asked to stop in a reply ({said[:200] or f'reply #{reply.pk}'})"
        )
        return "lead opted out"
    if cls == C.BOUNCE_NOTICE:
        lead_problem_record(
            lead_id=lead_id,
            status=Lead.Status.BOUNCED,
            reason=f"delivery failure notice (reply #{reply.pk}): {triage.reason}",
        )
        return "lead suppressed as a hard bounce"
    if cls == C.OUT_OF_OFFICE:
        at = resume_at(return_date=triage.return_date, now=timezone.now())
        _sequence_on(reply=reply, at=at, stopped=sequence_stopped, why=f"out of office until {at:%Y-%m-%d}")
        return f"no answer; next step after {at:%Y-%m-%d %H:%M} UTC"
    if cls == C.AUTO_REPLY:
        _sequence_on(reply=reply, at=timezone.now(), stopped=sequence_stopped, why="automatic reply")
        return "no answer; sequence goes on"
    _replied(lead_id=lead_id)
    if cls == C.REFERRAL:
        proposal = referral_propose(
            source=reply, email=triage.referral_email, name=triage.referral_name, reason=triage.reason
        )
        return f"no answer; referral #{proposal.pk} proposed ({proposal.contact_email or 'no address'})"
    return "sequence stopped"


def _sequence_on(*, reply: Outreach, at: datetime, stopped: bool, why: str) -> None:
    if stopped:
        sequence_resume(lead_id=reply.lead_id, at=at, source_id=reply.pk, reason=f"{why}: sequence resumed")
    else:
        sequence_defer(lead_id=reply.lead_id, at=at)


def _replied(*, lead_id: int) -> None:
    """A person wrote: the lead is marked replied and its sequence stops (as intake does for
    every reply the rules do not settle)."""
    Lead.objects.filter(id=lead_id, status=Lead.Status.ACTIVE).update(status=Lead.Status.REPLIED)
    sequence_stop(lead_id=lead_id, reason="lead replied: sequence stopped")
