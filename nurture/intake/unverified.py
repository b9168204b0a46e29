"""Keeping an inbound email that is not believed (nurture.intake.belief) for a person: its text,
who it claims to be from and to, the verdicts seen and why it was held. Never its attachments;
every field capped. One row per email, however often the provider delivers it.

Accepting one as the lead's reply is nurture.intake.replies.unverified_accept (it runs the
normal reply intake).
"""

from __future__ import annotations

import logging

from nurture.intake.belief import Belief, InboundReply
from outreach.idempotency import reply_key
from outreach.models import UnverifiedInbound

log = logging.getLogger(__name__)

# What a person needs to judge a message, not a mailbox: the text beyond this is cut.
BODY_MAX_CHARS = 20_000


def unverified_keep(*, reply: InboundReply, belief: Belief) -> UnverifiedInbound:
    """The row holding this email (a new one, or the one a duplicate delivery already made)."""
    subject_max = UnverifiedInbound._meta.get_field("subject").max_length or 0
    sender_max = UnverifiedInbound._meta.get_field("sender").max_length or 0
    held, created = UnverifiedInbound.objects.get_or_create(
        key=reply_key(message_id=reply.message_id),
        defaults={
            "organization_id": belief.organization_id,
            "lead": belief.claimed,
            "provider": reply.provider or "webhook",
            "message_id": reply.message_id,
            "sender": reply.lead_email[:sender_max],
            "recipients": "\n".join(address[:sender_max] for address in reply.recipients),
            "subject": reply.subject[:subject_max],
            "body": reply.body[:BODY_MAX_CHARS],
            "in_reply_to": reply.in_reply_to,
            "references": " ".join(reply.references),
            "verdicts": [verdict.as_dict() for verdict in reply.verdicts],
            "reason": belief.reason,
            "detail": belief.detail[: UnverifiedInbound._meta.get_field("detail").max_length or 0],
        },
    )
    log.warning(
        "inbound email held unverified (#%s, %s): %s",
        held.pk,
        belief.reason,
        "kept" if created else "a duplicate delivery",
        extra={"organization_id": belief.organization_id, "unverified_id": held.pk},
    )
    return held
