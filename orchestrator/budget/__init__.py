"""The shared LLM budget: one provider key, many workers, (almost) never a 429.

Two layers, both atomic Lua in Redis, both on Redis's clock:
- dispatch time, token buckets per scope (requests/min and tokens/min, refilled continuously):
  `reserve` / `reserve_many` / `reserve_in_order` / `reserve_jobs` hold budget for jobs,
  `settle` returns the unused estimate, `refund` all of it; `headroom` (`headrooms`: many sets
  of scopes in one call) says what a dispatch cycle may take;
- call time, a log mirroring the provider's sliding 60 s window: `acquire_call` before each
  provider call; `report_provider` / `report_429` adapt the limits (AIMD) when others share
  the key. `snapshot` shows all of it.

The maths (docs/budget.md, maths.py): a bucket of rate r and burst b admits at most
b + r * 60 s in any 60 s window, so a sliding-window provider with limit L is never tripped by
the bucket alone iff r * 60 s + b <= L. Strict limits (the default) solve r = L * 60 / (60 + B)
for a burst of B seconds of refill (B >= one dispatch cycle + one job: ~96% of L). But calls
reach the provider 0.5-25 s after their reservation and bunch up, so every call is also paced
by `acquire_call`; paced limits (`strict=False`) then refill at L * 60 / (60 + margin) and let
the pacer trim the burst: never over L, and 99% or more of it once the margin is measured
(the spread of call delays, tens of ms, rather than the 1 s cap).
"""

from __future__ import annotations

import threading

from config.redis_client import connect
from orchestrator.budget.breaker import CircuitBreaker
from orchestrator.budget.core import BudgetUnavailable, ScriptCall
from orchestrator.budget.mailboxes import (
    Mailboxes,
    MailboxGrant,
    MailboxTerms,
    MailboxUsage,
    ramp_cap,
    spacing_draw,
)
from orchestrator.budget.maths import burst_for_cycle
from orchestrator.budget.pacing import Pacing
from orchestrator.budget.reservations import UNMETERED, Reservations, reservation_ids, reservation_scopes
from orchestrator.budget.sends import DomainDay, SendDenied, SendGrant, SendRules, Sends
from orchestrator.budget.values import (
    PROVIDER,
    Adaptive,
    CallSlot,
    Denied,
    Draw,
    FailurePolicy,
    Headroom,
    Limits,
    ProviderReport,
    Reservation,
    Spread,
    organization_scope,
)

__all__ = [
    "PROVIDER",
    "UNMETERED",
    "Adaptive",
    "Budget",
    "BudgetUnavailable",
    "CallSlot",
    "CircuitBreaker",
    "Denied",
    "DomainDay",
    "Draw",
    "Headroom",
    "Limits",
    "MailboxGrant",
    "MailboxTerms",
    "MailboxUsage",
    "ProviderReport",
    "Reservation",
    "ScriptCall",
    "SendDenied",
    "SendGrant",
    "SendRules",
    "Spread",
    "budget_from_settings",
    "connect",
    "deployment_limits",
    "get_budget",
    "limits_from_settings",
    "organization_limits",
    "organization_scope",
    "ramp_cap",
    "reservation_ids",
    "reservation_scopes",
    "send_rules_from_settings",
    "spacing_draw",
]


class Budget(Reservations, Pacing, Sends, Mailboxes):
    """The shared LLM budget, and the email provider's (sends.py: same buckets, own scopes).
    Build it with an injected Redis client and limits (tests, benchmarks), or take the
    process-wide one from `get_budget()` (settings)."""


_budget: Budget | None = None
_lock = threading.Lock()


def get_budget() -> Budget:
    """The process's budget, built once from Django settings (imported here, lazily)."""
    global _budget
    if _budget is None:
        with _lock:
            if _budget is None:
                _budget = budget_from_settings()
    return _budget


