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

# hash: "p:<owner id>" -> the owner's averages packed in one field, so a cycle reads a window's
# owners a field each: "<settled> <counted> <reply settled> <reply counted> <intro settled>
# <intro counted> <nudge settled> <nudge counted>" (settled and counted tokens/job over all its
# jobs, then over each step's, KINDS' order), "-" for a step not learned yet. Until 2026-12-06
# each average was a field of its own ("<owner id>", "<owner id>:counted", "<owner id>:<kind>",
# "<owner id>:<kind>:counted"; 8 fields an owner to read): an owner's record folds its old
# fields into its packed one, and the first load after that converts the rest (`_CONVERT`),
# marking the hash "format" = "2".
KEY: Final = "orchestrator:dispatch:owner_tokens"
# Weight of the newest job in the average: about the last ten jobs count, so a change of
# prompts (a new sequence, longer context) shows within a few dozen jobs.
ALPHA: Final = 0.2
KINDS: Final = ("reply", "intro", "nudge")  # the steps learned apart (Outreach.kind, Tier names)
FORMAT: Final = "2"

# An owner's averages as the packed field's words, from its packed field or else from the old
# fields (then dropped): '-' for what it has none of, and for all of a field that is not eight
# numbers or '-' (`job_costs_load` does not read it either).
_OWNER_WORDS: Final = """
local kinds = {'reply', 'intro', 'nudge'}
local function owner_words(key, owner)
  local packed = redis.call('HGET', key, 'p:' .. owner)
  local words = {}
  if packed then
    for word in string.gmatch(packed, '%S+') do
      local n = tonumber(word)
      if word ~= '-' and not (n and n == n and math.abs(n) ~= math.huge) then words = {}; break end
      words[#words + 1] = word
    end
    if #words == 8 then return words end
    return {'-', '-', '-', '-', '-', '-', '-', '-'}  -- unreadable: learned again from this job
  end
  local names = {owner, owner .. ':counted'}
  for _, kind in ipairs(kinds) do
    names[#names + 1] = owner .. ':' .. kind
    names[#names + 1] = owner .. ':' .. kind .. ':counted'
  end
  local old = redis.call('HMGET', key, unpack(names))
  local found = false
  for i = 1, #names do
    if old[i] then words[i] = old[i]; found = true else words[i] = '-' end
  end
  if found then redis.call('HDEL', key, unpack(names)) end
  return words
end
"""

# One finished job folded into its owner's averages and, given its step (ARGV[3]: 1-based place
# in KINDS, 0 none), that step's: new = old + alpha * (x - old), or x for the first job; as text
# (HSET keeps the double's digits). Returns the owner's new averages.
_RECORD: Final = (
    _OWNER_WORDS
    + """
local alpha, owner, step = tonumber(ARGV[1]), ARGV[2], tonumber(ARGV[3])
local words = owner_words(KEYS[1], owner)
local function fold(i, x)
  local old = tonumber(words[i])
  local new = x
  if old then new = old + alpha * (x - old) end
  words[i] = string.format('%.3f', new)
end
for i = 1, 2 do
  fold(i, tonumber(ARGV[3 + i]))
  if step > 0 then fold(2 * step + i, tonumber(ARGV[3 + i])) end
end
redis.call('HSET', KEYS[1], 'p:' .. owner, table.concat(words, ' '))
return {words[1], words[2]}
"""
)

# Every owner's old fields into its packed one, once (HKEYS: a one-off pass over the hash, some
# 30 ms of Redis at 10,000 owners' 80,000 old fields), then the hash marked converted.
_CONVERT: Final = (
    _OWNER_WORDS
    + """
if redis.call('HGET', KEYS[1], 'format') == ARGV[1] then return 0 end
local owners = {}
for _, name in ipairs(redis.call('HKEYS', KEYS[1])) do
  local owner = string.match(name, '^(%d+)')
  if owner then owners[owner] = true end
end
local converted = 0
for owner in pairs(owners) do
  redis.call('HSET', KEYS[1], 'p:' .. owner, table.concat(owner_words(KEYS[1], owner), ' '))
  converted = converted + 1
end
redis.call('HSET', KEYS[1], 'format', ARGV[1])
return converted
"""
)


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
    step = KINDS.index(kind) + 1 if kind in KINDS else 0
    try:
        raw = redis_client.shared().eval(_RECORD, 1, KEY, ALPHA, owner_id, step, settled, counted)
    except redis.RedisError as exc:
        log.warning("owner token estimate not recorded for owner %s: %s", owner_id, exc)
        return None
    return float(raw[0]), float(raw[1])


