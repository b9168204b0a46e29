"""Queue names: the one home of every Celery queue the product uses (docs/architecture.md, "Queues")."""

from __future__ import annotations

from enum import StrEnum


class Queue(StrEnum):
    ORCHESTRATOR = "orchestrator"  # the dispatch cycle and housekeeping: short, one at a time
    GENERATION = "generation"  # the three LLM calls for one outreach: slow, budget-bound
    # The same work for replies, on workers of their own: a reply never waits behind intros and
    # nudges already in the broker (docs/dispatch.md: why a lane, not priorities).
    REPLY = "reply"
    SEND = "send"  # SMTP delivery, including approved drafts (no LLM)
    DEAD_LETTER = "dead_letter"  # recording terminal failures and alerting, off the hot queues


# Task name prefix -> queue. Task names are stable strings (`<app>.<action>`), so a route
# never depends on where the function lives.
TASK_ROUTES: dict[str, dict[str, str]] = {
    "orchestrator.dispatch": {"queue": Queue.ORCHESTRATOR},
    # A webhook that hangs must not hold up dispatch cycles (the orchestrator queue runs one task).
    "orchestrator.alerts_check": {"queue": Queue.DEAD_LETTER},
    "orchestrator.*": {"queue": Queue.ORCHESTRATOR},
    "nurture.generate": {"queue": Queue.GENERATION},
    "nurture.generate_reply": {"queue": Queue.REPLY},
    "nurture.send": {"queue": Queue.SEND},
    "nurture.*": {"queue": Queue.ORCHESTRATOR},
    "dead_letter.*": {"queue": Queue.DEAD_LETTER},
}
