"""Start and stop the product's processes as a group (the demo, end-to-end tests, benchmarks).

Each process runs in its own session so a stop reaches its children (prefork pools too);
stop() sends SIGTERM, waits, then SIGKILLs whatever is left. Nothing is left running.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from config.queues import Queue
from config.workers import WORKERS, Pool, worker_environment

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

    def start(self, *, timeout_s: float = 10.0, extra: Sequence[str] = ()) -> RedisServer:
        """Start (or restart, on the same port) and wait until it answers PING; `extra` are more
        redis-server options (RedisCluster's cluster mode)."""
        import redis  # not needed by the rest of this module's users

        args = ["--port", str(self.port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no", *extra]
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


class RedisCluster:
    """A throwaway three-primary Redis Cluster (no replicas) on free ports, for the budget's
    cluster tests: `url` (redis+cluster://, what `orchestrator.budget.connect` takes) names one
    node and the client discovers the others. Starts in about a second; its node files live in
    a temporary directory removed on stop."""

    def __init__(self, *, nodes: int = 3) -> None:
        self.servers = [RedisServer() for _ in range(nodes)]
        self.workdir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def url(self) -> str:
        return f"redis+cluster://127.0.0.1:{self.servers[0].port}"

    def start(self, *, timeout_s: float = 10.0) -> RedisCluster:
        """Start the nodes in cluster mode, join them (redis-cli --cluster create) and wait until
        every slot is served."""
        try:
            return self._start(timeout_s=timeout_s)
        except BaseException:
            self.stop()
            raise

    def _start(self, *, timeout_s: float) -> RedisCluster:
        import redis

        self.workdir = tempfile.TemporaryDirectory(prefix="redis-cluster-")
        for server in self.servers:
            conf = Path(self.workdir.name) / f"nodes-{server.port}.conf"
            cluster = ["--cluster-enabled", "yes", "--cluster-config-file", str(conf)]
            # Its own bus port: the default (port + 10000) can lie beyond 65535 for a free port.
            server.start(timeout_s=timeout_s, extra=[*cluster, "--cluster-port", str(free_port())])
        hosts = [f"127.0.0.1:{server.port}" for server in self.servers]
        subprocess.run(
            ["redis-cli", "--cluster", "create", *hosts, "--cluster-replicas", "0", "--cluster-yes"],
            check=True,
            stdout=subprocess.DEVNULL,
            timeout=timeout_s,
        )
        deadline = time.monotonic() + timeout_s
        for server in self.servers:
            probe = redis.Redis(port=server.port, socket_connect_timeout=0.5)
            try:
                # create returns once the slots are assigned; each node serves only after it has
                # heard of all the others (gossip), which its cluster_state reports.
                while probe.cluster("INFO").get("cluster_state") != "ok":
                    if time.monotonic() > deadline:
                        raise TimeoutError(f"Redis Cluster node {server.port} not ready in {timeout_s} s")
                    time.sleep(0.05)
            finally:
                probe.close()
        return self

    def stop(self) -> None:
        for server in self.servers:
            server.stop()
        if self.workdir is not None:
            self.workdir.cleanup()
            self.workdir = None


def celery_worker(
    queue: Queue, *, concurrency: int | None = None, name: str | None = None, pool: Pool | None = None
) -> list[str]:
    """The queue's worker as the recipe (config.workers) runs it; `concurrency` and `name`
    override for tests that want a small or a second worker, `pool` for one on the other pool."""
    recipe = WORKERS[queue].argv(concurrency=concurrency, name=name, pool=pool)
    environment = [f"{k}={v}" for k, v in worker_environment(pool or WORKERS[queue].pool).items()]
    return [
        "env",
        *environment,
        sys.executable,
        "-m",
        *recipe,
        "--loglevel",
        "INFO",
        "--without-gossip",
        "--without-mingle",
    ]


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

    def stacks_dump(self) -> None:
        """Every Celery worker of the group (and its prefork children) writes its threads'
        stacks to its log (SIGUSR2: config.celery): what a timed-out test shows of a stuck one.
        Only workers: SIGUSR2 would end beat, and upgrade gunicorn."""
        for name, proc in self.procs.items():
            if name.startswith("worker-") and proc.poll() is None:
                os.killpg(proc.pid, signal.SIGUSR2)
        time.sleep(1.0)  # each writes from its signal handler

    def kill(self, name: str, sig: signal.Signals = signal.SIGKILL) -> None:
        proc = self.procs[name]
        if proc.poll() is None:
            os.killpg(proc.pid, sig)

    def stop(self, timeout: float = 15.0) -> None:
        """SIGTERM to each line's whole process group, then SIGKILL to what is left of it after
        `timeout`. A line is a shell running the worker (the Procfile's `env ... celery`): the
        shell ends at once, so waiting for it alone left a slow worker running on, busy
        reconnecting to its stopped broker beside the next bench's measurement."""
        for proc in self.procs.values():
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        for proc in self.procs.values():
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.1, deadline - time.monotonic()))
            if not _group_ended(proc.pid, by=deadline):
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait(5)
                _group_ended(proc.pid, by=time.monotonic() + 5)  # SIGKILL lands when it is scheduled
        self.procs.clear()


def _group_ended(pgid: int, *, by: float) -> bool:
    """Wait until no process of the group runs, or the monotonic time `by`; whether it ended."""
    while _group_alive(pgid):
        if time.monotonic() >= by:
            return False
        time.sleep(0.05)
    return True


def _group_alive(pgid: int) -> bool:
    """Whether a process of this group still runs (a zombie awaiting its reaper does not)."""
    proc_dir = Path("/proc")
    if not proc_dir.is_dir():  # not Linux: the group exists while any member does, zombies too
        try:
            os.killpg(pgid, 0)
        except (ProcessLookupError, PermissionError):
            return False
        return True
    for stat in proc_dir.glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rpartition(")")[2].split()
        except OSError:  # it ended while we looked
            continue
        if len(fields) > 2 and fields[2] == str(pgid) and fields[0] != "Z":
            return True
    return False
