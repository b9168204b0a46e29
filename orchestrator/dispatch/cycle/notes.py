"""Why work waits, written on the next rows in line: deferred owners and paused tiers, and an LLM
fault that stops every job. Each written only when its reason changed (the last one kept in Redis),
so a quiet cycle writes nothing."""

from __future__ import annotations

import secrets
from collections.abc import Collection, Mapping
from collections.abc import Set as AbstractSet
from dataclasses import dataclass, field

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
# The notes per owner: OWNER its own (every tier's, field "<owner id>" in DEFERRED_KEY), else
# a paused tier's (field "<owner id>:<tier>"). Kept per owner, so a cycle compares and clears
# its judged owners' notes with one lookup each, not four fields each made and looked up
# (2.3 ms of a cycle at 10,000 owners, bench/dispatch.py --controls, 2026-12-07).
OWNER = 0
Notes = dict[int, dict[int, str]]
_NONE: dict[int, str] = {}


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
    closing: Mapping[int, str] = {}
    notes: Notes = {}
    if judged is not None and every is not None:
        closing = _closings(closed or Closed(), every=every)
        notes = {o: {OWNER: reason} for o, reason in closing.items() if o not in judged}
    for o, reason in deferred.items():
        notes.setdefault(o, {})[OWNER] = reason
    for o, tiers in paused_tiers.items():
        notes.setdefault(o, {}).update(tiers.items())
    previous = _last_written(client)
    changed: dict[tuple[int, int], str] = {}
    for o, mine in notes.items():
        if (was := previous.get(o, _NONE)) != mine:  # most owners' notes stand: one compare
            changed |= {(o, at): reason for at, reason in mine.items() if was.get(at) != reason}
    # An owner's reason goes on the head of each of its tiers, but a paused tier keeps its own
    # (for an owner not judged, the one it last had).
    writes: dict[tuple[int, int], str] = {}
    unjudged: dict[tuple[int, int], str] = {}  # closed owners no cycle judged: their first rows
    for (o, at), reason in changed.items():
        seen = judged is None or o in judged
        kept: AbstractSet[int] = notes.get(o, _NONE).keys()
        if not seen and closing:
            kept = kept | previous.get(o, _NONE).keys()
        heads = [at] if at != OWNER else [int(t) for t in Tier if t not in kept]
        (writes if seen else unjudged).update({(o, int(t)): reason for t in heads})
    reasons_write(reasons=writes, rows_each=NOTE_ROWS)
    reasons_write(reasons=unjudged, rows_each=CLOSED_NOTE_ROWS)
    # What changed, not the whole map again: a tier paused everywhere is one key per owner.
    # Only the judged owners' notes can go (the map holds up to one per owner and tier).
    removed = [
        (o, at)
        for o in (previous if judged is None else judged)
        if (had := previous.get(o)) and had.keys() != notes.get(o, _NONE).keys()
        for at in had
        if at not in notes.get(o, _NONE)
    ]
    if removed or changed:
        pipe = client.pipeline()
        if removed:
            pipe.hdel(DEFERRED_KEY, *(_field(o, at) for o, at in removed))
        if changed:
            pipe.hset(DEFERRED_KEY, mapping={_field(o, at): reason for (o, at), reason in changed.items()})
        version = secrets.token_hex(8)  # never another writer's, even after Redis lost the map
        pipe.set(DEFERRED_VERSION_KEY, version)
        pipe.execute()
        written = dict(previous)  # each owner's notes copied as they change: `previous` is kept
        for o, at in removed:
            if not (left := {t: r for t, r in written[o].items() if t != at}):
                del written[o]
            else:
                written[o] = left
        for (o, at), reason in changed.items():
            written[o] = {**written.get(o, _NONE), at: reason}
        _written.version, _written.notes = version.encode(), written
    if closing:
        _closed.noted = closing


@dataclass(slots=True)
class _Closed:
    """The closed owners' reasons this process noted last: `Closed.reasons`' answer, which it
    keeps while the closings and the active owners stand, so the same answer again is noted
    already (owners added since come with a new answer, and are noted with the rest)."""

    noted: Mapping[int, str] | None = None


_closed = _Closed()


def _closings(closed: Closed, *, every: ActiveOwners) -> Mapping[int, str]:
    """The closed owners with their reasons when this process has not noted them yet, else
    none: one identity compare a cycle once they are."""
    reasons = closed.reasons(every)
    return {} if reasons is _closed.noted else reasons


@dataclass(slots=True)
class _Written:
    """The map of reasons this process wrote last (`Notes`), and the version it gave it: the
    next cycle takes it instead of reading the map back (a reason per deferred owner and paused
    tier: a tier paused across an organization is one per owner, 10,000 at platform scale).
    Any other version (another dispatcher wrote, or Redis lost the map) is read afresh, with
    its version in one transaction."""

    version: bytes | None = None
    notes: Notes = field(default_factory=dict)


_written = _Written()


def _last_written(client: Client) -> Notes:
    version = client.get(DEFERRED_VERSION_KEY)
    if version is not None and version == _written.version:
        return _written.notes
    pipe = client.pipeline()  # MULTI: the map and its version as of one moment
    pipe.get(DEFERRED_VERSION_KEY)
    pipe.hgetall(DEFERRED_KEY)
    version, stored = pipe.execute()
    notes: Notes = {}
    for key, reason in stored.items():
        owner, _, tier = _text(key).partition(":")
        try:
            notes.setdefault(int(owner), {})[int(tier) if tier else OWNER] = _text(reason)
        except ValueError:  # not a field this map holds: compares with none, and stays
            continue
    _written.version, _written.notes = version, notes
    return notes


def _field(owner: int, at: int) -> str:
    """The note's field in DEFERRED_KEY (`Notes`)."""
    return str(owner) if at == OWNER else f"{owner}:{int(at)}"


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
