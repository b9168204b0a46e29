"""Dispatch-time admission: reserve budget before work starts, settle or refund it after.

A reservation is a record with an expiry. `settle` and `refund` remove it atomically, so each
happens at most once. One never settled expires: it stops counting as in flight and gives
nothing back, since its calls may have reached the provider (counting it spent is the safe
side; the bucket refills anyway). A settle or refund after expiry is a no-op returning False.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from orchestrator.budget import maths
from orchestrator.budget.core import KINDS, BudgetCore, BudgetUnavailable, Plan, ScriptCall
from orchestrator.budget.values import PROVIDER, Denied, Draw, Headroom, Reservation

UNMETERED = "unmetered:"


def reservation_scopes(reservation_id: str) -> tuple[str, ...]:
    """The scopes a reservation was made in: its id ends with them ("...@provider,org:7").
    An unmetered (fail-open) or empty id names none: the provider's."""
    _, at, tail = reservation_id.rpartition("@")
    return tuple(tail.split(",")) if at and not reservation_id.startswith(UNMETERED) else (PROVIDER,)


def reservation_ids(joined: str) -> list[str]:
    """The reservations one job holds: one per deployment its steps use, kept space-separated
    on the outreach (ids never contain spaces: SCOPE_RE)."""
    return joined.split()


