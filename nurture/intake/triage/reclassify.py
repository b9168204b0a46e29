"""A person changes a reply's class: recorded (who, when, from, to) and acted on where it still can be.

What still can be: a reply not sent yet that the new class does not answer is cancelled (its
draft, if any, never leaves); one the new class answers and that is still waiting keeps going,
routed by the new class (nurture.reply_actions.reply_needs_person) when its draft is recorded.
The new class's action on the lead runs too (opt out, suppress, move the sequence after an
out-of-office, propose a referral, stop the sequence). A reply already sent, or cancelled
before, stays as it is: a new answer is a person's to write.
"""

from __future__ import annotations

import contextlib

from nurture.reply_actions import ReplyTriage, reply_answered, reply_class_act, reply_class_record
from outreach.models import Outreach, ReplyClass, State, TriageBy
from outreach.services.operations import NotActionable
from outreach.transitions import AT_REST, TransitionLost, transition


def reply_reclassify(*, outreach_id: int, reply_class: str, by_id: int) -> Outreach:
    """Give the reply `reply_class` as a person's decision. Raises NotActionable naming the
    row: not a reply, a class that does not exist, or the class it has already."""
    if reply_class not in ReplyClass.values:
        raise NotActionable(
            f"{reply_class!r} is not a reply class: use one of {', '.join(ReplyClass.values)}"
        )
    reply = Outreach.objects.select_related("lead__organization").get(pk=outreach_id)
    if reply.kind != Outreach.Kind.REPLY:
        raise NotActionable(f"#{reply.pk} is a {reply.kind}, not a reply: only replies have a class")
    if reply.reply_class == reply_class:
        raise NotActionable(f"#{reply.pk} is {reply_class} already")
    before, stopped = reply.reply_class or "none", reply.reply_class_by != TriageBy.RULES
    triage = ReplyTriage(reply_class, f"reclassified by a person from {before} to {reply_class}")
    reply_class_record(outreach_id=reply.pk, triage=triage, by=TriageBy.PERSON, actor_id=by_id)
    if not reply_answered(reply_class=reply_class, organization=reply.lead.organization):
        # In flight, sent or ended: the worker's own checks, or nothing left to stop.
        with contextlib.suppress(TransitionLost):
            transition(
                outreach_id=reply.pk,
                from_=AT_REST,
                to=State.CANCELLED,
                note=f"reclassified {before} -> {reply_class}: not answered",
                actor_id=by_id,
            )
    reply.reply_class = reply_class
    reply_class_act(reply=reply, triage=triage, sequence_stopped=stopped)
    reply.refresh_from_db()
    return reply
