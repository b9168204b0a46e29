"""The pipeline's Prometheus counters and histograms, counted where the event happens.

Why PostgreSQL (the MetricCounter and OwnerCounter tables) and not Redis: every figure here is
a state change, and `transition()` adds to the counters in the same transaction as the move. A
move that rolls back or loses its race counts nothing; one that commits is counted exactly
once, by whichever process (web, worker, on any host) made it. The totals survive process
restarts and a Redis flush (Redis holds the budget, which may be rebuilt), and retention never
deletes them, so they only grow, as Prometheus' rate() expects. Two figures are not moves: a
reply's class, which nurture.reply_actions.reply_class_record counts in the transaction that
records it on the row, and the LLM call's duration, added in its own one-statement transaction.

Counters are exposed as `<name>_total`; histograms as `<name>_bucket{le}`, `_sum`, `_count`.
Stored per bucket (not cumulative) with sums in milliseconds (an integer column);
`counters_read()` and orchestrator/metrics/prometheus.py turn them into Prometheus' shape.

Pure core (`move_increments`, `reply_classified`, `observation`) and a small I/O shell
(`counters_add`, `counters_read`).
"""

from __future__ import annotations

import logging
import math
import os
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, NamedTuple

from django.db import DatabaseError, connection, transaction
from django.db.models import Sum
from prometheus_client.utils import floatToGoString

from outreach.models import (
    ErrorClass,
    MetricCounter,
    Outreach,
    OwnerCounter,
    State,
    int_array,
    text_array,
)
from outreach.tiers import Tier

SENT = "outreach_sent"
GENERATED = "outreach_generated"
DEAD_LETTERS = "outreach_dead_letters"
RETRIES = "outreach_retries"
PROVIDER_429S = "outreach_provider_429s"
LLM_REQUESTS = "outreach_llm_requests"
LLM_TOKENS = "outreach_llm_tokens"
# Per owner (label owner_id) and per organization (label organization_id): a member's scrape
# shows those of its organizations (orchestrator.metrics.prometheus).
OWNER_SENT = "outreach_owner_sent"
OWNER_DISPATCHED = "outreach_owner_dispatched"
REPLIES_CLASSIFIED = "outreach_replies_classified"
REPLY_DRAFTS_DECIDED = "outreach_reply_drafts_decided"
COUNTERS = (
    SENT,
    GENERATED,
    DEAD_LETTERS,
    RETRIES,
    PROVIDER_429S,
    LLM_REQUESTS,
    LLM_TOKENS,
    OWNER_SENT,
    OWNER_DISPATCHED,
    REPLIES_CLASSIFIED,
    REPLY_DRAFTS_DECIDED,
)
# An owner's series, stored as the columns of its OwnerCounter rows, not as MetricCounter rows.
OWNER_COLUMNS = {OWNER_DISPATCHED: "dispatched", OWNER_SENT: "sent"}
_OWNER_COLUMN = {name: n for n, name in enumerate(OWNER_COLUMNS)}

COMPLETION_LATENCY = "outreach_completion_latency_seconds"
LLM_CALL_DURATION = "outreach_llm_call_duration_seconds"
# Upper bounds (seconds). Completion: a reply is due in seconds to minutes, a nudge's backlog
# may take hours. A provider call: tenths of a second to a minute.
BUCKETS: dict[str, tuple[float, ...]] = {
    COMPLETION_LATENCY: (5, 15, 30, 60, 120, 300, 600, 1800, 3600, 7200, 21600, 86400),
    LLM_CALL_DURATION: (0.1, 0.25, 0.5, 1, 2, 5, 10, 30, 60),
}
TIER_NAMES = tuple(t.name.lower() for t in Tier)
SHARDS = 8
log = logging.getLogger(__name__)

Labels = tuple[tuple[str, str], ...]


class Increment(NamedTuple):
    """What one event adds to one stored series. A tuple, not a frozen dataclass: a claim of
    500 owners' rows makes one an owner (`moves_increments`), and a frozen dataclass's
    __init__ sets each field through object.__setattr__."""

    name: str  # the stored series: a counter's name, or <histogram>_bucket/_sum_ms/_count
    labels: Labels
    value: int

    def times(self, n: int) -> Increment:
        """What `n` such events add."""
        return Increment(self.name, self.labels, self.value * n)


