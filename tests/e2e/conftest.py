"""Real processes: Celery workers and beat against the test database, Redis, an SMTP sink and
a scripted LLM provider over HTTP. Tests here are transactional so other processes see rows."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection, connections
from playwright.sync_api import BrowserContext, sync_playwright

from config.celery import app
from config.env import database_url
from config.queues import Queue
from devtools import processes
from devtools.llm_stub import LLMStub
from devtools.processes import ProcessGroup, stack_env
from devtools.smtp_sink import SMTPSink

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"
SHOTS = ARTIFACTS / "browser"
CHROMIUM = "/usr/bin/chromium"
# The flags Chromium needs on a machine with no network beyond the package registries: without
# the background-networking ones it keeps opening connections that the closed network refuses.
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]


@pytest.fixture
def stack(
    request: pytest.FixtureRequest, redis_client: Any, smtp_sink: SMTPSink, llm_stub: LLMStub, settings: Any
) -> Iterator[ProcessGroup]:
    """A process group whose children use this test's database, Redis, SMTP sink and provider."""
    purge_broker()
    env = stack_env_for_test(llm_base_url=llm_stub.base_url, smtp_port=smtp_sink.port)
    group = ProcessGroup(log_dir=ARTIFACTS / request.node.name, env=env)
    yield group
    group.stop()


def purge_broker() -> None:
    """Start from empty queues. On Redis they went with the test database's flush; RabbitMQ
    (CELERY_BROKER_URL=amqp://..., the second CI pass) keeps them across tests."""
    if not django_settings.CELERY_BROKER_URL.startswith("amqp"):
        return
    with app.connection_for_write() as conn:
        for queue in app.conf.task_queues:
            bound = queue(conn.default_channel)
            bound.declare()
            bound.purge()


def stack_env_for_test(*, llm_base_url: str, smtp_port: int, **settings: str) -> dict[str, str]:
    """A stack's environment pointed at this test's database and Redis, with fast recovery
    (stuck after 4 s) and a cycle a second; `settings` override."""
    db = connection.settings_dict
    return stack_env(
        llm_base_url=llm_base_url,
        smtp_port=smtp_port,
        **{
            "DATABASE_URL": database_url(db),
            "REDIS_URL": django_settings.REDIS_URL,
            "LLM_API_KEY": "sk-test",
            "DISPATCH_INTERVAL": "1",
            "DISPATCH_STUCK_AFTER_S": "4",
            **settings,
        },
    )


def start_pipeline(group: ProcessGroup, *, beat: bool = True) -> None:
    """The product's workers (2 processes each) and, unless beat=False, beat."""
    processes.start_pipeline(group, concurrency=2, beat=beat)


def wait_until(
    check: Callable[[], bool], *, timeout_s: float, what: str, group: ProcessGroup | None = None
) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return
        if group and (dead := group.dead()):
            pytest.fail(f"{', '.join(dead)} exited early; logs in {group.log_dir}")
        time.sleep(0.2)
    if group:
        group.stacks_dump()  # what each worker was doing, in its log
    pytest.fail(
        f"timed out after {timeout_s}s waiting for {what}"
        + (f"; logs (with each worker's stacks) in {group.log_dir}" if group else "")
    )


def dispatch_cycles(group: ProcessGroup) -> int:
    """Dispatch cycles run so far by the group's orchestrator worker (one log line each, written
    as the cycle ends): waiting for a few more shows the dispatcher, recovery sweep included,
    went past a moment. A test that proves nothing happened waits for that, never a sleep."""
    log = group.log_dir / f"worker-{Queue.ORCHESTRATOR.value}.log"
    return log.read_text(errors="replace").count(" dispatch cycle ") if log.exists() else 0


@pytest.fixture
def browser(
    request: pytest.FixtureRequest, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> Iterator[BrowserContext]:
    """Debian's Chromium with a fresh profile; a missing browser fails the test, never skips it."""
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(f"{CHROMIUM} is missing: run scripts/ensure_chromium.sh (apt-get install chromium)")
    # Playwright's sync API marks an asyncio loop as running in this thread while it is open, so
    # Django would refuse ORM calls here as "async". Nothing runs concurrently with them: the loop
    # only turns inside Playwright's own calls (greenlets), so the guard does not apply.
    # Meanwhile Django keeps the connection per asyncio context instead of per thread: it is
    # closed below, inside that context, or it would outlive the test and block dropping the
    # test database.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    SHOTS.mkdir(parents=True, exist_ok=True)
    with sync_playwright() as playwright:
        context = playwright.chromium.launch_persistent_context(
            tmp_path / "chromium-profile",
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_ARGS,
            viewport={"width": 1280, "height": 900},
        )
        context.set_default_timeout(15_000)
        context.tracing.start(screenshots=True, snapshots=True)  # for reading a CI failure
        try:
            yield context
        finally:
            context.tracing.stop(path=SHOTS / f"trace-{request.node.name}.zip")
            context.close()
            connections.close_all()
