"""The dispatcher hands approved drafts to `send` at the send budget's rate: real PostgreSQL and
Redis. (The budget itself: test_budget_sends.py; the send worker: tests/nurture/test_send_budget.py.)"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest

from orchestrator.budget import Budget, SendRules
from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.dispatch.send_flow import round_robin, send_slots
from orchestrator.metrics.depth import deferred_work
from outreach.models import Outreach, State
from tests.factories import make_lead, make_org, make_outreach, make_owner


@pytest.mark.parametrize(
    ("rate_per_s", "interval_s", "in_flight", "slots"),
    [
        (None, 2, 0, None),  # no send rate: no limit
        (4.0, 2, 0, 16),  # two cycles' worth
        (4.0, 2, 10, 6),
        (4.0, 2, 20, 0),
        (18.98, 2, 0, 76),  # ceil(75.92)
    ],
)
def test_send_slots(rate_per_s: float | None, interval_s: int, in_flight: int, slots: int | None) -> None:
    assert send_slots(rate_per_s=rate_per_s, interval_s=interval_s, in_flight=in_flight) == slots


def test_round_robin_takes_one_per_owner_in_turn_from_the_rotated_start() -> None:
    found = {1: [10, 11, 12], 2: [20], 3: [30, 31]}
    assert round_robin(found, slots=4, start=0) == [10, 20, 30, 11]
    assert round_robin(found, slots=4, start=1) == [20, 30, 10, 31]
    assert round_robin(found, slots=10, start=2) == [30, 10, 20, 31, 11, 12]
    assert round_robin({}, slots=3, start=0) == []


@pytest.mark.django_db
def test_a_burst_of_approvals_is_handed_out_at_the_send_rate_round_robin(
    budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given 5/s (strict: 4/s), a 2 s cycle, and three owners with 10 approved drafts each
    settings.DISPATCH_INTERVAL = 2
    budget.send_rules = SendRules(per_second=5)
    org = make_org()
    owners = [make_owner(organization=org, daily_limit=100) for _ in range(3)]
    for owner in owners:
        for _ in range(10):
            make_outreach(
                lead=make_lead(owner=owner), state=State.APPROVED, draft_subject="Hi", draft_body="B"
            )
    # when a cycle runs
    with django_capture_on_commit_callbacks(execute=True):
        report = dispatch_cycle(budget=budget)
    # then two cycles' worth at 4/s goes to send, shared among the owners
    assert len(report.send) == 16
    per_owner = Counter(Outreach.objects.filter(id__in=report.send).values_list("owner_id", flat=True))
    assert sorted(per_owner.values()) == [5, 5, 6]
    # and the rest wait in APPROVED saying why, counted as deferred work
    waiting = Outreach.objects.filter(state=State.APPROVED)
    assert set(waiting.values_list("blocked_reason", flat=True)) == {"send rate 5/s reached"}
    assert [(r.reason, r.rows) for r in deferred_work().reasons] == [("send rate 5/s reached", 14)]
    # when the next cycle runs with those 16 still in flight, nothing more goes
    with django_capture_on_commit_callbacks(execute=True):
        assert dispatch_cycle(budget=budget).send == []


@pytest.mark.django_db
def test_without_a_send_rate_every_approved_draft_goes_at_once(
    budget: Budget, django_capture_on_commit_callbacks: Any
) -> None:
    owner = make_owner(daily_limit=100)
    for _ in range(30):
        make_outreach(lead=make_lead(owner=owner), state=State.APPROVED, draft_subject="Hi", draft_body="B")
    with django_capture_on_commit_callbacks(execute=True):
        assert len(dispatch_cycle(budget=budget).send) == 30
