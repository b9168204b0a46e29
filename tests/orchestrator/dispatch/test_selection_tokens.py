"""Fairness in tokens (`select_batch(costs=...)`, DISPATCH_FAIRNESS=tokens): the pure policy's properties.

Owners share the budget in what their jobs cost: an owner's tag moves by cost / weight per pick and
the cursor carries each owner's lead, so cycles chain into one start-time fair queue. Count mode
(no `costs`) is the rest of tests/orchestrator/dispatch/test_selection.py, unchanged.
"""

from __future__ import annotations

import weakref
from collections import Counter
from collections.abc import Mapping
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.dispatch.selection import (
    Candidate,
    Candidates,
    Cursor,
    Leads,
    Position,
    StarvationGuard,
    rows_to_load,
    select_batch,
)
from orchestrator.dispatch.selection.cursor import LeadsChange
from outreach.tiers import Tier
from tests.orchestrator.dispatch.test_selection import (
    budget_groups,
    guards,
    ids,
    remaining,
    weight_maps,
    workloads,
)

REPLY = Tier.REPLY
OWNERS = range(1, 13)

cost_maps = st.fixed_dictionaries({o: st.integers(min_value=100, max_value=4_000) for o in OWNERS})


def backlog(owners: Mapping[int, int], served: Counter[int], k: Mapping[int, int]) -> Candidates:
    """Deep reply backlogs: the next k[o] rows of each owner (ids continue past what was served)."""
    return {
        REPLY: {
            o: [
                Candidate(outreach_id=o * 100_000 + served[o] + i, owner_id=o, tier=REPLY)
                for i in range(k[o])
            ]
            for o in owners
        }
    }


def simulate_tokens(
    *, costs: Mapping[int, int], weights: Mapping[int, int], slots_per_cycle: list[int]
) -> Counter[int]:
    """Tokens taken per owner over cycles; rows loaded with rows_to_load, cursor persisted as JSON."""
    served: Counter[int] = Counter()
    tokens: Counter[int] = Counter()
    cursor = Cursor()
    for slots in slots_per_cycle:
        k = rows_to_load(owners_with_work=list(costs), slots=slots, weights=weights, costs=costs)
        selection = select_batch(
            backlog(costs, served, k), slots=slots, cursor=cursor, weights=weights, costs=costs
        )
        cursor = Cursor.from_json(selection.cursor.to_json())
        for pick in selection.picks:
            served[pick.owner_id] += 1
            tokens[pick.owner_id] += costs[pick.owner_id]
    return tokens


def test_owners_whose_jobs_cost_one_and_three_times_get_equal_tokens_not_equal_emails() -> None:
    # given two equal-weight owners, one whose jobs cost three times the other's
    costs = {1: 1_000, 2: 3_000}
    # when 100 cycles of 4 slots run
    tokens = simulate_tokens(costs=costs, weights={}, slots_per_cycle=[4] * 100)
    # then each took half the tokens (within one job), so the cheap one sent three times the emails
    assert abs(tokens[1] - tokens[2]) <= 3_000
    assert tokens[1] // 1_000 == pytest.approx(3 * tokens[2] // 3_000, abs=3)


def test_count_mode_gives_the_same_owners_equal_emails() -> None:
    # given the same owners without costs (DISPATCH_FAIRNESS=count): one pick per owner per round
    selection = select_batch(backlog({1: 0, 2: 0}, Counter(), {1: 8, 2: 8}), slots=8, cursor=Cursor())
    assert Counter(p.owner_id for p in selection.picks) == {1: 4, 2: 4}


@settings(deadline=None, max_examples=60)
@given(
    costs=cost_maps,
    weights=weight_maps,
    owners=st.sets(st.sampled_from(list(OWNERS)), min_size=2, max_size=6),
    slots_per_cycle=st.lists(st.integers(min_value=1, max_value=8), min_size=5, max_size=60),
)
def test_token_shares_of_backlogged_owners_stay_within_one_job(
    costs: dict[int, int], weights: dict[int, int], owners: set[int], slots_per_cycle: list[int]
) -> None:
    # given backlogged owners with their own job costs and weights, served over many cycles
    costs = {o: costs[o] for o in owners}
    tokens = simulate_tokens(costs=costs, weights=weights, slots_per_cycle=slots_per_cycle)
    # then tokens / weight differ between any two owners by at most one job of each (the fair
    # queueing bound), however the slots fell across cycles: shares converge as the totals grow
    w = {o: weights.get(o, 1) for o in owners}
    for a in owners:
        for b in owners:
            gap = Fraction(tokens[a], w[a]) - Fraction(tokens[b], w[b])
            assert gap <= Fraction(costs[a], w[a]) + Fraction(costs[b], w[b]), (a, b, tokens)


