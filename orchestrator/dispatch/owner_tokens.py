"""What an owner's next job is expected to cost in tokens: a moving average of its settled usage.

Fairness in tokens (`select_batch(costs=...)`, DISPATCH_FAIRNESS=tokens) charges each pick this
estimate, and the job's budget reservation holds it, so an owner whose prompts are three times
longer is charged three times per email and the budget reserves what its job will really use.

The generation worker records a job's settled tokens (all its calls) once it wrote a draft: a
failed job's partial usage would drag the average down. An owner without history costs the
configured estimate (LLM_CALLS_PER_OUTREACH x LLM_EST_TOKENS_PER_CALL, `outreach_cost`). The
averages are one Redis hash on REDIS_URL (dispatcher state, like the cursor), each update one
atomic script, so concurrent workers never lose one. A Redis error costs only precision: the
record is skipped, the load falls back to the configured estimate. This module owns the key.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Collection
from typing import Final

import redis

from orchestrator.dispatch.inflight import redis_fast

log = logging.getLogger(__name__)

KEY: Final = "orchestrator:dispatch:owner_tokens"  # hash: owner id -> moving average (tokens/job)
# Weight of the newest job in the average: about the last ten jobs count, so a change of
# prompts (a new sequence, longer context) shows within a few dozen jobs.
ALPHA: Final = 0.2

# new = old + alpha * (x - old), or x for the first job; as text: HSET keeps the double's digits.
_RECORD: Final = """
local old = tonumber(redis.call('HGET', KEYS[1], ARGV[1]))
local x = tonumber(ARGV[2])
local new = x
if old then new = old + tonumber(ARGV[3]) * (x - old) end
redis.call('HSET', KEYS[1], ARGV[1], string.format('%.3f', new))
return string.format('%.3f', new)
"""


def owner_tokens_record(*, owner_id: int, tokens: int) -> float | None:
    """Fold one finished job's settled tokens into its owner's average; the new average, or
    None when Redis failed (logged: the estimate only loses this sample)."""
    try:
        return float(redis_fast().eval(_RECORD, 1, KEY, owner_id, tokens, ALPHA))
    except redis.RedisError as exc:
        log.warning("owner token estimate not recorded for owner %s: %s", owner_id, exc)
        return None


def owner_tokens_load(*, owner_ids: Collection[int], default: int) -> dict[int, int]:
    """Each owner's expected tokens per job (rounded up, at least 1): its average, or `default`
    when it has none yet or Redis failed. One HMGET."""
    ids = sorted(owner_ids)
    if not ids:
        return {}
    try:
        raw = redis_fast().hmget(KEY, [str(o) for o in ids])
    except redis.RedisError as exc:
        log.warning("owner token estimates unavailable, using %s tokens: %s", default, exc)
        raw = [None] * len(ids)
    return {o: default if v is None else max(1, math.ceil(float(v))) for o, v in zip(ids, raw, strict=True)}