def owner_tokens_load(*, owner_ids: Collection[int], default: int) -> dict[int, JobTokens]:
    """Each owner's expected tokens per job (rounded up, at least 1): its averages, or `default`
    for what it has no history of yet or when Redis failed (`job_costs_load`)."""
    return dict(job_costs_load(owner_ids=owner_ids, default=default).owners)


def job_costs_load(*, owner_ids: Collection[int], default: int) -> JobCosts:
    """The owners' learned costs, rounded up, at least 1: each owner's over all its jobs (or
    `default` with no history, or when Redis failed) and each step's it has history of. One
    field an owner, one round trip (a hash not yet converted: `_CONVERT` first, once)."""
    ids = sorted(owner_ids)
    if not ids:
        return JobCosts(owners={}, steps={})
    fields = [f"p:{o}" for o in ids]
    try:
        client = redis_client.shared()
        pipe = client.pipeline(transaction=False)
        pipe.hget(KEY, "format")
        pipe.hmget(KEY, fields)
        marked, raw = pipe.execute()
        if marked != FORMAT.encode():
            client.eval(_CONVERT, 1, KEY, FORMAT)
            raw = client.hmget(KEY, fields)
    except redis.RedisError as exc:
        log.warning("owner token estimates unavailable, using %s tokens: %s", default, exc)
        raw = [None] * len(ids)
    owners: dict[int, JobTokens] = {}
    steps: dict[tuple[int, str], JobTokens] = {}
    unknown = JobTokens(settled=default, counted=default)
    unreadable = []
    for owner, packed in zip(ids, raw, strict=True):
        if packed is None:
            owners[owner] = unknown
            continue
        read = _read.get(owner)
        if read is None or read[0] != packed or read[1] != default:
            read = _read[owner] = (packed, default, _owner_costs(packed, default))
        costs = read[2]
        if costs is None:
            owners[owner] = unknown
            unreadable.append(owner)
            continue
        owners[owner] = costs[0]
        for kind, tokens in costs[1]:
            steps[owner, kind] = tokens
    if unreadable:
        log.warning(
            "owner token estimates unreadable for %d owners (owner %s), using %s tokens until their next job",
            len(unreadable),
            ", owner ".join(map(str, unreadable[:10])),
            default,
        )
    return JobCosts(owners=owners, steps=steps)


# owner id -> its field as last read, the default then, and what they gave (`_owner_costs`): a
# cycle reads some 600 fields at 10,000 owners and few changed since (parsing them all was
# 3-4 ms a cycle). One entry an owner, replaced when its field changes.
_read: dict[int, tuple[bytes, int, tuple[JobTokens, tuple[tuple[str, JobTokens], ...]] | None]] = {}


def _owner_costs(packed: bytes, default: int) -> tuple[JobTokens, tuple[tuple[str, JobTokens], ...]] | None:
    """An owner's costs over all its jobs and each learned step's, from its field; None when
    the field is unreadable (`_words`)."""
    words = _words(packed)
    if words is None:
        return None
    steps = tuple(
        (kind, _tokens(words[2 * i], words[2 * i + 1], default))
        for i, kind in enumerate(KINDS, start=1)
        if words[2 * i] is not None
    )
    return _tokens(words[0], words[1], default), steps


def _words(packed: bytes) -> list[float | None] | None:
    """An owner's packed field as its eight averages (None: not learned); None for a field that
    is not eight numbers or '-' (a hand edit, a bad restore): the owner costs the default until
    its next job writes the field anew (`_OWNER_WORDS`), rather than every cycle raising."""
    try:
        words = [None if w == b"-" else float(w) for w in packed.split()]
    except ValueError:
        return None
    if len(words) != 8 or any(w is not None and not math.isfinite(w) for w in words):
        return None
    return words


def _tokens(settled: float | None, counted: float | None, default: int) -> JobTokens:
    """Two averages as whole tokens (rounded up, at least 1); `default` for one not learned."""

    def whole(word: float | None) -> int:
        return default if word is None else max(1, math.ceil(word))

    return JobTokens(settled=whole(settled), counted=whole(counted))
