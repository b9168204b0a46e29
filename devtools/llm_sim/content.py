"""Plausible email text, drawn deterministically from the prompt (lead facts, markers)."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Callable
from typing import Any

from devtools.llm_sim.config import MARKER_POLICY_FAIL
from devtools.llm_sim.protocol import ChatRequest
from devtools.llm_sim.triage import TASK_MARK, triage_answer

# Everything below writes text our policy check accepts: no links, no addresses, no placeholders.
# Lead data is untrusted, so only name-like values are echoed (letters, spaces, ' - &).

_NAME = re.compile(r"^[^\W\d_](?:[^\W\d_]|[ '&-]){0,39}$")
_SUBJECTS = {
    "intro": ["A quick idea for {company}", "Hello from {sender}", "Less follow-up work for {company}"],
    "nudge": ["Following up", "One more thought for {company}", "Circling back"],
    "reply": ["Re: your message", "Re: our conversation", "Re: next steps"],
}
_OPENERS = {
    "intro": [
        "I hope your week is off to a good start. Teams like yours often tell us that follow-up work "
        "eats into the time they would rather spend with customers.",
        "I came across {company} recently and thought a short note might be useful. Many teams we work "
        "with wanted a calmer way to keep every conversation moving.",
        "I will keep this brief. We help sales teams stay in touch with every prospect without adding "
        "hours to their week, and {company} seemed like a good fit.",
    ],
    "nudge": [
        "I wanted to follow up on my earlier note in case it got buried in a busy week.",
        "Just bringing my last message back to the top of your inbox, with one new thought.",
        "I know things get hectic, so here is a short follow-up to my previous email.",
    ],
    "reply": [
        "Thank you for getting back to me, I appreciate you taking the time.",
        "Thanks for your reply, that is really helpful context.",
        "Great to hear from you, and thank you for the thoughtful answer.",
    ],
}
_VALUES = [
    "Our customers usually see their response times drop within the first month, and their people "
    "get back a few hours every week.",
    "The setup is light: most teams are running within a day, and nothing changes about the tools "
    "they already use.",
    "What people like most is that nothing slips through the cracks, even in the busiest weeks.",
    "A team of a similar size to yours cut the time spent on routine follow-ups roughly in half.",
]
_ASKS = [
    "Would a fifteen-minute call next week be useful to see if this fits?",
    "If it sounds relevant, I would be glad to walk you through how a similar team approached it. "
    "Would Tuesday or Thursday suit you?",
    "Is this worth a short conversation, or would it be better to check back next quarter?",
]
_SIGNOFFS = ["Best regards", "Kind regards", "Thanks", "All the best"]
Picker = Callable[[list[str]], str]


def completion_text(request: ChatRequest) -> str:
    """A plausible answer, varied by a hash of the prompt (same prompt, same answer)."""
    prompt = request.last_user
    facts = _facts(prompt)
    pick = _picker(json.dumps(request.texts))
    task = prompt.split("<<<DATA", 1)[0].lower()  # the instructions, not the (untrusted) data
    if TASK_MARK in task:  # a reply's triage call (nurture.writing.triage)
        return triage_answer(data_block(prompt))
    # The message step asks for a "Subject:" line; the context step for facts; the plan step says plan.
    if "subject:" not in task and re.search(r"\b(context|facts|notes)\b", task):
        role = f" as {facts['title']}" if facts["title"] else ""
        return (
            f"{facts['first']} works at {facts['company']}{role}. There is no detail in the data that "
            "calls for a specific claim, so the email should stay short and about their team's "
            "follow-up workload."
        )
    if "subject:" not in task and re.search(r"\bplan\b", task):
        ask = pick(["a fifteen-minute call", "a short reply", "a quick demo"])
        return (
            f"Write a short, friendly {facts['kind']} email to {facts['first']} at {facts['company']} with "
            f"one call to action, {ask}. Keep the tone warm, concise and free of pressure."
        )
    return _email(facts=facts, pick=pick, policy_fail=MARKER_POLICY_FAIL in prompt)


def _email(*, facts: dict[str, str], pick: Picker, policy_fail: bool) -> str:
    def fill(template: str) -> str:  # safe: _safe() values never contain braces
        return template.format(company=facts["company"], sender=facts["sender"])

    opener, value, ask = fill(pick(_OPENERS[facts["kind"]])), pick(_VALUES), pick(_ASKS)
    greeting = "Hi {{first_name}}," if policy_fail else f"Hi {facts['first']},"
    subject = fill(pick(_SUBJECTS[facts["kind"]]))
    signed = f"{pick(_SIGNOFFS)},\n{facts['sender']}"
    return f"Subject: {subject}\n\n{greeting}\n\n{opener} {value}\n\n{ask}\n\n{signed}"


def _picker(seed_text: str) -> Picker:
    digest = hashlib.sha256(seed_text.encode()).digest()
    counter = iter(range(len(digest)))

    def pick(options: list[str]) -> str:
        return options[digest[next(counter)] % len(options)]

    return pick


def _facts(prompt: str) -> dict[str, str]:
    data = data_block(prompt)
    prospect, sender = data.get("prospect") or {}, data.get("sender") or {}
    kind = data.get("email_kind") if data.get("email_kind") in _OPENERS else None
    lowered = prompt.split("<<<DATA", 1)[0].lower()  # the task, not the (untrusted) data
    if kind is None:
        kind = "reply" if "answer" in lowered else "nudge" if "follow-up" in lowered else "intro"
    return {
        "kind": kind,
        "first": _safe(prospect, "first_name", "there"),
        "company": _safe(prospect, "company", "your team"),
        "title": _safe(prospect, "title", ""),
        "sender": _safe(sender, "name", "Alex"),
    }


def data_block(prompt: str) -> dict[str, Any]:
    """The JSON between '<<<DATA ...' and 'DATA>>>' that nurture.writing.prompts writes; {} if absent."""
    start, end = prompt.find("<<<DATA"), prompt.rfind("DATA>>>")
    if start < 0 or end < start:
        return {}
    try:
        data = json.loads(prompt[prompt.find("\n", start) + 1 : end])
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _safe(data: Any, key: str, default: str) -> str:
    value = " ".join(str(data.get(key) or "").split()) if isinstance(data, dict) else ""
    value = re.sub(r"\s*\([\w ]*\)$", "", value)  # "Atlas (agent)" -> "Atlas"
    return value if _NAME.match(value) else default
