"""`celery` with the dispatch lease observed: `python -m tests.faults.lease_probe -A config worker ...`.

Used by the two-beats fault test. Every cycle that wins the lease appends one line
"<pid> <acquired> <released>" (time.time(), taken inside the lease) to $FAULTS_LEASE_LOG, so
the test can check that no two cycles ever held it at once. $FAULTS_LEASE_HOLD_S keeps each
won lease that much longer: a cycle slower than the dispatch interval, so that the second
beat's cycles really do arrive while one is running.

It wraps `orchestrator.dispatch.singleton.dispatch_lease` before `orchestrator.dispatch` imports it (Celery
imports task modules after this runs); the product's lease logic itself is untouched.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

from config.redis_client import Client
from orchestrator.dispatch import singleton as lease

_original = lease.dispatch_lease


@contextmanager
def observed_lease(client: Client, *, ttl_s: float) -> Iterator[lease.Lease | None]:
    with _original(client, ttl_s=ttl_s) as lease:
        if lease is None:
            yield None
            return
        acquired = time.time()
        try:
            yield lease
            time.sleep(float(os.environ.get("FAULTS_LEASE_HOLD_S", "0")))
        finally:
            _record(f"{os.getpid()} {acquired:.6f} {time.time():.6f}\n")


def _record(line: str) -> None:
    path = os.environ.get("FAULTS_LEASE_LOG")
    if not path:
        return
    # O_APPEND: lines from several processes never interleave (each is one short write).
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, line.encode())
    finally:
        os.close(fd)


def read_spans(path: str) -> list[tuple[float, float]]:
    """The recorded (acquired, released) spans, sorted by acquisition."""
    if not os.path.exists(path):
        return []
    with open(path) as handle:
        spans = [(float(a), float(b)) for _, a, b in (line.split() for line in handle if line.strip())]
    return sorted(spans)


if __name__ == "__main__":
    lease.dispatch_lease = observed_lease
    from celery.__main__ import main

    sys.exit(main())