@given(candidates=workloads(), first=st.integers(0, 12), second=st.integers(0, 12), costs=cost_maps)
def test_with_costs_the_next_cycle_continues_where_this_one_stopped(
    candidates: Candidates, first: int, second: int, costs: dict[int, int]
) -> None:
    # given one tier, served in two cycles with the cursor (and its leads) persisted in between
    reply_only = {REPLY: dict(candidates.get(REPLY, {}))}
    one = select_batch(reply_only, slots=first, cursor=Cursor(), costs=costs)
    two = select_batch(
        remaining(reply_only, one.picks),
        slots=second,
        cursor=Cursor.from_json(one.cursor.to_json()),
        costs=costs,
    )
    # then it is the same order as one cycle with both cycles' slots
    both = select_batch(reply_only, slots=first + second, cursor=Cursor(), costs=costs)
    assert ids(one) + ids(two) == ids(both)


@given(
    first=workloads(),
    candidates=workloads(),
    slots=st.integers(0, 24),
    weights=weight_maps,
    groups=budget_groups(),
    guard=st.none() | guards(),
    costs=cost_maps,
)
def test_with_costs_truncating_to_rows_to_load_changes_nothing(
    first: Candidates,
    candidates: Candidates,
    slots: int,
    weights: dict[int, int],
    groups: tuple[dict[int, str], dict[str, int]],
    guard: StarvationGuard | None,
    costs: dict[int, int],
) -> None:
    of, group_slots = groups
    kwargs = {
        "weights": weights,
        "starvation_guard": guard,
        "groups": of,
        "group_slots": group_slots,
        "costs": costs,
    }
    # given a cursor with leads, as an earlier cycle leaves it
    cursor = select_batch(first, slots=slots, cursor=Cursor(), **kwargs).cursor  # type: ignore[arg-type]
    # and the rows the shell would load: rows_to_load per tier over the owners with work there
    truncated = {}
    for tier, by_owner in candidates.items():
        k = rows_to_load(
            owners_with_work=[o for o, rs in by_owner.items() if rs],
            slots=slots,
            weights=weights,
            groups=of,
            group_slots=group_slots,
            costs=costs,
        )
        truncated[tier] = {o: list(rs[: k.get(o, 0)]) for o, rs in by_owner.items()}
    # then selecting from them is the same as selecting from the whole queue
    full = select_batch(candidates, slots=slots, cursor=cursor, **kwargs)  # type: ignore[arg-type]
    assert select_batch(truncated, slots=slots, cursor=cursor, **kwargs) == full  # type: ignore[arg-type]


@given(candidates=workloads(), slots=st.integers(0, 24), costs=cost_maps, groups=budget_groups())
def test_with_costs_groups_never_exceed_their_slots_and_picks_fill_the_slots(
    candidates: Candidates, slots: int, costs: dict[int, int], groups: tuple[dict[int, str], dict[str, int]]
) -> None:
    of, group_slots = groups
    selection = select_batch(
        candidates, slots=slots, cursor=Cursor(), groups=of, group_slots=group_slots, costs=costs
    )
    picked = Counter(of[p.owner_id] for p in selection.picks if p.owner_id in of)
    assert all(picked[g] <= n for g, n in group_slots.items())
    usable = sum(len(rs) for by_owner in candidates.values() for o, rs in by_owner.items() if o not in of)
    usable += sum(
        min(
            n,
            sum(len(rs) for by_owner in candidates.values() for o, rs in by_owner.items() if of.get(o) == g),
        )
        for g, n in group_slots.items()
    )
    assert len(selection.picks) == min(slots, usable)


def test_a_groups_owners_share_its_slots_in_tokens() -> None:
    # given an organization with one slot a cycle and two owners whose jobs cost 1x and 3x
    costs, of, served, cursor = {1: 1_000, 2: 3_000}, {1: "org:1", 2: "org:1"}, Counter[int](), Cursor()
    tokens: Counter[int] = Counter()
    for _ in range(40):
        candidates = backlog(costs, served, {1: 2, 2: 2})
        selection = select_batch(
            candidates, slots=4, cursor=cursor, groups=of, group_slots={"org:1": 1}, costs=costs
        )
        cursor = Cursor.from_json(selection.cursor.to_json())
        for pick in selection.picks:
            served[pick.owner_id] += 1
            tokens[pick.owner_id] += costs[pick.owner_id]
    # then over the cycles they took equal tokens within one job
    assert abs(tokens[1] - tokens[2]) <= 3_000, tokens