class Reservations(BudgetCore):
    def reserve(
        self, *, requests: int, tokens: int, scopes: Sequence[str] = (PROVIDER,)
    ) -> Reservation | Denied:
        """Reserve budget for one unit of work in every scope, or in none."""
        (outcome,) = self.reserve_jobs([[Draw(tuple(scopes), requests, tokens)]])
        return outcome[0] if isinstance(outcome, list) else outcome

    def reserve_many(
        self, *, count: int, requests_each: int, tokens_each: int, scopes: Sequence[str] = (PROVIDER,)
    ) -> list[Reservation]:
        """Reserve up to `count` equal reservations in one round trip; returns those granted
        (`reserve_in_order`'s equal-size case)."""
        return self.reserve_in_order(
            requests_each=requests_each, tokens=[tokens_each] * count, scopes=scopes
        )[0]

    def reserve_in_order(
        self, *, requests_each: int, tokens: Sequence[int], scopes: Sequence[str] = (PROVIDER,)
    ) -> tuple[list[Reservation], Denied | None]:
        """One reservation per job, `tokens[i]` for the i-th, in one round trip: the longest run
        of them, in order, that every scope fits; and what stopped it short (None when all were
        granted). Jobs of different sizes need not be reserved one call each."""
        if not tokens:
            raise ValueError("bad reservation: count=0")
        granted: list[Reservation] = []
        for outcome in self.reserve_jobs([[Draw(tuple(scopes), requests_each, each)] for each in tokens]):
            if isinstance(outcome, Denied):
                return granted, outcome  # every later job draws from the scope that refused
            granted += outcome
        return granted, None

    def reserve_jobs(self, jobs: Sequence[Sequence[Draw]]) -> list[list[Reservation] | Denied]:
        """Each job's draws, all or none, in order, in one round trip: a job gets a reservation
        per draw when every scope its draws name fits them all. A scope that cannot fit a job
        refuses every later job drawing from it (a cheap job must not take the room a costlier
        one earlier in the schedule waits for); jobs in other scopes go on. Returns, per job,
        its reservations (one per draw, in order) or what refused it.

        A dispatch cycle's picks are jobs of many organizations interleaved, each drawing from
        the deployments its route calls and its organization's cap: one call for all of them,
        not one per run of a deployment and organization (docs/budget.md)."""
        if not jobs:
            return []
        scopes: dict[str, int] = {}  # scope -> its index in KEYS (from 1)
        sets: dict[tuple[str, ...], tuple[bytes, Plan]] = {}  # set of scopes -> b"<index>:", plan
        encoded = []
        for job in jobs:
            if len(job) != 1 and (not job or len({draw.scopes for draw in job}) != len(job)):
                raise ValueError(f"a job draws once from each set of scopes, at least once: {job!r}")
            draws = []
            for draw in job:
                known = sets.get(draw.scopes)
                if known is None:
                    known = sets[draw.scopes] = (b"%d:" % (len(sets) + 1), self.plan(draw.scopes))
                    for scope in draw.scopes:
                        scopes.setdefault(scope, len(scopes) + 1)
                self._check_size(draw, plan=known[1])
                draws.append(known[0] + b"%d:%d" % (draw.requests, draw.tokens))
            encoded.append(draws[0] if len(draws) == 1 else b";".join(draws))
        # Ids carry their scopes, so settle() can name every key its script touches.
        head, ttl = os.urandom(6).hex() + ".", self.reservation_ttl_ms
        tails = {named: "@" + ",".join(named) for named in sets}
        keys, args = [self.key("res").encode(), self.key("res", "exp").encode()], []
        for scope in scopes:
            plan = self.plan((scope,))
            keys += plan.keys[2:]
            args += plan.args
        try:
            now, stops, refusals = self.run(
                "RESERVE",
                keys,
                [
                    self.now_arg(),
                    ttl,
                    head,
                    self.adaptive.interval_ms,
                    len(sets),
                    *(a for named in sets for a in (".".join(str(scopes[s]) for s in named), tails[named])),
                    *args,
                    b",".join(encoded),
                ],
            )
        except BudgetUnavailable:
            return self._reserve_unavailable(jobs)
        names = list(scopes)
        denials = {
            i: Denied(wait_ms=refusals[2 * i - 1], bucket=f"{names[i - 1]}:{KINDS[refusals[2 * i - 2]]}")
            for i in set(stops) - {0}
        }
        expires = now + ttl
        outcomes: list[list[Reservation] | Denied] = []
        for k, (job, stop) in enumerate(zip(jobs, stops, strict=True), 1):
            if stop:
                outcomes.append(denials[stop])
            elif len(job) == 1:  # the usual job: one deployment
                (draw,) = job
                outcomes.append(
                    [Reservation(f"{head}{k}{tails[draw.scopes]}", draw.requests, draw.tokens, ttl, expires)]
                )
            else:
                outcomes.append(
                    [
                        Reservation(f"{head}{k}{tails[d.scopes]}", d.requests, d.tokens, ttl, expires)
                        for d in job
                    ]
                )
        return outcomes

    def largest_tokens(self, *, scopes: Sequence[str] = (PROVIDER,)) -> int:
        """The most tokens one reservation can ever hold in these scopes (their smallest
        bucket): a larger estimate is reserved at this and settled at what it really used."""
        return int(self.plan(tuple(scopes)).capacity[1] // maths.UNITS)

    def largest_requests(self, *, scopes: Sequence[str] = (PROVIDER,)) -> int:
        """The most requests one reservation can ever hold in these scopes: a reply's extra
        triage call beyond a small cap's burst is reserved at this and settled at its calls."""
        return int(self.plan(tuple(scopes)).capacity[0] // maths.UNITS)

    @staticmethod
    def _check_size(draw: Draw, *, plan: Plan) -> None:
        requests, tokens = draw.requests, draw.tokens
        if requests < 0 or tokens < 0 or requests + tokens == 0:
            raise ValueError(f"bad reservation: requests={requests} tokens={tokens} in {draw.scopes}")
        cap_r, cap_t = plan.capacity
        if requests * maths.UNITS > cap_r or tokens * maths.UNITS > cap_t:
            raise ValueError(
                f"{requests} requests / {tokens} tokens can never fit these scopes (capacity "
                f"{cap_r / maths.UNITS:g} / {cap_t / maths.UNITS:g}): raise their burst_ms"
            )

    def _reserve_unavailable(self, jobs: Sequence[Sequence[Draw]]) -> list[list[Reservation] | Denied]:
        if self.failure_policy == "closed":
            denied = Denied(wait_ms=self.unavailable_wait_ms(), bucket="redis")
            return [denied for _ in jobs]
        return [
            [
                Reservation(
                    id=UNMETERED + os.urandom(8).hex(),
                    requests=draw.requests,
                    tokens=draw.tokens,
                    ttl_ms=0,
                    expires_at_ms=0,
                    unmetered=True,
                )
                for draw in job
            ]
            for job in jobs
        ]

    def settle(
        self,
        *,
        reservation_id: str,
        actual_tokens: int,
        actual_requests: int | None = None,
        also: Sequence[ScriptCall] = (),
    ) -> bool:
        """Work done: give back the unused token estimate, or charge the excess. Requests are
        kept unless `actual_requests` says fewer calls were made. False if the reservation is
        unknown, expired, unmetered or already settled or refunded. `also`: advisory calls
        (the job's last answer's report) sent in the same round trip."""
        used_requests: int | str = "" if actual_requests is None else actual_requests
        return self._settle(reservation_id, refund=False, used=(used_requests, actual_tokens), also=also)

    def refund(self, *, reservation_id: str, also: Sequence[ScriptCall] = ()) -> bool:
        """Work failed before its calls were made: give all of it back. At most once."""
        return self._settle(reservation_id, refund=True, used=("", 0), also=also)

    def _settle(
        self, reservation_id: str, *, refund: bool, used: tuple[int | str, int], also: Sequence[ScriptCall]
    ) -> bool:
        if reservation_id.startswith(UNMETERED):
            self.also_run(also)
            return False
        try:
            plan = self.plan(reservation_scopes(reservation_id))
        except ValueError:
            self.also_run(also)
            return False
        args = [self.now_arg(), reservation_id, int(refund), *used, self.adaptive.interval_ms, *plan.args]
        try:
            return bool(self.run("SETTLE", plan.keys, args, also=also) == 1)
        except BudgetUnavailable:
            return False

    def headroom(self, *, scopes: Sequence[str] = (PROVIDER,)) -> Headroom:
        """Budget available now across `scopes` (the tightest), with the current adapted rates."""
        return self.headrooms([scopes])[0]

    def headrooms(self, scope_sets: Sequence[Sequence[str]]) -> list[Headroom]:
        """`headroom` of each set of scopes, in order, in one script call: a dispatch cycle
        reads the room of every capped organization it judges (hundreds on a platform)."""
        plans = [self.plan(tuple(scopes)) for scopes in scope_sets]
        if not plans:
            return []
        keys = [key for plan in plans for key in plan.keys[2:]]
        args = [
            self.now_arg(),
            self.adaptive.interval_ms,
            len(plans),
            *(len(scopes) for scopes in scope_sets),
            *(arg for plan in plans for arg in plan.args),
        ]
        try:
            rooms = self.run("HEADROOM", keys, args)
        except BudgetUnavailable:
            return [self._headroom_unavailable(tuple(scopes)) for scopes in scope_sets]
        return [
            Headroom(r / maths.UNITS, t / maths.UNITS, rate_r, rate_t, lim_r, lim_t, blocked_ms=blocked)
            for r, t, rate_r, rate_t, lim_r, lim_t, blocked, _ in rooms
        ]

    def _headroom_unavailable(self, scopes: tuple[str, ...]) -> Headroom:
        if self.failure_policy == "closed":
            return Headroom(0.0, 0.0, 0, 0, 0, 0, blocked_ms=self.unavailable_wait_ms())
        # Fail open but paced: each look offers one full bucket, what a dispatch cycle would get.
        limits = [self.limits_for(scope) for scope in scopes]
        return Headroom(
            min(lim.capacities()[0] for lim in limits) / maths.UNITS,
            min(lim.capacities()[1] for lim in limits) / maths.UNITS,
            min(lim.rates()[0] for lim in limits),
            min(lim.rates()[1] for lim in limits),
            min(lim.rpm for lim in limits),
            min(lim.tpm for lim in limits),
            unmetered=True,
        )
