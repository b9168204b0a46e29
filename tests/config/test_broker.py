"""The Redis broker's transport (config.broker) keeps one redis-py client per connection pool,
and still publishes, delivers and acknowledges through a real Redis."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from django.conf import settings
from kombu import Connection, Exchange, Producer, Queue

from config.broker import Channel


@pytest.fixture
def connection() -> Iterator[Connection]:
    if not settings.CELERY_BROKER_URL.startswith("redis"):
        pytest.skip("the Redis broker's transport: this run's broker is not Redis")
    with Connection(settings.CELERY_BROKER_URL, transport=settings.CELERY_BROKER_TRANSPORT) as conn:
        yield conn


def test_a_channel_builds_one_client_per_pool_and_a_new_one_after_its_pool_is_replaced(
    connection: Connection,
) -> None:
    assert isinstance(connection.default_channel, Channel)
    channel: Any = connection.default_channel
    first = channel._create_client()
    assert channel._create_client() is first
    channel._disconnect_pools()  # what kombu does after a lost connection
    again = channel._create_client()
    assert again is not first
    assert again.connection_pool is channel.pool


def test_messages_are_published_delivered_and_acknowledged_through_the_kept_client(
    connection: Connection,
) -> None:
    exchange = Exchange("test-broker-transport", type="direct")
    queue = Queue("test-broker-transport", exchange, routing_key="test")
    channel: Any = connection.channel()
    bound = queue(channel)
    bound.declare()
    try:
        bound.purge()
        producer = Producer(channel, exchange=exchange, routing_key="test")
        for n in range(3):
            producer.publish({"n": n})
        got, tags = [], []
        for _ in range(3):
            message = bound.get(no_ack=False)
            assert message is not None
            got.append(message.payload["n"])
            tags.append(message.delivery_tag)
            message.ack()
        assert got == [0, 1, 2]
        assert bound.get() is None
        # every delivery acknowledged: none left for Redis to restore after the visibility timeout
        unacked = channel._create_client().hmget(channel.unacked_key, tags)
        assert unacked == [None, None, None]
    finally:
        bound.delete()
        channel.close()
