"""Job leases against the test Redis: taken, renewed by the heartbeat, gone when it stops, and
only the holder's own key dropped."""

from __future__ import annotations

import time

import redis

from orchestrator.failures.leases import (
    JobLeases,
    lease_key,
    leases_alive,
    receipts_clear,
    receipts_lost,
    received_key,
)
from tests.e2e.conftest import wait_until


def expires_at(client: redis.Redis, key: str) -> float:
    """When the key expires, on time.monotonic(); -inf once it is gone (Redis's PTTL)."""
    pttl = client.pttl(key)
    return time.monotonic() + pttl / 1000 if pttl >= 0 else float("-inf")


def test_a_taken_lease_holds_the_token_with_the_ttl(redis_client: redis.Redis) -> None:
    # given a process's leases with a 30 s TTL
    leases = JobLeases(redis_client, ttl_s=30, renew_s=10, token="worker-a")
    # when a job takes one
    leases.take(outreach_id=7)
    # then the key names the holder and expires within the TTL
    assert redis_client.get(lease_key(7)) == b"worker-a"
    assert 29_000 < redis_client.pttl(lease_key(7)) <= 30_000
    assert leases.held() == {7}
    leases.stop()


def test_the_heartbeat_keeps_a_slow_job_alive_past_its_ttl(redis_client: redis.Redis) -> None:
    # given a lease of 0.6 s renewed every 0.15 s
    leases = JobLeases(redis_client, ttl_s=0.6, renew_s=0.15, token="worker-a")
    taken = time.monotonic()
    leases.take(outreach_id=1)
    # when the job runs until its key, renewed, expires three TTLs after it was taken
    wait_until(
        lambda: expires_at(redis_client, lease_key(1)) >= taken + 3 * 0.6,
        timeout_s=30,
        what="the lease renewed past three TTLs",
    )
    # then its lease is still there
    assert leases_alive(client=redis_client, outreach_ids=[1]) == {1}
    leases.stop()


def test_a_lease_is_gone_one_ttl_after_its_heartbeat_stops(redis_client: redis.Redis) -> None:
    # given a held lease, then its process stops beating (as if SIGKILLed)
    leases = JobLeases(redis_client, ttl_s=0.5, renew_s=0.1, token="worker-a")
    leases.take(outreach_id=1)
    leases.stop()
    assert leases_alive(client=redis_client, outreach_ids=[1]) == {1}
    # when its TTL runs out (a heartbeat still beating would keep it forever)
    wait_until(lambda: redis_client.exists(lease_key(1)) == 0, timeout_s=30, what="the lease expired")
    # then the lease is gone although the job never dropped it
    assert leases_alive(client=redis_client, outreach_ids=[1]) == set()


def test_drop_removes_only_the_holders_own_lease(redis_client: redis.Redis) -> None:
    # given outreach 5 recovered and now leased by another worker
    old = JobLeases(redis_client, ttl_s=30, renew_s=10, token="worker-old")
    new = JobLeases(redis_client, ttl_s=30, renew_s=10, token="worker-new")
    old.take(outreach_id=5)
    new.take(outreach_id=5)
    # when the old job finishes and drops its lease
    old.drop(outreach_id=5)
    # then the new holder's lease stays; its own drop removes it
    assert redis_client.get(lease_key(5)) == b"worker-new"
    new.drop(outreach_id=5)
    assert redis_client.exists(lease_key(5)) == 0
    assert new.held() == set() == old.held()
    old.stop()
    new.stop()


def test_one_renewal_restores_every_lease_lost_with_redis(redis_client: redis.Redis) -> None:
    # given three running jobs, and Redis losing its keys (a restart without persistence)
    leases = JobLeases(redis_client, ttl_s=30, renew_s=10, token="worker-a")
    for outreach_id in (1, 2, 3):
        leases.take(outreach_id=outreach_id)
    redis_client.flushdb()
    # when the heartbeat beats once
    renewed = leases.renew()
    # then all three are back, in one round trip
    assert renewed == 3
    assert leases_alive(client=redis_client, outreach_ids=[1, 2, 3, 4]) == {1, 2, 3}
    leases.stop()


def test_a_lease_not_taken_while_redis_is_down_does_not_fail_the_job() -> None:
    # given a Redis nobody listens on
    down = redis.Redis(host="127.0.0.1", port=1, socket_connect_timeout=0.2)
    leases = JobLeases(down, ttl_s=30, renew_s=10)
    # when a job takes and drops its lease, then nothing is raised (the heartbeat retries)
    leases.take(outreach_id=1)
    leases.drop(outreach_id=1)
    leases.stop()


def test_a_received_job_is_leased_and_marked_until_its_message_is_settled(redis_client: redis.Redis) -> None:
    # given a worker's main process receiving a job whose message is not acknowledged yet
    leases = JobLeases(redis_client, ttl_s=30, renew_s=10, token="worker-a", received_ttl_s=600)
    settled = False
    leases.receive(outreach_id=9, unsettled=lambda: not settled)
    # then it is leased and marked received at once, and a beat keeps both
    assert redis_client.get(lease_key(9)) == redis_client.get(received_key(9)) == b"worker-a"
    assert leases.renew() == 1
    assert receipts_lost(client=redis_client, outreach_ids=[9]) == set()
    # when the message is acknowledged, then the next beat drops lease and mark together
    settled = True
    assert leases.renew() == 0
    assert redis_client.exists(lease_key(9), received_key(9)) == 0
    leases.stop()


def test_a_received_job_of_a_dead_worker_is_a_lost_receipt(redis_client: redis.Redis) -> None:
    # given a job received by a worker that stops beating (SIGKILL), and one never received
    leases = JobLeases(redis_client, ttl_s=0.3, renew_s=0.1, token="worker-a", received_ttl_s=600)
    leases.receive(outreach_id=3, unsettled=lambda: True)
    leases.stop()
    # when its lease runs out
    wait_until(lambda: redis_client.exists(lease_key(3)) == 0, timeout_s=30, what="the lease expired")
    # then only the received one reads as lost; clearing forgets it
    assert receipts_lost(client=redis_client, outreach_ids=[3, 4]) == {3}
    receipts_clear(client=redis_client, outreach_ids=[3])
    assert receipts_lost(client=redis_client, outreach_ids=[3, 4]) == set()


def test_a_worker_stopping_cleanly_releases_what_it_received_but_keeps_running_leases(
    redis_client: redis.Redis,
) -> None:
    # given a worker holding a received job not begun (6) and a running one (8), both unsettled
    leases = JobLeases(redis_client, ttl_s=30, renew_s=10, token="worker-a", received_ttl_s=600)
    leases.receive(outreach_id=6, unsettled=lambda: True)
    leases.receive(outreach_id=8, unsettled=lambda: True)
    leases.take(outreach_id=8)
    # when it stops cleanly (its unsettled messages are back in the broker)
    assert leases.release_received() == 2
    # then the waiting job is neither marked nor leased (it waits in the broker, not for
    # recovery), and the running job keeps its lease until it ends
    assert redis_client.exists(lease_key(6), received_key(6), received_key(8)) == 0
    assert receipts_lost(client=redis_client, outreach_ids=[6, 8]) == set()
    assert leases_alive(client=redis_client, outreach_ids=[6, 8]) == {8}
    leases.stop()
