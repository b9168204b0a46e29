"""`select_batch`'s input checks: a misfiled candidate or a bad weight is a bug in the shell, so it
raises ValueError before any pick is made instead of skewing the schedule."""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator.dispatch.selection.values import Candidates


def check_candidates(candidates: Candidates) -> None:
    """Rejects rows filed under the wrong tier or owner and duplicates (shell bugs)."""
    seen: set[int] = set()
    for tier, by_owner in candidates.items():
        for owner_id, rows in by_owner.items():
            for row in rows:
                if row.tier != tier or row.owner_id != owner_id or row.outreach_id in seen:
                    raise ValueError(
                        f"candidate {row} misfiled under tier={tier!r} owner={owner_id} or repeated"
                    )
                seen.add(row.outreach_id)


def checked_groups(
    groups: Mapping[int, str], group_slots: Mapping[str, int]
) -> tuple[Mapping[int, str], Mapping[str, int]]:
    missing = set(groups.values()) - set(group_slots)
    bad = {g: n for g, n in group_slots.items() if not isinstance(n, int) or isinstance(n, bool) or n < 0}
    if missing or bad:
        raise ValueError(f"every group needs group_slots >= 0: missing {sorted(missing)}, bad {bad}")
    return groups, group_slots


def _with_rows(candidates: Candidates) -> set[int]:
    return {o for by_owner in candidates.values() for o, rows in by_owner.items() if rows}


def checked_costs(costs: Mapping[int, int], candidates: Candidates) -> Mapping[int, int]:
    owners = _with_rows(candidates)
    bad = {o: costs.get(o) for o in sorted(owners) if not _positive_int(costs.get(o))}
    if bad:
        raise ValueError(f"costs (tokens per job) must be positive ints for every owner with rows, got {bad}")
    return costs


def _positive_int(value: object) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def checked_weights(weights: Mapping[int, int], candidates: Candidates) -> Mapping[int, int]:
    """The weights the schedule reads, those of the owners with rows (the shell passes every
    active owner's: thousands, most without candidates this cycle); absent ones are 1."""
    bad = {
        o: weights[o]
        for o in sorted(_with_rows(candidates))
        if o in weights and not _positive_int(weights[o])
    }
    if bad:
        raise ValueError(f"owner weights must be positive ints, got {bad}")
    return weights
