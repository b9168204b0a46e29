"""config.redis_client in a forked child (a prefork pool's): never stuck on its parent's lock."""

from __future__ import annotations

import os
import threading
import time

import redis

from config import redis_client


def test_a_child_forked_while_a_parent_thread_builds_a_client_gets_its_own_client() -> None:
    # given a thread of this process holding the clients' lock (as the worker-presence beat does
    # while it builds its client), when the process forks
    held, release = threading.Event(), threading.Event()

    def builder() -> None:
        with redis_client._lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=builder)
    thread.start()
    held.wait(5)
    pid = os.fork()
    if pid == 0:  # the child: a client of a timeout nobody asked for yet, then exit
        try:
            redis_client.shared(timeout_s=7.25).ping()
            os._exit(0)
        except BaseException:
            os._exit(2)
    release.set()
    thread.join()
    # then the child gets its client and answers within seconds, instead of waiting forever
    deadline, exit_code = time.monotonic() + 10, None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            exit_code = os.waitstatus_to_exitcode(status)
            break
        time.sleep(0.05)
    else:  # stuck: it would never have run a task
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert exit_code == 0


def test_a_child_forked_while_a_parent_thread_holds_a_clients_pool_lock_gets_a_client_of_its_own() -> None:
    # given the process's shared client in use by another thread when the process forks (the
    # worker-presence beat mid-command as the prefork pool starts its child: CI saw the child's
    # first dispatch cycle stuck in redis-py's ConnectionPool.reset, which after a fork takes
    # the pool's lock, held by a thread the child does not have)
    parent_client = redis_client.shared(timeout_s=6.5)
    parent_client.ping()
    assert isinstance(parent_client, redis.Redis)  # REDIS_URL: one server, one pool
    held, release = threading.Event(), threading.Event()

    def beat() -> None:
        with parent_client.connection_pool._lock:
            held.set()
            release.wait(10)

    thread = threading.Thread(target=beat)
    thread.start()
    held.wait(5)
    pid = os.fork()
    if pid == 0:  # the child: the same client as the parent asked for, then exit
        try:
            redis_client.shared(timeout_s=6.5).ping()
            os._exit(0)
        except BaseException:
            os._exit(2)
    release.set()
    thread.join()
    # then the child answers within seconds on a client of its own, instead of waiting forever
    deadline, exit_code = time.monotonic() + 10, None
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            exit_code = os.waitstatus_to_exitcode(status)
            break
        time.sleep(0.05)
    else:
        os.kill(pid, 9)
        os.waitpid(pid, 0)
    assert exit_code == 0
    assert redis_client.shared(timeout_s=6.5) is parent_client  # the parent keeps its own
