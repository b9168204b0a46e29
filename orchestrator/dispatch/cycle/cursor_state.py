"""The selection cursor in Redis, written as what changed since the dispatcher's last write.

Two keys: CURSOR_KEY holds the cursor without its owners' leads (where each round stopped,
each round's lead scale and count, and the lease that wrote it), LEADS_KEY one hash of every
round's leads, field "<tier>|<group>|<owner id>" -> that owner's lead in units of 1 / the
round's scale (`Leads`; group "" is the tier's own round).

With fairness in tokens a cursor holds a lead for each owner of each round: 20,000 at 10,000
owners of a capped organization. As one JSON value that was 225 KB encoded and written every
cycle (4.4-6.9 ms of a cycle, bench/dispatch.py, 2026-12-05). A cycle moves the leads of the
owners it picked, about as many as its slots; the others change only when their round's
frame moves on (about once a round: every ten cycles or so at that size) or its scale does.
So a write sends the fields that changed and deletes those dropped, against what this process
wrote last (`_Written`), and only while Redis still holds that write (the script compares the
head); otherwise, or before this process has written, it rewrites the hash whole. Which fields
changed, the clock says when it made a round's leads from the written ones in the same frame
(`Leads.since`); only when a frame or scale moved are every round's leads compared.

A read takes the head first: when it is the head this process wrote last, the cursor it wrote
is taken back, nothing parsed. Any other head is read with the hash in one MULTI (another
dispatcher's write lands before or after both); one in the format used until 2026-12-05 (one
JSON value, leads inline) is read as such. A cursor that is not one, or whose leads do not add
up (the hash lost or evicted), is logged and the rounds start again from the lowest owner id:
nothing else is lost (until 2026-12-05 every cycle raised on it, and dispatch stopped). The
send cursor (cycle.sends: one JSON value, counts only) is read the same way (`json_cursor_load`).
"""

from __future__ import annotations

import json
import logging
from collections import defaultdict
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Final

from config.redis_client import Client
from orchestrator.dispatch.selection import Cursor
from orchestrator.dispatch.selection.cursor import Leads
from orchestrator.dispatch.singleton import Lease
from outreach.tiers import Tier

log = logging.getLogger(__name__)

CURSOR_KEY: Final = "orchestrator:dispatch:cursor"
LEADS_KEY: Final = "orchestrator:dispatch:cursor:leads"
FORMAT: Final = 2  # the head's "format": leads in LEADS_KEY (none: a cursor's JSON, leads inline)

# After the lease's check (singleton.Lease.run_if_held): KEYS[2] the head, KEYS[3] the leads;
# ARGV[2] the new head, ARGV[3] the head the change is made against ("": rewrite whole),
# ARGV[4] how many fields to set, then field and lead pairs, then the fields to delete.
# A change against a head Redis no longer holds writes nothing and answers -1. HSET and HDEL
# take a thousand arguments at a time (Lua's stack holds about 8,000).
_WRITE: Final = """
if ARGV[3] ~= '' and redis.call('GET', KEYS[2]) ~= ARGV[3] then return -1 end
redis.call('SET', KEYS[2], ARGV[2])
if ARGV[3] == '' then redis.call('DEL', KEYS[3]) end
local last_set = 4 + 2 * tonumber(ARGV[4])
for first = 5, last_set, 1000 do
  redis.call('HSET', KEYS[3], unpack(ARGV, first, math.min(first + 999, last_set)))
end
for first = last_set + 1, #ARGV, 1000 do
  redis.call('HDEL', KEYS[3], unpack(ARGV, first, math.min(first + 999, #ARGV)))
end
return 1
"""

Rounds = Mapping[tuple[Tier, str], Leads]


@dataclass(slots=True)
class _Written:
    """What this process wrote last, while Redis may still hold it: the head's text and the
    cursor (the leads in LEADS_KEY are that cursor's)."""

    head: bytes | None = None
    cursor: Cursor | None = None


_written = _Written()


def cursor_load(client: Client) -> Cursor:
    """The persisted cursor: the one this process wrote last while Redis holds its head, else
    what Redis holds (the start cursor when nothing, or nothing readable)."""
    head = client.get(CURSOR_KEY)
    if _written.cursor is not None and head == _written.head:
        return _written.cursor
    _written.head = _written.cursor = None
    return cursor_read(client)


def cursor_read(client: Client) -> Cursor:
    """What Redis holds, read whole (the head and every lead, in one MULTI)."""
    with client.pipeline(transaction=True) as pipe:
        pipe.get(CURSOR_KEY)
        pipe.hgetall(LEADS_KEY)
        head, fields = pipe.execute()
    return _or_start(lambda: _parsed(head, fields), key=CURSOR_KEY)


