"""The dispatcher's pure selection policy: table-driven cases for the obvious, hypothesis for the invariants.

No database, Redis or clock: `select_batch` is a pure function of (candidates, slots, cursor, weights, guard,
budget groups).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.dispatch.selection import (
    Candidate,
    Candidates,
    Cursor,
    Pick,
    Position,
    Selection,
    StarvationGuard,
    rows_per_owner,
    rows_to_load,
    select_batch,
)
from outreach.tiers import Tier

REPLY, INTRO, NUDGE = Tier.REPLY, Tier.INTRO, Tier.NUDGE


# --- helpers -----------------------------------------------------------------------------------------------


def rows(depths: Mapping[Tier, Mapping[int, int]]) -> dict[Tier, dict[int, list[Candidate]]]:
    """Readable ids: tier * 1000 + owner * 10 + position in the owner's list (1010 = reply, owner 1, first)."""
    return {
        tier: {
            owner: [
                Candidate(outreach_id=tier * 1000 + owner * 10 + i, owner_id=owner, tier=tier)
                for i in range(n)
            ]
            for owner, n in by_owner.items()
        }
        for tier, by_owner in depths.items()
    }


def cursor_at(**owner_by_tier: int) -> Cursor:
    return Cursor(
        positions=tuple((Tier[name.upper()], Position(owner_id=o)) for name, o in owner_by_tier.items())
    )


def ids(selection: Selection) -> list[int]:
    return [pick.outreach_id for pick in selection.picks]


def remaining(candidates: Candidates, picks: Sequence[Pick]) -> dict[Tier, dict[int, list[Candidate]]]:
    taken = {pick.outreach_id for pick in picks}
    return {
        tier: {owner: [r for r in rs if r.outreach_id not in taken] for owner, rs in by_owner.items()}
        for tier, by_owner in candidates.items()
    }


def per_owner(picks: Sequence[Pick], tier: Tier) -> Counter[int]:
    return Counter(pick.owner_id for pick in picks if pick.tier == tier)


def total(candidates: Candidates, tier: Tier | None = None) -> int:
    return sum(len(rs) for t, by_owner in candidates.items() if tier in (None, t) for rs in by_owner.values())


def within_one_item_of_a_common_share(
    counts: Mapping[int, int], *, has_more: Mapping[int, bool], weights: Mapping[int, int]
) -> bool:
    """True when some D has every owner at <= D*w + 1 and every owner with rows left at >= D*w - 1."""
    highest = max(((n - 1) / weights.get(o, 1) for o, n in counts.items()), default=-math.inf)
    lowest = min(
        ((counts.get(o, 0) + 1) / weights.get(o, 1) for o, more in has_more.items() if more), default=math.inf
    )
    return highest <= lowest + 1e-9


def prefixes_fair(candidates: Candidates, selection: Selection, weights: Mapping[int, int]) -> bool:
    """The share invariant holds after every pick of every tier, not just at the end of the cycle."""
    for tier, by_owner in candidates.items():
        counts: Counter[int] = Counter()
        for pick in (p for p in selection.picks if p.tier == tier):
            counts[pick.owner_id] += 1
            has_more = {o: counts[o] < len(rs) for o, rs in by_owner.items() if rs}
            if not within_one_item_of_a_common_share(counts, has_more=has_more, weights=weights):
                return False
    return True


# --- strategies --------------------------------------------------------------------------------------------

owner_ids = st.integers(min_value=1, max_value=12)
phases = st.integers(min_value=1, max_value=6).flatmap(
    lambda d: st.integers(0, d - 1).map(lambda n: Fraction(n, d))
)
positions = st.builds(Position, owner_id=st.integers(min_value=0, max_value=13), phase=phases)
group_names = st.sampled_from(["org:1", "org:2"])


@st.composite
def cursors(draw: st.DrawFn) -> Cursor:
    by_tier = draw(st.dictionaries(st.sampled_from(Tier), positions))
    by_group = draw(
        st.dictionaries(st.tuples(st.sampled_from(sorted(by_tier) or [REPLY]), group_names), positions)
    )
    return Cursor(
        positions=tuple(by_tier.items()),
        groups=tuple((t, g, p) for (t, g), p in by_group.items() if t in by_tier),
    )


@st.composite
def budget_groups(draw: st.DrawFn) -> tuple[dict[int, str], dict[str, int]]:
    """Some owners in one of two groups, each group with 0-6 slots."""
    groups = draw(st.dictionaries(owner_ids, group_names, max_size=8))
    return groups, {g: draw(st.integers(min_value=0, max_value=6)) for g in sorted(set(groups.values()))}


weight_maps = st.dictionaries(owner_ids, st.integers(min_value=1, max_value=4))
slot_counts = st.integers(min_value=0, max_value=24)


def queue_of(depths: Mapping[tuple[Tier, int], int]) -> dict[Tier, dict[int, list[Candidate]]]:
    """Each (tier, owner)'s rows, that many deep, ids unique up to 100 deep."""
    candidates: dict[Tier, dict[int, list[Candidate]]] = {}
    for i, ((tier, owner), depth) in enumerate(sorted(depths.items())):
        candidates.setdefault(tier, {})[owner] = [
            Candidate(outreach_id=i * 100 + j, owner_id=owner, tier=tier) for j in range(depth)
        ]
    return candidates


