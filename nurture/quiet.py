"""One answer per burst: when a lead's reply falls due (docs/dispatch.md, "The quiet period").

Each message from a lead starts, or extends, a quiet period: the answer to it is written once
the lead has been quiet that long since their last message, so "Interested!" and, two seconds
later, "Also, what does a pilot cost?" get one email that answers both. The pending reply's
`not_before` carries it (the dispatcher takes no queued row before its not_before), set by the
intake when a message queues the reply or joins it (nurture.intake.replies), and by the
generation job when a message that joined mid-draft sends the reply back to the queue
(nurture.writing.generation). After it, the reply goes first like any reply (tier REPLY).

The period is the organization's `reply_quiet_s`, else REPLY_QUIET_S (0: answered at once).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings

from outreach.models import Organization


def quiet_period_s(*, organization_s: int | None, default_s: int) -> int:
    """The organization's own quiet period when it set one (0 included), else the default."""
    return default_s if organization_s is None else organization_s


def reply_due(*, last_message_at: datetime, quiet_s: int, not_before: datetime | None = None) -> datetime:
    """When a reply may be written: `quiet_s` after the lead's last message, and never earlier
    than the `not_before` it already has (a backoff after a failed attempt keeps its wait; a
    later message only ever pushes the answer out, never pulls it in)."""
    due = last_message_at + timedelta(seconds=quiet_s)
    return due if not_before is None else max(due, not_before)


def reply_quiet_s(*, organization: Organization) -> int:
    """The quiet period a lead of `organization` gets: its own, else REPLY_QUIET_S."""
    return quiet_period_s(organization_s=organization.reply_quiet_s, default_s=settings.REPLY_QUIET_S)
