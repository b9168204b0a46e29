"""Acting on what the rules settle, at intake: no model, no answer, no LLM request.

The reply is recorded (an outreach of kind reply, so a person sees it with its class and why)
and cancelled at once; then the class's action (nurture.reply_actions, the one table the model
and a person's reclassification use too) runs with the sequence not stopped: an out-of-office
moves the next step after the return date, an automatic reply leaves it alone. A bounce notice
goes to the bounce handling of provider events (nurture.sequence.lead_problem_record): the lead
suppressed as a hard bounce, and its owner or sender domain paused if the bounce rate is now
too high.
"""

from __future__ import annotations

import logging

from nurture.reply_actions import ReplyTriage, reply_class_act, reply_class_record
from outreach.models import Outreach, ReplyClass, State, TriageBy
from outreach.transitions import transition

log = logging.getLogger(__name__)


def triage_settled_act(*, reply: Outreach, triage: ReplyTriage) -> None:
    """Record the rules' class on the just-queued reply, cancel it (never answered), act."""
    reply_class_record(outreach_id=reply.pk, triage=triage, by=TriageBy.RULES)
    # Cancelled before the action: suppressing the lead would cancel the queued reply itself.
    transition(
        outreach_id=reply.pk,
        from_=State.QUEUED,
        to=State.CANCELLED,
        note=f"{triage.reply_class} (rules): not answered; {_act_note(triage=triage)}"[:500],
    )
    reply_class_act(reply=reply, triage=triage, sequence_stopped=False)
    log.info(
        "reply %s settled by rules: %s (%s)",
        reply.pk,
        triage.reply_class,
        triage.reason,
        extra={"outreach_id": reply.pk, "lead_id": reply.lead_id},
    )


def _act_note(*, triage: ReplyTriage) -> str:
    if triage.reply_class == ReplyClass.BOUNCE_NOTICE:
        return "lead suppressed as a hard bounce"
    if triage.reply_class == ReplyClass.UNSUBSCRIBE:
        return "lead opted out"
    if triage.reply_class == ReplyClass.OUT_OF_OFFICE:
        back = triage.return_date.isoformat() if triage.return_date else "no return date"
        return f"sequence moved after the return date ({back})"
    return "sequence goes on"
