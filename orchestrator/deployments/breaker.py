"""Each deployment's configuration-fault breaker, in Redis so the dispatcher and every worker
agree on it (a per-process breaker would let each worker burn its own few calls, and the
dispatcher could not see it).

A deployment whose calls keep failing with 401/403/404 (bad key, no permission, unknown
model) or 400 unsupported_parameter (a dialect its model does not speak) is misconfigured: after LLM_FAULT_THRESHOLD such answers in a row its breaker opens.
A deployment that is down (unreachable, timing out, answering 5xx) opens it the same way when
its work has somewhere else to go (a pool-mate or a fallback); its failed jobs stay ordinary
transient failures, retried with backoff. A lone deployment that is down keeps today's retries.
While open the dispatcher places nothing on it (its work waits QUEUED, saying why, or runs on
the pool's other deployments or the fallback); after LLM_FAULT_PROBE_S it is half open and the
dispatcher sends one job as a probe; the probe's successful calls close it when the job
settles (any success does: a job's successes go in one round trip at its end, with the moment
each deployment last answered, and clear only the faults recorded before it), a fault opens it
again for another LLM_FAULT_PROBE_S.

  orchestrator:llm_fault:<scope>  hash  n (faults in a row), reason, last_ms (the last fault),
                                        opened_ms, probe_ms
Times are Redis's clock (TIME), shared by all processes.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Final, Literal

import redis
from django.conf import settings
from redis.client import Pipeline

from config import redis_client
from config.deployments import Deployment, deployments
from config.redis_client import Client
from orchestrator.notify import alert_raise

log = logging.getLogger(__name__)

KEY_PREFIX: Final = "orchestrator:llm_fault:"
# Recorded atomically: the count, the reason and the opening (or re-opening after a failed probe).
_FAULT = """
local t = redis.call('TIME')
local now = t[1] * 1000 + math.floor(t[2] / 1000)
local n = redis.call('HINCRBY', KEYS[1], 'n', 1)
redis.call('HSET', KEYS[1], 'reason', ARGV[2], 'last_ms', now)
if n < tonumber(ARGV[1]) then return 0 end
local was_open = redis.call('HEXISTS', KEYS[1], 'opened_ms')
redis.call('HSET', KEYS[1], 'opened_ms', now)
redis.call('HDEL', KEYS[1], 'probe_ms')
return was_open == 1 and 2 or 1
"""
# A success answered ARGV[1] ms ago clears the faults recorded before it (and with them an open
# breaker), not one recorded since: it reaches Redis when its job settles (successes_record).
# Its moment is known to within the round trip that carries it (the age is measured before
# it), so a fault in the same millisecond stands.
_SUCCESS = """
local t = redis.call('TIME')
local at = t[1] * 1000 + math.floor(t[2] / 1000) - tonumber(ARGV[1])
if tonumber(redis.call('HGET', KEYS[1], 'last_ms') or 0) >= at then return 0 end
return redis.call('DEL', KEYS[1])
"""
# The probe is marked only while the breaker is still open (a success may have closed it).
_PROBE = """
if redis.call('HEXISTS', KEYS[1], 'opened_ms') == 0 then return 0 end
local t = redis.call('TIME')
redis.call('HSET', KEYS[1], 'probe_ms', t[1] * 1000 + math.floor(t[2] / 1000))
return 1
"""

State = Literal["closed", "open", "half_open", "probing"]


@dataclass(frozen=True, slots=True)
class Health:
    state: State = "closed"
    reason: str = ""
    faults: int = 0  # in a row
    retry_in_ms: int = 0  # until the next probe (open)


def health_of(fields: Mapping[bytes, bytes], *, now_ms: int, probe_after_ms: int) -> Health:
    """The breaker's state from its hash (pure)."""
    reason = fields.get(b"reason", b"").decode()
    faults = int(fields.get(b"n", 0))
    if b"opened_ms" not in fields:
        return Health(reason=reason, faults=faults)
    since_open = now_ms - int(fields[b"opened_ms"])
    if since_open < probe_after_ms:
        return Health("open", reason, faults, retry_in_ms=probe_after_ms - since_open)
    probe = fields.get(b"probe_ms")
    # A probe that never reported (its worker died) is given up after one more probe interval.
    if probe is not None and now_ms - int(probe) < probe_after_ms:
        return Health("probing", reason, faults)
    return Health("half_open", reason, faults)


