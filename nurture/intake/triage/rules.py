"""The deterministic part of reply triage: what an inbound email's headers and text settle
without a model. Pure functions over the InboundReply (nurture.intake.belief); None when the
rules do not settle it (then the reply's generation job asks the model: nurture.writing.triage).

In order, the first that applies decides:

1. A delivery status report (RFC 3464: `multipart/report; report-type=delivery-status`) from a
   mailer daemon or postmaster: a bounce notice when it reports a failed recipient, else (a
   delay, a relay notice) an automatic reply; a report from anyone else is an automatic reply.
2. An automatic reply by its headers (RFC 3834 `Auto-Submitted` other than "no",
   `X-Autoreply`, `X-Autorespond`, `Precedence: auto_reply | bulk | list | junk`, a mailing
   list's `List-Id` or `List-Unsubscribe`) or by its subject ("Automatic reply: ...",
   "Abwesenheitsnotiz: ..."): out of office (with its return date) when its text says so,
   else an automatic reply. Never answered: the other side's responder may answer again.
3. A request to stop (nurture.intake.opt_out, the one home of those phrasings): unsubscribe.

Anything else, a person's out-of-office note without those headers included, is the model's
to classify: only a header or a notice's subject proves that no person is waiting for an answer.
Headers come from the email providers' inbound webhooks only; our signed JSON webhook carries
none, so there the rules read the text alone.
"""

from __future__ import annotations

import re
from datetime import date

from nurture.intake.belief import InboundReply
from nurture.intake.opt_out import own_text, reply_asks_to_stop
from nurture.intake.triage.out_of_office import AUTO_REPLY_SUBJECT, is_out_of_office, return_date
from nurture.reply_actions import ReplyTriage as Triage
from outreach.models.triage import ReplyClass

# The headers the rules read: what nurture.intake.inbound_email carries into InboundReply.
TRIAGE_HEADERS = (
    "auto-submitted",
    "x-autoreply",
    "x-autorespond",
    "precedence",
    "list-id",
    "list-unsubscribe",
)
_DAEMON = re.compile(r"^(?:mailer-daemon|postmaster|mail-daemon|mailerdaemon)@", re.IGNORECASE)
_AUTO_PRECEDENCE = frozenset({"auto_reply", "bulk", "list", "junk"})
_REASON_CHARS = 300  # Outreach.reply_class_reason


def triage_rules(*, reply: InboundReply, today: date) -> Triage | None:
    """The class the rules give the reply, or None when they do not settle it."""
    return _report(reply) or _automatic(reply, today=today) or _opt_out(reply)


def _report(reply: InboundReply) -> Triage | None:
    if reply.content_type != "multipart/report" or reply.report_type != "delivery-status":
        return None
    if not _DAEMON.match(reply.lead_email):
        return Triage(ReplyClass.AUTO_REPLY, f"delivery status report from {reply.lead_email[:100]}")
    if not reply.report_failed:
        return Triage(ReplyClass.AUTO_REPLY, "delivery status report without a failed recipient (a delay)")
    failed = ", ".join(reply.report_failed)
    return Triage(ReplyClass.BOUNCE_NOTICE, f"delivery failed for {failed}"[:_REASON_CHARS])


def _automatic(reply: InboundReply, *, today: date) -> Triage | None:
    why = auto_header(reply.headers) or _auto_subject(reply.subject)
    if why is None:
        return None
    text = own_text(reply.body)
    if is_out_of_office(f"{reply.subject}\n{text}"):
        back = return_date(text, today=today)
        said = f", back {back.isoformat()}" if back else ", no return date given"
        return Triage(ReplyClass.OUT_OF_OFFICE, f"out-of-office notice ({why}){said}", return_date=back)
    return Triage(ReplyClass.AUTO_REPLY, f"automatic reply ({why})")


def auto_header(headers: tuple[tuple[str, str], ...]) -> str | None:
    """The header that marks the email automatic ("Auto-Submitted: auto-replied"), or None."""
    for name, value in headers:
        word = value.strip().lower()
        if name == "auto-submitted" and word.split(";")[0].strip() not in ("", "no"):
            return f"Auto-Submitted: {word[:40]}"
        if name in ("x-autoreply", "x-autorespond") and word not in ("no", "false", "0"):
            return f"{name}: {word[:40]}"
        if name == "precedence" and word in _AUTO_PRECEDENCE:
            return f"Precedence: {word}"
        if name in ("list-id", "list-unsubscribe") and word:
            return f"{name} header (a mailing list)"
    return None


def _auto_subject(subject: str) -> str | None:
    return "an automatic reply's subject" if AUTO_REPLY_SUBJECT.match(subject) else None


def _opt_out(reply: InboundReply) -> Triage | None:
    if reply_asks_to_stop(subject=reply.subject, body=reply.body):
        return Triage(ReplyClass.UNSUBSCRIBE, "asked to stop (opt-out phrasing)")
    return None
