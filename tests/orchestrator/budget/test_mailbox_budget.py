"""The mailboxes' counters in Redis (orchestrator.budget.mailboxes) and the warm-up maths."""

from __future__ import annotations

from datetime import date

import pytest
import redis

from orchestrator.budget import Budget, Limits, MailboxGrant, MailboxTerms, SendDenied, ramp_cap


@pytest.mark.parametrize(
    ("days", "expected"), [(-1, 0), (0, 5), (1, 7), (9, 23), (17, 39), (18, 40), (100, 40)]
)
def test_the_warm_up_adds_its_step_each_day_up_to_the_cap(days: int, expected: int) -> None:
    start = date(2026, 12, 1)
    today = date.fromordinal(start.toordinal() + days)
    assert ramp_cap(daily_cap=40, ramp_start=5, ramp_step=2, ramp_from=start, today=today) == expected


@pytest.fixture
def at(redis_client: redis.Redis) -> tuple[Budget, list[int]]:
    now = [1_796_212_800_000]  # 2026-12-02 12:00 UTC
    return Budget(
        redis_client=redis_client, limits=Limits(rpm=1000, tpm=1_000_000), clock=lambda: now[0]
    ), now


def _take(budget: Budget, *, cap: int = 5, spacing_ms: int = 1_000) -> MailboxGrant | SendDenied:
    return budget.mailbox_reserve(
        owner_id=1,
        organization_id=1,
        mailboxes=[MailboxTerms(id=7, address="a@x.example", cap_today=cap, spacing_ms=spacing_ms)],
        recipient_domain="y.example",
        recipient_cap=None,
    )


def test_a_send_that_waited_for_the_rate_moves_the_mailbox_s_next_send(at: tuple[Budget, list[int]]) -> None:
    budget, now = at
    grant = _take(budget)
    assert isinstance(grant, MailboxGrant)
    # when the email left 5 s after its grant (the account's rate), the next waits 1 s after that
    budget.mailbox_defer(grant=grant, by_ms=5_000)
    now[0] += 2_000
    denied = _take(budget)
    assert isinstance(denied, SendDenied)
    assert denied.wait_ms == 4_000
    now[0] += 4_000
    assert isinstance(_take(budget), MailboxGrant)


def test_a_released_send_gives_its_day_back(at: tuple[Budget, list[int]]) -> None:
    budget, _ = at
    grant = _take(budget, cap=1, spacing_ms=0)
    assert isinstance(grant, MailboxGrant)
    assert budget.mailbox_usage(mailbox_ids=[7])[7].sent_today == 1
    budget.mailbox_release(grant=grant)
    assert budget.mailbox_usage(mailbox_ids=[7])[7].sent_today == 0
    assert isinstance(_take(budget, cap=1, spacing_ms=0), MailboxGrant)
    assert isinstance(_take(budget, cap=1, spacing_ms=0), SendDenied)
