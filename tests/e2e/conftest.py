"""Real processes: Celery workers and beat against the test database, Redis, an SMTP sink and
a scripted LLM provider over HTTP. Tests here are transactional so other processes see rows."""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.db import connection

from config.processes import ProcessGroup, celery_beat, celery_worker
from config.queues import Queue
from tests.llm_stub import LLMStub
from tests.smtp_sink import SMTPSink

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"


@pytest.fixture
def smtp_sink() -> Iterator[SMTPSink]:
    sink = SMTPSink().start()
    yield sink
    sink.stop()


@pytest.fixture
def llm_stub() -> Iterator[LLMStub]:
    stub = LLMStub().start()
    yield stub
    stub.stop()


@pytest.fixture
def stack(
    request: pytest.FixtureRequest, redis_client: Any, smtp_sink: SMTPSink, llm_stub: LLMStub, settings: Any
) -> Iterator[ProcessGroup]:
    """A process group whose children use this test's database, Redis, SMTP sink and provider."""
    db = connection.settings_dict
    env = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "config.settings",
        "DJANGO_DEBUG": "1",
        "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
        "REDIS_URL": settings.REDIS_URL,
        "LLM_BASE_URL": llm_stub.base_url,
        "LLM_API_KEY": "sk-test",
        "EMAIL_HOST": "127.0.0.1",
        "EMAIL_PORT": str(smtp_sink.port),
        "DISPATCH_INTERVAL": "1",
        "DISPATCH_STUCK_AFTER_S": "4",
    }
    group = ProcessGroup(log_dir=ARTIFACTS / request.node.name, env=env)
    yield group
    group.stop()


def start_pipeline(group: ProcessGroup, *, beat: bool = True) -> None:
    for queue in (Queue.ORCHESTRATOR, Queue.GENERATION, Queue.SEND, Queue.DEAD_LETTER):
        group.start(f"worker-{queue.value}", celery_worker(queue, concurrency=2))
    if beat:
        group.start("beat", celery_beat())


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
    pytest.fail(
        f"timed out after {timeout_s}s waiting for {what}" + (f"; logs in {group.log_dir}" if group else "")
    )