def json_cursor_load(client: Client, key: str) -> Cursor:
    """A cursor kept as one JSON value at `key` (the send cursor), as `cursor_read` reads the
    LLM one: the start cursor, logged, when Redis holds none or none readable."""
    return _or_start(lambda: Cursor.from_json(client.get(key)), key=key)


def _or_start(parse: Callable[[], Cursor], *, key: str) -> Cursor:
    """The cursor `parse` reads; the start cursor when what Redis holds at `key` is not one
    (logged): the rounds start again from the lowest owner id, rather than every cycle raising."""
    try:
        return parse()
    except ValueError as exc:
        log.warning(
            "dispatch cursor %s unreadable, its rounds start again from the lowest owner id: %s", key, exc
        )
        return Cursor()


def cursor_store(lease: Lease, cursor: Cursor) -> None:
    """Persist the cursor while the lease is held: its head, and its leads as what changed
    since this process's last write while Redis still holds that, else whole."""
    known, base = _written.cursor, _written.head
    head = json.dumps({"format": FORMAT, "lease": lease.token, "cursor": cursor.as_dict(owners=False)})
    _written.head = _written.cursor = None

    def write(against: str, before: Rounds) -> object:
        """The script's answer: 1 written, 0 the lease lost, -1 Redis no longer holds `against`."""
        sets, drops = leads_change(before, cursor.leads)
        return lease.run_if_held(
            _WRITE, keys=[CURSOR_KEY, LEADS_KEY], args=[head, against, len(sets) // 2, *sets, *drops]
        )

    written = write(base.decode(), known.leads) if known is not None and base is not None else -1
    if written == -1:  # Redis does not hold our last write (or we have none): rewrite whole
        written = write("", {})
    if written == 1:
        _written.head, _written.cursor = head.encode(), cursor


def leads_change(before: Rounds, after: Rounds) -> tuple[list[str | int], list[str]]:
    """The LEADS_KEY fields that make `before`'s leads `after`'s: (field, lead) pairs to set,
    flat, and the fields to delete. A round whose scale changed is set whole; one the clock made
    from `before`'s in the same frame says what it changed (`Leads.since`), which is
    written without comparing every lead."""
    sets: list[str | int] = []
    drops: list[str] = []
    for (tier, group), leads in after.items():
        prefix = f"{tier.name.lower()}|{group}|"
        was = before.get((tier, group))
        if was is leads:
            continue
        since = leads.since
        if was is not None and since is not None and since.base() is was:  # what the clock changed
            sets += [x for owner, lead in since.changed.items() for x in (f"{prefix}{owner}", lead)]
            drops += [f"{prefix}{owner}" for owner in since.dropped]
            continue
        old = was.ticks if was is not None and was.scale == leads.scale else {}
        new = leads.ticks
        changed = [owner for owner, lead in new.items() if old.get(owner) != lead]
        sets += [x for owner in changed for x in (f"{prefix}{owner}", new[owner])]
        # `after` holds all of `before`'s owners when it has as many besides those it added
        added = sum(1 for owner in changed if owner not in old)
        if was is not None and len(new) - added < len(was.ticks):
            drops += [f"{prefix}{owner}" for owner in was.ticks.keys() - new.keys()]
    for (tier, group), was in before.items():
        if (tier, group) not in after:
            drops += [f"{tier.name.lower()}|{group}|{owner}" for owner in was.ticks]
    return sets, drops


def _parsed(head: bytes | None, fields: Mapping[bytes, bytes]) -> Cursor:
    if not head:
        return Cursor()
    data = json.loads(head)  # a JSONDecodeError is a ValueError
    if not isinstance(data, dict):
        raise ValueError(f"not a selection cursor: {data!r}")
    if data.get("format") != FORMAT:
        return Cursor.from_dict(data)  # the format until 2026-12-05: the leads inline
    flat: dict[tuple[str, str], list[int]] = defaultdict(list)
    for field, lead in fields.items():
        tier, _, rest = field.decode().partition("|")
        group, _, owner = rest.rpartition("|")
        flat[(tier, group)] += (int(owner), int(lead))
    try:
        cursor = data["cursor"]
        for name, position in cursor.items():
            for group, by_round in position.get("leads", {}).items():
                pairs = flat.get((name, group), [])
                if len(pairs) != 2 * by_round["count"]:
                    raise ValueError(
                        f"round {name} {group!r}: {len(pairs) // 2} leads in {LEADS_KEY}, {by_round['count']} written"
                    )
                by_round["owners"] = pairs
                del by_round["count"]
    except (KeyError, TypeError, AttributeError) as exc:
        raise ValueError(f"not a selection cursor: {data!r}") from exc
    return Cursor.from_dict(cursor)
