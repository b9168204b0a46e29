"""The queues' declarations (config.queues.task_queues): what RabbitMQ is told to create."""

from __future__ import annotations

from config.queues import QUORUM_EXCHANGE, Queue, task_queues


def test_classic_queues_keep_their_direct_exchanges() -> None:
    queues = task_queues(quorum=False)
    assert [q.name for q in queues] == [q.value for q in Queue]
    assert {q.exchange.type for q in queues} == {"direct"}
    assert {str(q.queue_arguments) for q in queues} == {"None"}


def test_quorum_queues_sit_on_a_topic_exchange_for_native_delayed_delivery() -> None:
    # Celery's native delayed delivery binds each queue's exchange to its delay exchanges and
    # skips direct ones: a countdown task would then wait inside a worker (its only slot, for
    # the orchestrator). tests/e2e/test_delayed_tasks.py shows the behaviour on RabbitMQ.
    queues = task_queues(quorum=True)
    assert [q.name for q in queues] == [q.value for q in Queue]
    assert {q.exchange.name for q in queues} == {QUORUM_EXCHANGE.name}
    assert QUORUM_EXCHANGE.type == "topic"
    assert all(q.routing_key == q.name for q in queues)
    assert all(q.queue_arguments == {"x-queue-type": "quorum"} for q in queues)