@dataclass(frozen=True)
class Move:
    """What `transition()` knows about one move; None where the caller did not read it."""

    from_state: str
    to: str
    error_class: str
    tier: int | None = None
    at: datetime | None = None
    due_at: datetime | None = None  # created_at, or not_before when later (activity.py's due)
    approved_at: datetime | None = None
    llm_calls: int = 0
    tokens: int = 0
    owner_id: int | None = None
    kind: str = ""
    reply_class: str = ""
    organization_id: int | None = None  # read only for a reply's decision (reply_decided)


def reply_decided(move: Move) -> bool:
    """A person approved or rejected a triaged reply's draft: counted per organization and class
    (its class when decided). A reply not triaged (no class) is in no series."""
    return (
        move.from_state == State.AWAITING_APPROVAL
        and move.to in (State.APPROVED, State.REJECTED)
        and move.kind == Outreach.Kind.REPLY
        and bool(move.reply_class)
    )


def tier_name(tier: int) -> str:
    return Tier(tier).name.lower()


def move_increments(move: Move) -> list[Increment]:
    """The counters one committed move adds to. The definitions match the window figures of
    orchestrator/metrics/activity.py (completed, generated, retries, 429s, an owner's sent and
    dispatched: its CLAIMED, the dispatcher's claims from QUEUED or APPROVED) and of
    orchestrator/metrics/replies.py (reply drafts approved, rejected), so a rate over 24 h of a
    counter equals the dashboard's window figure."""
    found = [Increment(SENT, (), 1)] if move.to == State.SENT else []
    if move.owner_id is not None:
        owner = (("owner_id", str(move.owner_id)),)
        found += [Increment(name, owner, 1) for name in owner_series(move)]
    if reply_decided(move) and move.organization_id is not None:
        decision = "approved" if move.to == State.APPROVED else "rejected"
        labels = (
            ("organization_id", str(move.organization_id)),
            ("reply_class", move.reply_class),
            ("decision", decision),
        )
        found.append(Increment(REPLY_DRAFTS_DECIDED, labels, 1))
    if move.to == State.DEAD:
        found.append(Increment(DEAD_LETTERS, (("class", move.error_class or "unknown"),), 1))
    if move.error_class == ErrorClass.TRANSIENT:
        found.append(Increment(RETRIES, (), 1))
    if move.error_class == ErrorClass.RATE_LIMITED:
        found.append(Increment(PROVIDER_429S, (), 1))
    generated = move.from_state == State.GENERATING and move.to in (State.AWAITING_APPROVAL, State.DISPATCHED)
    if generated and move.tier is not None:
        found.append(Increment(GENERATED, (("tier", tier_name(move.tier)),), 1))
        found.append(Increment(LLM_REQUESTS, (), move.llm_calls))
        found.append(Increment(LLM_TOKENS, (), move.tokens))
    completed = move.to == State.AWAITING_APPROVAL or (move.to == State.SENT and move.approved_at is None)
    if completed and move.tier is not None and move.at is not None and move.due_at is not None:
        waited = max(0.0, (move.at - min(move.due_at, move.at)).total_seconds())
        found += observation(COMPLETION_LATENCY, (("tier", tier_name(move.tier)),), waited)
    return found


def owner_series(move: Move) -> tuple[str, ...]:
    """The counters per owner (label owner_id) a move of an owner's row adds to."""
    if move.to == State.SENT:
        return (OWNER_SENT,)
    if move.to == State.DISPATCHED and move.from_state in (State.QUEUED, State.APPROVED):
        return (OWNER_DISPATCHED,)
    return ()


# Per owner, what to add to each of OWNER_COLUMNS (in their order): an owner's series kept as
# the columns they are stored in, not as an Increment each.
OwnerAdds = dict[int, list[int]]


def moves_increments(
    moved: Mapping[tuple[str, int | None], int], *, to: str, error_class: str
) -> tuple[list[Increment], OwnerAdds]:
    """What bulk moves to `to` add: `moved` counts the rows of each (from state, owner id).
    Rows of one from state make the same move but for their owner, so `move_increments` is
    worked out once per from state, times its rows, and the owner's series (`owner_series`)
    once per from state too, added to each owner's columns: a claim of 500 rows of 500 owners
    built a Move and its increments per owner, 2.46 ms, 0.56 ms with an Increment per owner
    (both alternating in one process, medians of 30, 2026-12-06; docs/dispatch.md, "The claim's
    counts per from-state, and the collector's young generation"), and that Increment's label
    written as text and read back as an int again: the claim's counting in Python 1.0 -> 0.4 ms
    for 500 owners this way (timeit, the two codes on a slow evening, 2026-12-08)."""
    rows: Counter[str] = Counter()
    for (state, _), n in moved.items():
        rows[state] += n
    found: list[Increment] = []
    columns: dict[str, list[int]] = {}
    for state, n in rows.items():
        move = Move(from_state=state, to=to, error_class=error_class)
        found += [inc.times(n) for inc in move_increments(move)]
        columns[state] = [_OWNER_COLUMN[name] for name in owner_series(move)]
    owners: OwnerAdds = {}
    for (state, owner_id), n in moved.items():
        if owner_id is not None and (of_state := columns[state]):
            adds = owners.get(owner_id) or owners.setdefault(owner_id, [0] * len(OWNER_COLUMNS))
            for column in of_state:
                adds[column] += n
    return found, owners


