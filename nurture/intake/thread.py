"""The conversation with a lead, as a reviewer reads it before approving an answer.

`thread_build` is the pure part: our emails as sent and the prospect's messages (each reply's
first message and those joined into it, nurture.intake.replies), in order, each cut into its
own words and the text it quotes (nurture.intake.quoting). `lead_thread` loads them for one
reply. Text stays text: the page escapes it (nothing here is HTML).

Order: our emails by sent_at; a prospect's message by the time it arrived when recorded
("received_at", ISO), else its reply's created_at, the messages joined into a reply after the
first in the order they joined. Inbound text is hostile: a context that is not the shape the
intake writes contributes nothing rather than failing the page.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, replace
from datetime import datetime
from typing import Any

from nurture.intake.quoting import Segment, segments, unquoted
from outreach.models import Outreach, State

__all__ = [
    "EXCERPT_CHARS",
    "InboundRecord",
    "SentRecord",
    "ThreadMessage",
    "excerpt",
    "lead_thread",
    "reply_inbound",
    "thread_build",
]

# What a page shows of one message; a longer one (a 30 MB post) is cut with a note.
SHOWN_CHARS = 20_000
# The conversation's latest messages a page shows (a lead writes a handful).
SHOWN_MESSAGES = 50
EXCERPT_CHARS = 120


@dataclass(frozen=True)
class SentRecord:
    """One email we sent the lead."""

    outreach_id: int
    subject: str
    body: str
    sent_at: datetime


@dataclass(frozen=True)
class InboundRecord:
    """One reply outreach: the prospect's messages it holds (its context) and when it arrived."""

    outreach_id: int
    created_at: datetime
    context: Any


@dataclass(frozen=True)
class ThreadMessage:
    ours: bool
    subject: str
    at: datetime
    segments: tuple[Segment, ...]
    cut: bool = False  # longer than SHOWN_CHARS: the rest is not shown
    reply_id: int | None = None  # the prospect's: the reply outreach holding it
    joined: bool = False  # the prospect's: arrived after that reply's first message


def reply_inbound(context: Any) -> list[dict[str, str]]:
    """The prospect's messages a reply's context holds, first then joined, each with string
    subject, body (missing or not text: empty) and received_at; anything else is left out."""
    if not isinstance(context, dict):
        return []
    joined = context.get("joined")
    found = [context.get("inbound"), *(joined if isinstance(joined, list) else [])]
    return [
        {
            key: value if isinstance(value := m.get(key), str) else ""
            for key in ("subject", "body", "received_at")
        }
        for m in found
        if isinstance(m, dict)
    ]


def thread_build(*, sent: Iterable[SentRecord], inbound: Iterable[InboundRecord]) -> list[ThreadMessage]:
    """Every message of the conversation, oldest first (the module docstring's order), the last
    SHOWN_MESSAGES of them."""
    keyed: list[tuple[datetime, int, ThreadMessage]] = []
    for email in sent:
        keyed.append(
            (email.sent_at, 0, _message(ours=True, subject=email.subject, body=email.body, at=email.sent_at))
        )
    for record in inbound:
        for position, m in enumerate(reply_inbound(record.context)):
            at = _when(m["received_at"]) or record.created_at
            message = _message(ours=False, subject=m["subject"], body=m["body"], at=at)
            keyed.append((at, position, replace(message, reply_id=record.outreach_id, joined=position > 0)))
    keyed.sort(key=lambda row: (row[0], row[1]))
    return [message for _, _, message in keyed[-SHOWN_MESSAGES:]]


def _message(*, ours: bool, subject: str, body: str, at: datetime) -> ThreadMessage:
    shown = body[:SHOWN_CHARS]
    return ThreadMessage(
        ours=ours, subject=subject, at=at, segments=tuple(segments(shown)), cut=len(body) > len(shown)
    )


def _when(text: str) -> datetime | None:
    try:
        found = datetime.fromisoformat(text) if text else None
    except ValueError:
        return None
    return found if found is not None and found.tzinfo is not None else None


def excerpt(body: str, *, chars: int = EXCERPT_CHARS) -> str:
    """What the prospect wrote, on one line: their own words (quotes left out), the first
    `chars` characters, an ellipsis when cut."""
    text = " ".join(unquoted(body[: chars * 40]).split())
    return text if len(text) <= chars else text[: chars - 1].rstrip() + "\u2026"


def lead_thread(*, outreach: Outreach) -> list[ThreadMessage]:
    """The conversation of `outreach`'s lead up to now: our emails sent, the prospect's messages
    (the latest SHOWN_MESSAGES of each, by the lead's index)."""
    rows = Outreach.objects.filter(lead_id=outreach.lead_id)
    sent = (
        rows.filter(state=State.SENT, sent_at__isnull=False)
        .order_by("-sent_at", "-id")
        .values_list("id", "draft_subject", "draft_body", "sent_at")
    )
    inbound = (
        rows.filter(kind=Outreach.Kind.REPLY)
        .order_by("-created_at", "-id")
        .values_list("id", "created_at", "context")
    )
    return thread_build(
        sent=[SentRecord(i, subject, body, at) for i, subject, body, at in sent[:SHOWN_MESSAGES] if at],
        inbound=[InboundRecord(*row) for row in inbound[:SHOWN_MESSAGES]],
    )
