"""What an owner's next job is expected to cost in tokens, learned from its finished jobs.

Two moving averages per owner, because a provider's limiter and its bill count different things:

- `settled`: the tokens the job really used (prompt + completion of all its calls,
  `Outreach.tokens_used`). Fairness in tokens (`select_batch(costs=...)`,
  DISPATCH_FAIRNESS=tokens) charges each pick this, so an owner whose prompts are three times
  longer is charged three times per email.
- `counted`: what the provider's token limit counted for those calls: each call's prompt
  estimate + its max_tokens, at admission, as OpenAI and `llm_sim` count (and as the worker's
  pacer logs each call, `Budget.acquire_call`). The job's reservation holds this and the worker
  settles it, so the dispatcher's bucket and the call-time pacer measure one window in one unit.
  Reserving `settled` instead dispatched more than the window admits, and the calls that did not
  fit went back to the queue (`Paced`) after their owner's turn was spent (docs/benchmarks.md).

Both are kept per owner and per owner and step (`kind`: reply, intro, nudge), because one
owner's jobs differ by step: a reply carries the prospect's inbound email (up to 4,000
characters) and its thread, and is counted several times an intro's tokens. The step's figure
stands for a job of that step once learned, the owner's until then (`JobCosts.of`). The
dispatcher sizes its cycle (slots, in-flight target) and the budget's burst (`Budget.hold_job`)
on these counted figures too, not on the configured estimate.

The generation worker records a job once it wrote a draft: a failed job's partial usage would
drag the averages down. An owner without history costs the configured estimate
(LLM_CALLS_PER_OUTREACH x LLM_EST_TOKENS_PER_CALL, `outreach_cost`) in both. The averages are
one Redis hash on REDIS_URL (dispatcher state, like the cursor), each job's update one atomic
script, so concurrent workers never lose one. A Redis error costs only precision: the record
is skipped, the load falls back to the configured estimate. This module owns the key.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from fractions import Fraction
from typing import Final

import redis

from config import redis_client
from config.deployments import job_steps

log = logging.getLogger(__name__)

# hash: "<owner id>" -> settled tokens/job, "<owner id>:counted" -> counted tokens/job (averages);
# "<owner id>:<kind>" and "<owner id>:<kind>:counted" the same for that step's jobs only
KEY: Final = "orchestrator:dispatch:owner_tokens"
# Weight of the newest job in the average: about the last ten jobs count, so a change of
# prompts (a new sequence, longer context) shows within a few dozen jobs.
ALPHA: Final = 0.2
KINDS: Final = ("reply", "intro", "nudge")  # the steps learned apart (Outreach.kind, Tier names)

# For each field: new = old + alpha * (x - old), or x for the first job; as text: HSET keeps the
# double's digits. Returns the new averages in field order.
_RECORD: Final = """
local alpha = tonumber(ARGV[1])
local out = {}
for i = 2, #ARGV, 2 do
  local old = tonumber(redis.call('HGET', KEYS[1], ARGV[i]))
  local x = tonumber(ARGV[i + 1])
  local new = x
  if old then new = old + alpha * (x - old) end
  out[#out + 1] = string.format('%.3f', new)
  redis.call('HSET', KEYS[1], ARGV[i], out[#out])
end
return out
"""


@dataclass(frozen=True)
class JobTokens:
    """An owner's expected tokens per job: what it uses, what the provider's limit counts."""

    settled: int
    counted: int


@dataclass(frozen=True)
class JobCosts:
    """The learned costs of the owners' jobs, per owner and per owner and step."""

    owners: Mapping[int, JobTokens]
    steps: Mapping[tuple[int, str], JobTokens]

    def of(self, owner_id: int, kind: str | None = None) -> JobTokens:
        """A job of this owner and step: the step's figure, else (or with no step) the owner's;
        a reply's, until learned, the owner's per call times its calls (it makes the triage call
        too, config.deployments.job_steps)."""
        learned = self.steps.get((owner_id, kind)) if kind else None
        if learned is not None:
            return learned
        base = self.owners[owner_id]
        if kind != "reply":
            return base
        calls = Fraction(len(job_steps(reply=True)), len(job_steps(reply=False)))
        return JobTokens(settled=math.ceil(base.settled * calls), counted=math.ceil(base.counted * calls))

    def among(self, owner_ids: Collection[int]) -> JobCosts:
        """These owners' costs only."""
        keep = set(owner_ids)
        return JobCosts(
            owners={o: t for o, t in self.owners.items() if o in keep},
            steps={(o, k): t for (o, k), t in self.steps.items() if o in keep},
        )

    def smallest_counted(self) -> int:
        """The cheapest job the provider's limit may count among these owners' (0: no owners):
        what the cycle's slot count and in-flight target divide by, since over-sizing them costs
        nothing (the budget's reservations, not they, set the dispatch rate) and under-sizing
        idles the key."""
        return min((t.counted for t in (*self.owners.values(), *self.steps.values())), default=0)

    def largest_counted(self) -> int:
        """The costliest job the provider's limit may count among these owners' (0: no owners):
        what the budget's buckets must be able to hold at once."""
        return max((t.counted for t in (*self.owners.values(), *self.steps.values())), default=0)


def owner_tokens_record(
    *, owner_id: int, settled: int, counted: int, kind: str | None = None
) -> tuple[float, float] | None:
    """Fold one finished job's tokens into its owner's averages and, given its step (`kind`),
    into the owner's averages for that step; the owner's new (settled, counted) averages, or
    None when Redis failed (logged: the estimates only lose this sample)."""
    fields: list[str | int] = [str(owner_id), settled, f"{owner_id}:counted", counted]
    if kind is not None:
        fields += [f"{owner_id}:{kind}", settled, f"{owner_id}:{kind}:counted", counted]
    try:
        raw = redis_client.shared().eval(_RECORD, 1, KEY, ALPHA, *fields)
    except redis.RedisError as exc:
        log.warning("owner token estimate not recorded for owner %s: %s", owner_id, exc)
        return None
    return float(raw[0]), float(raw[1])


def owner_tokens_load(*, owner_ids: Collection[int], default: int) -> dict[int, JobTokens]:
    """Each owner's expected tokens per job (rounded up, at least 1): its averages, or `default`
    for what it has no history of yet or when Redis failed. One HMGET."""
    ids = sorted(owner_ids)
    if not ids:
        return {}
    fields = [name for o in ids for name in (str(o), f"{o}:counted")]
    try:
        raw = redis_client.shared().hmget(KEY, fields)
    except redis.RedisError as exc:
        log.warning("owner token estimates unavailable, using %s tokens: %s", default, exc)
        raw = [None] * len(fields)

    def tokens(value: bytes | str | None) -> int:
        return default if value is None else max(1, math.ceil(float(value)))

    return {
        o: JobTokens(settled=tokens(raw[2 * i]), counted=tokens(raw[2 * i + 1])) for i, o in enumerate(ids)
    }


def job_costs_load(*, owner_ids: Collection[int], default: int, kinds: Collection[str] = KINDS) -> JobCosts:
    """The owners' learned costs (`owner_tokens_load`) and, for each step of `kinds` an owner
    has history of, that step's. One HMGET, or two reads when Redis failed (then all default)."""
    owners = owner_tokens_load(owner_ids=owner_ids, default=default)
    pairs = [(o, k) for o in sorted(owners) for k in kinds]
    fields = [name for o, k in pairs for name in (f"{o}:{k}", f"{o}:{k}:counted")]
    try:
        raw = redis_client.shared().hmget(KEY, fields) if fields else []
    except redis.RedisError as exc:
        log.warning("per-step token estimates unavailable: %s", exc)
        raw = [None] * len(fields)
    steps = {
        pair: JobTokens(settled=max(1, math.ceil(float(s))), counted=max(1, math.ceil(float(c))))
        for pair, s, c in zip(pairs, raw[::2], raw[1::2], strict=True)
        if s is not None and c is not None
    }
    return JobCosts(owners=owners, steps=steps)
