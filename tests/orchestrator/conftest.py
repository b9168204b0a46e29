from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis
from django.conf import settings

from orchestrator.budget import connect

START_MS = 1_700_000_000_000


class FakeClock:
    """The budget's injectable clock (Redis milliseconds), moved by hand."""

    def __init__(self) -> None:
        self.now = START_MS

    def __call__(self) -> int:
        return self.now


@pytest.fixture
def client() -> Iterator[redis.Redis]:
    """A raw client of the test Redis, as the budget makes it (`connect`)."""
    c = connect(settings.REDIS_URL)
    yield c
    c.close()