@st.composite
def workloads(draw: st.DrawFn) -> dict[Tier, dict[int, list[Candidate]]]:
    return queue_of(
        draw(st.dictionaries(st.tuples(st.sampled_from(Tier), owner_ids), st.integers(0, 6), max_size=24))
    )


@st.composite
def guards(draw: st.DrawFn) -> StarvationGuard:
    intro = draw(st.integers(min_value=0, max_value=100))
    nudge = draw(st.integers(min_value=0, max_value=100 - intro))
    return StarvationGuard(min_share={INTRO: intro / 100, NUDGE: nudge / 100})


# --- table-driven: the obvious cases ----------------------------------------------------------------------

CASES = [
    ("nothing queued", {}, 8, Cursor(), None, []),
    ("no slots", {REPLY: {1: 3}}, 0, Cursor(), None, []),
    ("one owner keeps its own order", {REPLY: {1: 3}}, 2, Cursor(), None, [1010, 1011]),
    (
        "one item per owner per round",
        {REPLY: {1: 2, 2: 2, 3: 2}},
        5,
        Cursor(),
        None,
        [1010, 1020, 1030, 1011, 1021],
    ),
    (
        "starts after the cursor and wraps",
        {REPLY: {1: 2, 2: 2, 3: 2}},
        4,
        cursor_at(reply=2),
        None,
        [1030, 1010, 1020, 1031],
    ),
    (
        "cursor owner has no work now",
        {REPLY: {1: 1, 5: 1, 9: 1}},
        3,
        cursor_at(reply=6),
        None,
        [1090, 1010, 1050],
    ),
    (
        "cursor past the highest owner wraps",
        {REPLY: {1: 1, 5: 1}},
        2,
        cursor_at(reply=99),
        None,
        [1010, 1050],
    ),
    ("an exhausted owner leaves the round", {REPLY: {1: 1, 2: 3}}, 3, Cursor(), None, [1010, 1020, 1021]),
    (
        "unused reply slots backfill from intro",
        {REPLY: {1: 1}, INTRO: {1: 2, 2: 2}},
        4,
        Cursor(),
        None,
        [1010, 2010, 2020, 2011],
    ),
    (
        "nudge only once reply and intro are spent",
        {REPLY: {1: 1}, INTRO: {2: 1}, NUDGE: {3: 5}},
        3,
        Cursor(),
        None,
        [1010, 2020, 3030],
    ),
    ("reply outranks a deep intro backlog", {REPLY: {2: 2}, INTRO: {1: 50}}, 2, Cursor(), None, [1020, 1021]),
    (
        "each tier has its own cursor",
        {REPLY: {1: 1, 2: 1}, INTRO: {1: 1, 2: 1}},
        4,
        cursor_at(reply=1, intro=2),
        None,
        [1020, 1010, 2010, 2020],
    ),
    (
        "weight 2 gets two items per round, interleaved",
        {REPLY: {1: 4, 2: 4}},
        6,
        Cursor(),
        {1: 2},
        [1010, 1020, 1011, 1012, 1021, 1013],
    ),
]


@pytest.mark.parametrize(
    ("name", "depths", "slots", "cursor", "weights", "expected"), CASES, ids=[c[0] for c in CASES]
)
def test_select_batch_table(
    name: str,
    depths: dict[Tier, dict[int, int]],
    slots: int,
    cursor: Cursor,
    weights: dict[int, int] | None,
    expected: list[int],
) -> None:
    # given the rows of the case / when selecting / then the picks come in the expected order
    assert ids(select_batch(rows(depths), slots=slots, cursor=cursor, weights=weights)) == expected


def test_reasons_name_the_tier_the_round_and_backfill() -> None:
    # given one reply and two intro owners
    candidates = rows({REPLY: {1: 1}, INTRO: {1: 2, 2: 2}})
    # when four slots are filled
    selection = select_batch(candidates, slots=4, cursor=Cursor())
    # then reply slots say so and intro picks are marked as backfill, with the owner's round
    assert [p.reason for p in selection.picks] == [
        "tier=reply round=1",
        "backfill tier=intro round=1",
        "backfill tier=intro round=1",
        "backfill tier=intro round=2",
    ]


def test_weighted_reasons_show_the_weight() -> None:
    selection = select_batch(rows({REPLY: {1: 3}}), slots=3, cursor=Cursor(), weights={1: 2})
    assert [p.reason for p in selection.picks] == [
        "tier=reply round=1 weight=2",
        "tier=reply round=1 weight=2",
        "tier=reply round=2 weight=2",
    ]


def test_new_cursor_is_the_last_owner_served_per_tier() -> None:
    # given a reply cursor at owner 2 and an intro tier with no picks this cycle
    cursor = cursor_at(reply=2, intro=7)
    # when owners 3 and 1 are served
    selection = select_batch(rows({REPLY: {1: 1, 3: 1}, INTRO: {4: 1}}), slots=2, cursor=cursor)
    # then reply moves to owner 1 and the idle intro position is kept
    assert selection.cursor == cursor_at(reply=1, intro=7)
    assert selection.cursor.to_json() == (
        '{"intro": {"owner_id": 7, "phase": "0"}, "reply": {"owner_id": 1, "phase": "0"}}'
    )


