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

Leases from receipt (as Sidekiq's super_fetch and Oban's lifeline do for theirs): a job a worker
has taken from the broker but not begun (prefetched, waiting for a pool slot, or started but
still DISPATCHED, waiting for its first database turn) is leased too, from the moment the
worker's main process receives it (`JobLeases.receive`, from Celery's task_received in
nurture.tasks) until the worker acknowledges or rejects its message: the main process beats
for it, so prefork (received in the parent, run in a child) and threads pools are alike. Beside
the lease, a receipt mark (`received_key`, the same token, DISPATCH_STUCK_AFTER_S long) says the
job left the broker: a DISPATCHED row with a mark and no lease was in a worker that died, and
recovery takes it back within the lease TTL; a DISPATCHED row with neither is still waiting in
the broker and keeps the timeout. Lease and mark go together when the message is settled.
"""

from __future__ import annotations

import logging
import os
import threading
import uuid
from collections.abc import Callable, Iterable

import redis
from django.conf import settings

from config import redis_client
from config.redis_client import Client

log = logging.getLogger(__name__)

KEY_PREFIX = "orchestrator:job-lease:"
RECEIVED_PREFIX = "orchestrator:job-received:"

# Drop only our own key: after a recovery the outreach may run under another worker's lease.
_DROP = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""


def lease_key(outreach_id: int) -> str:
    return f"{KEY_PREFIX}{outreach_id}"


def received_key(outreach_id: int) -> str:
    return f"{RECEIVED_PREFIX}{outreach_id}"


class JobLeases:
    """The leases of the jobs one process runs, and the heartbeat that keeps them alive."""

    def __init__(
        self,
        client: Client,
        *,
        ttl_s: float,
        renew_s: float,
        token: str | None = None,
        received_ttl_s: float = 600.0,
    ) -> None:
        self.client = client
        self.ttl_ms = int(ttl_s * 1000)
        self.renew_s = renew_s
        self.token = token or f"{os.getpid()}:{uuid.uuid4().hex[:12]}"
        # The receipt mark outlives any lease; past DISPATCH_STUCK_AFTER_S the timeout covers the row.
        self.received_ttl_ms = int(received_ttl_s * 1000)
        self._held: set[int] = set()
        # Received jobs, each with "is its message still unsettled?" (asked on every beat).
        self._received: dict[int, Callable[[], bool]] = {}
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

    def receive(self, *, outreach_id: int, unsettled: Callable[[], bool]) -> None:
        """Lease a job from the moment its message is received, with its receipt mark, until
        `unsettled()` turns False (the message acknowledged or rejected): then the next beat
        drops both. A Redis error is logged, not raised (the next beat sets them)."""
        with self._lock:
            self._received[outreach_id] = unsettled
        self._ensure_heartbeat()
        try:
            pipe = self.client.pipeline(transaction=False)
            pipe.set(lease_key(outreach_id), self.token, px=self.ttl_ms)
            pipe.set(received_key(outreach_id), self.token, px=self.received_ttl_ms)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("receipt lease not taken: %s", exc, extra={"outreach_id": outreach_id})

    def drop(self, *, outreach_id: int) -> None:
        with self._lock:
            self._held.discard(outreach_id)
        try:
            self.client.eval(_DROP, 1, lease_key(outreach_id), self.token)
        except redis.RedisError as exc:  # the key expires by itself within one TTL
            log.warning("job lease not dropped: %s", exc, extra={"outreach_id": outreach_id})

    def renew(self) -> int:
        """Re-set every held lease in one round trip, and drop the receipt leases whose message
        is settled; return how many are held. Raises RedisError."""
        settled = self._settled()
        with self._lock:
            held = self._held | set(self._received)
        if held or settled:
            pipe = self.client.pipeline(transaction=False)
            for outreach_id in held:
                pipe.set(lease_key(outreach_id), self.token, px=self.ttl_ms)
            for outreach_id in settled:  # only our own: another worker may have it since
                pipe.eval(_DROP, 1, received_key(outreach_id), self.token)
                if outreach_id not in held:
                    pipe.eval(_DROP, 1, lease_key(outreach_id), self.token)
            pipe.execute()
        return len(held)

    def _settled(self) -> list[int]:
        """Forget the received jobs whose message is settled; return them."""
        with self._lock:  # `unsettled` reads a flag: cheap enough to ask under the lock
            settled = [outreach_id for outreach_id, unsettled in self._received.items() if not unsettled()]
            for outreach_id in settled:
                del self._received[outreach_id]
        return settled

    def held(self) -> set[int]:
        with self._lock:
            return self._held | set(self._received)

    def release_received(self) -> int:
        """A worker stopping cleanly gave the messages it had not settled back to the broker
        (Celery restores them as it closes): their rows wait there again, not received by
        anyone, so their marks and leases go (a running job's own lease stays). Returns how
        many. A Redis error is logged: the marks then look lost, and recovery takes the rows
        back once the leases expire (the returned messages are then dropped as stale)."""
        with self._lock:
            released = list(self._received)
            self._received.clear()
            running = set(self._held)
        try:
            pipe = self.client.pipeline(transaction=False)
            for outreach_id in released:
                pipe.eval(_DROP, 1, received_key(outreach_id), self.token)
                if outreach_id not in running:
                    pipe.eval(_DROP, 1, lease_key(outreach_id), self.token)
            pipe.execute()
        except redis.RedisError as exc:
            log.warning("receipt leases not released: %s", exc)
        return len(released)

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


def receipts_lost(*, client: Client, outreach_ids: Iterable[int]) -> set[int]:
    """The outreach among `outreach_ids` a worker received (a receipt mark) and no longer leases:
    that worker is gone. Raises RedisError."""
    ids = list(outreach_ids)
    if not ids:
        return set()
    marks = client.mget([received_key(i) for i in ids])
    leases = client.mget([lease_key(i) for i in ids])
    return {
        i for i, mark, lease in zip(ids, marks, leases, strict=True) if mark is not None and lease is None
    }


def receipts_clear(*, client: Client, outreach_ids: Iterable[int]) -> None:
    """Forget the receipt marks of recovered rows (their next dispatch starts unreceived).
    Raises RedisError."""
    ids = list(outreach_ids)
    if ids:
        client.delete(*[received_key(i) for i in ids])


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
                received_ttl_s=settings.DISPATCH_STUCK_AFTER_S,
            )
            _process_leases = (os.getpid(), leases)
        return _process_leases[1]


def lease_client() -> Client:
    return redis_client.shared(timeout_s=2.0)
