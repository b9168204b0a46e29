"""One dispatch cycle at a time in the whole cluster: a Redis lease with a fencing token.

Two beat processes, or a cycle slower than the interval, both end here: the second caller
finds the lease held and skips its cycle. The lease has a TTL so a killed cycle cannot wedge
dispatch; the fencing token (a counter that only grows) lets a cycle that outlived its lease
notice it lost it before it persists anything (the cursor). Row claims are safe regardless:
they are conditional UPDATEs with SKIP LOCKED.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from config.redis_client import Client

LOCK_KEY = "orchestrator:dispatch:lease"
FENCE_KEY = "orchestrator:dispatch:fence"

# Release only our own lease: another cycle may hold it if ours expired.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# Write a value only while our lease is still held (fencing).
_SET_IF_HOLDER = """
if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end
redis.call('SET', KEYS[2], ARGV[2])
return 1
"""


class Lease:
    def __init__(self, client: Client, token: str) -> None:
        self.client = client
        self.token = token

    def held(self) -> bool:
        return self.client.get(LOCK_KEY) == self.token.encode()

    def set_if_held(self, key: str, value: str) -> bool:
        return bool(self.client.eval(_SET_IF_HOLDER, 2, LOCK_KEY, key, self.token, value))


@contextmanager
def dispatch_lease(client: Client, *, ttl_s: float) -> Iterator[Lease | None]:
    """Yield a Lease if this process won the cycle, else None (someone else is dispatching)."""
    token = str(client.incr(FENCE_KEY))
    if not client.set(LOCK_KEY, token, nx=True, px=int(ttl_s * 1000)):
        yield None
        return
    try:
        yield Lease(client, token)
    finally:
        client.eval(_RELEASE, 1, LOCK_KEY, token)
