"""The one place a Redis client is built.

`connect(url)` builds a client that fails fast (the budget's, and every hot path's); `shared()`
is the process's client on REDIS_URL, one per URL and timeout (threads share it: redis-py's
connection pool is thread-safe; keyed by URL because tests point settings at their own
database). Everything in the product that talks to Redis gets its client here.
"""

from __future__ import annotations

import os
import threading
from typing import Final

import redis
from django.conf import settings
from redis.backoff import NoBackoff
from redis.cluster import RedisCluster
from redis.retry import Retry

CLUSTER_SCHEMES: Final = {"redis+cluster": "redis", "rediss+cluster": "rediss"}

Client = redis.Redis | RedisCluster


def connect(url: str, *, timeout_s: float = 0.5) -> Client:
    """A Redis client fit for the budget: it fails fast. Short timeouts and one immediate retry
    (a pooled connection gone stale across a Redis restart); the circuit breaker, not client
    retries with backoff, decides when to try again. (redis.Redis() built directly retries
    with backoff for seconds: every budget call would stall that long during an outage.)

    A redis+cluster:// (or rediss+cluster://) URL names one node of a Redis Cluster: the client
    discovers the others and sends each script to the node of its keys' slot (they share one,
    orchestrator/budget/core.py). Cluster has no databases, so such a URL has no /db path."""
    scheme, sep, rest = url.partition("://")
    if scheme in CLUSTER_SCHEMES:
        return RedisCluster.from_url(
            f"{CLUSTER_SCHEMES[scheme]}{sep}{rest}",
            socket_timeout=timeout_s,
            socket_connect_timeout=timeout_s,
            retry=Retry(NoBackoff(), 1),
        )
    return redis.Redis.from_url(
        url, socket_timeout=timeout_s, socket_connect_timeout=timeout_s, retry=Retry(NoBackoff(), 1)
    )


_clients: dict[tuple[str, float], Client] = {}
_lock = threading.Lock()


def _lock_renew_in_child() -> None:
    """A process forked while another of its parent's threads held the lock (a worker's
    presence beat building its client as the prefork pool started its child) inherits it held
    by a thread that does not exist in the child: its first shared() would wait forever, as a
    prefork orchestrator's first dispatch cycle did. The child starts with a free lock; its
    clients' connection pools reset themselves after a fork (redis-py checks the pid)."""
    global _lock
    _lock = threading.Lock()


os.register_at_fork(after_in_child=_lock_renew_in_child)


def shared(*, timeout_s: float = 0.5) -> Client:
    """The process's client on REDIS_URL. The default timeout suits the workers' hot paths (a
    budget call, a lease beat); the dispatcher, leases' recovery and alerts wait up to 2 s."""
    key = (settings.REDIS_URL, timeout_s)
    if key not in _clients:
        with _lock:
            _clients.setdefault(key, connect(key[0], timeout_s=timeout_s))
    return _clients[key]
