"""Does an inbound reply ask us to stop writing? ("STOP", "unsubscribe", "remove me from your list")

A reply that does is an opt-out, the same as the unsubscribe link (nurture.sequence.lead_opt_out):
it is recorded, never answered, and the lead is never emailed again. Answering "please remove
me" with a model-written email is the one reply that must not happen, so this is decided by
plain rules before any LLM sees the text, and read by a person only if they look.

What is read: the reply's own text, not the thread it quotes. Lines from the first quoted one
(">"), the "On <date>, <name> wrote:" line a mail client puts above the quote, an Outlook
"-----Original Message-----" or "From: / Sent:" header block, or a "-- " signature separator
(our compliance footer, with its own opt-out sentence, sits below one) are cut off. The subject
counts too, but a reply's subject ("Re: ...") is usually our own subject echoed, which the model
wrote ("Stop chasing invoices"): there only a bare request ("Re: STOP", "Unsubscribe") counts.

How: the text is lower-cased and cut into clauses (at . , ; : ! ? and line ends), so "not
interested, stop emailing" is judged clause by clause. A clause asks to stop when it is a bare
request ("stop", "please stop", "unsubscribe", "remove me", "opt out") or names one ("do not
contact me", "stop emailing", "take me off your list", "no more emails"). A request that a
negation comes just before ("don't stop sending me these", "I don't want to unsubscribe") is no
request. Deliberately not an opt-out on its own: "not interested" (a no, which ends the
sequence like any reply; the owner may still answer it), "stop by our booth", "what stops you",
"remove me from the CC". The table of what counts and what does not is in
tests/nurture/intake/test_opt_out.py.
"""

from __future__ import annotations

import re

from nurture.intake.quoting import quote_starts

__all__ = ["own_text", "reply_asks_to_stop"]

# Where the reply's own text ends: the quoted thread (nurture.intake.quoting) or a signature below it.
_SIGNATURE = re.compile(r"^\s*--\s*$")  # "-- ", the signature separator (RFC 3676 4.3)

_REPLY_PREFIX = re.compile(r"^\s*(?:(?:re|fw|fwd|aw|wg|sv|tr|rv)\s*(?:\[\d+\])?\s*:\s*)+", re.IGNORECASE)
_CLAUSE_BREAK = re.compile(r"[.,;:!?\n()\"]+")

# A whole clause that is a request in itself: "STOP", "Please stop.", "Unsubscribe me", "Opt-out".
_BARE = re.compile(
    r"""(?:please\s+)?
    (?: (?:stop\s*)+ (?:all|it|this|now|please|them)?
      | unsub(?:scribe)? (?:\s+(?:me|us|please|now))*
      | remove (?:\s+(?:me|us|please))*
      | opt[\s-]?out (?:\s+(?:me|us|please|now))*
      | take\s+me\s+off
      | leave\s+me\s+alone
    )
    (?:\s+(?:please|thanks|thank\s+you|now))?""",
    re.VERBOSE,
)

_OBJECT = r"(?:me|us|my\s+(?:e-?mail(?:\s+address)?|address|name|details|contact\s+details|info|data))"
_LIST = r"(?:list|lists|mailing|mailings|database|e-?mails|emails|contacts|sequence|campaign|system|records|distribution|newsletter)"
_EMAIL_VERBS = r"(?:contact|e-?mail|mail|message|spam|bother|reach\s+out\s+to|write\s+to|text)"
_AGAIN = r"(?:again|anymore|any\s+more|ever(?:\s+again)?|further|please|thanks|thank\s+you|at\s+all|in\s+future|in\s+the\s+future)"
# "stop emailing", "stop sending me these", "stop contacting my team": the verb, then the end of
# the clause or whom/what (not "stop sending invoices by hand", "stop writing code").
_EMAILING = (
    r"(?:e-?mailing|mailing|messaging|contacting|spamming|bothering|reaching\s+out(?:\s+to)?|writing|sending|texting)"
    r"(?:\s+(?:to\s+)?(?:me|us|(?:my|our)\s+\w+))?"
    rf"(?=\s*$|\s+(?:these|this|them|e-?mails|messages|mail|stuff|anything|things|{_AGAIN})\b)"
)

