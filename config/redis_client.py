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
# Connections a client's pool may open (per node of a cluster). A connection serves one command
# or pipeline at a time, so a pool opens one per thread inside a command at once: the process's
# threads bound it, not this. redis-py's default, 100, is below the generation worker's 200
# threads: after a stall of that worker (bench/soak.py, 2026-11-28: a profiler paused it) more
# than 100 of them were inside budget calls at once, the pool refused the rest ("Too many
# connections"), the budget took that for Redis failing, opened its circuit, and its failure
# policy let calls through unpaced, which the provider answered 429.
MAX_CONNECTIONS: Final = 10_000

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
            max_connections=MAX_CONNECTIONS,
        )
    return redis.Redis.from_url(
        url,
        socket_timeout=timeout_s,
        socket_connect_timeout=timeout_s,
        retry=Retry(NoBackoff(), 1),
        max_connections=MAX_CONNECTIONS,
    )


_clients: dict[tuple[str, float], Client] = {}
_lock = threading.Lock()
# A forked child's copies of its parent's clients: kept, never used (collecting one would
# disconnect its pool, which takes the lock a parent thread may hold).
_inherited: list[Client] = []


def _renew_in_child() -> None:
    """A process forked while another of its parent's threads held a lock inherits it held by a
    thread that does not exist in the child, and would wait on it forever, as prefork
    orchestrators' first dispatch cycles did: on this module's lock (a worker's presence beat
    building its client as the pool started its child), and on a client's connection pool's
    (the beat mid-command: redis-py resets a pool after a fork under that pool's own lock). So
    the child starts with a free lock and no client: it builds its own."""
    global _lock
    _lock = threading.Lock()
    _inherited.extend(_clients.values())
    _clients.clear()


os.register_at_fork(after_in_child=_renew_in_child)


def shared(*, timeout_s: float = 0.5) -> Client:
    """The process's client on REDIS_URL. The default timeout suits the workers' hot paths (a
    budget call, a lease beat); the dispatcher, leases' recovery and alerts wait up to 2 s."""
    key = (settings.REDIS_URL, timeout_s)
    if key not in _clients:
        with _lock:
            _clients.setdefault(key, connect(key[0], timeout_s=timeout_s))
    return _clients[key]
