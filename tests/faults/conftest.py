"""Fixtures of the fault suite: real Celery workers and beat against the test database, Redis
(the test's, or an own redis-server the test may crash), the SMTP sink of tests/conftest.py (it
can be slow), and a provider (a time-stamping LLM stub, or llm_sim).

Each test records its figures (lost, copies, recovery time, requests during an outage) with the
`figures` fixture; they are printed at the end of the run and written to
artifacts/faults/figures.json (figures-chaos.json under CHAOS=1) for docs/reliability.md.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from devtools.processes import ProcessGroup, RedisServer
from devtools.smtp_sink import SMTPSink
from tests.e2e.conftest import ARTIFACTS as E2E_ARTIFACTS
from tests.e2e.conftest import purge_broker, stack_env_for_test
from tests.faults.helpers import CHAOS, TimedLLMStub

ARTIFACTS = E2E_ARTIFACTS.parent / "faults"
_FIGURES: list[dict[str, Any]] = []

StackFactory = Callable[..., ProcessGroup]


@pytest.fixture
def stub() -> Iterator[TimedLLMStub]:
    provider = TimedLLMStub()
    provider.start()
    yield provider
    provider.stop()


@pytest.fixture
def own_redis() -> Iterator[RedisServer]:
    """A redis-server of this test only (the shared one is never restarted); killed at the end."""
    server = RedisServer()
    server.start()
    yield server
    server.crash()


@pytest.fixture
def make_stack(
    request: pytest.FixtureRequest, redis_client: Any, smtp_sink: SMTPSink, stub: TimedLLMStub, settings: Any
) -> Iterator[StackFactory]:
    """Build a ProcessGroup whose children use this test's database, Redis, sink and provider.

    `make_stack(redis_url=..., llm_base_url=..., RETRY_MAX_ATTEMPTS="3", ...)`: keyword
    arguments in capitals are extra environment variables. Every group is stopped at teardown.
    """
    groups: list[ProcessGroup] = []
    purge_broker()  # RabbitMQ keeps messages across tests (Redis's went with the flush)

    def build(*, redis_url: str | None = None, llm_base_url: str | None = None, **env: str) -> ProcessGroup:
        full_env = stack_env_for_test(
            llm_base_url=llm_base_url or stub.base_url,
            smtp_port=smtp_sink.port,
            REDIS_URL=redis_url or settings.REDIS_URL,
            RETRY_BACKOFF_BASE_S="0.5",  # retries in about a second, not 15 s
            **env,
        )
        log_dir = ARTIFACTS / request.node.name
        for old in log_dir.glob("*.log") if log_dir.exists() else []:
            old.unlink()  # one run's logs per directory
        group = ProcessGroup(log_dir=log_dir, env=full_env)
        groups.append(group)
        return group

    yield build
    for group in groups:
        group.stop()


@pytest.fixture
def figures(request: pytest.FixtureRequest) -> Iterator[dict[str, Any]]:
    found: dict[str, Any] = {}
    yield found
    if found:
        _FIGURES.append({"test": request.node.name, "chaos": CHAOS, **found})


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Under CHAOS=1 the long variants get more than the suite's 300 s per test."""
    if CHAOS:
        for item in items:
            if Path(str(item.path)).parent == Path(__file__).parent:
                item.add_marker(pytest.mark.timeout(900))


def pytest_terminal_summary(terminalreporter: Any) -> None:
    if not _FIGURES:
        return
    terminalreporter.section("fault figures" + (" (CHAOS=1)" if CHAOS else ""))
    for row in _FIGURES:
        terminalreporter.write_line(json.dumps(row))
    path: Path = ARTIFACTS / ("figures-chaos.json" if CHAOS else "figures.json")
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(_FIGURES, indent=2) + "\n")
