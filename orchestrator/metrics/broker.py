"""The Celery queues as the broker sees them, for /metrics: per queue the ready messages, its
consumers, and the workers that say they consume it (config.worker_presence). A queue with
ready messages and no consumer is work nobody will do (alert OutreachQueueUnconsumed).

One passive `queue_declare` per queue: it changes nothing and answers (name, messages,
consumers) on RabbitMQ; kombu's Redis transport answers the list's length and 0 consumers (a
Redis broker keeps no consumer registry), so there the consumers are the workers heard from.
A queue never declared (no task sent, no worker started) has nothing and nobody: 0 and 0.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, cast

from celery import Celery

from config.redis_client import Client
from config.worker_presence import presence_count

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class QueueNow:
    queue: str
    ready: int  # messages waiting for a consumer (not those a worker holds unacknowledged)
    consumers: int
    workers: int  # workers heard from within config.worker_presence.PRESENCE_STALE_S


@dataclass(frozen=True)
class BrokerNow:
    up: bool  # False: the broker did not answer; `queues` is then empty
    queues: list[QueueNow]


def broker_queues_now(
    *, app: Celery, queues: Iterable[str], presence: Client, timeout_s: int = 2
) -> BrokerNow:
    names = list(queues)
    try:
        workers = presence_count(client=presence, queues=names, now=time.time())
    except Exception as exc:  # Redis away: llm_budget_up says so; the broker's counts still help
        log.warning("worker presence unreadable: %s", exc)
        workers = dict.fromkeys(names, 0)
    try:
        # A pooled connection (kept: no connect per scrape); typed as a Producer by the stubs.
        with cast(Any, app.pool.acquire(block=True, timeout=timeout_s)) as conn:
            conn.ensure_connection(max_retries=0, timeout=timeout_s)  # one try: a scrape must not wait
            counts_consumers = conn.transport.driver_type == "amqp"
            found = _declare_passive(conn, names)
    except Exception as exc:
        log.warning("broker queues unreadable: %s", exc)
        return BrokerNow(up=False, queues=[])
    return BrokerNow(
        up=True,
        queues=[
            QueueNow(
                queue=name,
                ready=ready,
                consumers=consumers if counts_consumers else workers[name],
                workers=workers[name],
            )
            for name, (ready, consumers) in zip(names, found, strict=True)
        ],
    )


def _declare_passive(conn: Any, names: list[str]) -> list[tuple[int, int]]:
    """(ready messages, consumers) of each queue. RabbitMQ: on a channel of our own, as a 404 (a
    queue never declared) closes it and the next queue needs a new one. Redis: on the pooled
    connection's default channel, kept (a 404 there closes nothing, and building a Redis
    channel costs a dozen round trips)."""
    if conn.transport.driver_type != "amqp":
        return [_one_queue(conn, conn.default_channel, name) for name in names]
    found = []
    for name in names:
        channel = conn.channel()
        try:
            found.append(_one_queue(conn, channel, name))
        finally:
            with contextlib.suppress(Exception):  # already closed by the broker's 404
                channel.close()
    return found


def _one_queue(conn: Any, channel: Any, name: str) -> tuple[int, int]:
    try:
        _, ready, consumers = channel.queue_declare(queue=name, passive=True)
    except conn.channel_errors:
        return 0, 0
    return int(ready), int(consumers)
