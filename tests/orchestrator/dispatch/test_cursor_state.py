"""The selection cursor in Redis (cycle.cursor_state): read back whole by any process, written
as what changed since this process's last write, whole when Redis does not hold that write."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from fractions import Fraction
from typing import Any

import pytest
import redis
from django.conf import settings as django_settings
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.budget import Budget
from orchestrator.dispatch.cycle import cursor_state, dispatch_cycle
from orchestrator.dispatch.cycle.cursor_state import (
    CURSOR_KEY,
    LEADS_KEY,
    cursor_load,
    cursor_read,
    cursor_store,
    leads_change,
)
from orchestrator.dispatch.selection import Candidate, Candidates, Cursor, Position, Selection, select_batch
from orchestrator.dispatch.selection.cursor import Leads
from orchestrator.dispatch.singleton import Lease, dispatch_lease
from outreach.tiers import Tier
from tests.factories import make_outreach
from tests.orchestrator.dispatch.test_selection import (
    budget_groups,
    owner_ids,
    slot_counts,
    weight_maps,
    workloads,
)
from tests.orchestrator.dispatch.test_selection_tokens import cost_maps
from tests.orchestrator.dispatch.test_selection_window import cursors_with_leads

INTRO, REPLY = Tier.INTRO, Tier.REPLY
# A field in a round no head names: a write whole deletes it with the hash, a change keeps it.
STRAY = "nudge|org:404|1"


def _cursor(leads: dict[int, int], *, group: dict[int, int] | None = None, scale: int = 1000) -> Cursor:
    """An intro round stopped at owner 3, a third of the way round, with `leads`, and a
    budget group's round with `group`'s."""
    rounds = {(INTRO, ""): Leads(scale, leads)}
    if group is not None:
        rounds[(INTRO, "org:7")] = Leads(scale, group)
    return Cursor(
        positions=((INTRO, Position(owner_id=3, phase=Fraction(1, 3))),),
        groups=((INTRO, "org:7", Position(owner_id=5)),),
        leads=rounds,
    )


def _another_process() -> None:
    """What a dispatcher that never wrote knows: nothing (as after a restart)."""
    cursor_state._written = cursor_state._Written()


@pytest.fixture
def lease(redis_client: redis.Redis) -> Iterator[Lease]:
    with dispatch_lease(redis_client, ttl_s=30) as held:
        assert held is not None
        yield held


def test_the_cursor_this_process_wrote_is_read_back_without_parsing_and_any_other_is_parsed(
    redis_client: redis.Redis, lease: Lease
) -> None:
    # given a cursor persisted by this process while it held the lease
    written = _cursor({3: 701, 8: 1_901}, group={5: 2_101})
    cursor_store(lease, written)
    # when the next cycle reads it, it gets that very cursor back
    assert cursor_load(redis_client) is written
    # and a process that did not write it reads it whole: the head and every lead
    _another_process()
    assert cursor_load(redis_client) == written
    # and when another dispatcher has written since (a cursor's JSON, as until 2026-12-05, or
    # nothing at all), what is there is parsed
    other = Cursor(positions=((INTRO, Position(owner_id=9)),), leads={(INTRO, ""): Leads(6, {2: 14})})
    redis_client.set(CURSOR_KEY, other.to_json())
    assert cursor_load(redis_client) == other
    redis_client.delete(CURSOR_KEY)
    assert cursor_load(redis_client) == Cursor()


def test_a_write_sends_the_leads_that_changed_and_deletes_those_dropped(
    redis_client: redis.Redis, lease: Lease
) -> None:
    # given a cursor written, and a field no cursor names beside its leads
    cursor_store(lease, _cursor({3: 701, 8: 1_901, 11: 301}, group={5: 2_101}))
    redis_client.hset(LEADS_KEY, STRAY, 1)
    # when the next cycle writes one owner moved on, one new ahead and one no longer ahead
    moved = _cursor({3: 701, 8: 2_401, 12: 51}, group={5: 2_101})
    assert cursor_load(redis_client) is not None
    cursor_store(lease, moved)
    # then only those fields changed: the stray one is still there (no rewrite whole) ...
    assert redis_client.hgetall(LEADS_KEY) == {
        b"intro||3": b"701",
        b"intro||8": b"2401",
        b"intro||12": b"51",
        b"intro|org:7|5": b"2101",
        STRAY.encode(): b"1",
    }
    # ... and another process reads the new cursor back
    _another_process()
    assert cursor_load(redis_client) == moved


def test_what_a_write_changes_is_worked_out_round_by_round() -> None:
    before = {(INTRO, ""): Leads(1000, {1: 5, 2: 7, 3: 9}), (REPLY, "org:7"): Leads(4, {6: 1})}
    # an owner moved on, one new, one dropped; a round gone; a round new
    after = {(INTRO, ""): Leads(1000, {1: 5, 2: 8, 4: 3}), (REPLY, ""): Leads(4, {6: 3})}
    sets, drops = leads_change(before, after)
    assert sets == ["intro||2", 8, "intro||4", 3, "reply||6", 3]
    assert sorted(drops) == ["intro||3", "reply|org:7|6"]
    # a round in another scale is set whole (the dropped owners deleted); the same round object: nothing
    rescaled = {(INTRO, ""): Leads(3, {1: 1, 2: 2})}
    assert leads_change(before, rescaled) == (["intro||1", 1, "intro||2", 2], ["intro||3", "reply|org:7|6"])
    assert leads_change(before, before) == ([], [])


def test_a_write_against_a_cursor_redis_no_longer_holds_rewrites_the_leads_whole(
    redis_client: redis.Redis, lease: Lease
) -> None:
    # given a cursor this process wrote, then another dispatcher's write between two of its
    # cycles (this process has not read since: its change would be against a head now gone)
    cursor_store(lease, _cursor({3: 701, 8: 1_901}))
    redis_client.set(CURSOR_KEY, Cursor().to_json())
    redis_client.hset(LEADS_KEY, STRAY, 1)
    # when it writes its next cursor
    latest = _cursor({3: 701, 8: 2_401}, group={5: 90})
    cursor_store(lease, latest)
    # then it wrote the leads whole (the stray field went with the old hash), and they read back
    assert STRAY.encode() not in redis_client.hgetall(LEADS_KEY)
    _another_process()
    assert cursor_load(redis_client) == latest


def test_a_cursor_of_the_inline_format_is_read_and_the_next_write_is_whole(
    redis_client: redis.Redis, lease: Lease
) -> None:
    # given the cursor a dispatcher wrote until 2026-12-05: one JSON value, leads inline
    old = _cursor({3: 701, 8: 1_901}, group={5: 2_101})
    redis_client.set(CURSOR_KEY, old.to_json())
    # when this dispatcher reads it and writes its next
    assert cursor_load(redis_client) == old
    cursor_store(lease, old)
    # then the head holds no owner's lead, the hash holds them all, and they read back
    head = json.loads(redis_client.get(CURSOR_KEY) or b"")
    assert head["format"] == cursor_state.FORMAT
    assert head["cursor"]["intro"]["leads"][""] == {"scale": 1000, "count": 2}
    assert len(redis_client.hgetall(LEADS_KEY)) == 3
    _another_process()
    assert cursor_load(redis_client) == old


def test_thousands_of_leads_are_written_read_and_dropped_in_chunks(
    redis_client: redis.Redis, lease: Lease
) -> None:
    # (Redis's Lua takes about 8,000 arguments at once: the script sets and deletes a thousand at a time)
    many = _cursor({o: 1 + o % 1_701 for o in range(1, 6_001)}, group={o: 2 + o for o in range(1, 3_001)})
    cursor_store(lease, many)
    assert redis_client.hlen(LEADS_KEY) == 9_000
    cursor_load(redis_client)
    fewer = _cursor({o: 1 + o % 1_701 for o in range(2_501, 6_001)}, group={1: 3})
    cursor_store(lease, fewer)
    assert redis_client.hlen(LEADS_KEY) == 3_501
    _another_process()
    assert cursor_load(redis_client) == fewer


def test_nothing_is_written_once_the_lease_is_lost(redis_client: redis.Redis) -> None:
    with dispatch_lease(redis_client, ttl_s=30) as lease:
        assert lease is not None
        redis_client.delete("orchestrator:dispatch:lease")  # expired, say, and taken by nobody yet
        cursor_store(lease, _cursor({3: 701}))
    assert redis_client.get(CURSOR_KEY) is None
    assert redis_client.hlen(LEADS_KEY) == 0


@pytest.mark.parametrize("damage", ["leads lost", "not a cursor"])
def test_a_cursor_that_does_not_add_up_is_logged_and_the_rounds_start_again(
    redis_client: redis.Redis, lease: Lease, caplog: pytest.LogCaptureFixture, damage: str
) -> None:
    cursor_store(lease, _cursor({3: 701, 8: 1_901}))
    if damage == "leads lost":  # evicted, say: the head says two leads, the hash holds none
        redis_client.delete(LEADS_KEY)
    else:
        redis_client.set(CURSOR_KEY, b'{"format": 2, "cursor": [1, 2]}')
    _another_process()
    with caplog.at_level(logging.WARNING, logger=cursor_state.__name__):
        assert cursor_load(redis_client) == Cursor()
    assert f"dispatch cursor {CURSOR_KEY} unreadable" in caplog.text


@pytest.mark.django_db
def test_a_cycle_dispatches_over_a_cursor_it_cannot_read(
    budget: Budget, redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given queued work and, in Redis, something that is not a cursor (a bad restore, a hand edit)
    queued = make_outreach()
    redis_client.set(CURSOR_KEY, b'{"intro": {"owner_id": "three"}}')
    # when a cycle runs, it dispatches from the start cursor (before, every cycle raised)
    with django_capture_on_commit_callbacks(execute=False):
        assert dispatch_cycle(budget=budget).generation == [queued.pk]
    # and the cursor it wrote over it reads back
    assert cursor_read(redis_client).position(Tier.INTRO) == Position(owner_id=queued.owner_id)


_rounds = st.dictionaries(
    st.tuples(st.sampled_from([REPLY, INTRO]), st.sampled_from(["", "org:7", "org:8"])),
    st.tuples(
        st.sampled_from([1, 6, 1_000]),
        st.dictionaries(st.integers(1, 40), st.integers(1, 3_000), max_size=30),
    ),
    max_size=4,
)


@settings(max_examples=80)
@given(
    steps=st.lists(
        st.tuples(_rounds, st.sampled_from(["read", "restart", "other wrote"])), min_size=1, max_size=6
    )
)
def test_any_run_of_writes_leaves_redis_holding_the_last_cursor(
    steps: list[tuple[dict[tuple[Tier, str], tuple[int, dict[int, int]]], str]],
) -> None:
    # given a run of cursors whose rounds come and go, change scale, gain and lose owners; before
    # each, the dispatcher read the cursor, or restarted (it forgets what it wrote), or another
    # dispatcher wrote since its read (a cursor of its own, and a lead of its own in a round)
    client = redis.Redis.from_url(django_settings.REDIS_URL)
    client.delete(CURSOR_KEY, LEADS_KEY)
    _another_process()
    with dispatch_lease(client, ttl_s=30) as lease:
        assert lease is not None
        for rounds, before in steps:
            tiers = {tier for tier, _ in rounds}
            cursor = Cursor(
                positions=tuple((tier, Position(owner_id=1)) for tier in sorted(tiers)),
                leads={name: Leads(scale, ticks) for name, (scale, ticks) in rounds.items()},
            )
            if before == "read":
                cursor_load(client)
            elif before == "restart":
                _another_process()
            else:
                client.set(CURSOR_KEY, Cursor(positions=((INTRO, Position(owner_id=9)),)).to_json())
                client.hset(LEADS_KEY, "intro||41", 5)
            # when each is written
            cursor_store(lease, cursor)
            # then Redis holds exactly it: read whole, it is the cursor written
            assert cursor_read(client) == cursor
    client.delete(CURSOR_KEY, LEADS_KEY)


def _pairs(sets: list[str | int]) -> dict[str | int, str | int]:
    return dict(zip(sets[::2], sets[1::2], strict=True))


@st.composite
def one_frame_cursors(draw: st.DrawFn) -> Cursor:
    """An intro round early in its frame (position under half a round, scale 1000), owners ahead
    by less than what is left of it, and owner 99 (never a candidate) at 999, whose lead stands:
    selections of cheap jobs that stay in that frame."""
    at = draw(st.integers(0, 500))
    leads = draw(st.dictionaries(owner_ids, st.integers(at + 1, 998), max_size=10))
    return Cursor(
        positions=((INTRO, Position(owner_id=draw(owner_ids), phase=Fraction(at, 1000))),),
        leads={(INTRO, ""): Leads(1000, {**leads, 99: 999})},
    )


@settings(deadline=None, max_examples=400)
@given(
    candidates=workloads(),
    slots=slot_counts,
    cursor=one_frame_cursors() | cursors_with_leads(),
    weights=weight_maps,
    groups=budget_groups(),
    costs=st.fixed_dictionaries({o: st.integers(1, 300) for o in range(1, 13)}) | cost_maps,
    uniform=st.booleans(),
)
def test_what_a_selection_says_it_changed_in_the_leads_is_what_comparing_them_all_finds(
    candidates: Candidates,
    slots: int,
    cursor: Cursor,
    weights: dict[int, int],
    groups: tuple[dict[int, str], dict[str, int]],
    costs: dict[int, int],
    uniform: bool,
) -> None:
    # given any selection in tokens from a cursor with leads (often one that stays in its frame)
    by_group, group_slots = groups
    after = select_batch(
        candidates,
        slots=slots,
        cursor=cursor,
        weights={} if uniform else weights,
        groups=by_group,
        group_slots=group_slots,
        costs=costs,
    ).cursor.leads
    # when the write is worked out from what the clock says it changed (`Leads.since`)
    sets, drops = leads_change(cursor.leads, after)
    # then it is what comparing every lead with the cursor's finds
    compared = {name: Leads(leads.scale, dict(leads.ticks)) for name, leads in after.items()}
    all_sets, all_drops = leads_change(cursor.leads, compared)
    assert (_pairs(sets), sorted(drops)) == (_pairs(all_sets), sorted(all_drops))


def test_a_cycle_in_one_frame_writes_the_leads_it_changed_and_redis_holds_them_all(
    redis_client: redis.Redis,
) -> None:
    # given 400 owners ahead of an intro round's position, their leads written
    cursor = Cursor(
        positions=((INTRO, Position(owner_id=3, phase=Fraction(1, 10))),),
        leads={(INTRO, ""): Leads(1000, {o: 200 + o for o in range(1, 401)})},
    )
    rows = {INTRO: {o: [Candidate(outreach_id=o, owner_id=o, tier=INTRO)] for o in range(1, 401)}}
    with dispatch_lease(redis_client, ttl_s=30) as lease:
        assert lease is not None
        cursor_store(lease, cursor)
        # when a selection of five picks (each 0.1 of a round ahead) moves on in the same frame
        after = select_batch(rows, slots=5, cursor=cursor, costs=dict.fromkeys(range(1, 401), 100)).cursor
        leads = after.leads_of(INTRO)
        assert leads.since is not None
        # then the write names the five picked owners and the ones the round passed, no others
        sets, drops = leads_change(cursor.leads, after.leads)
        assert sorted(_pairs(sets)) == [f"intro||{o}" for o in sorted(leads.since.changed)]
        assert len(leads.since.changed) == 5
        assert sorted(drops) == sorted(f"intro||{o}" for o in leads.since.dropped)
        # and Redis holds every lead of the new cursor
        cursor_store(lease, after)
        assert cursor_read(redis_client) == after


def test_the_cycle_after_a_frames_end_writes_only_the_leads_it_changed() -> None:
    # given owners who all started at one phase, 1-4 with jobs of half a round, 5-6 of a whole
    # one, and a cycle whose last pick crossed into the round's next frame: each was picked as
    # often as its cost allows, so every lead is a multiple of half a round
    rows = {
        INTRO: {
            o: [Candidate(outreach_id=10 * o + k, owner_id=o, tier=INTRO) for k in range(4)]
            for o in range(1, 7)
        }
    }
    costs = {1: 500, 2: 500, 3: 500, 4: 500, 5: 1000, 6: 1000}
    first = select_batch(rows, slots=16, cursor=Cursor(), costs=costs).cursor
    assert first.leads_of(INTRO).fractions() == {
        1: Fraction(1, 2),
        2: Fraction(1, 2),
        3: Fraction(1, 2),
        4: Fraction(1, 2),
        5: Fraction(1),
        6: Fraction(1),
    }
    # when the next cycle picks two owners in the new frame
    after = select_batch(rows, slots=2, cursor=first, costs=costs).cursor
    # then its clock made the leads from the last cycle's (the same scale) and the write names
    # the two it picked and the two the round passed: not owners 5 and 6, whose leads stand
    sets, drops = leads_change(first.leads, after.leads)
    assert (sorted(_pairs(sets)), sorted(drops)) == (["intro||1", "intro||2"], ["intro||3", "intro||4"])
    assert after.leads_of(INTRO).since is not None


def test_leads_carried_from_other_weights_come_back_to_the_clocks_scale_at_a_frames_end() -> None:
    # given leads over 3,000ths (a clock when an owner weighed 3), and owners who now weigh 1
    cursor = Cursor(
        positions=((INTRO, Position(owner_id=2)),),
        leads={(INTRO, ""): Leads(3000, {1: 1500, 2: 3000})},
    )
    rows = {INTRO: {o: [Candidate(outreach_id=o, owner_id=o, tier=INTRO)] for o in (1, 2)}}
    # when a selection's last pick crosses into the round's next frame
    after = select_batch(rows, slots=2, cursor=cursor, costs={1: 1000, 2: 1000}).cursor
    # then the leads are the clock's own 1,000ths again, not a scale every clock must rescale
    leads = after.leads_of(INTRO)
    assert (leads.scale, leads.fractions()) == (1000, {1: Fraction(1, 2), 2: Fraction(1)})


@settings(deadline=None, max_examples=300)
@given(
    candidates=workloads(),
    slots=slot_counts,
    cursor=one_frame_cursors() | cursors_with_leads(),
    weights=weight_maps,
    groups=budget_groups(),
    costs=cost_maps,
    factor=st.sampled_from([2, 3, 7, 1000]),
)
def test_the_same_leads_over_any_scale_select_the_same_picks_and_leave_equal_leads(
    candidates: Candidates,
    slots: int,
    cursor: Cursor,
    weights: dict[int, int],
    groups: tuple[dict[int, str], dict[str, int]],
    costs: dict[int, int],
    factor: int,
) -> None:
    # given a cursor with leads, and the same cursor with every round's leads over a larger
    # scale (as another clock, whose owners' weights differed, would have kept them)
    rescaled = Cursor(
        positions=cursor.positions,
        groups=cursor.groups,
        leads={
            name: Leads(leads.scale * factor, {o: n * factor for o, n in leads.ticks.items()})
            for name, leads in cursor.leads.items()
        },
    )
    assert rescaled == cursor
    by_group, group_slots = groups

    def select(start: Cursor) -> Selection:
        return select_batch(
            candidates,
            slots=slots,
            cursor=start,
            weights=weights,
            groups=by_group,
            group_slots=group_slots,
            costs=costs,
        )

    # when each selects
    one, other = select(cursor), select(rescaled)
    # then the picks are the same, and so are the cursors they leave (by value)
    assert one.picks == other.picks
    assert one.cursor == other.cursor
