"""What the email provider said about an inbound email's authenticity: SPF, DKIM, DMARC, spam
and virus verdicts, read from a django-anymail inbound message and the provider's own post.

Verdicts can only hold an email back, never make one believed (nurture.intake.belief): a sender
can write any header, including a forged `Authentication-Results: spf=pass`, but a forged pass
changes nothing, and the provider's real verdict is read beside it. Where each comes from:

- every provider: the `Authentication-Results` (RFC 8601) and `Received-SPF` (RFC 7208)
  headers the receiving server added (Postmark's Received-SPF, Amazon SES's
  Authentication-Results and Received-SPF in the content it posts, Gmail's and Microsoft's
  hops when the email passed through them); anymail's `spam_detected` (Mailgun's
  X-Mailgun-Sflag, Postmark's X-Spam-Status, Amazon SES's spamVerdict), and `spam_score`
  where the provider gives a score but no flag (SendGrid, Mailjet, Brevo);
- Mailgun: `X-Mailgun-Spf` and `X-Mailgun-Dkim-Check-Result`;
- Amazon SES: the receipt's spfVerdict, dkimVerdict, dmarcVerdict, spamVerdict, virusVerdict
  (the SNS notification, anymail's `esp_event`);
- SendGrid Inbound Parse: its `SPF` and `dkim` form fields.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from anymail.inbound import AnymailInboundMessage

# Results that mean the check failed (RFC 8601 2.7, RFC 7208 2.6). "none", "neutral" and
# "temperror" do not: a sender's domain without a record, or a DNS hiccup, is no forgery.
FAILED = frozenset({"fail", "softfail", "permerror", "policy", "spam", "virus"})
# A SpamAssassin score at or above this is spam where the provider gives only a score:
# SpamAssassin's own default `required_score`.
SPAM_SCORE_MAX = 5.0
CHECKS = ("spf", "dkim", "dmarc")
_RESULT = re.compile(r"^\s*([a-z][a-z0-9-]*)\s*=\s*([a-z]+)")
_COMMENT = re.compile(r"\([^()]*\)")
_SES_VERDICTS = {
    "spfVerdict": "spf",
    "dkimVerdict": "dkim",
    "dmarcVerdict": "dmarc",
    "spamVerdict": "spam",
    "virusVerdict": "virus",
}


@dataclass(frozen=True)
class Verdict:
    source: str  # where it was read: a header or field name
    check: str  # spf, dkim, dmarc, spam, virus
    result: str  # lower-case: pass, fail, softfail, ..., spam

    @property
    def failed(self) -> bool:
        return self.result in FAILED

    def as_dict(self) -> dict[str, str]:
        return {"source": self.source, "check": self.check, "result": self.result}


def verdicts_read(*, message: AnymailInboundMessage, esp_event: Any = None) -> tuple[Verdict, ...]:
    """Every verdict the provider (and the servers the email passed) gave, in a stable order."""
    found = [
        *authentication_results(message.get_all("Authentication-Results") or []),
        *_received_spf(message.get_all("Received-SPF") or []),
        *_mailgun(message),
        *_spam(message),
        *_amazon_ses(esp_event),
        *_sendgrid(esp_event),
    ]
    return tuple(dict.fromkeys(found))


def authentication_results(values: Iterable[object]) -> list[Verdict]:
    """`authserv-id; spf=fail (comment) smtp.mailfrom=...; dkim=pass ...` -> the spf, dkim and
    dmarc results (RFC 8601); other methods are not read."""
    found = []
    for value in values:
        for part in _COMMENT.sub("", str(value)).lower().split(";"):
            match = _RESULT.match(part)
            if match and match.group(1) in CHECKS:
                found.append(Verdict("Authentication-Results", match.group(1), match.group(2)))
    return found


def _received_spf(values: Iterable[object]) -> list[Verdict]:
    """`Received-SPF: Fail (reason) client-ip=...`: the first word is the result (RFC 7208 9.1)."""
    words = (str(value).strip().split(None, 1) for value in values)
    return [Verdict("Received-SPF", "spf", first[0].lower()) for first in words if first]


def _mailgun(message: AnymailInboundMessage) -> list[Verdict]:
    pairs = (("X-Mailgun-Spf", "spf"), ("X-Mailgun-Dkim-Check-Result", "dkim"))
    return [
        Verdict(header, check, str(message[header]).strip().lower())
        for header, check in pairs
        if message[header] is not None
    ]


def _spam(message: AnymailInboundMessage) -> list[Verdict]:
    """anymail's spam flag; without one, the provider's SpamAssassin score."""
    if message.spam_detected is not None:
        return [Verdict("spam_detected", "spam", "spam" if message.spam_detected else "pass")]
    if message.spam_score is not None:
        spam = float(message.spam_score) >= SPAM_SCORE_MAX
        return [Verdict("spam_score", "spam", "spam" if spam else "pass")]
    return []


def _amazon_ses(esp_event: Any) -> list[Verdict]:
    """The SES receipt's verdicts: {"status": "PASS" | "FAIL" | "GRAY" | "PROCESSING_FAILED"}."""
    receipt = esp_event.get("receipt") if isinstance(esp_event, Mapping) else None
    if not isinstance(receipt, Mapping):
        return []
    found = []
    for field, check in _SES_VERDICTS.items():
        status = receipt.get(field, {}).get("status") if isinstance(receipt.get(field), Mapping) else None
        if isinstance(status, str):
            found.append(Verdict(f"receipt.{field}", check, status.lower()))
    return found


def _sendgrid(esp_event: Any) -> list[Verdict]:
    """SendGrid Inbound Parse's `SPF` field ("pass") and `dkim` field ("{@example.com : pass}")."""
    fields = getattr(esp_event, "POST", None)
    if fields is None:
        return []
    found = []
    if spf := str(fields.get("SPF", "")).strip().lower():
        found.append(Verdict("SPF", "spf", spf.split()[0]))
    for result in re.findall(r":\s*([a-z]+)", str(fields.get("dkim", "")).lower()):
        found.append(Verdict("dkim", "dkim", result))
    return found
