"""nurture.retry_rules: 429 re-queues are bounded; the provider that keeps refusing ends in a
dead letter that says so."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from nurture.errors import RateLimited
from nurture.retry_rules import fail
from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, Outreach, State
from outreach.transitions import transition
from tests.factories import make_outreach

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]


def _generating() -> Outreach:
    row = make_outreach(state=State.DISPATCHED)
    transition(outreach_id=row.pk, from_=State.DISPATCHED, to=State.GENERATING)
    return row


def _refused_again(row: Outreach) -> State:
    row.refresh_from_db()
    if row.state == State.QUEUED:
        transition(outreach_id=row.pk, from_=State.QUEUED, to=State.DISPATCHED)
        transition(outreach_id=row.pk, from_=State.DISPATCHED, to=State.GENERATING)
        row.refresh_from_db()
    return fail(
        outreach=row, from_=State.GENERATING, exc=RateLimited("429", retry_after_s=2), job_type="generation"
    )


def test_429s_requeue_up_to_the_cap_then_dead_letter_saying_the_provider_kept_refusing(
    settings: Any,
) -> None:
    # given at most 3 re-queues after a 429
    settings.RETRY_MAX_RATE_LIMITED = 3
    row = _generating()
    # when the provider answers 429 four times in a row
    outcomes = [_refused_again(row) for _ in range(4)]
    # then the first three are re-queued (no attempt spent) and the fourth is dead-lettered
    assert outcomes == [State.QUEUED, State.QUEUED, State.QUEUED, State.DEAD]
    row.refresh_from_db()
    assert (row.attempts, row.rate_limited) == (0, 3)
    letter = DeadLetter.objects.get(outreach=row)
    assert letter.failure_class == ErrorClass.RATE_LIMITED
    assert "provider kept refusing" in letter.reason
    assert "4 times" in letter.reason


def test_replay_gives_a_fresh_429_allowance(settings: Any) -> None:
    from orchestrator.failures.dead_letters import dead_letter_replay

    settings.RETRY_MAX_RATE_LIMITED = 1
    row = _generating()
    assert [_refused_again(row) for _ in range(2)] == [State.QUEUED, State.DEAD]
    dead_letter_replay(dead_letter=DeadLetter.objects.get(outreach=row))
    assert _refused_again(row) == State.QUEUED


@pytest.mark.slow
def test_bad_rate_limited_cap_is_a_startup_error_naming_it() -> None:
    result = subprocess.run(
        [sys.executable, "-c", "import django; django.setup()"],
        cwd=ROOT,
        env={**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings", "RETRY_MAX_RATE_LIMITED": "0"},
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert "RETRY_MAX_RATE_LIMITED='0': must be at least 1" in result.stderr
