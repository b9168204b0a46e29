"""The dispatch cycle's shell: the lease, the owners' room this cycle, then the two ways work
leaves the queue (approved drafts to `send`, LLM jobs to the generation workers)."""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass, field
from datetime import datetime

from django.conf import settings
from django.utils import timezone

from config import redis_client
from config.redis_client import Client
from orchestrator.budget import Budget, get_budget, reservation_ids
from orchestrator.dispatch import reads
from orchestrator.dispatch.cycle.admission import job_pricing, owners_admit
from orchestrator.dispatch.cycle.cursor_state import cursor_load
from orchestrator.dispatch.cycle.generation import Generation, generation_dispatch
from orchestrator.dispatch.cycle.notes import deferrals_note
from orchestrator.dispatch.cycle.sends import approved_dispatch
from orchestrator.dispatch.cycle.window import (
    WIDEN,
    ReadyWork,
    left_out_window,
    owners_window,
    window_learn,
    window_size,
)
from orchestrator.dispatch.inflight import outreach_cost
from orchestrator.dispatch.owner_tokens import job_costs_load
from orchestrator.dispatch.selection import Pick
from orchestrator.dispatch.singleton import Lease, dispatch_lease
from orchestrator.failures.recovery import recover_stuck

# The package's name, not this module's: bench/soak.py reads the cycle times from the
# "orchestrator.dispatch.cycle dispatch cycle ... ms=" lines.
log = logging.getLogger("orchestrator.dispatch.cycle")


@dataclass
class CycleReport:
    ran: bool = True
    recovered: int = 0
    slots: int = 0
    picks: list[Pick] = field(default_factory=list)
    generation: list[int] = field(default_factory=list)
    send: list[int] = field(default_factory=list)
    deferred: dict[int, str] = field(default_factory=dict)
    duration_ms: float = 0.0
    held: tuple[float, float] = (0.0, 0.0)  # wall-clock span the lease was held (metrics, tests)
    # Where the cycle's time went, phase by phase (PHASES, in order; logged with the cycle)
    phases_ms: dict[str, float] = field(default_factory=dict)
    judged: int = 0  # owners admitted and loaded (the window: cycle.window), of `active`
    active: int = 0
    windows: int = 0  # windows judged: 1, more when the first left out an owner the schedule reached


# The cycle's phases: the active owners and the caps (kept while their version holds: one read
# most cycles) and the stuck work recovered; the owners' window and their learned costs
# loaded; their admission and why-waiting notes; approved drafts to `send`; the LLM jobs
# selected (slots, candidates, the batch); and those claimed (reserved, moved, published).
PHASES = ("recover", "owners", "admission", "sends", "select", "claim")


class _Laps:
    """Times the cycle's phases one after another into `phases_ms`."""

    def __init__(self, phases_ms: dict[str, float]) -> None:
        self.phases_ms, self.mark = phases_ms, time.perf_counter()

    def lap(self, phase: str, *, less_ms: float = 0.0) -> None:
        """`phase` took the time since the last lap (less `less_ms`, timed apart)."""
        now = time.perf_counter()  # a phase a widened window ran again adds up
        self.phases_ms[phase] = round(self.phases_ms.get(phase, 0.0) + (now - self.mark) * 1000 - less_ms, 1)
        self.mark = now


def dispatch_cycle(*, now: datetime | None = None, budget: Budget | None = None) -> CycleReport:
    """Run one cycle if no other is running anywhere; return what it did."""
    client = redis_client.shared(timeout_s=2.0)
    started = time.perf_counter()
    with dispatch_lease(client, ttl_s=max(30.0, 10 * settings.DISPATCH_INTERVAL)) as lease:
        if lease is None:
            return CycleReport(ran=False)
        held_from = time.time()
        report = _cycle(lease=lease, client=client, now=now or timezone.now(), budget=budget or get_budget())
        report.held = (held_from, time.time())
    report.duration_ms = (time.perf_counter() - started) * 1000
    log.info(
        "dispatch cycle",
        extra={
            "slots": report.slots,
            "generation": len(report.generation),
            "send": len(report.send),
            "deferred": len(report.deferred),
            "recovered": report.recovered,
            "judged": report.judged,
            "active": report.active,
            "windows": report.windows,
            "ms": round(report.duration_ms, 1),
            **{f"{phase}_ms": ms for phase, ms in report.phases_ms.items()},
        },
    )
    return report