def test_cursor_json_start_and_phase() -> None:
    assert Cursor.from_json(None) == Cursor.from_json("") == Cursor() == Cursor.from_json("{}")
    cursor = Cursor(positions=((NUDGE, Position(owner_id=3, phase=Fraction(2, 3))),))
    assert cursor.as_dict() == {"nudge": {"owner_id": 3, "phase": "2/3"}}
    assert Cursor.from_dict(cursor.as_dict()) == cursor


@pytest.mark.parametrize(
    "text",
    [
        "[]",
        '{"bogus": {"owner_id": 1, "phase": "0"}}',
        '{"reply": {"owner_id": "1", "phase": "0"}}',
        '{"reply": {"owner_id": 1, "phase": "3/2"}}',
        '{"reply": {"owner_id": 1}}',
        '{"reply": 5}',
        "not json",
    ],
)
def test_cursor_from_json_rejects_garbage(text: str) -> None:
    with pytest.raises(ValueError):  # noqa: PT011 - each case has its own message; ValueError is the contract
        Cursor.from_json(text)


@pytest.mark.parametrize(
    ("kwargs", "candidates"),
    [
        ({"slots": -1}, {}),
        # the weights of the owners with rows: the shell passes every active owner's
        ({"slots": 1, "weights": {1: 0}}, {REPLY: {1: [Candidate(outreach_id=1, owner_id=1, tier=REPLY)]}}),
        (
            {"slots": 1, "weights": {1: True}},
            {REPLY: {1: [Candidate(outreach_id=1, owner_id=1, tier=REPLY)]}},
        ),
        ({"slots": 1}, {REPLY: {2: [Candidate(outreach_id=1, owner_id=1, tier=REPLY)]}}),
        ({"slots": 1}, {INTRO: {1: [Candidate(outreach_id=1, owner_id=1, tier=REPLY)]}}),
        ({"slots": 1}, {REPLY: {1: [Candidate(outreach_id=1, owner_id=1, tier=REPLY)] * 2}}),
    ],
    ids=["negative slots", "zero weight", "bool weight", "wrong owner", "wrong tier", "duplicate"],
)
def test_select_batch_rejects_bad_input(kwargs: dict[str, object], candidates: Candidates) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        select_batch(candidates, cursor=Cursor(), **kwargs)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "min_share",
    [{REPLY: 0.1}, {INTRO: 0.7, NUDGE: 0.4}, {NUDGE: -0.1}],
    ids=["top tier", "over 1", "negative"],
)
def test_starvation_guard_rejects_bad_shares(min_share: dict[Tier, float]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        StarvationGuard(min_share=min_share)


@pytest.mark.parametrize(
    ("slots", "owners", "weight", "expected"),
    [
        (8, 500, 1, 1),  # many owners: one row each is all a cycle can use
        (8, 500, 3, 3),  # ... or w rows for a weight-w owner
        (8, 1, 1, 8),  # a lone owner can take every slot
        (8, 3, 1, 6),  # the two others take at least one each
        (8, 2, 20, 8),  # never more than slots
        (8, 0, 1, 0),
        (0, 5, 1, 0),
    ],
)
def test_rows_per_owner_table(slots: int, owners: int, weight: int, expected: int) -> None:
    assert rows_per_owner(slots=slots, owners_with_work=owners, weight=weight) == expected


# --- starvation guard --------------------------------------------------------------------------------------


def test_starvation_guard_reserves_a_minimum_share_for_nudges() -> None:
    # given far more replies than slots and some nudges
    candidates = rows({REPLY: dict.fromkeys(range(1, 11), 10), NUDGE: {1: 5, 2: 5}})
    guard = StarvationGuard(min_share={NUDGE: 0.25})
    # when selecting with and without the guard
    guarded = select_batch(candidates, slots=8, cursor=Cursor(), starvation_guard=guard)
    unguarded = select_batch(candidates, slots=8, cursor=Cursor())
    # then the guard gives nudges ceil(8 * 0.25) = 2 slots, marked as such; off, replies take everything
    assert (guarded.count(REPLY), guarded.count(NUDGE)) == (6, 2)
    assert [p.reason for p in guarded.picks if p.tier == NUDGE] == ["guard tier=nudge round=1"] * 2
    assert (unguarded.count(REPLY), unguarded.count(NUDGE)) == (8, 0)


@pytest.mark.parametrize(
    ("depths", "shares", "slots", "expected"),
    [
        ({REPLY: {1: 20}}, {NUDGE: 0.25}, 8, (8, 0, 0)),  # nothing to protect: no slot wasted
        (
            {REPLY: {1: 20}, INTRO: {1: 9}, NUDGE: {1: 9}},
            {INTRO: 0.1, NUDGE: 0.1},
            8,
            (6, 1, 1),
        ),  # ceil(0.8) = 1
        ({REPLY: {1: 20}, NUDGE: {1: 1}}, {NUDGE: 0.5}, 8, (7, 0, 1)),  # reserve capped by the work there is
        (
            {REPLY: {1: 2}, INTRO: {1: 20}, NUDGE: {1: 20}},
            {NUDGE: 0.25},
            8,
            (2, 4, 2),
        ),  # the rest by priority
        ({REPLY: {1: 20}, NUDGE: {1: 20}}, {NUDGE: 0.3}, 10, (7, 0, 3)),  # 10 * 0.3 reserves 3, not 4
        ({REPLY: {1: 20}, INTRO: {1: 20}}, {INTRO: 0.5}, 1, (0, 1, 0)),  # a reserve can take the only slot
    ],
)
def test_starvation_guard_table(
    depths: dict[Tier, dict[int, int]], shares: dict[Tier, float], slots: int, expected: tuple[int, int, int]
) -> None:
    guard = StarvationGuard(min_share=shares)
    selection = select_batch(rows(depths), slots=slots, cursor=cursor_at(), starvation_guard=guard)
    assert tuple(selection.count(t) for t in Tier) == expected


def test_starvation_guard_serves_nudges_every_cycle_under_permanent_reply_load() -> None:
    # given 40 owners that always have replies and one owner with a nudge backlog
    guard = StarvationGuard(min_share={NUDGE: 0.1})
    cursor, nudge_backlog, served = Cursor(), list(range(9000, 9020)), 0
    for cycle in range(10):
        candidates = {
            REPLY: {o: [Candidate(outreach_id=cycle * 100 + o, owner_id=o, tier=REPLY)] for o in range(40)},
            NUDGE: {7: [Candidate(outreach_id=i, owner_id=7, tier=NUDGE) for i in nudge_backlog[served:]]},
        }
        # when each cycle selects 8 with the guard on
        selection = select_batch(candidates, slots=8, cursor=cursor, starvation_guard=guard)
        cursor, served = selection.cursor, served + selection.count(NUDGE)
        # then every cycle still fills every slot and one of them goes to a nudge
        assert (len(selection.picks), selection.count(NUDGE)) == (8, 1)
    assert served == 10


@given(candidates=workloads(), slots=slot_counts, cursor=cursors(), guard=guards())
def test_starvation_guard_property(
    candidates: Candidates, slots: int, cursor: Cursor, guard: StarvationGuard
) -> None:
    selection = select_batch(candidates, slots=slots, cursor=cursor, starvation_guard=guard)
    left = slots
    for tier in sorted(Tier):
        floor = min(guard.reserved(tier=tier, slots=slots), total(candidates, tier), left)
        left -= floor
        # a guarded tier with work gets its reserved share (as far as earlier reservations leave room) ...
        assert selection.count(tier) >= floor
        # ... and anything beyond it only once every higher tier is fully served (priority otherwise)
        if selection.count(tier) > floor:
            assert all(selection.count(t) == total(candidates, t) for t in Tier if t < tier)
    assert len(selection.picks) == min(slots, total(candidates))


# --- properties of one cycle -------------------------------------------------------------------------------


@given(
    candidates=workloads(),
    slots=slot_counts,
    cursor=cursors(),
    weights=weight_maps,
    guard=st.none() | guards(),
)
def test_picks_are_distinct_candidates_and_fill_min_of_slots_and_work(
    candidates: Candidates, slots: int, cursor: Cursor, weights: dict[int, int], guard: StarvationGuard | None
) -> None:
    selection = select_batch(candidates, slots=slots, cursor=cursor, weights=weights, starvation_guard=guard)
    offered = {r.outreach_id: r for by_owner in candidates.values() for rs in by_owner.values() for r in rs}
    picked = ids(selection)
    # never more picks than slots, all slots used when work exists, nothing picked twice
    assert len(picked) == min(slots, total(candidates))
    assert len(set(picked)) == len(picked)
    # every pick is an offered row, with its owner and tier
    assert all(
        (p.owner_id, p.tier) == (offered[p.outreach_id].owner_id, offered[p.outreach_id].tier)
        for p in selection.picks
    )


@given(candidates=workloads(), slots=slot_counts, cursor=cursors(), weights=weight_maps)
def test_no_lower_tier_pick_while_a_higher_tier_row_is_unpicked(
    candidates: Candidates, slots: int, cursor: Cursor, weights: dict[int, int]
) -> None:
    selection = select_batch(candidates, slots=slots, cursor=cursor, weights=weights)
    for tier in Tier:
        if selection.count(tier):
            assert all(selection.count(t) == total(candidates, t) for t in Tier if t < tier)
    # and picks come tier by tier, reply first
    assert [p.tier for p in selection.picks] == sorted(p.tier for p in selection.picks)


@given(candidates=workloads(), slots=slot_counts, cursor=cursors())
def test_unweighted_per_owner_picks_differ_by_at_most_one_within_a_tier(
    candidates: Candidates, slots: int, cursor: Cursor
) -> None:
    selection = select_batch(candidates, slots=slots, cursor=cursor)
    for tier, by_owner in candidates.items():
        counts = per_owner(selection.picks, tier)
        # owners whose rows ran out may have fewer; every other owner is within one of the most served
        still_eligible = [counts[o] for o, rs in by_owner.items() if counts[o] < len(rs)]
        if still_eligible:
            assert max(counts.values(), default=0) <= min(still_eligible) + 1
    # no owner gets a second slot while an eligible one has none: true after every single pick
    assert prefixes_fair(candidates, selection, weights={})


@given(candidates=workloads(), slots=slot_counts, cursor=cursors(), weights=weight_maps)
def test_weighted_shares_hold_within_one_item(
    candidates: Candidates, slots: int, cursor: Cursor, weights: dict[int, int]
) -> None:
    selection = select_batch(candidates, slots=slots, cursor=cursor, weights=weights)
    assert prefixes_fair(candidates, selection, weights=weights)


@given(weights=weight_maps.filter(bool), cursor=cursors())
def test_weights_give_w_items_per_round_when_every_owner_is_backlogged(
    weights: dict[int, int], cursor: Cursor
) -> None:
    # given deep backlogs in one tier, and slots for exactly two whole rounds
    deep = {
        REPLY: {
            o: [Candidate(outreach_id=o * 100 + i, owner_id=o, tier=REPLY) for i in range(9)] for o in weights
        }
    }
    # when selecting, wherever the cursor stood
    selection = select_batch(deep, slots=2 * sum(weights.values()), cursor=cursor, weights=weights)
    # then every owner got exactly w items per round
    assert per_owner(selection.picks, REPLY) == Counter({o: 2 * w for o, w in weights.items()})


@given(
    candidates=workloads(),
    slots=slot_counts,
    cursor=cursors(),
    weights=weight_maps,
    guard=st.none() | guards(),
)
def test_truncating_to_rows_per_owner_changes_nothing(
    candidates: Candidates, slots: int, cursor: Cursor, weights: dict[int, int], guard: StarvationGuard | None
) -> None:
    # given the rows the shell would load with per-owner top-k
    truncated = {
        tier: {
            o: list(
                rs[
                    : rows_per_owner(
                        slots=slots,
                        owners_with_work=sum(1 for x in by_owner.values() if x),
                        weight=weights.get(o, 1),
                    )
                ]
            )
            for o, rs in by_owner.items()
        }
        for tier, by_owner in candidates.items()
    }
    # then selecting from them is the same as selecting from the whole queue
    full = select_batch(candidates, slots=slots, cursor=cursor, weights=weights, starvation_guard=guard)
    assert (
        select_batch(truncated, slots=slots, cursor=cursor, weights=weights, starvation_guard=guard) == full
    )


@given(candidates=workloads(), first=slot_counts, second=slot_counts, cursor=cursors(), weights=weight_maps)
def test_next_cycle_continues_where_this_one_stopped(
    candidates: Candidates, first: int, second: int, cursor: Cursor, weights: dict[int, int]
) -> None:
    # given one tier (backfill aside, two cycles must read like one long cycle)
    reply_only = {REPLY: dict(candidates.get(REPLY, {}))}
    # when the queue is served in two cycles, the cursor persisted through JSON in between
    one = select_batch(reply_only, slots=first, cursor=cursor, weights=weights)
    two = select_batch(
        remaining(reply_only, one.picks),
        slots=second,
        cursor=Cursor.from_json(one.cursor.to_json()),
        weights=weights,
    )
    # then it is the same order as a single cycle with both cycles' slots
    both = select_batch(reply_only, slots=first + second, cursor=cursor, weights=weights)
    assert ids(one) + ids(two) == ids(both)
    assert two.cursor == both.cursor


@given(cursor=cursors())
def test_cursor_round_trips_through_json(cursor: Cursor) -> None:
    assert Cursor.from_json(cursor.to_json()) == cursor
    assert Cursor.from_dict(cursor.as_dict()) == cursor


# --- across cycles -----------------------------------------------------------------------------------------


def simulate(
    *,
    owners: Sequence[int],
    slots: int,
    cycles: int,
    cursor: Cursor,
    weights: Mapping[int, int] | None = None,
) -> tuple[list[list[int]], Cursor]:
    """Deep backlogs in the reply tier; each cycle loads top-k per owner as the shell would; owners per cycle."""
    weights = weights or {}
    served: Counter[int] = Counter()
    history: list[list[int]] = []
    for _ in range(cycles):
        candidates = {
            REPLY: {
                o: [
                    Candidate(outreach_id=o * 10_000 + served[o] + i, owner_id=o, tier=REPLY)
                    for i in range(
                        rows_per_owner(slots=slots, owners_with_work=len(owners), weight=weights.get(o, 1))
                    )
                ]
                for o in owners
            }
        }
        selection = select_batch(candidates, slots=slots, cursor=cursor, weights=weights)
        cursor = Cursor.from_json(selection.cursor.to_json())  # persisted between cycles
        served.update(p.owner_id for p in selection.picks)
        history.append([p.owner_id for p in selection.picks])
    return history, cursor


@pytest.mark.parametrize(
    "start", [Cursor(), cursor_at(reply=1), cursor_at(reply=250), cursor_at(reply=10_000)]
)
def test_every_one_of_500_owners_is_served_within_63_cycles_of_8_slots(start: Cursor) -> None:
    # given 500 owners with deep backlogs (sparse ids) and 8 slots a cycle
    owners = [3 * i + 1 for i in range(500)]
    # when 63 = ceil(500 / 8) cycles run
    history, _ = simulate(owners=owners, slots=8, cycles=63, cursor=start)
    # then every owner was served, each cycle used all 8 slots, and nobody twice before everyone once
    assert {o for cycle in history for o in cycle} == set(owners)
    assert all(len(cycle) == 8 for cycle in history)
    assert len(set([o for cycle in history for o in cycle][:500])) == 500
    # and 62 cycles would not have been enough: the bound is tight, nothing is wasted
    assert len({o for cycle in history[:62] for o in cycle}) == 62 * 8


@settings(deadline=None)
@given(
    owners=st.lists(st.integers(min_value=0, max_value=10_000), min_size=1, max_size=80, unique=True),
    slots=st.integers(min_value=1, max_value=12),
    cursor=cursors(),
)
def test_every_owner_is_served_within_ceil_owners_over_slots_cycles(
    owners: list[int], slots: int, cursor: Cursor
) -> None:
    history, _ = simulate(owners=owners, slots=slots, cycles=math.ceil(len(owners) / slots), cursor=cursor)
    assert {o for cycle in history for o in cycle} == set(owners)


@settings(deadline=None)
@given(
    weights=st.dictionaries(
        st.integers(min_value=1, max_value=40), st.integers(min_value=1, max_value=4), min_size=1, max_size=10
    ),
    slots=st.integers(min_value=1, max_value=6),
    cycles=st.integers(min_value=1, max_value=30),
    cursor=cursors(),
)
def test_weights_are_honoured_across_cycles(
    weights: dict[int, int], slots: int, cycles: int, cursor: Cursor
) -> None:
    # given owners with deep backlogs and weights, even when a cycle has fewer slots than a round
    history, _ = simulate(owners=sorted(weights), slots=slots, cycles=cycles, cursor=cursor, weights=weights)
    # then over all the cycles together every owner is within one item of the same share D * w
    counts = Counter(o for cycle in history for o in cycle)
    assert within_one_item_of_a_common_share(counts, has_more=dict.fromkeys(weights, True), weights=weights)


# --- budget groups (organizations with their own LLM cap) --------------------------------------------------

Groups = tuple[dict[int, str], dict[str, int]]


def usable(candidates: Candidates, groups: Groups) -> int:
    """Rows that could be picked with unlimited slots: a group's rows count up to its slots."""
    of, group_slots = groups
    free = sum(len(rs) for by_owner in candidates.values() for o, rs in by_owner.items() if o not in of)
    in_group = Counter(
        of[o] for by_owner in candidates.values() for o, rs in by_owner.items() if o in of for _ in rs
    )
    return free + sum(min(n, group_slots[g]) for g, n in in_group.items())


GROUP_CASES = [
    (
        "a spent group's slots go to the others in the same cycle",
        {REPLY: {1: 2, 2: 2, 3: 2}},
        4,
        Cursor(),
        [1010, 1030, 1031],
    ),
    (
        "the group's turn continues after its own position",
        {REPLY: {1: 2, 2: 2, 3: 2}},
        4,
        Cursor(positions=((REPLY, Position(owner_id=3)),), groups=((REPLY, "org:1", Position(owner_id=1)),)),
        [1020, 1030, 1031],
    ),
    (
        "the group's place in the round is its owners' place",
        {REPLY: {1: 1, 2: 1, 3: 1}},
        1,
        Cursor(positions=((REPLY, Position(owner_id=1)),), groups=((REPLY, "org:1", Position(owner_id=2)),)),
        [1010],  # owner 2's place in the round, filled by owner 1: the group's next
    ),
    (
        "the group's reply takes its slot before its intro",
        {REPLY: {2: 1}, INTRO: {1: 1, 3: 1}},
        3,
        Cursor(),
        [1020, 2030],
    ),
]


@pytest.mark.parametrize(
    ("name", "depths", "slots", "cursor", "expected"), GROUP_CASES, ids=[c[0] for c in GROUP_CASES]
)
def test_select_batch_with_a_group_table(
    name: str, depths: dict[Tier, dict[int, int]], slots: int, cursor: Cursor, expected: list[int]
) -> None:
    # given owners 1 and 2 sharing one slot of their organization's cap, owner 3 uncapped
    groups, group_slots = {1: "org:1", 2: "org:1"}, {"org:1": 1}
    # when selecting / then
    selection = select_batch(rows(depths), slots=slots, cursor=cursor, groups=groups, group_slots=group_slots)
    assert ids(selection) == expected


def test_group_positions_persist_in_the_cursor() -> None:
    # given a group whose one slot went to owner 2 in the reply tier
    selection = select_batch(
        rows({REPLY: {2: 1, 3: 1}}), slots=2, cursor=Cursor(), groups={2: "org:1"}, group_slots={"org:1": 1}
    )
    # then the cursor says so under the tier, and round-trips
    assert selection.cursor.as_dict() == {
        "reply": {"owner_id": 3, "phase": "0", "groups": {"org:1": {"owner_id": 2, "phase": "0"}}}
    }
    assert Cursor.from_json(selection.cursor.to_json()) == selection.cursor
    assert selection.cursor.keeping_groups({"org:9"}) == Cursor(positions=selection.cursor.positions)


@pytest.mark.parametrize(
    ("groups", "group_slots"),
    [({1: "org:1"}, {}), ({1: "org:1"}, {"org:1": -1}), ({1: "org:1"}, {"org:1": True})],
    ids=["group without slots", "negative slots", "bool slots"],
)
def test_select_batch_rejects_bad_groups(groups: dict[int, str], group_slots: dict[str, int]) -> None:
    with pytest.raises(ValueError):  # noqa: PT011
        select_batch({}, slots=1, cursor=Cursor(), groups=groups, group_slots=group_slots)


@given(
    candidates=workloads(),
    slots=slot_counts,
    cursor=cursors(),
    weights=weight_maps,
    groups=budget_groups(),
    guard=st.none() | guards(),
)
def test_groups_never_exceed_their_slots_and_the_others_take_the_rest(
    candidates: Candidates,
    slots: int,
    cursor: Cursor,
    weights: dict[int, int],
    groups: Groups,
    guard: StarvationGuard | None,
) -> None:
    of, group_slots = groups
    selection = select_batch(
        candidates,
        slots=slots,
        cursor=cursor,
        weights=weights,
        starvation_guard=guard,
        groups=of,
        group_slots=group_slots,
    )
    offered = {r.outreach_id: r for by_owner in candidates.values() for rs in by_owner.values() for r in rs}
    # never more picks for a group than its slots ...
    per_group = Counter(of[p.owner_id] for p in selection.picks if p.owner_id in of)
    assert all(n <= group_slots[g] for g, n in per_group.items())
    # ... and every slot used while usable work exists: min(slots, usable rows), distinct offered rows
    assert len(selection.picks) == min(slots, usable(candidates, groups))
    assert len(set(ids(selection))) == len(selection.picks)
    assert all((p.owner_id, p.tier) == (offered[p.outreach_id].owner_id, p.tier) for p in selection.picks)
    assert Cursor.from_json(selection.cursor.to_json()) == selection.cursor


@given(
    candidates=workloads(), slots=slot_counts, cursor=cursors(), weights=weight_maps, groups=budget_groups()
)
def test_with_groups_no_lower_tier_pick_while_a_usable_higher_tier_row_is_unpicked(
    candidates: Candidates, slots: int, cursor: Cursor, weights: dict[int, int], groups: Groups
) -> None:
    of, group_slots = groups
    selection = select_batch(
        candidates, slots=slots, cursor=cursor, weights=weights, groups=of, group_slots=group_slots
    )
    picked = set(ids(selection))
    used = Counter(of[p.owner_id] for p in selection.picks if p.owner_id in of)
    spent = {g for g, n in group_slots.items() if used[g] == n}
    for pick in selection.picks:
        for higher in (t for t in Tier if t < pick.tier):
            # every higher-tier row is picked unless its owner's group is spent (replies first in a group)
            assert all(
                r.outreach_id in picked or of.get(o) in spent
                for o, rs in candidates.get(higher, {}).items()
                for r in rs
            )
    assert [p.tier for p in selection.picks] == sorted(p.tier for p in selection.picks)


@given(candidates=workloads(), slots=slot_counts, cursor=cursors(), groups=budget_groups())
def test_with_groups_no_eligible_owner_waits_for_a_second_slot_of_another(
    candidates: Candidates, slots: int, cursor: Cursor, groups: Groups
) -> None:
    of, group_slots = groups
    selection = select_batch(candidates, slots=slots, cursor=cursor, groups=of, group_slots=group_slots)
    used: Counter[str] = Counter()
    for tier, by_owner in candidates.items():
        counts: Counter[int] = Counter()
        used.update(of[p.owner_id] for p in selection.picks if p.tier < tier and p.owner_id in of)
        for pick in (p for p in selection.picks if p.tier == tier):
            counts[pick.owner_id] += 1
            used.update([of[pick.owner_id]] if pick.owner_id in of else [])
            # eligible: rows left, and its group (if any) not spent yet
            eligible = {
                o: counts[o] < len(rs) and (o not in of or used[of[o]] < group_slots[of[o]])
                for o, rs in by_owner.items()
                if rs
            }
            assert within_one_item_of_a_common_share(counts, has_more=eligible, weights={})
        used.clear()


@given(
    candidates=workloads(), slots=slot_counts, cursor=cursors(), weights=weight_maps, groups=budget_groups()
)
def test_with_groups_weighted_shares_hold_among_owners_outside_groups(
    candidates: Candidates, slots: int, cursor: Cursor, weights: dict[int, int], groups: Groups
) -> None:
    of, group_slots = groups
    selection = select_batch(
        candidates, slots=slots, cursor=cursor, weights=weights, groups=of, group_slots=group_slots
    )
    outside = {t: {o: rs for o, rs in by_owner.items() if o not in of} for t, by_owner in candidates.items()}
    kept = Selection(picks=tuple(p for p in selection.picks if p.owner_id not in of), cursor=selection.cursor)
    assert prefixes_fair(outside, kept, weights=weights)


@given(
    candidates=workloads(),
    slots=slot_counts,
    cursor=cursors(),
    weights=weight_maps,
    groups=budget_groups(),
    guard=st.none() | guards(),
)
def test_with_groups_truncating_to_rows_to_load_changes_nothing(
    candidates: Candidates,
    slots: int,
    cursor: Cursor,
    weights: dict[int, int],
    groups: Groups,
    guard: StarvationGuard | None,
) -> None:
    of, group_slots = groups
    # given the rows the shell would load: rows_to_load per tier over the owners with work there
    truncated = {}
    for tier, by_owner in candidates.items():
        k = rows_to_load(
            owners_with_work=[o for o, rs in by_owner.items() if rs],
            slots=slots,
            weights=weights,
            groups=of,
            group_slots=group_slots,
        )
        truncated[tier] = {o: list(rs[: k.get(o, 0)]) for o, rs in by_owner.items()}
    # then selecting from them is the same as selecting from the whole queue
    kwargs = {
        "slots": slots,
        "cursor": cursor,
        "weights": weights,
        "starvation_guard": guard,
        "groups": of,
        "group_slots": group_slots,
    }
    assert select_batch(truncated, **kwargs) == select_batch(candidates, **kwargs)  # type: ignore[arg-type]


def simulate_groups(
    *,
    free: Sequence[int],
    members: Sequence[int],
    slots: int,
    group_slots: int,
    cycles: int,
    cursor: Cursor,
    weights: Mapping[int, int] | None = None,
) -> list[list[int]]:
    """Deep reply backlogs; `members` share one group's `group_slots` a cycle; the shell's loading and
    the cursor persisted between cycles. Owners served, per cycle."""
    weights = weights or {}
    groups = dict.fromkeys(members, "org:1")
    served: Counter[int] = Counter()
    history: list[list[int]] = []
    for _ in range(cycles):
        owners = [*free, *members]
        k = rows_to_load(
            owners_with_work=owners,
            slots=slots,
            weights=weights,
            groups=groups,
            group_slots={"org:1": group_slots},
        )
        candidates = {
            REPLY: {
                o: [
                    Candidate(outreach_id=o * 10_000 + served[o] + i, owner_id=o, tier=REPLY)
                    for i in range(k[o])
                ]
                for o in owners
            }
        }
        selection = select_batch(
            candidates,
            slots=slots,
            cursor=cursor,
            weights=weights,
            groups=groups,
            group_slots={"org:1": group_slots},
        )
        cursor = Cursor.from_json(selection.cursor.to_json())
        served.update(p.owner_id for p in selection.picks)
        history.append([p.owner_id for p in selection.picks])
    return history


def test_a_groups_single_slot_rotates_among_its_owners_from_cycle_to_cycle() -> None:
    # given three owners sharing one slot a cycle, and an uncapped owner with the highest id
    history = simulate_groups(free=[9], members=[1, 2, 3], slots=4, group_slots=1, cycles=6, cursor=Cursor())
    # then each cycle the group's slot goes to its next owner, and the uncapped owner takes the rest
    assert [[o for o in cycle if o != 9] for cycle in history] == [[1], [2], [3], [1], [2], [3]]
    assert all(cycle.count(9) == 3 for cycle in history)


@settings(deadline=None)
@given(
    free=st.lists(st.integers(min_value=0, max_value=60), max_size=12, unique=True),
    members=st.lists(st.integers(min_value=61, max_value=120), min_size=1, max_size=8, unique=True),
    slots=st.integers(min_value=1, max_value=8),
    group_slots=st.integers(min_value=1, max_value=4),
    cursor=cursors(),
    data=st.data(),
)
def test_every_owner_of_a_group_gets_its_turn_across_cycles(
    free: list[int], members: list[int], slots: int, group_slots: int, cursor: Cursor, data: st.DataObject
) -> None:
    # given owners interleaved with the group's (ids shuffled into one range), unit weights
    shuffle = data.draw(st.permutations(range(200)))
    free, members = [shuffle[o] for o in free], [shuffle[o] for o in members]
    # when the tier's round has passed every place (its owners' and the group's) as often as the
    # group has owners: that many rounds, each within ceil(places / slots) cycles
    rounds = len(members) * math.ceil((len(free) + len(members)) / slots)
    history = simulate_groups(
        free=free, members=members, slots=slots, group_slots=group_slots, cycles=rounds, cursor=cursor
    )
    # then every owner of the group was served, and no cycle gave the group more than its slots
    assert {o for cycle in history for o in cycle} >= set(members)
    assert all(sum(1 for o in cycle if o in members) <= group_slots for cycle in history)


@settings(deadline=None)
@given(
    weights=st.dictionaries(
        st.integers(min_value=1, max_value=30), st.integers(min_value=1, max_value=4), min_size=2, max_size=8
    ),
    slots=st.integers(min_value=1, max_value=6),
    group_slots=st.integers(min_value=1, max_value=3),
    cursor=cursors(),
)
def test_weighted_owners_of_a_group_all_get_their_turn(
    weights: dict[int, int], slots: int, group_slots: int, cursor: Cursor
) -> None:
    # given a group of weighted owners and as many uncapped ones (ids above)
    members = sorted(weights)
    free = [100 + o for o in members]
    # when the group has had at least one full round of its own (sum of its weights picks)
    cycles = sum(weights.values()) * math.ceil(2 * len(members) / slots)
    history = simulate_groups(
        free=free,
        members=members,
        slots=slots,
        group_slots=group_slots,
        cycles=cycles,
        cursor=cursor,
        weights=weights,
    )
    # then every owner of the group was served
    assert {o for cycle in history for o in cycle} >= set(members)
