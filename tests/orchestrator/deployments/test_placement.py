"""Placement of jobs on deployments (orchestrator.deployments.placement): pure, table-driven."""

from __future__ import annotations

import pytest

from orchestrator.deployments.placement import Room, Route, place

SPLIT = {"plan": "small", "context": "small", "message": "large"}
PER_CALL = 100


def _rooms(*rows: tuple[str, str, float]) -> list[Room]:
    """(label, pool, requests): tokens never bind in these tables."""
    return [Room(label=label, pool=pool, requests=r, tokens=1e9) for label, pool, r in rows]


def test_each_job_is_placed_in_its_pools_on_the_deployment_with_most_room() -> None:
    # given a pool of two large deployments, the second with more room
    rooms = _rooms(("small#0", "small", 100), ("large#0", "large", 2), ("large#1", "large", 4))
    # when 5 jobs are placed
    placed = place(
        count=5,
        step_pools=SPLIT,
        rooms=rooms,
        fallbacks={},
        may_fall_back=frozenset(),
        tokens_per_call=PER_CALL,
    )
    # then the message steps went to the roomier deployment until they were level, then in turn
    assert [r.deployment_for("message") for r in placed.routes] == [
        "large#1",
        "large#1",
        "large#0",
        "large#1",
        "large#0",
    ]
    assert {r.deployment_for("plan") for r in placed.routes} == {"small#0"}


@pytest.mark.parametrize(
    ("small", "large", "expected"),
    [
        (100, 3, 3),  # the large model binds: one message call each
        (5, 100, 2),  # the small binds: two calls (plan, context) per job, 5 // 2
        (0, 100, 0),
    ],
)
def test_the_scarcest_deployment_bounds_the_jobs(small: float, large: float, expected: int) -> None:
    rooms = _rooms(("small#0", "small", small), ("large#0", "large", large))

    placed = place(
        count=50,
        step_pools=SPLIT,
        rooms=rooms,
        fallbacks={},
        may_fall_back=frozenset(),
        tokens_per_call=PER_CALL,
    )

    assert len(placed.routes) == expected


def test_a_job_is_placed_whole_or_not_at_all() -> None:
    # given room for one job's plan and context, but none for any message
    rooms = _rooms(("small#0", "small", 2), ("large#0", "large", 0))
    # when placing
    placed = place(
        count=3,
        step_pools=SPLIT,
        rooms=rooms,
        fallbacks={},
        may_fall_back=frozenset(),
        tokens_per_call=PER_CALL,
    )
    # then nothing is placed, and the pool that stopped it is named
    assert (placed.routes, placed.stopped_at) == ([], "large")


def test_a_pool_that_may_fall_back_runs_its_steps_on_the_fallback() -> None:
    # given the large pool failing (no room) and allowed to fall back to small
    rooms = _rooms(("small#0", "small", 6), ("large#0", "large", 0))
    # when placing
    placed = place(
        count=5,
        step_pools=SPLIT,
        rooms=rooms,
        fallbacks={"large": "small"},
        may_fall_back=frozenset({"large"}),
        tokens_per_call=PER_CALL,
    )
    # then each job draws 3 calls from small (2 jobs fit), and the route says so
    assert [r.encode() for r in placed.routes] == [
        "triage=small#0,plan=small#0,context=small#0,message=small#0 fallback large->small"
    ] * 2


def test_without_leave_to_fall_back_the_pool_waits() -> None:
    rooms = _rooms(("small#0", "small", 6), ("large#0", "large", 0))

    placed = place(
        count=5,
        step_pools=SPLIT,
        rooms=rooms,
        fallbacks={"large": "small"},
        may_fall_back=frozenset(),
        tokens_per_call=PER_CALL,
    )

    assert placed.routes == []


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("plan=small#0,context=small#0,message=large#1", "large#1"),
        ("plan=a#0,context=a#0,message=a#0 fallback large->a", "a#0"),
    ],
)
def test_a_route_reads_back_as_written(text: str, message: str) -> None:
    route = Route.decode(text)

    assert route is not None
    assert (route.encode(), route.deployment_for("message")) == (text, message)


@pytest.mark.parametrize("text", ["", "garbage", "draft=x#0"])
def test_an_unreadable_route_is_none(text: str) -> None:
    assert Route.decode(text) is None


def test_a_deployment_due_for_a_probe_gets_one_job_even_beside_a_roomier_one() -> None:
    # given large#0 half open (room for its one probe job) beside a roomy large#1
    rooms = [
        Room(label="small#0", pool="small", requests=100, tokens=1e9),
        Room(label="large#0", pool="large", requests=1, tokens=1e9, probe=True),
        Room(label="large#1", pool="large", requests=50, tokens=1e9),
    ]
    # when 4 jobs are placed
    placed = place(
        count=4,
        step_pools=SPLIT,
        rooms=rooms,
        fallbacks={},
        may_fall_back=frozenset(),
        tokens_per_call=PER_CALL,
    )
    # then the first is the probe, the rest go to the roomy one
    assert [r.deployment_for("message") for r in placed.routes] == [
        "large#0",
        "large#1",
        "large#1",
        "large#1",
    ]
