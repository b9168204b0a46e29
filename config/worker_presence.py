"""Which worker kinds run: each Celery worker says so in Redis every PRESENCE_INTERVAL_S, and
/metrics counts, per queue, the workers heard from within PRESENCE_STALE_S
(`outreach_celery_workers{queue}`, alert OutreachWorkerAbsent in docs/prometheus/alerts.yml).

Why not `celery inspect ping` (config.liveness): a broadcast waits its whole timeout for
replies, and a scrape must not. Why not the broker's consumer count alone: a Redis broker has
none. Keys: one hash per queue, `workers:present:<queue>`, field the node name
(`reply@host`), value the Unix time it last said so. A worker that stops cleanly removes its
field; a killed one's goes stale, and is dropped by the next live worker after a day.

Started by PresenceStep, a worker bootstep (config.celery adds it): a daemon thread
(config.periodic_step), so it beats whichever pool runs the tasks, and a failed write is
logged, never raised.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable
from typing import Any

from config.periodic_step import PeriodicStep
from config.redis_client import Client

log = logging.getLogger(__name__)

PRESENCE_INTERVAL_S = 10.0
PRESENCE_STALE_S = 30.0  # three missed beats
FORGET_AFTER_S = 86_400.0


def _key(queue: str) -> str:
    return f"workers:present:{queue}"


def presence_record(*, client: Client, node: str, queues: Iterable[str], now: float) -> None:
    """`node` consumes `queues` as of `now`; fields unheard of for a day are dropped."""
    for queue in queues:
        key = _key(queue)
        client.hset(key, node, repr(now))
        stale = [f for f, t in client.hgetall(key).items() if now - float(t) > FORGET_AFTER_S]
        if stale:
            client.hdel(key, *stale)


def presence_forget(*, client: Client, node: str, queues: Iterable[str]) -> None:
    for queue in queues:
        client.hdel(_key(queue), node)


def presence_count(*, client: Client, queues: Iterable[str], now: float) -> dict[str, int]:
    """Per queue, the workers heard from within PRESENCE_STALE_S of `now` (0 for none)."""
    counts = {}
    for queue in queues:
        beats = client.hgetall(_key(queue)).values()
        counts[queue] = sum(1 for t in beats if now - float(t) <= PRESENCE_STALE_S)
    return counts


def presence_last_heard(*, client: Client, queues: Iterable[str]) -> dict[str, float | None]:
    """Per queue, when a worker of it last said it runs (None: none has, or the last stopped)."""
    heard: dict[str, float | None] = {}
    for queue in queues:
        beats = [float(t) for t in client.hgetall(_key(queue)).values()]
        heard[queue] = max(beats, default=None)
    return heard


class PresenceStep(PeriodicStep):
    """Beats the worker's presence for every queue it consumes while it runs."""

    thread_name = "worker-presence"
    interval_s = PRESENCE_INTERVAL_S
    tick_at_start = True  # the worker is counted as soon as it starts, not a beat later

    def __init__(self, worker: Any, **kwargs: Any) -> None:
        super().__init__(worker, **kwargs)
        self._node = ""
        self._queues: list[str] = []

    def start(self, worker: Any) -> None:
        self._node = worker.hostname
        self._queues = sorted(worker.app.amqp.queues.consume_from)
        super().start(worker)

    def stop(self, worker: Any) -> None:
        """Also on a cold shutdown (PeriodicStep.terminate stops): the field is removed either way."""
        super().stop(worker)
        try:
            presence_forget(client=_client(), node=self._node, queues=self._queues)
        except Exception as exc:  # a stopping worker with Redis away: the field goes stale instead
            log.warning("worker presence not removed: %s", exc)

    def tick(self) -> bool:
        try:
            presence_record(client=_client(), node=self._node, queues=self._queues, now=time.time())
        except Exception as exc:  # Redis away: the worker works on; /metrics will show it absent
            log.warning("worker presence not recorded: %s", exc)
        return True


def _client() -> Client:
    from config.redis_client import shared

    return shared()
