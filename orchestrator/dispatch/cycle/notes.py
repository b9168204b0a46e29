"""Why work waits, written on the next rows in line: deferred owners and paused tiers, and an LLM
fault that stops every job. Each written only when its reason changed (the last one kept in Redis),
so a quiet cycle writes nothing."""

from __future__ import annotations

import secrets
from collections.abc import Collection, Mapping
from dataclasses import dataclass, field
from typing import Any, cast

from config.redis_client import Client
from orchestrator.dispatch.cycle.admission import Closed
from orchestrator.dispatch.reads import ActiveOwners, queued_head, reasons_write
from outreach.models import Outreach
from outreach.tiers import Tier

DEFERRED_KEY = "orchestrator:dispatch:deferred"  # owner id -> reason last written (write on change)
DEFERRED_VERSION_KEY = DEFERRED_KEY + ":version"  # a new token at each write of it
LLM_BLOCKED_KEY = "orchestrator:dispatch:llm_blocked"  # the fault last written on waiting rows
NOTE_ROWS = 50  # a deferred owner's reason goes on this many of each tier's next rows
# A closed owner no cycle judged gets its reason on its next row of each tier only: a closing
# notes every owner of an organization or domain at once, and 50 rows of each of 10,000 owners
# was one 19-second statement (bench/dispatch.py --spend-cap 0, 2026-12-07); its first row, 1.
CLOSED_NOTE_ROWS = 1


def deferrals_note(
    *,
    client: Client,
    deferred: Mapping[int, str],
    paused_tiers: Mapping[int, Mapping[Tier, str]],
    judged: Collection[int] | None = None,
    closed: Closed | None = None,
    every: ActiveOwners | None = None,
) -> None:
    """Say on each deferred owner's (or paused tier's) next-in-line rows why they wait, only
    when the reason changed. `judged`: the owners this cycle admitted (its window, None: all);
    the others' notes stand until a cycle judges them, but for the `closed` owners (admission's
    `Admitted.closed`, among `every`, the active owners), noted with their reason once per
    closing: each of them is refused whoever judges it, and over a spend cap or a domain's day
    the window would not reach most of them all day.

    Bounded: at most NOTE_ROWS rows per owner tier, only where the reason is new since the last
    cycle, and one statement for them all (reads.reasons_write), so a morning in which every
    owner comes into its hours costs one statement, not one per owner.
    """
    closed = closed or Closed()
    closing: dict[tuple[str, object], str] = {}
    notes: dict[str, str] = {}
    if judged is not None and every is not None:
        closing = _closings(closed, every=every)
        if closing:
            notes = {str(o): reason for o, reason in closed.reasons(every).items() if o not in judged}
    notes |= {str(o): reason for o, reason in deferred.items()}
    for o, tiers in paused_tiers.items():
        notes |= {f"{o}:{int(tier)}": reason for tier, reason in tiers.items()}
    previous = _last_written(client)
    changed = {key: reason for key, reason in notes.items() if previous.get(key) != reason}
    # An owner's reason goes on the head of each of its tiers, but a paused tier keeps its own
    # (for an owner not judged, the one it last had).
    writes: dict[tuple[int, int], str] = {}
    unjudged: dict[tuple[int, int], str] = {}  # closed owners no cycle judged: their first rows
    either = notes.keys() | previous.keys() if closing else notes.keys()
    for key, reason in changed.items():
        owner_id, _, tier = key.partition(":")
        seen = judged is None or int(owner_id) in judged
        kept = notes if seen else either
        heads = [int(tier)] if tier else [int(t) for t in Tier if f"{owner_id}:{int(t)}" not in kept]
        (writes if seen else unjudged).update({(int(owner_id), t): reason for t in heads})
    reasons_write(reasons=writes, rows_each=NOTE_ROWS)
    reasons_write(reasons=unjudged, rows_each=CLOSED_NOTE_ROWS)
    # What changed, not the whole map again: a tier paused everywhere is one key per owner.
    # Only the judged owners' keys can go (the map holds up to one per owner and tier).
    suffixes = [f":{int(t)}" for t in Tier]  # each judged owner's keys: "7", "7:1", "7:2", "7:3"
    judged_keys = (
        previous
        if judged is None
        else (key for o in map(str, judged) for key in (o, *(o + suffix for suffix in suffixes)))
    )
    removed = [key for key in judged_keys if key in previous and key not in notes]
    if removed or changed:
        pipe = client.pipeline()
        if removed:
            pipe.hdel(DEFERRED_KEY, *removed)
        if changed:
            pipe.hset(DEFERRED_KEY, mapping=cast("dict[Any, str]", changed))  # redis-py's key union
        version = secrets.token_hex(8)  # never another writer's, even after Redis lost the map
        pipe.set(DEFERRED_VERSION_KEY, version)
        pipe.execute()
        written = {k: v for k, v in previous.items() if k not in removed} | changed
        _written.version, _written.notes = version.encode(), written
    _closed.noted |= closing


@dataclass(slots=True)
class _Closed:
    """The closings this process noted, with their reasons (`Closed.entries`), among which
    active owners (`ActiveOwners`, by identity: owners added since are noted again with the rest)."""

    owners: object = None
    noted: dict[tuple[str, object], str] = field(default_factory=dict)


_closed = _Closed()


def _closings(closed: Closed, *, every: ActiveOwners) -> dict[tuple[str, object], str]:
    """The closings now not noted with their reason yet (all of them when any is new: each
    owner's reason is the first rule's of those that close it); one mapping compare a cycle
    once they are."""
    if _closed.owners is not every:
        _closed.owners, _closed.noted = every, {}
    entries = closed.entries()
    _closed.noted = {k: reason for k, reason in _closed.noted.items() if entries.get(k) == reason}
    return entries if any(_closed.noted.get(k) != reason for k, reason in entries.items()) else {}


@dataclass(slots=True)
class _Written:
    """The map of reasons this process wrote last, and the version it gave it: the next cycle
    takes it instead of reading the map back (a reason per deferred owner and paused tier: a
    tier paused across an organization is one per owner, 10,000 at platform scale). Any other
    version (another dispatcher wrote, or Redis lost the map) is read afresh, with its version
    in one transaction."""

    version: bytes | None = None
    notes: dict[str, str] = field(default_factory=dict)


_written = _Written()


def _last_written(client: Client) -> dict[str, str]:
    version = client.get(DEFERRED_VERSION_KEY)
    if version is not None and version == _written.version:
        return _written.notes
    pipe = client.pipeline()  # MULTI: the map and its version as of one moment
    pipe.get(DEFERRED_VERSION_KEY)
    pipe.hgetall(DEFERRED_KEY)
    version, stored = pipe.execute()
    notes = {_text(k): _text(v) for k, v in stored.items()}
    _written.version, _written.notes = version, notes
    return notes


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def llm_blocked_note(*, client: Client, reason: str) -> None:
    """Say on the next rows in line why LLM work waits (a misconfigured deployment), only when
    the reason changed: bounded to 100 rows a change. Claimed rows clear it."""
    if (_text(client.get(LLM_BLOCKED_KEY) or b"")) == reason:
        return
    if reason:
        Outreach.objects.filter(id__any=queued_head(rows=100)).update(blocked_reason=reason)
        client.set(LLM_BLOCKED_KEY, reason)
    else:
        client.delete(LLM_BLOCKED_KEY)