def _cycle(*, lease: Lease, client: Client, now: datetime, budget: Budget) -> CycleReport:
    report = CycleReport()
    laps = _Laps(report.phases_ms)
    # First, the caps: recovery may refund capped reservations (one read of the owners' version
    # says whether the owners and the caps kept are still theirs).
    every, caps = reads.owners_and_caps_load(budget=budget)
    report.recovered = recover_stuck(
        now=now, refund=lambda joined: [budget.refund(reservation_id=r) for r in reservation_ids(joined)]
    )
    laps.lap("recover")
    weights = every.weights
    report.active = len(weights)
    # The window (cycle.window): the owners each round meets first from the cursor, and those
    # whose approved drafts wait: only these are judged and loaded. Widened until the selection
    # says its picks are the full selection's. (The other owners' work in flight and drafts
    # count on their sender domains' days all the same: admission's `elsewhere`.)
    cursor = cursor_load(client).keeping_groups(caps)
    capped = every.capped(caps)
    groups = capped.scopes
    ready = ReadyWork(active=every.ids, now=now)  # asked as the windows need (cycle.window)
    # Read once for every window: what each owner committed (admission counts every owner's;
    # the window judges those with approved drafts) and the LLM jobs in flight (the window's
    # slot bound and the cycle's slots).
    work = reads.committed_work_load()
    # Owners deactivated since their work started: it still leaves from their domains (rule 6).
    gone = reads.owners_gone(work.owners() - weights.keys())
    in_flight = work.llm_in_flight
    tokens = settings.DISPATCH_FAIRNESS == "tokens"
    size = window_size(slot_bound=max(0, settings.DISPATCH_MAX_IN_FLIGHT - in_flight))
    sends_done = False
    while True:
        window = owners_window(
            ready=ready,
            cursor=cursor,
            weights=weights,
            groups=groups,
            group_members=capped.members,
            tokens=tokens,
            size=size,
            also=work.approved.keys(),
        )
        owners = every.of(window.loaded)
        report.judged, report.windows = len(owners), report.windows + 1
        # What each owner's next job of each step is expected to cost (owner_tokens: learned from
        # its finished jobs), read once: what work reserves of a spend cap (admission: the judged
        # owners' next jobs, and the jobs in flight of every owner, deactivated ones' included),
        # and the cycle's sizing and each pick's reservation (generation_dispatch).
        costs = job_costs_load(
            owner_ids={*(o.rules.owner_id for o in owners), *work.owners()}, default=outreach_cost()[1]
        )
        laps.lap("owners")
        # One admission (selection.admission's rules, in order) before any LLM work: what each owner
        # may send now, what LLM work it may start, and why not.
        price = job_pricing(costs)  # one pricing for the admission and the picks
        admitted = owners_admit(
            owners=owners,
            now=now,
            budget=budget,
            price=price,
            work=work,
            mailboxes={**every.mailboxes, **gone.mailboxes} if gone.mailboxes else every.mailboxes,
            spend_caps=every.spend_caps,
            # counted on their domains, not judged
            elsewhere=[*every.of(work.owners() - window.loaded), *gone.of(gone.owners)],
        )
        report.deferred = admitted.deferred
        deferrals_note(
            client=client,
            deferred=report.deferred,
            paused_tiers=admitted.paused_tiers,
            judged=window.loaded,
            closed=admitted.closed,
            every=every,
        )
        paused_tiers = {owner_id: frozenset(tiers) for owner_id, tiers in admitted.paused_tiers.items()}
        laps.lap("admission")
        if not sends_done:  # every owner with approved drafts is in the first window (`also`)
            report.send = approved_dispatch(
                room=admitted.send_room,
                approved=work.approved,
                weights=weights,
                now=now,
                budget=budget,
                paused_tiers=paused_tiers,
                lease=lease,
            )
            sends_done = True
            laps.lap("sends")
        # The LLM room stands after those sends: they were drafts, counted as committed already.
        generation: Generation = generation_dispatch(
            lease=lease,
            client=client,
            cursor=cursor,
            ready=ready.owners,
            first_rows=ready.first_rows,
            groups=groups,
            room=admitted.llm_room,
            weights=weights,
            paused_tiers=paused_tiers,
            shared=admitted.shared,
            job_costs=costs.among(admitted.llm_room),
            price=price,
            now=now,
            budget=budget,
            # where the owners left out begin, and whether admission could admit them
            window=None
            if window.complete
            else left_out_window(window, ready=ready, every=every, capped=capped, closed=admitted.closed),
            llm_in_flight=in_flight,
        )
        laps.lap("select", less_ms=generation.claim_ms)
        if generation.exact:
            break
        size *= WIDEN
    window_learn(window, generation.picks)  # the next cycle's first window (cycle.window)
    report.slots, report.picks, report.generation = generation.slots, generation.picks, generation.claimed
    report.phases_ms["claim"] = round(generation.claim_ms, 1)
    return report
