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
from collections.abc import Collection
from dataclasses import dataclass
from typing import Final

import redis

from config import redis_client

log = logging.getLogger(__name__)

# hash: "<owner id>" -> settled tokens/job, "<owner id>:counted" -> counted tokens/job (averages)
KEY: Final = "orchestrator:dispatch:owner_tokens"
# Weight of the newest job in the average: about the last ten jobs count, so a change of
# prompts (a new sequence, longer context) shows within a few dozen jobs.
ALPHA: Final = 0.2

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


def owner_tokens_record(*, owner_id: int, settled: int, counted: int) -> tuple[float, float] | None:
    """Fold one finished job's tokens into its owner's averages; the new (settled, counted)
    averages, or None when Redis failed (logged: the estimates only lose this sample)."""
    try:
        raw = redis_client.shared().eval(
            _RECORD, 1, KEY, ALPHA, str(owner_id), settled, f"{owner_id}:counted", counted
        )
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
