"""Start and stop the product's processes as a group (the demo, end-to-end tests, benchmarks).

Each process runs in its own session so a stop reaches its children (prefork pools too);
stop() sends SIGTERM, waits, then SIGKILLs whatever is left. Nothing is left running.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from config.queues import Queue
from config.workers import WORKERS

ROOT = Path(__file__).resolve().parent.parent


def free_port() -> int:
    """A TCP port on 127.0.0.1 nobody listens on now (for sinks, simulators and test servers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """A throwaway redis-server on a free port, no persistence (a restart comes back empty), for
    tests and benchmarks that stop, crash or prioritise Redis: the shared one is never touched."""

    def __init__(self) -> None:
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self, *, timeout_s: float = 10.0) -> RedisServer:
        """Start (or restart, on the same port) and wait until it answers PING."""
        import redis  # not needed by the rest of this module's users

        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"]
        self.proc = subprocess.Popen(
            ["redis-server", *args, "--daemonize", "no"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        probe = redis.Redis.from_url(self.url, socket_connect_timeout=0.1)
        deadline = time.monotonic() + timeout_s
        try:
            while True:
                try:
                    probe.ping()
                    return self
                except redis.ConnectionError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.02)
        finally:
            probe.close()

    def stop(self) -> None:
        """SIGTERM and wait: a clean shutdown."""
        if self.proc is not None:
            self.proc.terminate()
            self.proc.wait(timeout=10)
            self.proc = None

    def crash(self) -> None:
        """SIGKILL: like a crash, every queued message and key is gone."""
        if self.proc is not None:
            self.proc.kill()
            self.proc.wait(timeout=10)
            self.proc = None


def celery_worker(queue: Queue, *, concurrency: int | None = None, name: str | None = None) -> list[str]:
    """The queue's worker as the recipe (config.workers) runs it; `concurrency` and `name`
    override for tests that want a small or a second worker (same pool)."""
    recipe = WORKERS[queue].argv(concurrency=concurrency, name=name)
    return [sys.executable, "-m", *recipe, "--loglevel", "INFO", "--without-gossip", "--without-mingle"]


def celery_beat() -> list[str]:
    return [sys.executable, "-m", "celery", "-A", "config", "beat", "--loglevel", "INFO"]


def flower(*, port: int) -> list[str]:
    """Flower on loopback; basic auth from FLOWER_BASIC_AUTH through flowerconfig.py."""
    return [sys.executable, "-m", "celery", "-A", "config", "flower", f"--port={port}", "--address=127.0.0.1"]


def web(*, port: int) -> list[str]:
    return [sys.executable, "manage.py", "runserver", f"127.0.0.1:{port}", "--noreload"]


def stack_env(*, llm_base_url: str, smtp_port: int, **settings: str) -> dict[str, str]:
    """The environment of a local stack's processes (the demo, benchmarks, tests): this
    process's, with demo settings (DJANGO_DEBUG=1: demo secrets, never production ones), the
    provider and the mail server they talk to, and `settings` (variable -> value)."""
    return {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "1",
        "LLM_BASE_URL": llm_base_url,
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp_port),
        **settings,
    }


def start_pipeline(
    group: ProcessGroup, *, concurrency: int | Mapping[Queue, int] | None = None, beat: bool = True
) -> None:
    """One Celery worker per queue, named `worker-<queue>`, as the recipe runs it
    (config.workers); `concurrency` overrides it for all of them, or per queue), and beat
    unless `beat=False`."""
    for queue in Queue:
        n = concurrency if isinstance(concurrency, int | None) else concurrency.get(queue)
        group.start(f"worker-{queue.value}", celery_worker(queue, concurrency=n))
    if beat:
        group.start("beat", celery_beat())


@dataclass
class ProcessGroup:
    log_dir: Path
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    procs: dict[str, subprocess.Popen[bytes]] = field(default_factory=dict)

    def start(self, name: str, argv: list[str]) -> subprocess.Popen[bytes]:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        log = (self.log_dir / f"{name}.log").open("ab")
        proc = subprocess.Popen(
            argv, cwd=ROOT, env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
        )
        self.procs[name] = proc
        return proc

    def dead(self) -> list[str]:
        return [name for name, proc in self.procs.items() if proc.poll() is not None]

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, sig)

    def stop(self, timeout: float = 15.0) -> None:
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
        self.procs.clear()