# A request somewhere in a clause. Each is checked for a negation just before it.
_REQUESTS = [
    re.compile(r"\bunsub(?:scribe|scribed|scribing)?\b"),
    re.compile(r"\bopt(?:ed|ing)?[\s-]?out\b"),
    # "remove me", "take me off": alone, or off something list-like (not "remove me from the CC").
    re.compile(
        rf"\b(?:remove|delete|drop|erase|take|get)\s+{_OBJECT}"
        rf"(?:\s+(?:from|off)(?:\s+(?:of\s+)?(?:your|the|this|all|any|our|these)?\s*(?:\w+\s+){{0,2}}{_LIST}\b.*)?)?\s*$"
    ),
    re.compile(rf"\b(?:take|get)\s+{_OBJECT}\s+off\s+(?:your|the|this|all|any)\s+(?:\w+\s+){{0,2}}{_LIST}\b"),
    # "do not contact me", "don't email me again", "never e-mail us", "no longer contact me".
    re.compile(
        rf"\b(?:do\s+not|don't|dont|never|no\s+longer|please\s+don't)\s+(?:ever\s+)?{_EMAIL_VERBS}"
        rf"(?:\s+(?:me|us))?(?:\s+{_AGAIN})*\s*$"
    ),
    # "stop emailing", "stop sending me these", "quit contacting us".
    re.compile(rf"\b(?:stop|quit|cease)\s+{_EMAILING}"),
    # "no more emails", "I don't want any more messages", "leave me alone".
    re.compile(r"\b(?:no|not\s+any)\s+(?:more|further)\s+(?:e-?mails|messages|mail|contact)\b"),
    re.compile(
        r"\b(?:do\s+not|don't|dont)\s+(?:want|wish)\s+(?:to\s+(?:receive|get)\s+)?(?:any\s+)?(?:more\s+|further\s+)?"
        r"(?:e-?mails|messages|mail|these)\b"
    ),
    re.compile(r"\b(?:do\s+not|don't|dont)\s+(?:want|wish)\s+to\s+be\s+(?:contacted|e-?mailed|messaged)\b"),
    re.compile(r"\bleave\s+(?:me|us)\s+alone\b"),
    # The same request in a few other languages our leads write in.
    re.compile(
        r"\b(?:abmelden|abbestellen|d[ée]sabonner|d[ée]sinscri(?:re|vez)|darme\s+de\s+baja|dar\s+de\s+baja)\b"
    ),
]
# A negation just before a request undoes it: "don't stop sending", "I'd never unsubscribe".
_NEGATED = re.compile(
    r"\b(?:don't|dont|do\s+not|does\s+not|doesn't|never|not(?!\s+interested)|no\s+need\s+to|won't|wont|wouldn't|"
    r"shouldn't|didn't|why\s+would|why\s+should|without)\b(?:\s+\S+){0,3}\s*$"
)


# A request to stop is written at the top of a reply; reading more only costs time on a 30 MB
# post (nurture.intake.inbound_email reads bodies that large).
READ_CHARS = 10_000
# Enough for "I don't really want to" before the request.
_NEGATION_REACH = 60


def reply_asks_to_stop(*, subject: str, body: str) -> bool:
    """True when the reply asks us to stop writing to the sender (see the module docstring)."""
    if any(_asks(clause) for clause in _clauses(own_text(body[:READ_CHARS]))):
        return True
    subject = subject[:1000]
    topic = _REPLY_PREFIX.sub("", subject)
    if topic != subject:  # a reply's subject: ours echoed, only a bare request counts
        return any(_BARE.fullmatch(clause) for clause in _clauses(topic))
    return any(_asks(clause) for clause in _clauses(subject))


def own_text(body: str) -> str:
    """The reply without the thread it quotes or the signature below it."""
    lines = body.splitlines()
    for index, line in enumerate(lines):
        if quote_starts(lines, index) or _SIGNATURE.match(line):
            return "\n".join(lines[:index])
    return body


def _clauses(text: str) -> list[str]:
    normal = text.lower().replace("\u2019", "'").replace("\u2018", "'")
    return [" ".join(part.split()) for part in _CLAUSE_BREAK.split(normal) if part.strip()]


def _asks(clause: str) -> bool:
    if _BARE.fullmatch(clause):
        return True
    for request in _REQUESTS:
        for found in request.finditer(clause):
            if not _NEGATED.search(clause[max(0, found.start() - _NEGATION_REACH) : found.start()]):
                return True
    return False