def reply_classified(*, organization_id: int, reply_class: str, by: str) -> list[Increment]:
    """A reply's class decided (by the rules at intake, the model's triage call, or a person
    reclassifying it, who is `by`): one count under that class. A person's reclassification
    counts once more, under the new class (the first count stays: counters only grow), so
    replies received per class are the rules' and the model's counts, and `by="person"` counts
    the corrections."""
    labels = (("organization_id", str(organization_id)), ("reply_class", reply_class), ("by", by))
    return [Increment(REPLIES_CLASSIFIED, labels, 1)]


def observation(histogram: str, labels: Labels, seconds: float) -> list[Increment]:
    """One observation: its bucket (the smallest bound it fits, else +Inf), sum and count."""
    bound = next((b for b in BUCKETS[histogram] if seconds <= b), math.inf)
    return [
        Increment(f"{histogram}_bucket", (*labels, ("le", _bound(bound))), 1),
        Increment(f"{histogram}_sum_ms", labels, round(seconds * 1000)),
        Increment(f"{histogram}_count", labels, 1),
    ]


def _bound(bound: float) -> str:
    """As Prometheus clients write `le`: 30.0, 0.25, +Inf (prometheus_client.utils.floatToGoString)."""
    return floatToGoString(bound)


def _labels_text(labels: Labels) -> str:
    if len(labels) == 1:  # most series (an owner's: hundreds a claim)
        ((key, value),) = labels
        return f"{key}={value}"
    return ",".join(f"{k}={v}" for k, v in sorted(labels))


def _labels_parse(text: str) -> Labels:
    return tuple(tuple(pair.split("=", 1)) for pair in text.split(",") if pair)  # type: ignore[misc]


def counters_add(
    increments: Iterable[Increment], *, owners: Mapping[int, Sequence[int]] | None = None
) -> None:
    """Add to the counters in one statement (an upsert per series), inside the caller's
    transaction if there is one (one statement is atomic on its own: no savepoint, which
    would cost two more round trips a move). An owner's series are added to its OwnerCounter
    row (`OWNER_COLUMNS`): those among `increments`, and `owners`' (`OwnerAdds`, as
    `moves_increments` gives them); the others to MetricCounter's. On PostgreSQL both upserts
    are one statement (the second in a WITH). Rows are locked in one order, owners' then the
    others', each sorted, so two transactions adding to the same series cannot deadlock each
    other."""
    merged: dict[tuple[str, str], int] = defaultdict(int)
    per_owner: OwnerAdds = {o: list(adds) for o, adds in (owners or {}).items()}
    for inc in increments:
        if not inc.value:
            continue
        column = _OWNER_COLUMN.get(inc.name)
        if column is None:
            merged[(inc.name, _labels_text(inc.labels))] += inc.value
        else:
            ((_, owner_id),) = inc.labels  # owner_id, the one label of an owner's series
            per_owner.setdefault(int(owner_id), [0] * len(OWNER_COLUMNS))[column] += inc.value
    shard = os.getpid() % SHARDS
    statements = [
        _upsert(
            OwnerCounter,
            shard,
            keys={"owner_id": "bigint"},
            adds=[*OWNER_COLUMNS.values()],
            rows=[(owner_id, *per_owner[owner_id]) for owner_id in sorted(per_owner)],
        ),
        _upsert(
            MetricCounter,
            shard,
            keys={"name": "text", "labels": "text"},
            adds=["value"],
            rows=[(name, labels, value) for (name, labels), value in sorted(merged.items())],
        ),
    ]
    statements = [(sql, params) for sql, params in statements if params]
    if not statements:
        return
    with connection.cursor() as cursor:
        if len(statements) == 1:
            cursor.execute(*statements[0])
        elif connection.vendor == "postgresql":
            # PostgreSQL runs a WITH's statement that nothing reads after the main one, to its
            # end (ExecPostprocessPlan): every transaction locks owners' rows, then the others'.
            (owner_sql, owner_params), (series_sql, series_params) = statements
            cursor.execute(f"WITH series AS ({series_sql}) {owner_sql}", [*series_params, *owner_params])
        else:
            with transaction.atomic(using=connection.alias):
                for sql, params in statements:
                    cursor.execute(sql, params)


