"""The learned cost of an owner's jobs (orchestrator.dispatch.owner_tokens) and how the dispatch
cycle uses it: picks charged the tokens jobs use (DISPATCH_FAIRNESS=tokens), reservations of
what the provider's limit counts.
Real PostgreSQL and Redis; the worker's side is called as the generation task calls it."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
import redis

from devtools.llm_stub import LLMStub, StubRequest
from devtools.processes import free_port
from nurture.writing.generation import outreach_generate
from nurture.writing.llm import prompt_tokens_estimate
from orchestrator.budget import Budget, Limits, Reservation, limits_from_settings, maths
from orchestrator.budget.maths import UNITS
from orchestrator.dispatch.cycle import dispatch_cycle
from orchestrator.dispatch.cycle.cursor_state import cursor_read
from orchestrator.dispatch.owner_tokens import (
    KEY,
    JobTokens,
    job_costs_load,
    owner_tokens_load,
    owner_tokens_record,
)
from outreach.models import Outreach, State
from tests.factories import make_lead, make_outreach, make_owner
from tests.orchestrator.conftest import FakeClock


def test_the_estimates_are_moving_averages_of_finished_jobs(redis_client: redis.Redis) -> None:
    # given an owner's jobs using 1,000 then 3,000 then 3,000 tokens, counted 2,000 then 4,000 twice
    assert owner_tokens_record(owner_id=7, settled=1_000, counted=2_000) == (1_000, 2_000)  # the first job
    assert owner_tokens_record(owner_id=7, settled=3_000, counted=4_000) == (1_400, 2_400)  # + 0.2 x diff
    assert owner_tokens_record(owner_id=7, settled=3_000, counted=4_000) == pytest.approx((1_720, 2_720))
    # then the dispatcher reads them (rounded up), and the configured estimate for owners without history
    assert owner_tokens_load(owner_ids=[7, 8], default=1_800) == {
        7: JobTokens(settled=1_720, counted=2_720),
        8: JobTokens(settled=1_800, counted=1_800),
    }
    # in one field for the owner, its steps not learned
    assert redis_client.hget(KEY, "p:7") == b"1720.000 2720.000 - - - - - -"


def test_averages_kept_in_the_old_fields_are_read_and_go_on_from_where_they_were(
    redis_client: redis.Redis,
) -> None:
    # given the averages as the dispatcher kept them until 2026-12-06: a field each
    redis_client.hset(
        KEY,
        mapping={
            "7": "1400.000",
            "7:counted": "2400.000",
            "7:intro": "1400.000",
            "7:intro:counted": "2400.000",
            "8": "500.500",
            "8:counted": "900.000",
            "9": "100.000",
            "9:counted": "200.000",
        },
    )
    # when owner 9 finishes an intro before any cycle has read them
    assert owner_tokens_record(owner_id=9, settled=300, counted=400, kind="intro") == pytest.approx(
        (140, 240)
    )
    # then the cycle reads every owner's averages as they were, 9's with its new job
    costs = job_costs_load(owner_ids=[7, 8, 9, 10], default=1_800)
    assert costs.owners == {
        7: JobTokens(settled=1_400, counted=2_400),
        8: JobTokens(settled=501, counted=900),
        9: JobTokens(settled=140, counted=240),
        10: JobTokens(settled=1_800, counted=1_800),
    }
    assert costs.steps == {
        (7, "intro"): JobTokens(settled=1_400, counted=2_400),
        (9, "intro"): JobTokens(300, 400),
    }
    # and the next job goes on from the old average; the hash holds one field an owner, marked
    assert owner_tokens_record(owner_id=7, settled=3_400, counted=4_400, kind="intro") == pytest.approx(
        (1_800, 2_800)
    )
    assert job_costs_load(owner_ids=[7], default=1_800).of(7, "intro") == JobTokens(
        settled=1_800, counted=2_800
    )
    assert sorted(redis_client.hkeys(KEY)) == [b"format", b"p:7", b"p:8", b"p:9"]


def test_a_hash_converted_once_is_not_scanned_again(redis_client: redis.Redis) -> None:
    # given a converted hash (the first load marks it)
    owner_tokens_record(owner_id=7, settled=1_000, counted=2_000)
    job_costs_load(owner_ids=[7], default=1_800)
    # when a field in the old format turns up (a worker of the previous release, mid-deploy)
    redis_client.hset(KEY, mapping={"8": "100.000", "8:counted": "200.000"})
    # then loads do not look for it: the owner costs the configured estimate until it has a job
    assert job_costs_load(owner_ids=[8], default=1_800).owners == {8: JobTokens(settled=1_800, counted=1_800)}
    # and its next job folds it into its field
    assert owner_tokens_record(owner_id=8, settled=300, counted=400) == pytest.approx((140, 240))
    assert redis_client.hget(KEY, "p:8") == b"140.000 240.000 - - - - - -"


def test_an_unreadable_field_costs_the_configured_estimate_and_the_next_job_writes_it_anew(
    redis_client: redis.Redis, caplog: pytest.LogCaptureFixture
) -> None:
    # given owner 7's field cut short, 8's and 10's not numbers (a hand edit, a bad restore), 9's sound
    redis_client.hset(
        KEY,
        mapping={
            "format": "2",
            "p:7": "1720.000 2720.000 -",
            "p:8": "a b c d e f g h",
            "p:10": "inf - - - - - - -",
        },
    )
    owner_tokens_record(owner_id=9, settled=1_000, counted=2_000)
    # then the cycle does not raise: those owners cost the configured estimate, logged by owner
    costs = job_costs_load(owner_ids=[7, 8, 9, 10], default=1_800)
    assert costs.owners == {
        7: JobTokens(settled=1_800, counted=1_800),
        8: JobTokens(settled=1_800, counted=1_800),
        9: JobTokens(settled=1_000, counted=2_000),
        10: JobTokens(settled=1_800, counted=1_800),
    }
    assert costs.steps == {}
    assert "unreadable for 3 owners (owner 7, owner 8, owner 10)" in caplog.text
    # and each one's next job starts its averages again
    assert owner_tokens_record(owner_id=7, settled=300, counted=400, kind="intro") == (300, 400)
    assert owner_tokens_record(owner_id=8, settled=500, counted=600) == (500, 600)
    assert owner_tokens_record(owner_id=10, settled=700, counted=800) == (700, 800)
    assert redis_client.hget(KEY, "p:7") == b"300.000 400.000 - - 300.000 400.000 - -"
    assert redis_client.hget(KEY, "p:8") == b"500.000 600.000 - - - - - -"
    # and the next cycle reads the new fields, not what it made of the old ones
    again = job_costs_load(owner_ids=[7, 8], default=1_800)
    assert again.owners == {7: JobTokens(settled=300, counted=400), 8: JobTokens(settled=500, counted=600)}
    assert again.steps == {(7, "intro"): JobTokens(settled=300, counted=400)}


def test_without_redis_the_configured_estimate_stands_in(settings: Any) -> None:
    # given a REDIS_URL nobody answers on
    settings.REDIS_URL = f"redis://127.0.0.1:{free_port()}/0"
    # then recording loses the sample and loading gives the configured estimate, neither raises
    assert owner_tokens_record(owner_id=7, settled=1_000, counted=2_000) is None
    assert owner_tokens_load(owner_ids=[7], default=1_800) == {7: JobTokens(settled=1_800, counted=1_800)}


def _counted(requests: list[StubRequest]) -> int:
    """What a provider's token limit counts for these calls: prompt (chars / 4, rounded up) +
    max_tokens each."""
    return sum(prompt_tokens_estimate(r.json["messages"]) + r.json["max_tokens"] for r in requests)


@pytest.mark.django_db
def test_a_finished_job_settles_what_the_limit_counted_and_teaches_both_estimates(
    redis_client: redis.Redis, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given a dispatched job holding a reservation of 9,000 tokens, on a frozen clock
    clock = FakeClock()
    budget = Budget(redis_client=redis_client, limits=Limits(rpm=6_000, tpm=600_000), clock=clock)
    reservation = budget.reserve(requests=3, tokens=9_000)
    assert isinstance(reservation, Reservation)
    held = budget.headroom().tokens
    outreach = make_outreach(state=State.DISPATCHED, reservation_id=reservation.id)
    # when the worker writes it (the stub's calls use 12 + 8 tokens each)
    with django_capture_on_commit_callbacks():
        outreach_generate(outreach_id=outreach.pk, budget=budget)
    # then the bucket is charged what the provider's limit counted for its calls (prompt +
    # max_tokens, far above the 60 tokens they used), not what they used: the bucket and the
    # call-time pacer count one window in one unit
    outreach.refresh_from_db()
    counted = _counted(llm_stub.requests)
    assert (outreach.tokens_used, len(llm_stub.requests)) == (60, 3)
    assert budget.headroom().tokens == pytest.approx(held + 9_000 - counted)
    # and the owner's estimates learn both: its settled usage (fairness), its counted (reservations)
    assert owner_tokens_load(owner_ids=[outreach.owner_id], default=1) == {
        outreach.owner_id: JobTokens(settled=60, counted=counted)
    }


def _two_owners_cycle(
    settings: Any, budget: Budget, redis_client: redis.Redis, captured: Any
) -> dict[str, Any]:
    """Owners whose jobs settled at 1,000 and 3,000 tokens, eight intros each; one cycle of 4 slots."""
    settings.DISPATCH_MAX_IN_FLIGHT = 4
    cheap, costly = make_owner(), make_owner()
    owner_tokens_record(owner_id=cheap.pk, settled=1_000, counted=1_500)
    owner_tokens_record(owner_id=costly.pk, settled=3_000, counted=3_500)
    for owner in (cheap, costly):
        for _ in range(8):
            make_outreach(lead=make_lead(owner=owner))
    with captured(execute=False):
        report = dispatch_cycle(budget=budget)
    picks = Counter(pick.owner_id for pick in report.picks)
    reserved = {
        owner: {
            _text(redis_client.hget(budget.key("res"), rid)).split(":")[1]
            for rid in Outreach.objects.filter(owner_id=owner, state=State.DISPATCHED).values_list(
                "reservation_id", flat=True
            )
        }
        for owner in (cheap.pk, costly.pk)
    }
    return {
        "picks": (picks[cheap.pk], picks[costly.pk]),
        "reserved": (reserved[cheap.pk], reserved[costly.pk]),
    }


def _text(raw: object) -> str:
    assert isinstance(raw, bytes), raw
    return raw.decode()


@pytest.mark.django_db
def test_tokens_fairness_gives_the_cheap_owner_three_picks_for_one_and_reserves_each_estimate(
    settings: Any, budget: Budget, redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    settings.DISPATCH_FAIRNESS = "tokens"
    seen = _two_owners_cycle(settings, budget, redis_client, django_capture_on_commit_callbacks)
    # then equal tokens used: 3 x 1,000 for the cheap owner, 1 x 3,000 for the other, each
    # reserving what the provider's limit will count for its job
    assert seen == {"picks": (3, 1), "reserved": ({"1500"}, {"3500"})}


@pytest.mark.django_db
def test_count_fairness_gives_equal_picks_and_still_reserves_each_estimate(
    settings: Any, budget: Budget, redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    settings.DISPATCH_FAIRNESS = "count"
    seen = _two_owners_cycle(settings, budget, redis_client, django_capture_on_commit_callbacks)
    assert seen == {"picks": (2, 2), "reserved": ({"1500"}, {"3500"})}


@pytest.mark.django_db
@pytest.mark.parametrize(("beyond", "held"), [(500, "estimate"), (200_000, "capacity")])
def test_an_estimate_beyond_the_configured_buckets_capacity_widens_it_and_still_dispatches(
    redis_client: redis.Redis, django_capture_on_commit_callbacks: Any, beyond: int, held: str
) -> None:
    # given a budget whose token bucket holds ~3,100 tokens and an owner whose jobs were
    # counted more: a little, or more than the key's 80,000 tokens/min (the cycle once failed
    # here: "can never fit these scopes")
    budget = Budget(redis_client=redis_client, limits=Limits(rpm=6_000, tpm=80_000))
    estimate = budget.largest_tokens() + beyond
    owner = make_owner()
    owner_tokens_record(owner_id=owner.pk, settled=estimate, counted=estimate)
    outreach = make_outreach(lead=make_lead(owner=owner))
    # when the dispatcher runs
    with django_capture_on_commit_callbacks(execute=False):
        report = dispatch_cycle(budget=budget)
    # then the job goes, holding its whole estimate (the burst now holds it: Budget.hold_job),
    # or, beyond what any burst can hold, the most one reservation can
    assert report.generation == [outreach.pk]
    outreach.refresh_from_db()
    reserved = int(_text(redis_client.hget(budget.key("res"), outreach.reservation_id)).split(":")[1])
    assert reserved == {"estimate": estimate, "capacity": budget.largest_tokens()}[held]
    assert reserved < estimate or held == "estimate"


@pytest.mark.django_db
def test_a_costly_pick_the_bucket_refuses_keeps_its_turn(
    settings: Any, redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given a bucket (frozen clock) with room for a 1,000-token job but not for a 3,000-token
    # one, and the costly owner first in the round (bench/fairness.py showed costly owners
    # starved: charged for picks the budget refused while cheap ones took the room)
    settings.LLM_CALLS_PER_OUTREACH, settings.LLM_EST_TOKENS_PER_CALL = 3, 100
    clock = FakeClock()
    budget = Budget(redis_client=redis_client, limits=Limits(rpm=6_000, tpm=80_000), clock=clock)
    assert isinstance(budget.reserve(requests=3, tokens=budget.largest_tokens() - 1_500), Reservation)
    costly, cheap = make_owner(), make_owner()
    owner_tokens_record(owner_id=costly.pk, settled=3_000, counted=3_000)
    owner_tokens_record(owner_id=cheap.pk, settled=1_000, counted=1_000)
    first = make_outreach(lead=make_lead(owner=costly))
    make_outreach(lead=make_lead(owner=cheap))
    # when a cycle runs: the costly pick is refused, so the cheap one after it waits too
    with django_capture_on_commit_callbacks(execute=False):
        assert dispatch_cycle(budget=budget).generation == []
    # then nobody was charged a turn, and once the bucket refilled the costly job goes first
    assert cursor_read(redis_client).leads == {}
    clock.now += 60_000
    with django_capture_on_commit_callbacks(execute=False):
        assert dispatch_cycle(budget=budget).generation[0] == first.pk


def test_each_step_is_learned_apart_and_stands_for_its_owners_jobs_once_learned(
    redis_client: redis.Redis,
) -> None:
    # given owner 7's replies counted 12,000 tokens and its intros 1,200; owner 8 unknown
    owner_tokens_record(owner_id=7, settled=9_000, counted=12_000, kind="reply")
    owner_tokens_record(owner_id=7, settled=600, counted=1_200, kind="intro")
    # when the dispatcher loads them
    costs = job_costs_load(owner_ids=[7, 8], default=1_800)
    # then a reply and an intro each cost their step's figure, a nudge (never run) the owner's
    # average over both, an unknown owner the configured estimate (a reply's with its triage
    # call on top: 4 calls of the 3-call estimate's 600)
    assert costs.of(7, "reply") == JobTokens(settled=9_000, counted=12_000)
    assert costs.of(7, "intro") == JobTokens(settled=600, counted=1_200)
    assert costs.of(7, "nudge") == JobTokens(settled=7_320, counted=9_840)  # 12,000 + 0.2 x (1,200 - 12,000)
    assert costs.of(8, "intro") == JobTokens(settled=1_800, counted=1_800)
    assert costs.of(8, "reply") == JobTokens(settled=2_400, counted=2_400)
    # and the cycle sizes its slots on the cheapest job, the buckets' burst on the costliest
    assert (costs.smallest_counted(), costs.largest_counted()) == (1_200, 12_000)


@pytest.mark.parametrize("strict", [False, True])
def test_a_burst_holding_a_job_holds_the_refill_of_the_cycles_between_draws_on_top_of_it(
    strict: bool,
) -> None:
    # given limits whose bursts were sized for the configured 1,800-token job
    limits = limits_from_settings_for(tpm=150_000, strict=strict)
    # when they must hold a 40,000-token job
    held = limits.holding(tokens=40_000, interval_ms=2_000)
    # then the token bucket takes the job plus the refill of one dispatch cycle (strict) or of
    # PACED_TOKEN_CYCLES (paced: the dispatcher skips cycles, and none is lost meanwhile), the
    # request bucket one cycle's, and a smaller job changes nothing
    rate_r, rate_t = (
        maths.bucket_rate(
            limit=limit, burst_ms=held.burst_ms, strict=strict, margin_ms=held.fastest_margin_ms
        )
        for limit in (100_000, 150_000)
    )
    cycles = 1 if strict else maths.PACED_TOKEN_CYCLES
    assert held.capacities()[1] >= 40_000 * UNITS + rate_t * 2_000 * cycles > limits.capacities()[1]
    assert held.capacities()[0] == rate_r * held.burst_ms  # requests: no more than one cycle's past the job
    assert limits.holding(tokens=1_000, interval_ms=2_000) == limits


def limits_from_settings_for(*, tpm: int, strict: bool) -> Limits:
    """As limits_from_settings sizes them, for the configured 3 x 600-token job and 2 s cycles."""
    limits = Limits(rpm=100_000, tpm=tpm, burst_ms=2_722, strict=strict, margin_ms=1_000, margin_floor_ms=100)
    return limits.holding(tokens=1_800, interval_ms=2_000)


@pytest.mark.django_db
def test_a_long_reply_reserves_all_it_will_be_counted_and_the_intros_behind_it_the_cycles_refill(
    settings: Any, redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given a key binding on tokens (150,000/min) whose token bucket the settings size for the
    # configured 3 x 600-token job (about 26,800 tokens: five 2 s cycles of refill and the job;
    # it cannot hold a long reply), on a frozen clock, and an owner whose replies were counted
    # 40,000 tokens and intros 1,200
    settings.LLM_EST_TOKENS_PER_CALL, settings.DISPATCH_INTERVAL = 600, 2
    budget = Budget(
        redis_client=redis_client, limits=limits_from_settings(rpm=100_000, tpm=150_000), clock=FakeClock()
    )
    assert budget.largest_tokens() < 40_000
    owner = make_owner(daily_limit=500)
    owner_tokens_record(owner_id=owner.pk, settled=30_000, counted=40_000, kind="reply")
    owner_tokens_record(owner_id=owner.pk, settled=600, counted=1_200, kind="intro")
    reply = make_outreach(lead=make_lead(owner=owner), kind=Outreach.Kind.REPLY)
    intros = [make_outreach(lead=make_lead(owner=owner)).pk for _ in range(40)]
    # when a cycle runs
    with django_capture_on_commit_callbacks(execute=False):
        claimed = dispatch_cycle(budget=budget).generation
    # then the reply goes holding all 40,000 tokens the provider will count (the bucket was
    # widened to hold it and the cycles' refill: Budget.hold_job), and intros of 1,200 take the
    # rest of the (full) bucket, so no refill is lost while the reply waits (before the
    # widening: 6,793 held, no intro went)
    reply.refresh_from_db()
    assert claimed[0] == reply.pk
    assert _text(redis_client.hget(budget.key("res"), reply.reservation_id)).split(":")[1] == "40000"
    assert budget.largest_tokens() > 40_000
    assert len(set(claimed) & set(intros)) == (budget.largest_tokens() - 40_000) // 1_200


@pytest.mark.django_db
def test_a_call_larger_than_the_keys_tokens_per_minute_is_dead_lettered_naming_the_limit(
    redis_client: redis.Redis, llm_stub: LLMStub, django_capture_on_commit_callbacks: Any
) -> None:
    # given a key of 50 tokens/min: no call of a job (prompt + max_tokens) can ever fit it
    budget = Budget(redis_client=redis_client, limits=Limits(rpm=6_000, tpm=50), clock=FakeClock())
    outreach = make_outreach(state=State.DISPATCHED)
    # when the worker takes the job
    with django_capture_on_commit_callbacks():
        outreach_generate(outreach_id=outreach.pk, budget=budget)
    # then it is a dead letter at once, saying why, and the provider was never called (today's
    # code raised a bare ValueError, retried as unknown until the attempts ran out)
    outreach.refresh_from_db()
    assert outreach.state == State.DEAD
    assert "LLM call too large" in outreach.last_error
    assert "(50/min)" in outreach.last_error
    assert outreach.attempts == 0
    assert llm_stub.requests == []
