"""The Celery queues' figures from the real brokers (Redis and RabbitMQ): ready messages, and
consumers as the broker counts them (RabbitMQ) or as the workers say they run (Redis)."""

from __future__ import annotations

import time
import uuid
from collections.abc import Iterator
from typing import Any

import pytest
import redis
from celery import Celery
from django.conf import settings
from kombu import Connection, Exchange, Producer
from kombu import Queue as KombuQueue

from config.worker_presence import PRESENCE_STALE_S, presence_forget, presence_record
from orchestrator.metrics.broker import BrokerNow, QueueNow, broker_queues_now

AMQP_URL = "amqp://guest:guest@127.0.0.1:5672//"


@pytest.fixture(params=["redis", "amqp"])
def broker(request: pytest.FixtureRequest, redis_client: redis.Redis) -> Iterator[tuple[Celery, str]]:
    """A Celery app on that broker and a queue of this test's own (RabbitMQ is shared: deleted after)."""
    url = settings.CELERY_BROKER_URL if request.param == "redis" else AMQP_URL
    if request.param == "redis":
        assert url.startswith("redis://")
    name = f"test-unconsumed-{uuid.uuid4().hex[:8]}"
    app = Celery(broker=url)
    yield app, name
    with Connection(url) as conn:
        KombuQueue(name, Exchange(name), routing_key=name)(conn.channel()).delete()


def _publish(url: str, name: str, count: int) -> None:
    with Connection(url) as conn:
        queue = KombuQueue(name, Exchange(name), routing_key=name)
        producer = Producer(conn.channel())
        for n in range(count):
            producer.publish({"n": n}, exchange=queue.exchange, routing_key=name, declare=[queue])


def _asked_until(app: Celery, name: str, presence: redis.Redis, *, ready: int) -> BrokerNow:
    """RabbitMQ counts a message published on another connection a moment later: poll."""
    deadline = time.monotonic() + 5
    while True:
        now = broker_queues_now(app=app, queues=[name], presence=presence)
        if (now.queues and now.queues[0].ready == ready) or time.monotonic() > deadline:
            return now
        time.sleep(0.05)


def test_ready_messages_without_a_consumer(broker: tuple[Celery, str], redis_client: redis.Redis) -> None:
    app, name = broker
    # given three messages on a queue nobody consumes
    _publish(app.conf.broker_url, name, 3)
    # when the broker is asked
    now = _asked_until(app, name, redis_client, ready=3)
    # then
    assert now.up
    assert now.queues == [QueueNow(queue=name, ready=3, consumers=0, workers=0)]


def test_a_queue_never_declared_has_nothing_and_nobody(
    broker: tuple[Celery, str], redis_client: redis.Redis
) -> None:
    app, name = broker
    now = broker_queues_now(app=app, queues=[name], presence=redis_client)
    assert now.queues == [QueueNow(queue=name, ready=0, consumers=0, workers=0)]


def test_rabbitmq_counts_a_consumer_holding_one_message(redis_client: redis.Redis) -> None:
    # given a consumer with prefetch 1 on a queue of three messages
    name = f"test-consumed-{uuid.uuid4().hex[:8]}"
    _publish(AMQP_URL, name, 3)
    with Connection(AMQP_URL) as conn:
        channel: Any = conn.channel()
        channel.basic_qos(0, 1, False)
        channel.basic_consume(queue=name, callback=lambda _message: None)
        now = _asked_until(Celery(broker=AMQP_URL), name, redis_client, ready=2)  # one handed out
        # then two ready and one consumer
        assert now.queues == [QueueNow(queue=name, ready=2, consumers=1, workers=0)]
        channel.queue_delete(name)


def test_on_redis_the_consumers_are_the_workers_heard_from(redis_client: redis.Redis) -> None:
    # given a reply worker heard from now, another last heard from before the stale limit
    app = Celery(broker=settings.CELERY_BROKER_URL)
    t = time.time()
    presence_record(client=redis_client, node="reply@a", queues=["reply"], now=t)
    presence_record(client=redis_client, node="reply@b", queues=["reply"], now=t - PRESENCE_STALE_S - 1)
    # when asked; then one consumer, one worker
    assert broker_queues_now(app=app, queues=["reply"], presence=redis_client).queues == [
        QueueNow(queue="reply", ready=0, consumers=1, workers=1)
    ]
    # and once it stopped (cleanly), none
    presence_forget(client=redis_client, node="reply@a", queues=["reply"])
    assert broker_queues_now(app=app, queues=["reply"], presence=redis_client).queues[0].workers == 0


def test_a_broker_that_does_not_answer_is_down(redis_client: redis.Redis) -> None:
    app = Celery(broker="amqp://guest:guest@127.0.0.1:1//")
    app.conf.broker_connection_timeout = 1
    now = broker_queues_now(app=app, queues=["reply"], presence=redis_client, timeout_s=1)
    assert not now.up
    assert now.queues == []
