"""Real processes: Celery workers and beat against the test database, Redis, an SMTP sink and
a scripted LLM provider over HTTP. Tests here are transactional so other processes see rows."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings as django_settings
from django.db import connection

from devtools import processes
from devtools.llm_stub import LLMStub
from devtools.processes import ProcessGroup, stack_env
from devtools.smtp_sink import SMTPSink

ARTIFACTS = Path(__file__).resolve().parents[2] / "artifacts" / "e2e"


@pytest.fixture
def stack(
    request: pytest.FixtureRequest, redis_client: Any, smtp_sink: SMTPSink, llm_stub: LLMStub, settings: Any
) -> Iterator[ProcessGroup]:
    """A process group whose children use this test's database, Redis, SMTP sink and provider."""
    env = stack_env_for_test(llm_base_url=llm_stub.base_url, smtp_port=smtp_sink.port)
    group = ProcessGroup(log_dir=ARTIFACTS / request.node.name, env=env)
    yield group
    group.stop()


def stack_env_for_test(*, llm_base_url: str, smtp_port: int, **settings: str) -> dict[str, str]:
    """A stack's environment pointed at this test's database and Redis, with fast recovery
    (stuck after 4 s) and a cycle a second; `settings` override."""
    db = connection.settings_dict
    return stack_env(
        llm_base_url=llm_base_url, smtp_port=smtp_port, **{
            "DATABASE_URL": f"postgres://{db['USER']}@{db['HOST']}:{db['PORT']}/{db['NAME']}",
            "REDIS_URL": django_settings.REDIS_URL, "LLM_API_KEY": "sk-test", "DISPATCH_INTERVAL": "1",
            "DISPATCH_STUCK_AFTER_S": "4", **settings,
        },
    )  # fmt: skip


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
    pytest.fail(
        f"timed out after {timeout_s}s waiting for {what}" + (f"; logs in {group.log_dir}" if group else "")
    )
