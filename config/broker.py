"""The Redis broker's transport: kombu's, with one redis-py client per connection pool.

kombu's Redis channel builds a new `redis.Redis` around its pool for every publish, every ack
and every flush of Celery's task events (`Channel._create_client`, through `conn_or_acquire`):
about 60 us each, several per outreach in each worker. The client holds no connection of its
own (each command borrows one from the pool, so one client serves every thread), so the
channel keeps one per pool, and builds the next when kombu replaces its pool after a lost
connection. Selected for redis:// and rediss:// broker URLs (config.settings,
CELERY_BROKER_TRANSPORT); RabbitMQ and Sentinel keep kombu's own.
"""

from __future__ import annotations

from typing import Any

from kombu.transport import redis as kombu_redis


class Channel(kombu_redis.Channel):
    _sync_client: tuple[Any, Any] | None = None  # (the pool, the client built around it)

    def _create_client(self, asynchronous: bool = False) -> Any:
        if asynchronous:  # the consumer's own client (BRPOP), cached by kombu already
            return super()._create_client(asynchronous=True)  # type: ignore[misc]
        pool, kept = self.pool, self._sync_client
        if kept is None or kept[0] is not pool:
            kept = self._sync_client = (pool, super()._create_client())  # type: ignore[misc]
        return kept[1]


class Transport(kombu_redis.Transport):
    Channel = Channel
