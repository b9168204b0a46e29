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
from orchestrator.budget.values import PROVIDER, Denied, Headroom, Reservation

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
        granted, denied = self._reserve(requests=requests, tokens=[tokens], scopes=tuple(scopes))
        if granted:
            return granted[0]
        assert denied is not None
        return denied

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
        return self._reserve(requests=requests_each, tokens=list(tokens), scopes=tuple(scopes))

    def _reserve(
        self, *, requests: int, tokens: list[int], scopes: tuple[str, ...]
    ) -> tuple[list[Reservation], Denied | None]:
        plan = self.plan(scopes)
        count = len(tokens)
        self._check_size(count=count, requests=requests, tokens=tokens, plan=plan)
        # Ids carry their scopes, so settle() can name every key its script touches.
        head, tail, ttl = os.urandom(6).hex() + ".", "@" + ",".join(scopes), self.reservation_ttl_ms
        args = [
            self.now_arg(),
            count,
            requests,
            # One figure for every job when they are equal (the usual batch), else one each.
            tokens[0] if len(set(tokens)) == 1 else ",".join(map(str, tokens)),
            ttl,
            head,
            tail,
            self.adaptive.interval_ms,
            *plan.args,
        ]
        try:
            granted, wait, scope_index, kind, now = self.run("RESERVE", plan.keys, args)
        except BudgetUnavailable:
            return self._reserve_unavailable(requests=requests, tokens=tokens)
        reservations = [
            Reservation(
                id=f"{head}{i}{tail}",
                requests=requests,
                tokens=tokens[i - 1],
                ttl_ms=ttl,
                expires_at_ms=now + ttl,
            )
            for i in range(1, granted + 1)
        ]
        if granted == count:
            return reservations, None
        return reservations, Denied(wait_ms=wait, bucket=f"{scopes[scope_index - 1]}:{KINDS[kind]}")

    def largest_tokens(self, *, scopes: Sequence[str] = (PROVIDER,)) -> int:
        """The most tokens one reservation can ever hold in these scopes (their smallest
        bucket): a larger estimate is reserved at this and settled at what it really used."""
        return int(self.plan(tuple(scopes)).capacity[1] // maths.UNITS)

    def largest_requests(self, *, scopes: Sequence[str] = (PROVIDER,)) -> int:
        """The most requests one reservation can ever hold in these scopes: a reply's extra
        triage call beyond a small cap's burst is reserved at this and settled at its calls."""
        return int(self.plan(tuple(scopes)).capacity[0] // maths.UNITS)

    @staticmethod
    def _check_size(*, count: int, requests: int, tokens: list[int], plan: Plan) -> None:
        least, most = (min(tokens), max(tokens)) if tokens else (0, 0)
        if count < 1 or requests < 0 or least < 0 or requests + least == 0:
            raise ValueError(f"bad reservation: count={count} requests={requests} tokens={least}")
        cap_r, cap_t = plan.capacity
        if requests * maths.UNITS > cap_r or most * maths.UNITS > cap_t:
            raise ValueError(
                f"{requests} requests / {most} tokens can never fit these scopes (capacity "
                f"{cap_r / maths.UNITS:g} / {cap_t / maths.UNITS:g}): raise their burst_ms"
            )

    def _reserve_unavailable(
        self, *, requests: int, tokens: list[int]
    ) -> tuple[list[Reservation], Denied | None]:
        if self.failure_policy == "closed":
            return [], Denied(wait_ms=self.unavailable_wait_ms(), bucket="redis")
        return [
            Reservation(
                id=UNMETERED + os.urandom(8).hex(),
                requests=requests,
                tokens=each,
                ttl_ms=0,
                expires_at_ms=0,
                unmetered=True,
            )
            for each in tokens
        ], None

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
