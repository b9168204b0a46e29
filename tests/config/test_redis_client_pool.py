"""A Redis client's pool serves every thread of a threads-pool worker at once (config.redis_client)."""

from __future__ import annotations

import threading
import uuid

from django.conf import settings

from config.queues import Queue
from config.redis_client import connect
from config.workers import WORKERS


def test_a_client_serves_as_many_threads_at_once_as_the_generation_worker_runs() -> None:
    # given one client shared by as many threads as the generation worker runs, all inside a
    # Redis command at the same moment (as after a stall of the worker: each waits on its reply)
    client = connect(settings.REDIS_URL, timeout_s=5.0)
    threads = WORKERS[Queue.GENERATION].concurrency
    start, key = threading.Barrier(threads), f"test:pool:{uuid.uuid4().hex}"
    failed: list[BaseException] = []

    def inside_a_command() -> None:
        start.wait(10)
        try:
            client.blpop([key], timeout=1)  # holds its connection for a second, server side
        except BaseException as exc:
            failed.append(exc)

    running = [threading.Thread(target=inside_a_command) for _ in range(threads)]
    for thread in running:
        thread.start()
    for thread in running:
        thread.join(15)
    # then every command ran: none was refused a connection (a refusal reads as Redis failing)
    assert failed == []
    client.close()
