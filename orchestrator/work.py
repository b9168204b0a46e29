"""The workers' door: what generation, reply and send use of the orchestrator, and nothing else
of it (docs/architecture.md, "The workers' door"; an import-linter contract holds nurture to
this module). A job, in the order a worker goes through it:

1. start: `job_pause(outreach=...)` says whether a pause now covers the job (the worker puts it
   back, saying why); the claim itself is the worker's guarded transition on the record.
2. lease (generation): `job_leases()`; while the row is GENERATING a lost process is noticed
   within the lease TTL. Every job is leased from receipt as well (`JobLeases.receive`, from
   nurture.tasks), so a lost process's prefetched DISPATCHED rows come back as soon.
3. budget: `job_budget(...)` is the route and the reservations the dispatcher made for the job;
   each LLM call waits for `call_slot(...)` and reports `call_done(...)` (the answer's report
   rides with the job's next budget call), `call_refused(...)`,
   `deployment_fault(...)` or `deployment_down(...)`. A send reserves and releases one message
   of the send budget on the `Budget` (`reserve_send`, `release_send`), after `mailbox_take(...)`
   (the mailbox it leaves from, or why it waits; `Budget.mailbox_release` if it never left).
4. settle or refund: `job_settle(...)` (what the calls counted, or all of it back),
   `reservations_known(...)` then `Budget.refund` for a job put back before any call.
5. finish: `owner_tokens_record(...)`, `replay_outcome_success(...)`; a failure ends through
   `attempts_exhausted`, `dead_letter` or `send_unconfirmed`.

What the mail side learns about a lead goes through `deliverability_check(...)`.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass, field
from decimal import Decimal

from redis.client import Pipeline

from config.deployments import STEPS, Deployment, deployments, step_models
from orchestrator.budget import (
    PROVIDER,
    Budget,
    CallSlot,
    ProviderReport,
    ScriptCall,
    SendDenied,
    SendGrant,
    get_budget,
    reservation_ids,
)
from orchestrator.controls.deliverability import deliverability_check
from orchestrator.controls.mailboxes import mailbox_take
from orchestrator.controls.pauses import active_pause_scopes, job_pause
from orchestrator.controls.spend import Prices, llm_cost
from orchestrator.deployments.breaker import (
    down_reason,
    fault_reason,
    fault_record,
    has_alternative,
    successes_record,
)
from orchestrator.deployments.placement import Route
from orchestrator.dispatch.inflight import call_latency_stage
from orchestrator.dispatch.owner_tokens import owner_tokens_record
from orchestrator.dispatch.reads import job_scopes, organization_caps_load
from orchestrator.failures.dead_letters import attempts_exhausted, dead_letter, replay_outcome_success
from orchestrator.failures.leases import job_leases
from orchestrator.failures.recovery import send_unconfirmed
from orchestrator.models import Pause
from outreach.models import Outreach

__all__ = [
    "PROVIDER",
    "Budget",
    "JobBudget",
    "PacingWait",
    "Pause",
    "SendDenied",
    "SendGrant",
    "Usage",
    "active_pause_scopes",
    "attempts_exhausted",
    "call_done",
    "call_refused",
    "call_slot",
    "dead_letter",
    "deliverability_check",
    "deployment_down",
    "deployment_fault",
    "get_budget",
    "job_budget",
    "job_leases",
    "job_pause",
    "job_settle",
    "mailbox_take",
    "owner_tokens_record",
    "replay_outcome_success",
    "reservations_known",
    "send_unconfirmed",
]


@dataclass
class Usage:
    """One deployment's part of a job's budget: its reservation, the scopes its calls draw from
    (the deployment's, and the organization's cap if any), and what they used."""

    reservation_id: str = ""
    scopes: tuple[str, ...] = (PROVIDER,)
    requests: int = 0
    tokens: int = 0  # what the calls used (prompt + completion): the bill, Outreach.tokens_used
    # What the provider's token limit counted for them (each call's prompt estimate + its
    # max_tokens, as the pacer logged it): what the reservation is settled with.
    counted: int = 0
    input_tokens: int = 0  # spend: priced apart from output (orchestrator.controls.spend)
    output_tokens: int = 0


@dataclass(frozen=True, slots=True)
class Answer:
    """One call the provider answered: on which deployment and step, how long the provider took
    (no pacing wait), and when (time.monotonic())."""

    deployment: Deployment
    step: str
    seconds: float
    at_s: float


@dataclass
class JobBudget:
    """Where each step runs (the dispatcher's placement, `Outreach.llm_route`) and the budget
    it holds on each deployment."""

    route: dict[str, Deployment]
    uses: dict[str, Usage] = field(default_factory=dict)  # by deployment label
    # Each answered call, in order: its deployment's health and its step's latency sample go
    # to Redis in one round trip when the job settles, and its duration is counted with the
    # job's outcome (outreach.counters) in a database turn the job takes anyway.
    answers: list[Answer] = field(default_factory=list)
    answers_recorded: int = 0  # how many of them went to Redis already
    # The answers' reports not sent yet: each rides with the job's next budget call (the next
    # call's slot, or the settlement), one Redis round trip fewer per call (docs/scaling.md).
    reports: list[ProviderReport] = field(default_factory=list)

    @property
    def call_durations(self) -> list[tuple[str, float]]:
        """(step, seconds) of each answered call."""
        return [(a.step, a.seconds) for a in self.answers]

    def reports_take(self, budget: Budget) -> list[ScriptCall]:
        """The pending reports as script calls, in the order answered; none pending after."""
        calls = [budget.report_call(report) for report in self.reports]
        self.reports.clear()
        return calls

    @property
    def requests(self) -> int:
        return sum(u.requests for u in self.uses.values())

    @property
    def tokens(self) -> int:
        return sum(u.tokens for u in self.uses.values())

    @property
    def counted(self) -> int:
        return sum(u.counted for u in self.uses.values())

    @property
    def input_tokens(self) -> int:
        return sum(u.input_tokens for u in self.uses.values())

    @property
    def output_tokens(self) -> int:
        return sum(u.output_tokens for u in self.uses.values())

    def cost(self, *, prices: Prices) -> Decimal:
        """Dollars of its calls, each deployment's tokens at its own model's price (the implicit
        deployment's model is LLM_MODEL)."""
        models = {d.label: d.model for d in self.route.values()}
        return sum(
            (
                llm_cost(
                    prices=prices,
                    model=models[label],
                    input_tokens=u.input_tokens,
                    output_tokens=u.output_tokens,
                )
                for label, u in self.uses.items()
                if label in models
            ),
            Decimal(0),
        )


def job_budget(*, budget: Budget, outreach: Outreach) -> JobBudget:
    """The job's route and reservations: the deployment each step was placed on (a route the
    configuration no longer knows, or none: the first deployment of the step's model) and, per
    deployment, the reservation made on it (its first scope is the deployment's)."""
    budget.job_tokens_refresh()  # the bursts the dispatcher reserved in (Budget.hold_job)
    deps = deployments()
    by_label, by_scope = {d.label: d for d in deps}, {d.scope: d for d in deps}
    models = step_models()
    placed = Route.decode(outreach.llm_route)
    route: dict[str, Deployment] = {}
    for step in STEPS:
        label = placed.deployment_for(step) if placed else None
        default = next(d for d in deps if d.name == models[step])
        route[step] = by_label.get(label or "", default)
    job = JobBudget(route=route)
    for rid in reservation_ids(outreach.reservation_id):
        scopes = job_scopes(budget=budget, reservation_id=rid)
        if scopes and scopes[0] in by_scope:
            job.uses[by_scope[scopes[0]].label] = Usage(reservation_id=rid, scopes=scopes)
    for deployment in route.values():
        if deployment.label not in job.uses:  # no reservation (made by hand, or a replay): pacing only
            if deployment.scope not in budget.scope_limits and not deployment.implicit:
                organization_caps_load(budget=budget)
            job.uses[deployment.label] = Usage(scopes=(deployment.scope,))
    return job


def reservations_known(*, budget: Budget, outreach: Outreach) -> list[str]:
    """The reservations the dispatcher made for a job, each one's scopes looked up (an
    organization's cap must be known to refund it: a database read, so call it inside the
    job's database turn). Refund them with `Budget.refund` after the turn: Redis calls need
    no connection held."""
    rids = reservation_ids(outreach.reservation_id)
    for rid in rids:
        job_scopes(budget=budget, reservation_id=rid)
    return rids


def job_settle(*, budget: Budget, usage: JobBudget, refund: bool = False) -> None:
    """Settle each deployment's reservation with what its token limit counted there (prompt +
    max_tokens a call, the unit the pacer and the provider count in; a refund when no call was
    made, or when `refund` says the calls do not count). The last answers' reports go with the
    first settlement (or alone, for a job without a reservation)."""
    also = usage.reports_take(budget)
    for use in usage.uses.values():
        if not use.reservation_id:
            continue
        if refund or use.requests == 0:
            budget.refund(reservation_id=use.reservation_id, also=also)
        else:
            budget.settle(
                reservation_id=use.reservation_id,
                actual_tokens=use.counted,
                actual_requests=use.requests,
                also=also,
            )
        also = []
    budget.also_run(also)
    _answers_record(usage)


def _answers_record(usage: JobBudget) -> None:
    """The job's answered calls not recorded yet, in one round trip on REDIS_URL: each
    deployment's last success (it clears the faults recorded before it; a probe's success
    closes its breaker here, when the job settles) and each call's latency sample."""
    answers = usage.answers[usage.answers_recorded :]
    usage.answers_recorded = len(usage.answers)
    if not answers:
        return
    now = time.monotonic()
    # Each deployment's latest answer (later ones overwrite), its age rounded up: placed a
    # little earlier than it came, a fault recorded just after it stands; placed later, the
    # success would clear it.
    last = {a.deployment: math.ceil((now - a.at_s) * 1000) for a in answers}

    def samples(pipe: Pipeline) -> None:
        for answer in answers:
            call_latency_stage(pipe, step=answer.step, seconds=answer.seconds)

    successes_record(answered_ago_ms=last, also=samples)


@dataclass(frozen=True)
class PacingWait:
    """The provider window stays full longer than a worker should wait: the job goes back."""

    wait_s: float
    cause: str


def call_slot(
    *, budget: Budget, usage: JobBudget, use: Usage, tokens: int, max_wait_s: float
) -> CallSlot | PacingWait:
    """Wait for room for one call of `tokens` (prompt estimate + max_tokens) on the use's scopes
    (the deployment's, and the organization's cap if any): sleep off short waits; a wait that
    would take the job past `max_wait_s` in all is returned instead. The call is counted on
    the use once granted. Raises ValueError, naming the scope and its limit, for a call larger
    than a scope's tokens/min: it can never be made."""
    slot = budget.acquire_call(tokens=tokens, scopes=use.scopes, also=usage.reports_take(budget))
    waited = 0.0
    while slot.wait_ms:
        if waited + slot.wait_ms / 1000 > max_wait_s:
            cause = (
                "LLM budget unavailable (Redis down, closed policy)"
                if slot.bucket == "redis"
                else f"provider window full ({slot.bucket})"
            )
            return PacingWait(wait_s=slot.wait_ms / 1000, cause=cause)
        time.sleep(slot.wait_ms / 1000)
        waited += slot.wait_ms / 1000
        slot = budget.acquire_call(tokens=tokens, scopes=use.scopes)
    use.requests += 1
    use.counted += tokens
    return slot


def call_refused(
    *,
    budget: Budget,
    usage: JobBudget,
    deployment: Deployment,
    slot: CallSlot,
    tokens: int,
    retry_after_s: float,
    remaining_requests: int | None = None,
    remaining_tokens: int | None = None,
) -> None:
    """The provider answered 429: the call was not counted (by it, nor by our log now), and the
    scope's window learns the refusal. The refusal's remaining counts, if it carries them, are
    the freshest view of the window there is (an answer's are as old as the model's latency):
    they ride with the job's next budget call as an answer's do, after the refusal took the
    call out of our log, so the estimate of the other clients rises to what they hold now."""
    usage.uses[deployment.label].counted -= tokens
    budget.report_429(
        retry_after_s=retry_after_s, sent_at_ms=slot.at_ms or None, tokens=tokens, scope=deployment.scope
    )
    if remaining_requests is not None or remaining_tokens is not None:
        usage.reports.append(
            ProviderReport(
                remaining_requests=remaining_requests,
                remaining_tokens=remaining_tokens,
                sent_at_ms=slot.at_ms or None,
                scope=deployment.scope,
                answered_s=time.monotonic(),
            )
        )


def deployment_fault(
    *, deployment: Deployment, status: int | None, code: str | None, param: str | None = None
) -> str:
    """A refusal for the deployment's configuration (401/403/404, or a 400 for a parameter its
    model does not take): its breaker opens; the reason."""
    reason = fault_reason(deployment=deployment, status=status, code=code, param=param)
    fault_record(deployment=deployment, reason=reason)
    return reason


def deployment_down(*, deployment: Deployment, status: int | None) -> None:
    """The deployment did not answer (unreachable, 5xx): its pool or fallback takes over, if any."""
    if (status is None or status >= 500) and has_alternative(deployment):
        fault_record(deployment=deployment, reason=down_reason(deployment=deployment, status=status))


def call_done(
    *,
    budget: Budget,
    usage: JobBudget,
    deployment: Deployment,
    step: str,
    slot: CallSlot,
    seconds: float,
    remaining_requests: int | None,
    remaining_tokens: int | None,
    reset_requests_s: float | None,
    reset_tokens_s: float | None,
    processing_ms: int | None,
    tokens: int,
    input_tokens: int,
    output_tokens: int,
) -> None:
    """A call answered: its deployment is healthy, its duration sizes the dispatcher's in-flight
    target (the provider's time only, no pacing wait), and the scope learns the provider's
    rate-limit headers. Its usage is added to the job's. Nothing goes to Redis here: the
    report rides with the job's next budget call, the health and the latency sample with the
    job's settlement (docs/scaling.md: round trips per call)."""
    usage.answers.append(Answer(deployment=deployment, step=step, seconds=seconds, at_s=time.monotonic()))
    usage.reports.append(  # sent with the job's next budget call (JobBudget.reports)
        ProviderReport(
            remaining_requests=remaining_requests,
            remaining_tokens=remaining_tokens,
            reset_requests_s=reset_requests_s,
            reset_tokens_s=reset_tokens_s,
            sent_at_ms=slot.at_ms or None,
            processing_ms=processing_ms,
            scope=deployment.scope,
            answered_s=time.monotonic(),
        )
    )
    use = usage.uses[deployment.label]
    use.tokens += tokens
    use.input_tokens += input_tokens
    use.output_tokens += output_tokens
