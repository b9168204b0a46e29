"""Outreach.idempotency_key: the one place its formats are written.

One key per piece of work, so running the same input twice (a CSV loaded again, a webhook
retried, a seed re-run) finds the row already there instead of queueing a second email:

- `intro:<lead id>`: the first email to a lead;
- `nudge:<lead id>:<step>`: its follow-up number `step` (1, 2, ...);
- `reply:<message_id>`: the answer to one inbound email, keyed by its Message-ID.

Keys name the lead by id, never by email address: an address is unique only within an
organization, and two organizations may both have `pat@acme.example`. Pure: no Django here,
so anything (benches, the demo seed, raw SQL builders) may import it.
"""

from __future__ import annotations

import hashlib
from typing import Final

KEY_MAX_CHARS: Final = 200  # Outreach.idempotency_key's max_length (a test holds them equal)
INTRO_PREFIX: Final = "intro:"
NUDGE_PREFIX: Final = "nudge:"
REPLY_PREFIX: Final = "reply:"
# nurture.intake.assignment_sql builds the intro and nudge keys inside PostgreSQL, as
# INTRO_PREFIX || lead_id and NUDGE_PREFIX || lead_id || NUDGE_STEP_SEPARATOR || step.
NUDGE_STEP_SEPARATOR: Final = ":"


def intro_key(*, lead_id: int) -> str:
    return f"{INTRO_PREFIX}{lead_id}"


def nudge_key(*, lead_id: int, step: int) -> str:
    return f"{NUDGE_PREFIX}{lead_id}{NUDGE_STEP_SEPARATOR}{step}"


def reply_key(*, message_id: str) -> str:
    """`reply:<message_id>`; a Message-ID too long for the column is keyed by its SHA-256 instead.

    Hashing keeps the key unique per Message-ID (a truncated prefix would make two long ids
    that share their first 194 characters one reply).
    """
    key = REPLY_PREFIX + message_id
    if len(key) <= KEY_MAX_CHARS:
        return key
    return f"{REPLY_PREFIX}sha256:{hashlib.sha256(message_id.encode()).hexdigest()}"
