"""config.redis_client in a forked child (a prefork pool's): never stuck on its parent's lock."""

from __future__ import annotations

import os
import threading
import time
from typing import Any

import redis

from config import redis_client


def _child_after_fork_while_held(lock: Any, *, timeout_s: float) -> int | None:
    """Fork while another thread of this process holds `lock`; the child asks for the shared
    client of `timeout_s` and pings. The child's exit code, or None when it was still stuck
    after 10 s (killed then: it would never have run a task)."""
    held, release = threading.Event(), threading.Event()

    def holder() -> None:
        with lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=holder)
    thread.start()
    held.wait(5)
    pid = os.fork()
    if pid == 0:
        try:
            redis_client.shared(timeout_s=timeout_s).ping()
            os._exit(0)
        except BaseException:
            os._exit(2)
    release.set()
    thread.join()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


def test_a_child_forked_while_a_parent_thread_builds_a_client_gets_its_own_client() -> None:
    # given a thread of this process holding the clients' lock (as the worker-presence beat does
    # while it builds its client), when the process forks and the child asks for a client of a
    # timeout nobody asked for yet
    exit_code = _child_after_fork_while_held(redis_client._lock, timeout_s=7.25)
    # then the child gets its client and answers within seconds, instead of waiting forever
    assert exit_code == 0


def test_a_child_forked_while_a_parent_thread_holds_a_clients_pool_lock_gets_a_client_of_its_own() -> None:
    # given the process's shared client in use by another thread when the process forks (the
    # worker-presence beat mid-command as the prefork pool starts its child: CI saw the child's
    # first dispatch cycle stuck in redis-py's ConnectionPool.reset, which after a fork takes
    # the pool's lock, held by a thread the child does not have)
    parent_client = redis_client.shared(timeout_s=6.5)
    parent_client.ping()
    assert isinstance(parent_client, redis.Redis)  # REDIS_URL: one server, one pool
    # when the child asks for the same client as the parent
    exit_code = _child_after_fork_while_held(parent_client.connection_pool._lock, timeout_s=6.5)
    # then it answers within seconds on a client of its own, instead of waiting forever
    assert exit_code == 0
    assert redis_client.shared(timeout_s=6.5) is parent_client  # the parent keeps its own
