"""A guess at each owner's rows, loaded whole where the selection ran them dry (`rows_loaded`,
`ran_dry`): the same selection as `rows_to_load`'s safe k, from far fewer rows when many small
budget groups share a cycle (a platform of many capped organizations)."""

from __future__ import annotations

from collections.abc import Mapping

from hypothesis import event, given, settings
from hypothesis import strategies as st

from orchestrator.dispatch.selection import (
    Candidate,
    Candidates,
    Cursor,
    Loaded,
    Selection,
    StarvationGuard,
    ran_dry,
    rows_loaded,
    select_batch,
)
from outreach.tiers import Tier
from tests.orchestrator.dispatch.test_selection import cursors, guards, queue_of

OWNERS = range(1, 25)
GROUPS = [f"org:{n}" for n in range(1, 7)]


@st.composite
def deep_workloads(draw: st.DrawFn) -> dict[Tier, dict[int, list[Candidate]]]:
    """10-24 owners with rows in one tier (a few in a second), up to 12 deep: deeper than a
    guess of one or two."""
    depth = st.sampled_from([0, 1, 2, 3, 5, 8, 12])
    one = draw(st.dictionaries(st.sampled_from(OWNERS), st.tuples(st.sampled_from(Tier), depth), min_size=10))
    depths = {(tier, owner): n for owner, (tier, n) in one.items()}
    depths |= draw(
        st.dictionaries(st.tuples(st.sampled_from(Tier), st.sampled_from(OWNERS)), depth, max_size=6)
    )
    return queue_of(depths)


@st.composite
def many_groups(draw: st.DrawFn) -> tuple[dict[int, str], dict[str, int]]:
    """Half the owners or more in one of six budget groups, each group with 0-30 slots."""
    of = draw(st.dictionaries(st.sampled_from(OWNERS), st.sampled_from(GROUPS), min_size=12, max_size=24))
    return of, {g: draw(st.sampled_from([0, 1, 2, 5, 30])) for g in sorted(set(of.values()))}


def _select(
    candidates: Candidates,
    *,
    whole: set[int],
    room: Mapping[int, int],
    dropped: set[int],
    policy: dict,
) -> tuple[Selection, Loaded, set[int]]:
    """What the cycle does with a queue of `candidates`: load (the owners in `whole` whole, the
    others a guess), drop the unsendable rows, select; and the owners that ran dry."""

    def load(tier: Tier, k: dict[int, int]) -> dict[int, list[Candidate]]:
        found = {o: list(candidates.get(tier, {}).get(o, ())[:n]) for o, n in k.items()}
        return {o: rows for o, rows in found.items() if rows}

    loaded = rows_loaded(
        ready={t: [o for o, rs in by_owner.items() if rs] for t, by_owner in candidates.items()},
        room=room,
        slots=policy["slots"],
        weights=policy["weights"],
        groups=policy["groups"],
        group_slots=policy["group_slots"],
        costs=policy["costs"],
        paused_tiers={},
        whole=whole,
        load=load,
    )
    sendable = {
        t: {o: [r for r in rows if r.outreach_id not in dropped] for o, rows in by_owner.items()}
        for t, by_owner in loaded.candidates.items()
    }
    selection = select_batch(sendable, **policy)
    return selection, loaded, ran_dry(selection, offered=sendable, loaded=sendable, cut=loaded.cut)


def _guessed_then_whole(candidates: Candidates, **kwargs) -> tuple[Selection, Selection, int, int, bool]:
    """The selection from every owner's safe k, the one the guess-and-reload loop ends with,
    the rows each loaded, and whether the loop loaded any owner whole."""
    owners = {o for by_owner in candidates.values() for o in by_owner}
    safe, loaded, _ = _select(candidates, whole=owners, **kwargs)
    whole: set[int] = set()
    while True:
        guessed, guess_loaded, dry = _select(candidates, whole=whole, **kwargs)
        if dry <= whole:
            break
        whole |= dry
    rows = sum(len(rs) for by_owner in loaded.candidates.values() for rs in by_owner.values())
    guess_rows = sum(len(rs) for by_owner in guess_loaded.candidates.values() for rs in by_owner.values())
    return safe, guessed, rows, guess_rows, bool(whole)


@settings(max_examples=300)
@given(
    candidates=deep_workloads(),
    slots=st.integers(0, 14),
    cursor=cursors(),
    weights=st.dictionaries(st.sampled_from(OWNERS), st.integers(1, 4)),
    groups=many_groups(),
    guard=st.none() | guards(),
    room=st.fixed_dictionaries({o: st.sampled_from([1, 2, 4, 10, 50]) for o in OWNERS}),
    dropped=st.sets(st.integers(0, 3_000), max_size=30),
    tokens=st.booleans(),
    costs=st.fixed_dictionaries({o: st.integers(100, 4_000) for o in OWNERS}),
)
def test_a_guess_reloaded_where_it_ran_dry_selects_as_the_safe_k_does(
    candidates: Candidates,
    slots: int,
    cursor: Cursor,
    weights: dict[int, int],
    groups: tuple[dict[int, str], dict[str, int]],
    guard: StarvationGuard | None,
    room: dict[int, int],
    dropped: set[int],
    tokens: bool,
    costs: dict[int, int],
) -> None:
    of, group_slots = groups
    policy = {
        "slots": slots,
        "cursor": cursor,
        "weights": weights,
        "starvation_guard": guard,
        "groups": of,
        "group_slots": group_slots,
        "costs": costs if tokens else None,
    }
    # given a queue, each owner's room for today and some rows the shell finds unsendable
    # when the cycle loads a guess, and loads whole and selects again the owners it ran dry
    safe, guessed, rows, guess_rows, reloaded = _guessed_then_whole(
        candidates, room=room, dropped=dropped, policy=policy
    )
    event(f"owners loaded whole after the guess: {'some' if reloaded else 'none'}")
    # then it selects what every owner's safe k selects, cursor and all, from no more rows
    event("fewer rows loaded" if guess_rows < rows else "as many rows loaded")
    assert guessed == safe
    assert guess_rows <= rows


