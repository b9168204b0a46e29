"""Why work waits, written on the next rows in line: deferred owners and paused tiers, and an LLM
fault that stops every job. Each written only when its reason changed (the last one kept in Redis),
so a quiet cycle writes nothing."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, cast

from config.redis_client import Client
from outreach.models import Outreach, State
from outreach.tiers import Tier

DEFERRED_KEY = "orchestrator:dispatch:deferred"  # owner id -> reason last written (write on change)
LLM_BLOCKED_KEY = "orchestrator:dispatch:llm_blocked"  # the fault last written on waiting rows


def deferrals_note(
    *, client: Client, deferred: Mapping[int, str], paused_tiers: Mapping[int, Mapping[Tier, str]]
) -> None:
    """Say on each deferred owner's (or paused tier's) next-in-line rows why they wait, only
    when the reason changed.

    Bounded: at most 50 rows per owner or owner tier, and only where the reason is new since
    the last cycle, so a night in which every owner is outside its hours costs one write per owner.
    """
    notes = {str(o): reason for o, reason in deferred.items()}
    for o, tiers in paused_tiers.items():
        notes |= {f"{o}:{int(tier)}": reason for tier, reason in tiers.items()}
    previous = {_text(k): _text(v) for k, v in client.hgetall(DEFERRED_KEY).items()}
    for key, reason in notes.items():
        if previous.get(key) != reason:
            owner_id, _, tier = key.partition(":")
            waiting = Outreach.objects.filter(owner_id=int(owner_id), state=State.QUEUED)
            if tier:
                waiting = waiting.filter(tier=int(tier))
            head = waiting.order_by("not_before", "id")[:50]
            Outreach.objects.filter(id__in=list(head.values_list("id", flat=True))).update(
                blocked_reason=reason
            )
    pipe = client.pipeline()
    pipe.delete(DEFERRED_KEY)
    if notes:
        pipe.hset(DEFERRED_KEY, mapping=cast("dict[Any, str]", notes))  # redis-py's key union
    pipe.execute()


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def llm_blocked_note(*, client: Client, reason: str) -> None:
    """Say on the next rows in line why LLM work waits (a misconfigured deployment), only when
    the reason changed: bounded to 100 rows a change. Claimed rows clear it."""
    if (_text(client.get(LLM_BLOCKED_KEY) or b"")) == reason:
        return
    if reason:
        head = Outreach.objects.filter(state=State.QUEUED, draft_body="").order_by("not_before", "id")[:100]
        Outreach.objects.filter(id__in=list(head.values_list("id", flat=True))).update(blocked_reason=reason)
        client.set(LLM_BLOCKED_KEY, reason)
    else:
        client.delete(LLM_BLOCKED_KEY)
