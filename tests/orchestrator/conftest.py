from __future__ import annotations

import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from django.conf import settings

from devtools.processes import RedisCluster
from orchestrator.budget import Budget, SendRules, connect
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


# The cluster's three redis-server processes make those runs slow (pyproject.toml, `slow`).
@pytest.fixture(params=["single", pytest.param("cluster", marks=pytest.mark.slow)])
def client(request: pytest.FixtureRequest) -> Iterator[Client]:
    """A raw client as the budget makes it (`connect`): of the test Redis, and of a Redis
    Cluster (BUDGET_REDIS_URL=redis+cluster://...), so every budget test runs on both."""
    url = settings.REDIS_URL if request.param == "single" else request.getfixturevalue("redis_cluster").url
    c = connect(url)
    yield c
    c.close()


@pytest.fixture
def clock() -> FakeClock:
    return FakeClock()


@pytest.fixture
def budget_defaults() -> dict[str, Any]:
    """What `make_budget` passes to Budget unless the test says otherwise. A module whose
    budgets share limits or a clock overrides this fixture; the default says nothing."""
    return {}


@pytest.fixture
def make_budget(client: Client, budget_defaults: dict[str, Any]) -> Iterator[Callable[..., Budget]]:
    """`make_budget(send_rules=None, **kwargs)`: a Budget on `client` under a key prefix of its
    own, built from `budget_defaults` updated with `kwargs`; every one reset after the test."""
    made: list[Budget] = []

    def make(*, send_rules: SendRules | None = None, **kwargs: Any) -> Budget:
        options = {**budget_defaults, **kwargs}
        budget = Budget(redis_client=client, prefix=f"test-{uuid.uuid4().hex}", **options)
        if send_rules is not None:
            budget.send_rules = send_rules
        made.append(budget)
        return budget

    yield make
    for budget in made:
        budget.reset()