def test_many_small_groups_load_a_few_rows_an_owner_not_their_group_s_slots() -> None:
    # given 20 capped organizations of 5 owners, each owner 40 intros deep, 60 slots, a budget
    # each group's slots cannot reach
    candidates = {
        Tier.INTRO: {
            o: [Candidate(outreach_id=o * 1_000 + i, owner_id=o, tier=Tier.INTRO) for i in range(40)]
            for o in range(1, 101)
        }
    }
    of = {o: f"org:{(o - 1) // 5}" for o in range(1, 101)}
    policy = {
        "slots": 60,
        "cursor": Cursor(),
        "weights": {},
        "starvation_guard": None,
        "groups": of,
        "group_slots": dict.fromkeys(of.values(), 1_000),
        "costs": None,
    }
    # when the cycle loads the rows it selects from
    safe, guessed, rows, guess_rows, _ = _guessed_then_whole(
        candidates, room=dict.fromkeys(range(1, 101), 50), dropped=set(), policy=policy
    )
    # then it selects the same 60, from 2 rows an owner where the safe k loads 40 (56 of its
    # group's 60 slots, as far as each owner has)
    assert guessed == safe
    assert len(guessed.picks) == 60
    assert (rows, guess_rows) == (4_000, 200)


def test_an_owner_with_work_in_a_later_tier_is_given_its_safe_k_where_its_room_is_charged() -> None:
    # given ten owners with 10 replies each, each its own capped organization, the first also
    # with 5 intros and room for 6 more today, 6 slots of which the guard keeps half for intros
    candidates = {
        Tier.REPLY: {
            o: [Candidate(outreach_id=o * 1_000 + i, owner_id=o, tier=Tier.REPLY) for i in range(10)]
            for o in range(1, 11)
        },
        Tier.INTRO: {1: [Candidate(outreach_id=500 + i, owner_id=1, tier=Tier.INTRO) for i in range(5)]},
    }
    of = {o: f"org:{o}" for o in range(1, 11)}
    policy = {
        "slots": 6,
        "cursor": Cursor(),
        "weights": {},
        "starvation_guard": StarvationGuard(min_share={Tier.INTRO: 0.5}),
        "groups": of,
        "group_slots": dict.fromkeys(of.values(), 30),
        "costs": None,
    }
    # when the cycle loads a guess of 2 replies an owner (its safe k, 6, loads 6 of the first's,
    # its whole room, and no intro)
    safe, guessed, _, _, _ = _guessed_then_whole(
        candidates, room=dict.fromkeys(range(1, 11), 6), dropped=set(), policy=policy
    )
    # then the first owner's replies are not guessed, or its room would leave 4 intros the
    # guard's stage would pick
    assert guessed == safe
    assert not any(p.tier == Tier.INTRO for p in guessed.picks)


def test_the_run_that_names_the_guard_s_picks_is_checked_for_rows_run_dry_too() -> None:
    # given 6 slots, a guard keeping 1% for intros and nudges, and a capped organization with
    # 5 slots whose owner 11 has 3 replies (its safe k) and is guessed 2: the guard's run never
    # reaches its second, the run without the guard (which names the guard's picks) its third
    reply, intro, nudge = Tier.REPLY, Tier.INTRO, Tier.NUDGE
    candidates = {
        reply: {o: [Candidate(outreach_id=o * 100, owner_id=o, tier=reply)] for o in (2, 3, 4, 5, 13)}
        | {11: [Candidate(outreach_id=7_000 + i, owner_id=11, tier=reply) for i in range(3)]},
        intro: {1: [Candidate(outreach_id=5_000, owner_id=1, tier=intro)]},
        nudge: {12: [Candidate(outreach_id=6_000, owner_id=12, tier=nudge)]},
    }
    of = dict.fromkeys((1, 2, 3, 11, 12), "org:1") | {4: "org:2", 5: "org:2"}
    policy = {
        "slots": 6,
        "cursor": Cursor(),
        "weights": {},
        "starvation_guard": StarvationGuard(min_share={intro: 0.01, nudge: 0.01}),
        "groups": of,
        "group_slots": {"org:1": 5, "org:2": 0},
        "costs": None,
    }
    # when the cycle loads a guess and selects
    safe, guessed, _, _, reloaded = _guessed_then_whole(
        candidates, room=dict.fromkeys(range(1, 14), 1) | {11: 4}, dropped=set(), policy=policy
    )
    # then owner 11 was loaded whole, and the intro is the guard's pick, as with the safe k
    # (a backfill's when only the picks counted: the run without the guard ran owner 11 dry)
    assert reloaded
    assert guessed == safe
    assert [p.reason for p in guessed.picks if p.tier == intro] == ["guard tier=intro round=1"]
