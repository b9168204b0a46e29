"""The dispatcher hands approved drafts to `send` at the send budget's rate: real PostgreSQL and
Redis. (The budget itself: test_budget_sends.py; the send worker: tests/nurture/mail/test_send_budget.py.)"""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis
from django.utils import timezone

from orchestrator.budget import Budget, SendRules
from orchestrator.dispatch.cycle import SEND_CURSOR_KEY, dispatch_cycle
from orchestrator.dispatch.selection import Cursor, Position, SendSelection, select_sends
from orchestrator.dispatch.send_flow import send_slots
from orchestrator.metrics.depth import deferred_work
from outreach.models import Outreach, Owner, State
from outreach.tiers import Tier
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


def test_select_sends_takes_turns_by_weight_and_goes_on_from_the_cursor() -> None:
    # given three owners' approved drafts, each in its own order
    found = {1: [10, 11, 12], 2: [20], 3: [30, 31]}
    # when 4 sends are shared from the start, then 4 more from where that stopped
    first = select_sends(found, slots=4, cursor=Cursor())
    second = select_sends(found, slots=4, cursor=first.cursor)
    # then one per owner in turn, each owner's oldest first, and the next cycle goes on after
    # the owner served last (owner 1), not from the start again
    assert first.outreach_ids == (10, 20, 30, 11)
    assert second.outreach_ids == (20, 30, 10, 31)
    # and an owner of weight 2 gets two sends a round
    weighted = select_sends({1: [10, 11, 12, 13], 2: [20, 21, 22]}, slots=6, cursor=Cursor(), weights={1: 2})
    assert weighted.outreach_ids == (10, 20, 11, 12, 21, 13)
    # and nothing approved, nothing handed out, the cursor unchanged
    assert select_sends({}, slots=3, cursor=first.cursor) == SendSelection(
        outreach_ids=(), cursor=first.cursor
    )


def _approved(owner: Owner, count: int) -> list[int]:
    return [
        make_outreach(
            lead=make_lead(owner=owner), state=State.APPROVED, draft_subject="Hi", draft_body="B"
        ).pk
        for _ in range(count)
    ]


def _owners_of(ids: list[int]) -> list[int]:
    owner_of = dict(Outreach.objects.filter(id__in=ids).values_list("id", "owner_id"))
    return [owner_of[i] for i in ids]


@pytest.mark.django_db
def test_under_a_send_rate_owners_get_sends_by_their_weights(
    budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given 3/s (strict: 2/s) and a 3 s cycle, so 12 sends a cycle, and two owners with deep
    # backlogs of approved drafts, of weights 2 and 1
    settings.DISPATCH_INTERVAL = 3
    budget.send_rules = SendRules(per_second=3)
    org = make_org()
    heavy = make_owner(organization=org, daily_limit=100, weight=2)
    light = make_owner(organization=org, daily_limit=100, weight=1)
    _approved(heavy, 20)
    _approved(light, 20)
    # when a cycle runs
    with django_capture_on_commit_callbacks(execute=True):
        report = dispatch_cycle(budget=budget)
    # then the sends are shared 2:1, as the LLM slots are
    assert len(report.send) == 12
    assert Counter(_owners_of(report.send)) == {heavy.pk: 8, light.pk: 4}


@pytest.mark.django_db
def test_the_send_cursor_not_the_clock_rotates_who_sends_first(
    budget: Budget, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given 2/s (strict: 1/s) and a 1 s cycle, so 2 sends a cycle, and three owners with
    # approved drafts
    settings.DISPATCH_INTERVAL = 1
    budget.send_rules = SendRules(per_second=2)
    org = make_org()
    a, b, c = (make_owner(organization=org, daily_limit=100) for _ in range(3))
    for owner in (a, b, c):
        _approved(owner, 3)
    now = timezone.now()
    # when two cycles run at the same wall-clock second (the first cycle's sends gone out between)
    with django_capture_on_commit_callbacks(execute=True):
        first = dispatch_cycle(budget=budget, now=now)
    Outreach.objects.filter(id__in=first.send).update(state=State.SENT)
    with django_capture_on_commit_callbacks(execute=True):
        second = dispatch_cycle(budget=budget, now=now)
    # then the second cycle goes on from the owner the first one served last
    assert set(_owners_of(first.send)) == {a.pk, b.pk}
    assert set(_owners_of(second.send)) == {c.pk, a.pk}


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


@pytest.mark.django_db
def test_a_send_cursor_it_cannot_read_does_not_stop_the_sends(
    budget: Budget, redis_client: redis.Redis, settings: Any, django_capture_on_commit_callbacks: Any
) -> None:
    # given a send rate, approved drafts, and in Redis a send cursor that is not one (a bad
    # restore, a hand edit)
    settings.DISPATCH_INTERVAL = 1
    budget.send_rules = SendRules(per_second=2)
    owner = make_owner(daily_limit=100)
    approved = _approved(owner, 3)
    redis_client.set(SEND_CURSOR_KEY, b'{"intro": {"owner_id": "three"}}')
    # when a cycle runs, the sends go out from the start of the round (before, every cycle raised)
    with django_capture_on_commit_callbacks(execute=True):
        assert dispatch_cycle(budget=budget).send == approved[:2]
    # and the send cursor it wrote over it reads back (sends run as the top tier's round)
    assert Cursor.from_json(redis_client.get(SEND_CURSOR_KEY)).position(Tier.REPLY) == Position(
        owner_id=owner.pk
    )