def limits_from_settings(*, rpm: int, tpm: int) -> Limits:
    """Window limits of `rpm` / `tpm` with the bucket shape settings give every scope: strict or
    paced (LLM_BUDGET_STRICT, LLM_BUDGET_MARGIN_MS and _FLOOR_MS) and a burst that holds a dispatch cycle's
    refill plus one outreach (maths.burst_for_cycle; LLM_BUDGET_BURST_MS is a floor). Raises
    ValueError, naming the limit, when one outreach can never fit it."""
    from django.conf import settings

    strict = bool(settings.LLM_BUDGET_STRICT)
    margin_ms = int(settings.LLM_BUDGET_MARGIN_MS)
    floor_ms = int(getattr(settings, "LLM_BUDGET_MARGIN_FLOOR_MS", 100))
    calls, per_call = settings.LLM_CALLS_PER_OUTREACH, settings.LLM_EST_TOKENS_PER_CALL
    interval_ms = int(settings.DISPATCH_INTERVAL * 1000)
    burst_ms = max(
        int(getattr(settings, "LLM_BUDGET_BURST_MS", 0)),
        *(
            # at the fastest refill a measured margin can bring (Limits.capacities)
            burst_for_cycle(
                limit=limit,
                amount=amount,
                interval_ms=interval_ms,
                strict=strict,
                margin_ms=min(margin_ms, floor_ms),
            )
            for limit, amount in ((rpm, calls), (tpm, calls * per_call))
        ),
    )
    limits = Limits(
        rpm=rpm, tpm=tpm, burst_ms=burst_ms, strict=strict, margin_ms=margin_ms, margin_floor_ms=floor_ms
    )
    # Paced, the token bucket also holds PACED_TOKEN_CYCLES cycles of refill (Limits.holding)
    return limits.holding(tokens=calls * per_call, interval_ms=interval_ms)


def organization_limits(*, rpm: int | None, tpm: int | None) -> Limits:
    """An organization's cap as limits: a half left empty (or above the provider's) is the
    provider's. Raises ValueError naming the field when one outreach could never get through:
    fewer requests/min than the calls of one outreach, or fewer tokens/min than their estimate
    (its calls would wait for room that never comes)."""
    from django.conf import settings

    calls = settings.LLM_CALLS_PER_OUTREACH
    if rpm is not None and rpm < calls:
        raise ValueError(
            f"llm_rpm {rpm}: one outreach makes {calls} calls, so allow at least {calls} requests/min."
        )
    need = calls * settings.LLM_EST_TOKENS_PER_CALL
    if tpm is not None and tpm < need:
        raise ValueError(
            f"llm_tpm {tpm}: one outreach needs about {need} tokens, so allow at least {need}/min."
        )
    return limits_from_settings(
        rpm=min(rpm or settings.LLM_RPM, settings.LLM_RPM), tpm=min(tpm or settings.LLM_TPM, settings.LLM_TPM)
    )


def deployment_limits() -> dict[str, Limits]:
    """Each configured deployment's scope -> its limits (LLM_DEPLOYMENTS; none for the implicit
    deployment, whose scope is the provider's). Loaded with the organizations' caps
    (dispatch.reads.organization_caps_load), since `set_scope_limits` replaces them all."""
    from config.deployments import deployments

    return {d.scope: limits_from_settings(rpm=d.rpm, tpm=d.tpm) for d in deployments() if not d.implicit}


def budget_from_settings() -> Budget:
    """A budget from settings: LLM_RPM, LLM_TPM (limits_from_settings), DISPATCH_STUCK_AFTER_S,
    BUDGET_FAILURE_POLICY and BUDGET_REDIS_URL (REDIS_URL unless set). Organizations' caps are added per use
    (`set_scope_limits`), since they change in the admin."""
    from django.conf import settings

    policy: FailurePolicy = "closed" if settings.BUDGET_FAILURE_POLICY == "closed" else "open"
    budget = Budget(
        redis_client=connect(settings.BUDGET_REDIS_URL),
        limits=limits_from_settings(rpm=settings.LLM_RPM, tpm=settings.LLM_TPM),
        scope_limits=deployment_limits(),
        # A reservation outlives the stuck-job timeout, so the recovery's refund still finds it.
        reservation_ttl_ms=(getattr(settings, "DISPATCH_STUCK_AFTER_S", 600) + 120) * 1000,
        failure_policy=policy,
    )
    budget.send_rules = send_rules_from_settings()
    budget.cycle_ms = int(settings.DISPATCH_INTERVAL * 1000)  # the cycle a burst holds (hold_job)
    return budget


def send_rules_from_settings() -> SendRules:
    """The mail provider's limits: EMAIL_RATE_PER_SECOND, EMAIL_RATE_PER_MINUTE,
    EMAIL_DOMAIN_DAILY_LIMIT, EMAIL_WARMUP (all optional; none set: no send budget), and the
    rate's margin EMAIL_RATE_MARGIN_MS."""
    from django.conf import settings

    return SendRules(
        per_second=getattr(settings, "EMAIL_RATE_PER_SECOND", None),
        per_minute=getattr(settings, "EMAIL_RATE_PER_MINUTE", None),
        domain_daily=getattr(settings, "EMAIL_DOMAIN_DAILY_LIMIT", None),
        warmup=tuple(getattr(settings, "EMAIL_WARMUP", ())),
        margin_ms=getattr(settings, "EMAIL_RATE_MARGIN_MS", 0),
    )
