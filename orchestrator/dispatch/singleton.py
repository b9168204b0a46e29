"""One dispatch cycle at a time in the whole cluster: a Redis lease with a fencing token.

Two beat processes, or a cycle slower than the interval, both end here: the second caller
finds the lease held and skips its cycle. The lease has a TTL so a killed cycle cannot wedge
dispatch; the fencing token (a counter that only grows) lets a cycle that outlived its lease
notice it lost it before it persists anything (the cursor). Row claims are safe regardless:
they are conditional UPDATEs with SKIP LOCKED.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

from config.redis_client import Client

LOCK_KEY = "orchestrator:dispatch:lease"
FENCE_KEY = "orchestrator:dispatch:fence"

# Release only our own lease: another cycle may hold it if ours expired.
_RELEASE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# Before a write made under the lease: nothing while our lease is not held (fencing). The
# write's own keys and arguments follow the lease's (KEYS[1], ARGV[1]).
_IF_HELD = "if redis.call('GET', KEYS[1]) ~= ARGV[1] then return 0 end\n"


class Lease:
    def __init__(self, client: Client, token: str) -> None:
        self.client = client
        self.token = token

    def held(self) -> bool:
        return self.client.get(LOCK_KEY) == self.token.encode()

    def set_if_held(self, key: str, value: str) -> bool:
        return bool(
            self.run_if_held("redis.call('SET', KEYS[2], ARGV[2]) return 1", keys=[key], args=[value])
        )

    def run_if_held(self, script: str, *, keys: Sequence[str], args: Sequence[str | int]) -> Any:
        """Run `script` atomically while our lease is still held, its `keys` from KEYS[2] and
        `args` from ARGV[2]; its answer, or 0 when the lease is not ours any more."""
        return self.client.eval(_IF_HELD + script, 1 + len(keys), LOCK_KEY, *keys, self.token, *args)


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
