"""Queue names: the one home of every Celery queue the product uses (docs/architecture.md, "Queues")."""

from __future__ import annotations

from enum import StrEnum

from kombu import Exchange
from kombu import Queue as KombuQueue


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


# Quorum queues sit on this topic exchange, each bound by its own name. RabbitMQ's quorum queues
# refuse the per-channel prefetch a Celery worker raises to hold a task with a countdown or an
# ETA, so such a task would occupy a worker's only slot until its time (the orchestrator's one
# process: dispatch cycles expire behind it). Celery's native delayed delivery parks the message
# in the broker instead (its celery_delayed_* queues) and hands it back through the queues'
# exchange when due, and that works only with a topic exchange, not the default direct one. The
# exchange has its own name so a quorum deployment made before it keeps its queues: they are
# bound to both, the old direct exchange simply goes unused.
QUORUM_EXCHANGE = Exchange("outreach", type="topic")


def task_queues(*, quorum: bool) -> list[KombuQueue]:
    """CELERY_TASK_QUEUES: every queue, classic on the default direct exchanges (Redis, or
    RabbitMQ's classic queues), or quorum on QUORUM_EXCHANGE (RabbitMQ, CELERY_QUEUE_TYPE=quorum)."""
    if not quorum:
        return [KombuQueue(q.value, routing_key=q.value) for q in Queue]
    return [
        KombuQueue(q.value, QUORUM_EXCHANGE, routing_key=q.value, queue_arguments={"x-queue-type": "quorum"})
        for q in Queue
    ]
