"""The admission's rules as pure functions (selection.admission): facts in, rooms and reasons out."""

from __future__ import annotations

from datetime import UTC, datetime, time
from decimal import Decimal
from typing import Any

import pytest

from orchestrator.budget import DomainDay
from orchestrator.dispatch.owner_limits import OwnerRules
from orchestrator.dispatch.selection.admission import (
    OwnerAdmission,
    OwnerFacts,
    SpendFacts,
    owner_admission,
    picks_admission,
    unsendable_rows,
)

NOW = datetime(2026, 11, 25, 12, 0, tzinfo=UTC)  # a Wednesday


def _owner(
    owner_id: int = 1, *, limit: int = 20, org: int = 1, domain: str = "a.example", **facts: Any
) -> OwnerFacts:
    rules = OwnerRules(owner_id, limit, time(9), time(17), facts.pop("days", "12345"), "UTC")
    return OwnerFacts(rules=rules, organization_id=org, sender_domain=domain, **facts)


def _one(facts: OwnerFacts, **kwargs: Any) -> OwnerAdmission:
    decisions, _ = owner_admission(
        owners=[facts],
        now=kwargs.pop("now", NOW),
        domains=kwargs.get("domains", {}),
        spend=kwargs.get("spend", {}),
    )
    return decisions[facts.rules.owner_id]


@pytest.mark.parametrize(
    ("facts", "send", "llm", "reason"),
    [
        # nothing committed: the day is the room for both
        (_owner(), 20, 20, ""),
        # a pause comes first, whatever else is true
        (_owner(paused="paused by ann", days="67"), 0, 0, "paused by ann"),
        # outside working days: nothing, with when it resumes
        (_owner(days="67"), 0, 0, "outside operating hours 09:00-17:00, resumes Sat 09:00 UTC"),
        # the day: sent and in flight
        (_owner(sent_today=15, in_flight=5), 0, 0, "daily limit 20 reached, resumes 09:00 UTC"),
        # drafts: approved drafts may still be sent, but no more LLM work
        (
            _owner(sent_today=5, in_flight=1, drafts=14, review_required=True),
            14,
            0,
            "daily limit 20 committed: 5 sent today, 1 in flight, 14 drafts; more as drafts are sent or rejected",
        ),
        # a draft-ahead day doubles what a review-required owner may hold
        (_owner(sent_today=5, drafts=15, review_required=True, draft_ahead_days=1), 15, 20, ""),
        # ... but not outside its hours, nor with a limit of none
        (
            _owner(days="67", review_required=True, draft_ahead_days=1),
            0,
            0,
            "outside operating hours 09:00-17:00, resumes Sat 09:00 UTC",
        ),
        (_owner(limit=0, review_required=True, draft_ahead_days=1), 0, 0, "daily limit 0 reached"),
        # ... and means nothing for an autonomous one
        (_owner(drafts=20, draft_ahead_days=1), 20, 0, "daily limit 20 committed"),
        # the owner's mailboxes' room, less what is in flight or drafted (it leaves from them)
        (_owner(mailbox_room={"a.example": 0}), 20, 0, "mailboxes' day reached: 0 more may leave today"),
        (_owner(mailbox_room={"a.example": 1, "b.example": 2}), 20, 3, ""),
        (
            _owner(mailbox_room={"a.example": 5}, in_flight=2, drafts=3, review_required=True),
            18,
            0,
            "mailboxes' day",
        ),
        # every mailbox paused: no domain to send from
        (_owner(mailbox_room={}), 20, 0, "every mailbox of this owner is paused"),
        # the mailboxes' day and the owner's committed day both spent: the earlier rule names it
        (_owner(mailbox_room={"a.example": 5}, drafts=20), 20, 0, "mailboxes' day reached"),
        # the owner's committed day spent, its mailboxes with room left
        (_owner(mailbox_room={"a.example": 50}, drafts=20), 20, 0, "daily limit 20 committed"),
    ],
)
def test_owner_rules_in_order(facts: OwnerFacts, send: int, llm: int, reason: str) -> None:
    decision = _one(facts)
    assert (decision.send, decision.llm) == (send, llm)
    assert decision.reason.startswith(reason)