def test_leads_round_trip_through_json_and_reject_garbage() -> None:
    cursor = Cursor(
        positions=((REPLY, Position(owner_id=2, phase=Fraction(1, 3))),),
        groups=((REPLY, "org:1", Position(owner_id=5)),),
        leads={(REPLY, ""): Leads.of({2: Fraction(7, 3)}), (REPLY, "org:1"): Leads.of({5: Fraction(1, 2)})},
    )
    assert Cursor.from_json(cursor.to_json()) == cursor
    assert cursor.keeping_groups([]).leads == {(REPLY, ""): Leads(3, {2: 7})}
    with pytest.raises(ValueError, match="positive lead"):
        Cursor(positions=cursor.positions, leads={(REPLY, ""): Leads(1, {2: 0})})
    with pytest.raises(ValueError, match="only in tiers it has served"):
        Cursor(positions=cursor.positions, leads={(Tier.INTRO, ""): Leads(1, {2: 1})})
    for garbage in (
        '{"x": 1}',
        "[1]",
        '{"": {"scale": 0, "owners": []}}',
        '{"": {"scale": 1, "owners": [2]}}',
    ):
        with pytest.raises(ValueError, match=r"not a selection cursor|positive scale"):
            Cursor.from_json(f'{{"reply": {{"owner_id": 2, "phase": "0", "leads": {garbage}}}}}')
    with pytest.raises(ValueError, match="one lead per"):
        Cursor.from_json(
            '{"reply": {"owner_id": 2, "phase": "0", "leads": {"": {"scale": 2, "owners": [2, 1, 2, 3]}}}}'
        )


def test_equal_leads_compare_equal_whatever_their_scale() -> None:
    # given the same leads over two scales (two clocks whose owners' weights differ)
    assert Leads(6_000, {1: 3_000, 2: 9_000}) == Leads(2, {1: 1, 2: 3})
    assert Leads(6_000, {1: 3_000, 2: 9_000}).scale == 6_000  # kept as made: no clock rescales
    assert Leads(6_000, {1: 3_000, 2: 9_001}) != Leads(2, {1: 1, 2: 3})
    assert Leads(6_000, {1: 3_000}) != Leads(2, {1: 1, 2: 3})
    assert Leads.of({1: Fraction(1, 2), 2: Fraction(3, 2)}).fractions() == {
        1: Fraction(1, 2),
        2: Fraction(3, 2),
    }


@settings(max_examples=300)
@given(
    base=st.dictionaries(st.integers(1, 60), st.integers(1, 40), max_size=40),
    changed=st.dictionaries(st.integers(1, 70), st.integers(1, 40), max_size=20),
    dropped=st.sets(st.integers(1, 60), max_size=20),
    passed=st.integers(0, 41),
)
def test_leads_made_from_ranked_ones_are_ranked_as_sorting_them_would(
    base: dict[int, int], changed: dict[int, int], dropped: set[int], passed: int
) -> None:
    # given ranked leads (a cycle's window ranked them), and the leads a clock makes from them:
    # those its last pick passed dropped (the first ranked), others dropped or moved anywhere,
    # new owners' leads set
    before = Leads(1, base)
    before.ranked()
    dropped = ({o for o, lead in base.items() if lead <= passed} | (dropped & base.keys())) - changed.keys()
    ticks = {o: lead for o, lead in base.items() if o not in dropped} | changed
    change = LeadsChange(base=weakref.ref(before), changed=changed, dropped=frozenset(dropped))
    # when they are made
    made = Leads(1, ticks, since=change)
    # then they are ranked as sorting them would rank them, without sorting them (a ranking made
    # as they were made), and say what changed
    assert made._ranked is not None
    assert made.since is change
    expected = sorted((lead, o) for o, lead in made.ticks.items())
    assert made.ranked() == expected
    assert before.ranked() == sorted((lead, o) for o, lead in base.items())  # the base's untouched


def test_leads_made_from_others_are_refused_a_lead_not_ahead() -> None:
    # given leads, and a change that sets one owner's lead at 0 (not ahead)
    before = Leads(1000, {1: 7, 2: 9})
    change = LeadsChange(base=weakref.ref(before), changed={2: 0}, dropped=frozenset())
    # then leads made so are refused, as any others would be
    with pytest.raises(ValueError, match="positive lead"):
        Leads(1000, {1: 7, 2: 0}, since=change)


def test_a_cursor_written_before_leads_were_ints_is_read() -> None:
    # given the text a dispatcher wrote until 2026-12-05: each lead "n/d" under its owner's id
    text = '{"reply": {"owner_id": 2, "phase": "1/3", "leads": {"": {"2": "7/3", "9": "1/2"}}}}'
    # then the same leads are read, over their least common denominator
    assert Cursor.from_json(text).leads_of(REPLY) == Leads(6, {2: 14, 9: 3})


def test_costs_must_cover_every_owner_with_rows() -> None:
    with pytest.raises(ValueError, match="costs"):
        select_batch(backlog({1: 0, 2: 0}, Counter(), {1: 1, 2: 1}), slots=2, cursor=Cursor(), costs={1: 500})
