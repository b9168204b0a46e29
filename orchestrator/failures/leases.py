"""Job leases: a running generation job's heartbeat, so a dead worker's jobs come back in
seconds, not after DISPATCH_STUCK_AFTER_S.

A threads-pool generation worker holds hundreds of jobs at once; SIGKILL strands them all. A
job that moved DISPATCHED -> GENERATING takes a lease: one Redis key per outreach holding the
worker process's token, with a TTL (GENERATION_LEASE_TTL_S). One heartbeat thread per process
re-sets the keys of every job it runs, in one pipeline, every GENERATION_LEASE_RENEW_S; the job
drops its key after its outcome is recorded. A key that is gone therefore means the process
that ran the job is gone (or cut off from Redis for a whole TTL), however slow a live LLM call
is. Recovery (orchestrator.failures.recovery) reads the keys; this module is their one owner.

The heartbeat re-SETs rather than extends: after a Redis restart the keys of live jobs are
back within one renew interval. A lease only hurries recovery; taking the row back is still
the guarded transition, so a job that loses its lease while alive can waste its LLM calls
but never send twice.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Iterable

import redis
from django.conf import settings

from config import redis_client
from config.redis_client import Client

log = logging.getLogger(__name__)

KEY_PREFIX = "orchestrator:job-lease:"

# Drop only our own key: after a recovery the outreach may run under another worker's lease.
_DROP = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def lease_key(outreach_id: int) -> str:
    return f"{KEY_PREFIX}{outreach_id}"


class JobLeases:
    """The leases of the jobs one process runs, and the heartbeat that keeps them alive."""

    def __init__(self, client: Client, *, ttl_s: float, renew_s: float, token: str | None = None) -> None:
        self.client = client
        self.ttl_ms = int(ttl_s * 1000)
        self.renew_s = renew_s
        self.token = token or f"{os.getpid()}:{uuid.uuid4().hex[:12]}"
        self._held: set[int] = set()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._heartbeat: threading.Thread | None = None

    def take(self, *, outreach_id: int) -> None:
        """Hold a lease while the job runs. A Redis error is logged, not raised: the heartbeat
        sets the key on its next beat, and a missing lease costs at worst a wasted job."""
        with self._lock:
            self._held.add(outreach_id)
        self._ensure_heartbeat()
        try:
            self.client.set(lease_key(outreach_id), self.token, px=self.ttl_ms)
        except redis.RedisError as exc:
            log.warning("job lease not taken: %s", exc, extra={"outreach_id": outreach_id})

    def drop(self, *, outreach_id: int) -> None:
        with self._lock:
            self._held.discard(outreach_id)
        try:
            self.client.eval(_DROP, 1, lease_key(outreach_id), self.token)
        except redis.RedisError as exc:  # the key expires by itself within one TTL
            log.warning("job lease not dropped: %s", exc, extra={"outreach_id": outreach_id})

    def renew(self) -> int:
        """Re-set every held lease in one round trip; return how many. Raises RedisError."""
        with self._lock:
            held = list(self._held)
        if held:
            pipe = self.client.pipeline(transaction=False)
            for outreach_id in held:
                pipe.set(lease_key(outreach_id), self.token, px=self.ttl_ms)
            pipe.execute()
        return len(held)

    def held(self) -> set[int]:
        with self._lock:
            return set(self._held)

    def stop(self) -> None:
        self._stop.set()
        if self._heartbeat is not None:
            self._heartbeat.join(timeout=5)

    def _ensure_heartbeat(self) -> None:
        with self._lock:
            if self._heartbeat is not None and self._heartbeat.is_alive():
                return
            self._heartbeat = threading.Thread(target=self._beat, name="job-lease-heartbeat", daemon=True)
            self._heartbeat.start()

    def _beat(self) -> None:
        while not self._stop.wait(self.renew_s):
            try:
                self.renew()
            except redis.RedisError as exc:  # keep beating: the keys come back when Redis does
                log.warning("job lease heartbeat failed: %s", exc)


def leases_alive(*, client: Client, outreach_ids: Iterable[int]) -> set[int]:
    """The outreach among `outreach_ids` whose lease is held now. Raises RedisError."""
    ids = list(outreach_ids)
    if not ids:
        return set()
    values = client.mget([lease_key(i) for i in ids])
    return {i for i, value in zip(ids, values, strict=True) if value is not None}


_process_leases: tuple[int, JobLeases] | None = None
_process_lock = threading.Lock()


def job_leases() -> JobLeases:
    """This process's leases (one heartbeat per process; rebuilt in a forked child)."""
    global _process_leases
    with _process_lock:
        if _process_leases is None or _process_leases[0] != os.getpid():
            leases = JobLeases(
                lease_client(),
                ttl_s=settings.GENERATION_LEASE_TTL_S,
                renew_s=settings.GENERATION_LEASE_RENEW_S,
            )
            _process_leases = (os.getpid(), leases)
        return _process_leases[1]


def lease_client() -> Client:
    return redis_client.shared(timeout_s=2.0)
