"""Redis goes away in the middle of a run and comes back empty, under both failure policies.

The test starts its own redis-server on a free port (never the shared one). A worker thread
reserves and settles without pause while the main thread stops and restarts the server.
Nothing may raise; during the outage the policy answers (fail-open: unmetered grants,
fail-closed: denials naming Redis); after the restart the breaker half-opens, the scripts are
loaded again (the new server has none) and metered reservations resume.
"""

from __future__ import annotations

import shutil
import threading
import time
from collections.abc import Iterator

import pytest

from devtools.processes import RedisServer
from orchestrator.budget import Budget, CircuitBreaker, Denied, Limits, Reservation, connect
from tests.e2e.conftest import wait_until

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server on PATH"),
]


@pytest.fixture
def server() -> Iterator[RedisServer]:
    srv = RedisServer()
    srv.start()
    yield srv
    srv.stop()


def classify(result: Reservation | Denied) -> str:
    if isinstance(result, Denied):
        return f"denied:{result.bucket}"
    return "unmetered" if result.unmetered else "metered"


@pytest.mark.parametrize(("policy", "outage"), [("open", "unmetered"), ("closed", "denied:redis")])
def test_redis_restart_mid_run(server: RedisServer, policy: str, outage: str) -> None:
    budget = Budget(
        redis_client=connect(server.url, timeout_s=0.2),
        limits=Limits(rpm=6_000_000, tpm=600_000_000),  # plenty: only Redis may say no
        failure_policy=policy,  # type: ignore[arg-type]
        breaker=CircuitBreaker(failures=2, cooldown_s=0.2),
    )
    log: list[tuple[float, float, str]] = []  # (started, ended, outcome) of each reserve
    errors: list[BaseException] = []
    stop = threading.Event()

    def work() -> None:
        try:
            while not stop.is_set():
                started = time.monotonic()
                result = budget.reserve(requests=1, tokens=10)
                log.append((started, time.monotonic(), classify(result)))
                if isinstance(result, Reservation):
                    budget.settle(reservation_id=result.id, actual_tokens=5)
                budget.acquire_call(tokens=10)
                budget.headroom()
                time.sleep(0.002)
        except BaseException as exc:  # the point of the test: nothing escapes
            errors.append(exc)

    # given a run in progress
    worker = threading.Thread(target=work)
    worker.start()
    wait_until(lambda: len(log) >= 20, timeout_s=10, what="20 metered reservations")
    held = budget.reserve(requests=1, tokens=10)
    assert isinstance(held, Reservation)
    # when Redis stops, stays away, and comes back empty
    stopping_at = time.monotonic()
    server.stop()
    down_at = time.monotonic()
    wait_until(
        lambda: sum(started > down_at for started, _, _ in log) >= 5,
        timeout_s=10,
        what="5 answers during the outage",
    )
    during = budget.reserve(requests=1, tokens=10)
    settled_during = budget.settle(reservation_id=held.id, actual_tokens=1)
    restarting_at = time.monotonic()
    server.start()
    up_at = time.monotonic()
    wait_until(
        lambda: sum(started > up_at + 0.5 for started, _, _ in log) >= 20,
        timeout_s=10,
        what="20 answers after it",
    )
    stop.set()
    worker.join(timeout=10)

    # then nothing raised, and each phase got the answer its policy promises
    assert not errors, errors
    assert classify(held) == "metered"
    assert classify(during) == outage
    assert settled_during is False
    before = {kind for _, ended, kind in log if ended < stopping_at}
    outage_kinds = {kind for started, ended, kind in log if down_at < started and ended < restarting_at}
    after = {kind for started, _, kind in log if started > up_at + 0.5}  # the breaker's cool-down: 0.2 s
    assert before == {"metered"}
    assert outage_kinds == {outage}
    assert after == {"metered"}
    # the reservation made before the restart is gone with Redis's memory: a no-op, not an error
    assert budget.settle(reservation_id=held.id, actual_tokens=1) is False
    assert budget.breaker.state == "closed"
