"""Tasks for the claimed rows, published once the claim commits: the cycle's one way to the broker.

Task names live here, for the LLM work and the sends alike.
"""

from __future__ import annotations

from typing import Any

from celery.utils.nodenames import anon_nodename
from django.db import transaction
from kombu.utils.uuid import uuid

from config import tracing
from config.celery import app

GENERATE_TASK = "nurture.generate"
# Replies take their own lane (config.queues: queue `reply`, its own workers): a reply never
# waits in the broker behind intros and nudges dispatched before it. docs/dispatch.md says why
# a lane and not broker priorities or a worker reading both queues.
GENERATE_REPLY_TASK = "nurture.generate_reply"
SEND_TASK = "nurture.send"


def tasks_enqueue_on_commit(task_name: str, ids: list[int]) -> None:
    """Enqueue one task per id after the claim commits (a worker never finds a row not yet
    DISPATCHED). Ids only in the message: no lead data in the broker or Flower. One producer
    (one broker connection) publishes the whole batch, on Redis pipelined; batches publish in
    the order enqueued (replies first).

    Traced (config.tracing), each outreach starts a trace of its own, linked to the cycle's:
    its generation, LLM calls and send follow in it."""
    if ids:
        transaction.on_commit(lambda: _publish(task_name, ids))


def _publish(task_name: str, ids: list[int]) -> None:
    """Celery's send_task for each id, less what send_task works out again for every message
    though it is the batch's: the task's execution options (its time limits, where the task is
    registered, as in the dispatcher), its route (the task's queue), the configuration read,
    the task this runs in (the messages' parent) and the publishing node (`origin`). Each
    message is still made by create_task_message and sent by send_task_message: its publish
    signals (which carry the trace context), retry policy and kombu's publish, as send_task
    sends it. Under cProfile a message took 0.30 ms through send_task, 0.15 ms so (2026-12-05,
    docs/dispatch.md)."""
    amqp = app.amqp
    task: Any = app.tasks.get(task_name)  # an instance, as send_task passes it (the stubs say a class)
    # What send_task merges from a registered task, and takes apart as it does.
    options = {k: v for k, v in (task._get_exec_options() if task else {}).items() if v is not None}
    made = {
        "time_limit": options.pop("time_limit", None),
        "soft_time_limit": options.pop("soft_time_limit", None),
        "expires": options.pop("expires", None),
        "ignore_result": options.pop("ignore_result", None),
        "reply_to": app.thread_oid,
        "create_sent_event": app.conf.task_send_sent_event,
        "kwargsrepr": "{}",
        # The publishing node, as Celery names it for each message (the host's name asked
        # every time: 3.5 ms of a 500-message batch, py-spy, 2026-12-06).
        "origin": anon_nodename(),
    }
    route = amqp.router.route(options, task_name, (), None, task)
    parent = app.current_worker_task
    if parent:
        made |= {"root_id": parent.request.root_id or parent.request.id, "parent_id": parent.request.id}
    # kombu's publish batch: on Redis the batch's LPUSHes go in pipelined round trips (one per
    # 1,000 commands) instead of one each; on RabbitMQ it publishes each at once, as before.
    # The first message declares its queue (once per connection: kombu remembers it); the rest
    # of the batch goes to the same queue on the same connection and skips kombu's check, which
    # copies and binds the queue again for every message (a sixth of a publish's CPU).
    declare: dict[str, Any] = {}
    with app.producer_or_acquire() as producer, producer.batch():
        for outreach_id in ids:
            with tracing.trace_start(
                "outreach.dispatch", {"outreach.id": outreach_id, "celery.task_name": task_name}
            ):
                # What Celery's saferepr would write for Flower, written directly (saferepr
                # was an eighth of a publish).
                message = amqp.create_task_message(
                    uuid(), task_name, [outreach_id], {}, argsrepr=f"[{outreach_id}]", **made
                )
                amqp.send_task_message(producer, task_name, message, **route, **declare)
            declare = {"declare": []}