def test_a_sender_domain_counts_what_its_owners_committed_and_shares_its_room() -> None:
    # given a domain with a cap of 10, 4 sent today, and two owners with 3 in flight and drafts
    a = _owner(1, in_flight=1, drafts=1)
    b = _owner(2, org=2, drafts=1)
    other = _owner(3, domain="b.example")
    decisions, shared = owner_admission(
        owners=[a, b, other],
        now=NOW,
        domains={"a.example": DomainDay(sent=4, cap=10, warmup_day=2)},
        spend={},
    )
    # then each owner of the domain may start at most the 3 left, the other domain's owner is free
    assert [decisions[o].llm for o in (1, 2, 3)] == [3, 3, 20]
    # and the picks share those 3: the fourth is refused with the domain's reason
    verdicts = picks_admission(picks=[(10, 1), (20, 2), (11, 1), (30, 3), (21, 2)], shared=shared)
    assert verdicts.admitted == (10, 20, 11, 30)
    assert verdicts.refused == {
        21: "sender domain a.example: 10/day reached (warm-up day 2), resumes 00:00 UTC"
    }


def test_a_used_up_domain_day_refuses_its_owners_llm_work_but_not_their_sends() -> None:
    decision = _one(_owner(), domains={"a.example": DomainDay(sent=3, cap=3, warmup_day=1)})
    assert (decision.send, decision.llm) == (20, 0)
    assert decision.reason == "sender domain a.example: 3/day reached (warm-up day 1), resumes 00:00 UTC"


@pytest.mark.parametrize(
    ("spend", "job_cost", "room"),
    [
        # nothing spent or reserved: $1 holds 4 jobs at $0.30 (the last passes by less than one)
        (SpendFacts(cap=Decimal("1"), spent=Decimal("0"), in_flight=Decimal("0")), Decimal("0.30"), 4),
        # spent and in flight at what each job reserved: $0.25 left, one more job
        (SpendFacts(cap=Decimal("1"), spent=Decimal("0.40"), in_flight=Decimal("0.35")), Decimal("0.30"), 1),
        # one dear job in flight met the cap
        (SpendFacts(cap=Decimal("1"), spent=Decimal("0"), in_flight=Decimal("1.20")), Decimal("0.30"), 0),
        (SpendFacts(cap=Decimal("1"), spent=Decimal("1"), in_flight=Decimal("0")), Decimal("0"), 0),
        # unpriced jobs: no limit while the cap is not met
        (SpendFacts(cap=Decimal("1"), spent=Decimal("0.5"), in_flight=Decimal("0")), Decimal("0"), None),
    ],
)
def test_spend_room_counts_work_in_flight_at_its_reserved_cost(
    spend: SpendFacts, job_cost: Decimal, room: int | None
) -> None:
    decisions, _ = owner_admission(
        owners=[_owner()], now=NOW, domains={}, spend={1: spend}, job_cost={1: job_cost}
    )
    decision = decisions[1]
    assert decision.llm == (20 if room is None else min(20, room))
    if room == 0:
        assert decision.reason == "daily spend cap $1.00 reached, resumes 00:00 UTC"


def test_each_pick_reserves_its_own_cost_of_the_spend_cap() -> None:
    # given $1 left to an organization, owner 1's replies reserving $0.60 and its intros $0.30
    spend = {1: SpendFacts(cap=Decimal("1"), spent=Decimal("0"), in_flight=Decimal("0"))}
    _, shared = owner_admission(
        owners=[_owner()], now=NOW, domains={}, spend=spend, job_cost={1: Decimal("0.30")}
    )
    picks = [(10, 1), (11, 1), (12, 1)]
    costs = {10: Decimal("0.60"), 11: Decimal("0.30"), 12: Decimal("0.30")}
    # then the reply and one intro fit ($0.90); the third pick finds $0.10 left and is admitted
    # (the last passes by less than one job); a fourth would be refused
    verdicts = picks_admission(picks=[*picks, (13, 1)], shared=shared, row_cost=costs)
    assert verdicts.admitted == (10, 11, 12)
    assert verdicts.refused == {13: "daily spend cap $1.00 reached, resumes 00:00 UTC"}


def test_an_owner_on_two_mailbox_domains_is_held_only_when_both_days_are_used_up() -> None:
    # given an owner with mailboxes on a.example (day used up) and b.example (2 left)
    days = {d: DomainDay(sent=s, cap=5, warmup_day=0) for d, s in (("a.example", 5), ("b.example", 3))}
    owner = _owner(mailbox_room={"a.example": 10, "b.example": 10})
    decisions, shared = owner_admission(owners=[owner], now=NOW, domains=days, spend={})
    # then it may start what b.example can still send, and its picks are charged there
    assert decisions[1].llm == 2
    verdicts = picks_admission(picks=[(10, 1), (11, 1), (12, 1)], shared=shared)
    assert verdicts.admitted == (10, 11)
    assert verdicts.refused == {12: "sender domain a.example: 5/day reached, resumes 00:00 UTC"}


def test_rows_of_suppressed_leads_are_refused_saying_why() -> None:
    assert unsendable_rows(lead_status={7: "opted_out"}) == {7: "lead opted_out: nothing is sent to it"}
