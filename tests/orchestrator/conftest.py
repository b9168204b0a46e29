from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.conf import settings

from devtools.processes import RedisCluster
from orchestrator.budget import connect
from orchestrator.budget.core import Client

START_MS = 1_700_000_000_000


class FakeClock:
    """The budget's injectable clock (Redis milliseconds), moved by hand."""

    def __init__(self) -> None:
        self.now = START_MS

    def __call__(self) -> int:
        return self.now


@pytest.fixture(scope="session")
def redis_cluster() -> Iterator[RedisCluster]:
    """A real three-node Redis Cluster on free ports, started once per test session (~1-3 s)."""
    cluster = RedisCluster().start()
    yield cluster
    cluster.stop()


@pytest.fixture(params=["single", "cluster"])
def client(request: pytest.FixtureRequest) -> Iterator[Client]:
    """A raw client as the budget makes it (`connect`): of the test Redis, and of a Redis
    Cluster (BUDGET_REDIS_URL=redis+cluster://...), so every budget test runs on both."""
    url = settings.REDIS_URL if request.param == "single" else request.getfixturevalue("redis_cluster").url
    c = connect(url)
    yield c
    c.close()