def _upsert(
    model: type[MetricCounter | OwnerCounter],
    shard: int,
    *,
    keys: Mapping[str, str],
    adds: Sequence[str],
    rows: Sequence[tuple[Any, ...]],
) -> tuple[str, list[Any]]:
    """The upsert adding `rows` to `model`'s rows in `shard`: each row the values of `keys`
    (column: its PostgreSQL type) then of `adds` (bigint columns added to), sorted by keys.
    No params when there are no rows."""
    if not rows:
        return "", []
    table = model._meta.db_table
    if connection.vendor == "postgresql":
        # An array per column, not a VALUES row each: psycopg splits and binds every placeholder
        # in Python (a claim of 500 picks adds to 500 owners' rows). Each array as its literal
        # (lookups.int_array, text_array), not quoted element by element.
        types = [*keys.values(), *["bigint"] * len(adds)]
        source = "SELECT * FROM unnest(" + ", ".join(f"%s::{t}[]" for t in types) + ")"
        params = [
            (text_array if t == "text" else int_array)(row[n] for row in rows) for n, t in enumerate(types)
        ]
    else:
        source = "VALUES " + ", ".join(["(" + ", ".join(["%s"] * len(rows[0])) + ")"] * len(rows))
        params = [value for row in rows for value in row]
    sets = ", ".join(f"{c} = {table}.{c} + EXCLUDED.{c}" for c in adds)
    # WHERE true: SQLite's parser would read the ON CONFLICT as a join's ON without it
    sql = (
        f"INSERT INTO {table} (shard, {', '.join([*keys, *adds])}) SELECT %s, s.* FROM ({source}) AS s "
        f"WHERE true ON CONFLICT ({', '.join(keys)}, shard) DO UPDATE SET {sets}"
    )
    return sql, [shard, *params]


def call_durations_record(calls: Iterable[tuple[str, float]]) -> None:
    """A job's LLM call durations, (step, seconds) each, in one statement (the generation
    worker, with its outcome, outside any transaction). Never fails the job: a lost sample is a
    gap in a histogram, not a reason to pay again."""
    try:
        counters_add(
            inc
            for step, seconds in calls
            for inc in observation(LLM_CALL_DURATION, (("step", step),), seconds)
        )
    except DatabaseError as exc:
        log.warning("LLM call durations not counted", extra={"error": str(exc)})


def counters_read() -> dict[str, dict[Labels, int]]:
    """Every stored series summed over its shards: {name: {labels: value}}. An owner's series
    are read from OwnerCounter (those an owner never added to are not there: a 0 counted
    nothing), added to any MetricCounter still holds of them (written by a process of the code
    before migration 0033, while both ran)."""
    totals: dict[str, dict[Labels, int]] = defaultdict(dict)
    rows = MetricCounter.objects.values("name", "labels").annotate(total=Sum("value")).order_by()
    for row in rows:
        totals[row["name"]][_labels_parse(row["labels"])] = row["total"]
    sums = {name: Sum(column) for name, column in OWNER_COLUMNS.items()}
    for row in OwnerCounter.objects.values("owner_id").annotate(**sums).order_by():
        owner = (("owner_id", str(row["owner_id"])),)
        for name in OWNER_COLUMNS:
            if value := row[name]:
                totals[name][owner] = totals[name].get(owner, 0) + value
    return totals


def histogram_series(
    stored: Mapping[str, Mapping[Labels, int]], *, histogram: str, label: str, values: Sequence[str]
) -> dict[str, tuple[list[tuple[str, int]], float, int]]:
    """Per label value: (cumulative buckets [(le, count)], sum in seconds, count); zeros for a
    value never observed, so every series exists from the start (rate() needs its first 0)."""
    buckets = stored.get(f"{histogram}_bucket", {})
    sums = stored.get(f"{histogram}_sum_ms", {})
    counts = stored.get(f"{histogram}_count", {})
    result = {}
    for value in values:
        running, cumulative = 0, []
        for bound in (*BUCKETS[histogram], math.inf):
            le = _bound(bound)
            running += buckets.get(tuple(sorted(((label, value), ("le", le)))), 0)
            cumulative.append((le, running))
        key = ((label, value),)
        result[value] = (cumulative, sums.get(key, 0) / 1000, counts.get(key, 0))
    return result