# A provider's `param` is shown only when it looks like a parameter's name (it is provider text).
_PARAM = re.compile(r"^[A-Za-z0-9_.\[\]\-]{1,64}$")


def fault_reason(
    *, deployment: Deployment, status: int | None, code: str | None, param: str | None = None
) -> str:
    """The blocked reason work shows while this deployment is misconfigured. Azure repeats the
    status as its code ("401"): said once."""
    parts = [str(status) if status else "", code if code and code != str(status) else ""]
    if param and _PARAM.match(param):
        parts.append(f"'{param}'")
    what = " ".join(part for part in parts if part)
    hint = " (its dialect/token_param)" if param else ""
    return f"deployment '{deployment.label}' misconfigured: {what or 'refused'}; check LLM_DEPLOYMENTS{hint}"


def down_reason(*, deployment: Deployment, status: int | None) -> str:
    """The blocked reason while a deployment with somewhere else to send its work is failing."""
    what = f"answering {status}" if status else "unreachable"
    return f"deployment '{deployment.label}' failing: {what}; its work goes to its pool or fallback"


def has_alternative(deployment: Deployment) -> bool:
    """Its work has somewhere else to go: another deployment of its pool, or a fallback."""
    pool = sum(1 for d in deployments() if d.name == deployment.name)
    return pool > 1 or deployment.name in settings.LLM_FALLBACKS


def fault_record(*, deployment: Deployment, reason: str) -> None:
    """One call refused as misconfigured, or failed on a deployment that is down (the caller
    says which in `reason`). Opening the breaker raises the alert."""
    try:
        opened = int(
            health_client().eval(
                _FAULT, 1, KEY_PREFIX + deployment.scope, settings.LLM_FAULT_THRESHOLD, reason
            )
        )
    except redis.RedisError as exc:
        log.warning("LLM fault not recorded", extra={"deployment": deployment.label, "error": str(exc)})
        return
    if opened == 1:
        log.error(
            "LLM deployment breaker open",
            extra={"deployment": deployment.label, "model": deployment.model, "reason": reason},
        )
        alert_raise(
            condition=f"llm-deployment-breaker-{deployment.label}",
            text=f"{reason}. Work that needs it waits queued; it resumes by itself once a probe call succeeds.",
        )


def successes_record(
    *, answered_ago_ms: Mapping[Deployment, int], also: Callable[[Pipeline], object]
) -> None:
    """Calls succeeded, each deployment's last `answered_ago_ms` ago: faults in a row recorded
    before it start again from 0 and an open breaker closes. `also` stages more of the job's
    bookkeeping on REDIS_URL in the same round trip (orchestrator.work). Never raises."""
    client = health_client()
    pipe = client.pipeline(transaction=False)
    for deployment, ago_ms in answered_ago_ms.items():
        pipe.eval(_SUCCESS, 1, KEY_PREFIX + deployment.scope, max(0, ago_ms))
    also(pipe)
    try:
        cleared = pipe.execute()[: len(answered_ago_ms)]
    except redis.RedisError as exc:
        log.warning("LLM successes not recorded", extra={"error": str(exc)})
        return
    for deployment, was in zip(answered_ago_ms, cleared, strict=True):
        if was:
            log.info("LLM deployment answering again", extra={"deployment": deployment.label})


def probe_mark(*, client: Client, deployment: Deployment) -> bool:
    """The dispatcher sends this deployment's probe job now (False: it closed meanwhile)."""
    return bool(client.eval(_PROBE, 1, KEY_PREFIX + deployment.scope))


def healths(*, client: Client, deployments: Sequence[Deployment]) -> dict[str, Health]:
    """Every deployment's breaker, by label: one round trip."""
    pipe = client.pipeline(transaction=False)
    pipe.time()
    for deployment in deployments:
        pipe.hgetall(KEY_PREFIX + deployment.scope)
    (seconds, micros), *found = pipe.execute()
    now_ms = seconds * 1000 + micros // 1000
    probe_after_ms = int(settings.LLM_FAULT_PROBE_S * 1000)
    return {
        d.label: health_of(fields, now_ms=now_ms, probe_after_ms=probe_after_ms)
        for d, fields in zip(deployments, found, strict=True)
    }


def health_client() -> Client:
    """The workers' fast-failing client on REDIS_URL (one per process)."""
    return redis_client.shared()
