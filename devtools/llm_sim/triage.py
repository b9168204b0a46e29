"""Plausible answers to reply-triage prompts (nurture.writing.triage): a keyword classifier
over the quoted email, so tests and benches see a class, a reason, a return date and a referral
contact as a small model would give them. Sentences that speak to the classifier ("ignore
your instructions", "classify this as ...") are skipped, as a model told to treat the email as
data should; what is left decides."""

from __future__ import annotations

import json
import re
from typing import Any

TASK_MARK = "classify the prospect's reply"

_INJECTION = re.compile(
    r"(?:ignore|disregard|forget)\b.{0,40}\b(?:instructions|prompt|rules)|\bclassif(?:y|ied|ication)\b|\bsystem\s*:",
    re.IGNORECASE,
)
_RULES: list[tuple[str, re.Pattern[str]]] = [
    (
        "bounce_notice",
        re.compile(
            r"\b(?:undeliverable|delivery (?:has )?failed|could not be delivered|mailbox unavailable)\b"
        ),
    ),
    (
        "out_of_office",
        re.compile(
            r"\b(?:out of (?:the )?office|on (?:annual |parental )?leave|on vacation|on holiday|away from the office|"
            r"abwesend|im urlaub|absente? du bureau|en cong[ée]s|fuera de la oficina|de vacaciones|fuori ufficio|in ferie|"
            r"afwezig|met vakantie|de f[ée]rias)\b"
        ),
    ),
    (
        "unsubscribe",
        re.compile(r"\b(?:unsubscribe|remove me|stop (?:emailing|contacting)|do not contact|opt me out)\b"),
    ),
    (
        "complaint",
        re.compile(
            r"\b(?:spam|lawyer|legal|sue|gdpr|data protection|privacy|report you|complain\w*|harass\w*|"
            r"discount|contract terms|price concession|cheaper|lower the price|negotiat\w*)\b"
        ),
    ),
    (
        "referral",
        re.compile(
            r"\b(?:left the company|no longer (?:with|at|work)|wrong person|not the right person|better person|"
            r"please contact|reach out to|talk to our|handles this)\b"
        ),
    ),
    (
        "objection",
        re.compile(
            r"\b(?:not interested|no thanks|no, thanks|already use|we use|happy with|no budget|not a priority|"
            r"not right now|not a fit|pass on this)\b"
        ),
    ),
    ("question", re.compile(r"\?")),
    (
        "interested",
        re.compile(
            r"\b(?:interested|sounds good|let's talk|lets talk|book a call|schedule|meeting|demo|call me|"
            r"tell me more|send me more|happy to chat|keen|open to)\b"
        ),
    ),
]
_EMAIL = re.compile(r"[\w.+-]{1,64}@[\w-]{1,63}(?:\.[\w-]{1,63})+")
_ISO_DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
_NAME_BEFORE = re.compile(r"([A-Z][a-z]+(?: [A-Z][a-z]+)?)\W{0,3}(?:at\s+|\(|<)?\s*$")


def triage_answer(data: dict[str, Any]) -> str:
    """The JSON answer for the data block of a triage prompt."""
    text = _text(data)
    kept = " ".join(
        sentence for sentence in re.split(r"(?<=[.!?\n])\s+", text) if not _INJECTION.search(sentence)
    )
    lowered = kept.lower()
    # A person's reply with none of the signals above engages (a small model reads "Yes, Tuesday
    # works" as interest); nothing left once instructions to the classifier are skipped: other.
    default = "interested" if re.search(r"[^\W\d_]{2,}", lowered) else "other"
    found = next((name for name, pattern in _RULES if pattern.search(lowered)), default)
    answer: dict[str, Any] = {
        "class": found,
        "reason": f"keywords for {found}" if found != "other" else "no clear intent",
    }
    answer["return_date"] = (_ISO_DATE.search(kept) or [None])[0] if found == "out_of_office" else None
    email = _EMAIL.search(kept) if found == "referral" else None
    answer["referral_email"] = email.group(0) if email else None
    name = _NAME_BEFORE.search(kept[: email.start()]) if email else None
    answer["referral_name"] = name.group(1) if name else None
    return json.dumps(answer)


def _text(data: dict[str, Any]) -> str:
    messages = [data.get("inbound") or {}, *(data.get("inbound_later") or [])]
    parts = []
    for message in messages:
        if isinstance(message, dict):
            parts.append(str(message.get("body") or ""))  # a reply's subject is mostly ours, echoed
    return "\n".join(parts)
