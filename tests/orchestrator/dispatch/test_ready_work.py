"""Which owners have ready work in a tier (cycle.window.ReadyWork over reads.ready_owners), on
PostgreSQL: a tier with few such owners is read whole by a loose index scan, one with more is
asked only about the owners the window needs, so a cycle's reads follow its window and not the
active owners."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from orchestrator.dispatch import reads
from orchestrator.dispatch.cycle import window
from orchestrator.dispatch.cycle.window import ReadyWork, owners_window
from orchestrator.dispatch.selection import Candidate, Cursor, Position
from outreach.models import Outreach, Owner, State
from outreach.tiers import Tier
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = pytest.mark.django_db


def _owners_with_intros(n: int) -> list[Owner]:
    org = make_org()
    owners = [make_owner(organization=org) for _ in range(n)]
    for owner in owners:
        make_outreach(lead=make_lead(owner=owner), not_before=timezone.now() - timedelta(minutes=1))
    return owners


def test_a_tier_with_few_owners_with_ready_work_is_read_whole_in_one_statement() -> None:
    # given two owners with ready intros, and owners whose work is not ready intro work: a
    # future intro, a reply only, an intro already dispatched, an inactive owner's ready intro
    a, b, future, replying, dispatched, inactive = _owners_with_intros(6)
    now = timezone.now()
    Outreach.objects.filter(owner=future).update(not_before=now + timedelta(hours=1))
    Outreach.objects.filter(owner=replying).update(kind=Outreach.Kind.REPLY, tier=Tier.REPLY)
    Outreach.objects.filter(owner=dispatched).update(state=State.DISPATCHED)
    Owner.objects.filter(pk=inactive.pk).update(active=False)
    active = frozenset(Owner.objects.filter(active=True).values_list("pk", flat=True))
    ready = ReadyWork(active=active, now=now)
    # when the window asks about the intro tier, allowing up to 10 such owners
    with CaptureQueriesContext(connection) as queries:
        ready.ask(Tier.INTRO, limit=10, owners=[])
    # then the tier is read whole, in one statement: exactly the active owners with ready intros
    assert len(queries) == 1
    assert ready.whole(Tier.INTRO)
    assert ready.owners[Tier.INTRO] == {a.pk, b.pk}
    # and asking again reads nothing
    with CaptureQueriesContext(connection) as queries:
        ready.ask(Tier.INTRO, limit=10, owners=[a.pk, future.pk])
    assert len(queries) == 0


def test_a_tier_with_more_owners_than_the_limit_is_asked_only_about_the_owners_named() -> None:
    # given 12 owners with ready intros and one whose intro is not due yet
    *owners, future = _owners_with_intros(13)
    now = timezone.now()
    Outreach.objects.filter(owner=future).update(not_before=now + timedelta(hours=1))
    ids = sorted(o.pk for o in owners)
    ready = ReadyWork(active=frozenset([*ids, future.pk]), now=now)
    # when the window asks about three owners of the tier, allowing 4 owners with ready work
    with CaptureQueriesContext(connection) as queries:
        ready.ask(Tier.INTRO, limit=4, owners=[ids[9], ids[10], future.pk])
    # then one statement says the tier has more and answers for those three: known to have
    # ready work are the first 5 the loose scan met (by id) and the two named that have some
    assert len(queries) == 1
    assert not ready.whole(Tier.INTRO)
    assert ready.owners[Tier.INTRO] == {*ids[:5], ids[9], ids[10]}
    assert ready.asked[Tier.INTRO] == {*ids[:5], ids[9], ids[10], future.pk}
    # and a later ask reads only about owners not asked yet: none, nothing read; one, one statement
    with CaptureQueriesContext(connection) as queries:
        ready.ask(Tier.INTRO, limit=4, owners=[ids[0], ids[9], future.pk])
    assert len(queries) == 0
    with CaptureQueriesContext(connection) as queries:
        ready.ask(Tier.INTRO, limit=4, owners=[ids[11], ids[9]])
    assert len(queries) == 1
    assert ids[11] in ready.owners[Tier.INTRO]
    assert ids[6] not in ready.asked[Tier.INTRO]  # type: ignore[operator]


def test_an_empty_tier_is_read_whole_and_asks_about_nobody() -> None:
    # given owners with intros and no replies at all
    owners = _owners_with_intros(3)
    ready = ReadyWork(active=frozenset(o.pk for o in owners), now=timezone.now())
    # when the window asks about the reply tier, naming every owner, with a limit below them
    ready.ask(Tier.REPLY, limit=1, owners=[o.pk for o in owners])
    # then nobody has ready replies, and that is all of the tier
    assert ready.whole(Tier.REPLY)
    assert ready.owners[Tier.REPLY] == set()


def _window(owners: list[Owner], *, size: int) -> tuple[frozenset[int], int]:
    """A cycle's window over these owners (no cursor, equal weights): the owners it loads, and
    how many statements asked about ready work."""
    ids = [o.pk for o in owners]
    ready = ReadyWork(active=frozenset(ids), now=timezone.now())
    with CaptureQueriesContext(connection) as queries:
        window = owners_window(
            ready=ready, cursor=Cursor(), weights=dict.fromkeys(ids, 1), groups={}, tokens=False, size=size
        )
    return window.loaded, sum("WITH RECURSIVE loose" in q["sql"] for q in queries.captured_queries)


def test_a_tier_read_whole_last_cycle_is_asked_first_and_a_tier_that_grew_is_still_judged_whole(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given 40 owners, 3 of them with ready intros, and a window of 4 owners a round: the
    # first cycle reads the intro tier whole
    owners = _owners_with_intros(40)
    Outreach.objects.exclude(owner__in=owners[:3]).update(state=State.CANCELLED)
    monkeypatch.setattr(window, "_last", window._LastCycle())  # a dispatcher's first cycle
    loaded, asks = _window(owners, size=4)
    assert loaded == {o.pk for o in owners[:3]}
    assert asks == 3  # one statement a tier
    # when every owner has a ready intro by the next cycle (the tier grew past the window)
    Outreach.objects.update(state=State.QUEUED)
    loaded, asks = _window(owners, size=4)
    # then the window is the one a dispatcher that never read the tier whole judges, at the
    # cost of one statement more; and the cycle after that asks once a tier again
    monkeypatch.setattr(window, "_last", window._LastCycle())
    fresh, _ = _window(owners, size=4)
    assert loaded == fresh
    assert len(loaded) == 4
    assert asks == 4
    assert _window(owners, size=4)[1] == 3


def _intro_asks(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """Each ask of the intro tier (reads.ready_owners' arguments, its probes as a list), recorded
    as the cycle makes them."""
    from orchestrator.dispatch import reads

    asks: list[dict[str, Any]] = []
    real_ready_owners = reads.ready_owners

    def ready_owners(**kwargs: Any) -> reads.ReadyOwners:
        kwargs["probe"] = list(kwargs.get("probe", ()))
        if kwargs["tier"] == Tier.INTRO:
            asks.append(kwargs)
        return real_ready_owners(**kwargs)

    monkeypatch.setattr(reads, "ready_owners", ready_owners)
    return asks


def test_a_tier_found_bigger_than_the_window_is_asked_without_a_scan_until_it_shrinks(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given 40 owners with ready intros and a window of 4 owners a round, the intro tier's
    # asks recorded (the limit up to which its loose scan looks for owners with ready work)
    owners = _owners_with_intros(40)
    asks = _intro_asks(monkeypatch)
    # when a dispatcher judges its first window, and its second
    first, _ = _window(owners, size=4)
    second, _ = _window(owners, size=4)
    # then the first scanned for up to 4 owners with ready intros and found more; the second
    # asked only about the owners its window reaches, and loaded the same owners
    assert [ask["limit"] for ask in asks] == [4, 0]
    assert second == first
    # when all but two owners' intros are cancelled: the next window still asks as of a big
    # tier (and finds the two), the one after it scans again and reads the tier whole
    Outreach.objects.exclude(owner__in=owners[:2]).update(state=State.CANCELLED)
    third, _ = _window(owners, size=4)
    fourth, _ = _window(owners, size=4)
    assert [ask["limit"] for ask in asks] == [4, 0, 0, 4]
    assert third == fourth == {owners[0].pk, owners[1].pk}


def test_a_big_tier_is_asked_about_as_many_first_owners_as_its_last_share_with_work_needs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given 60 owners with ready intros, the owners each ask of the intro tier names recorded
    owners = _owners_with_intros(60)
    asks = _intro_asks(monkeypatch)
    # when a dispatcher judges its first two windows of 8 owners a round
    first, _ = _window(owners, size=8)
    second, _ = _window(owners, size=8)
    # then the first asked about 2 owners a place (none asked before), found every one with
    # work, and the second asked about 1 a place (8: all it needs), loading the same owners
    assert [len(ask["probe"]) for ask in asks] == [16, 8]
    assert second == first
    # when every second owner's intro is cancelled, the next window finds half of its 8 with
    # work: the one after it asks about 2 a place again (1 / 0.5)
    Outreach.objects.filter(owner__in=owners[1::2]).update(state=State.CANCELLED)
    _window(owners, size=8)
    _window(owners, size=8)
    assert [len(ask["probe"]) for ask in asks[2:]] == [8, 16]


def test_asking_about_owners_reads_their_first_ready_rows_in_the_candidates_order() -> None:
    # given three owners with ready intros, one with three due in an order their ids do not
    # follow, one with a single one, and one whose intro is not due yet; and a fourth owner
    now = timezone.now()
    many, one, later, more = _owners_with_intros(4)
    first = Outreach.objects.get(owner=many)
    due = [now - timedelta(minutes=m) for m in (30, 50, 40)]
    rows = [first, *(make_outreach(lead=make_lead(owner=many)) for _ in range(2))]
    for row, at in zip(rows, due, strict=True):
        Outreach.objects.filter(pk=row.pk).update(not_before=at)
    Outreach.objects.filter(owner=later).update(not_before=now + timedelta(hours=1))
    ready = ReadyWork(active=frozenset({many.pk, one.pk, later.pk, more.pk}), now=now)
    # when the window asks about three of them, the tier having more owners with work than it takes
    ready.ask(Tier.INTRO, limit=1, owners=[many.pk, one.pk, later.pk])
    # then it has each probed owner's first ready rows, oldest due first, at most FIRST_ROWS
    assert reads.FIRST_ROWS == 2
    assert ready.first_rows[Tier.INTRO] == {
        many.pk: [rows[1].pk, rows[2].pk],
        one.pk: [Outreach.objects.get(owner=one).pk],
    }
    # and they are the rows the candidates' read gives those owners
    assert reads.ready_candidates(tier=Tier.INTRO, k_by_owner={many.pk: 2, one.pk: 2}, now=now) == {
        owner: [Candidate(outreach_id=i, owner_id=owner, tier=Tier.INTRO) for i in ids]
        for owner, ids in ready.first_rows[Tier.INTRO].items()
    }


def _twenty_groups_of_four() -> tuple[list[int], dict[int, str]]:
    """80 owners with ready intros in 20 budget groups of 4 (owner n in group n mod 20): their
    ids, in order, and their groups."""
    ids = [o.pk for o in _owners_with_intros(80)]
    return ids, {owner: f"org:{n % 20}" for n, owner in enumerate(ids)}


def _window_of_8(
    ids: list[int], groups: dict[int, str], *, cursor: Cursor, tokens: bool
) -> window.OwnersWindow:
    ready = ReadyWork(active=frozenset(ids), now=timezone.now())
    return owners_window(
        ready=ready, cursor=cursor, weights=dict.fromkeys(ids, 1), groups=groups, tokens=tokens, size=8
    )


def test_a_window_over_many_budget_groups_loads_their_places_in_it_not_all_their_owners(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given 80 owners with ready intros in 20 capped organizations of 4 (a budget group each)
    ids, groups = _twenty_groups_of_four()
    monkeypatch.setattr(window, "_last", window._LastCycle())
    # when a dispatcher judges its first windows of 8 owners a round, in tokens
    for _ in range(2):
        judged = _window_of_8(ids, groups, cursor=Cursor(), tokens=True)
        # then each group's own round loads no more owners than the group has places among
        # the tier round's first 8 (until 2026-12-07 each loaded 8 of its own: all 80 owners,
        # every active owner of every capped organization judged each cycle)
        tier_firsts = judged.firsts[(Tier.INTRO, "")]
        for (tier, group), firsts in judged.firsts.items():
            if tier == Tier.INTRO and group:
                assert len(firsts) == sum(1 for o in tier_firsts if groups[o] == group)
        assert len(judged.loaded) <= 16


def test_a_budget_group_whose_next_owner_has_no_work_still_finds_its_place_s_owner(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # given the 80 owners in 20 budget groups of 4, windows of 8 (the first 8 owners: one place
    # of each of groups 0-7), group 0's own round gone on past its first owner, and its next
    # owner's intro cancelled
    ids, groups = _twenty_groups_of_four()
    cursor = Cursor(
        positions=((Tier.INTRO, Position(owner_id=ids[-1])),),
        groups=((Tier.INTRO, "org:0", Position(owner_id=ids[0])),),
    )
    Outreach.objects.filter(owner_id=ids[20]).update(state=State.CANCELLED)
    monkeypatch.setattr(window, "_last", window._LastCycle())
    for _ in range(2):  # a dispatcher's first window, and one that learned every owner asked has work
        judged = _window_of_8(ids, groups, cursor=cursor, tokens=False)
        # then the group's one place goes to the next owner of its round with work, asked about
        # with it: the round is asked about twice its places, not only as far as they reach
        assert judged.firsts[(Tier.INTRO, "org:0")] == [ids[40]]
