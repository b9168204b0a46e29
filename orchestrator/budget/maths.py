"""Budget maths: pure integer functions shared by the Redis client and the tests' reference model.

Units. Bucket levels are kept in *units* of 1/60000 of a request (or token). A limit of L per
minute is then exactly L units per millisecond, so refill is integer arithmetic with no drift
and no rounding, and Lua (whose numbers are doubles, exact up to 2**53) agrees with Python.

Window bound. A provider counting over any sliding 60 s window refuses the request that would
take its count over L. A token bucket of rate r and capacity b admits at most b + r * 60 s in
any 60 s window, so it never trips such a provider iff  r * 60 s + b <= L.
With the capacity expressed as `burst_ms` of refill (b = r * burst_ms), strict mode solves
r = floor(L * 60000 / (60000 + burst_ms)): the bucket alone keeps every window under L, at a
cost of burst_ms / (60000 + burst_ms) of throughput (2 s of burst: 3.2%). The dispatcher
drains the bucket once per cycle, so burst_ms must be at least the dispatch interval or the
refill between cycles overflows and is lost. Non-strict ("paced") mode refills at the rate the
call pacer can pass, r = L * 60000 / (60000 + margin_ms), and relies on `Budget.acquire_call`
(a log mirroring the provider's window, widened by margin_ms for arrival jitter) to hold each
call until the window has room: the bucket then over-admits by at most one burst, which the
pacer absorbs as a short wait. (Refilling at the full L would feed the pacer faster than it
can pass calls: a queue of waiting calls that grows without end.)
"""

from __future__ import annotations

import math
from typing import Final

WINDOW_MS: Final = 60_000
UNITS: Final = 60_000  # units per request or token: a limit of L/min refills L units per ms


def bucket_rate(*, limit: int, burst_ms: int, strict: bool, margin_ms: int = 0) -> int:
    """Refill rate in units per ms (equivalently: amounts per minute) for a window limit."""
    return limit * WINDOW_MS // (WINDOW_MS + (burst_ms if strict else margin_ms))


def bucket_capacity(*, limit: int, burst_ms: int, strict: bool, margin_ms: int = 0) -> int:
    """Capacity in units: burst_ms of refill at the configured (not the adapted) rate."""
    return bucket_rate(limit=limit, burst_ms=burst_ms, strict=strict, margin_ms=margin_ms) * burst_ms


def window_bound(*, limit: int, burst_ms: int, strict: bool, margin_ms: int = 0) -> float:
    """Most the bucket alone can admit in any 60 s window (amounts): b + r * 60 s."""
    rate = bucket_rate(limit=limit, burst_ms=burst_ms, strict=strict, margin_ms=margin_ms)
    return (rate * burst_ms + rate * WINDOW_MS) / UNITS


# Dispatch cycles of refill a paced token bucket holds on top of the costliest job (requests,
# and strict buckets, hold one). The dispatcher skips cycles whenever its in-flight target is
# full or the next pick does not fit, and refill past a full bucket is lost: holding one cycle,
# a token-bound key beside another client taking 30% of it used 95.3-96.9% of what the client
# left; holding five, 98.0% (bench/tokens_binding.py --foreign-share 0.3, 2026-11-27).
# Not requests: a key binding on requests then released five cycles of calls at once, bunched
# past the pacer's margin (bench/latency.py --rpm 3000: 94.6% of the key, 11 answered 429).
PACED_TOKEN_CYCLES: Final = 5


def burst_for_cycle(*, limit: int, amount: int, interval_ms: int, strict: bool, margin_ms: int = 0) -> int:
    """Smallest burst_ms whose bucket holds one dispatch cycle's refill plus one reservation.

    A dispatcher drawing whole reservations of `amount` once per interval leaves less than one
    reservation behind; the bucket must then take a full cycle's refill on top of that without
    overflowing, or refill is lost every cycle (with 3-request reservations and a bucket of
    exactly one cycle's 10 requests: 9 taken, 1 left, 1 lost: 90% of the rate).
    """
    burst_ms = max(1, interval_ms)
    while True:
        rate = bucket_rate(limit=limit, burst_ms=burst_ms, strict=strict, margin_ms=margin_ms)
        missing = amount * UNITS - rate * (burst_ms - interval_ms)
        if missing <= 0:
            return burst_ms
        if rate == 0 or burst_ms > 10 * WINDOW_MS:  # strict capacity tends to L: some never fit
            raise ValueError(f"a reservation of {amount} cannot fit a bucket for a limit of {limit}/min")
        burst_ms += -(-missing // rate)


def refill(*, level: int, elapsed_ms: int, rate: int, capacity: int) -> int:
    """Level after `elapsed_ms` of continuous refill, never above capacity (may start negative)."""
    return min(capacity, level + max(0, elapsed_ms) * rate)


def wait_ms(*, deficit: int, rate: int) -> int:
    """Whole milliseconds until `deficit` units have refilled (rounded up)."""
    if deficit <= 0:
        return 0
    return -(-deficit // rate) if rate > 0 else WINDOW_MS


def adapted_limit(
    *, configured: int, base: int | None, cut_ms: int, now_ms: int, step: int, interval_ms: int
) -> int:
    """AIMD: after a cut to `base` at `cut_ms`, the limit regains `step` per whole interval."""
    if base is None:
        return configured
    recovered = base + max(0, now_ms - cut_ms) // interval_ms * step
    return min(configured, recovered)


def send_bucket(*, limit: int, window_ms: int, margin_ms: int = 0) -> tuple[int, int]:
    """Refill rate (units per ms) and burst (ms) of a strict one-message bucket that never
    reserves more than `limit` messages in any `window_ms + margin_ms` (the email provider's
    per-second or per-minute limit, widened by the margin).

    A bucket of rate r and capacity b admits at most b + r * W in any window W, so strictness
    is r * (W + burst) <= limit. The capacity must still hold one message (r * burst >= one),
    so burst >= W / (limit - 1): the smallest such burst gives the fastest strict rate,
    about limit - 1 per window (20/s runs at 18.98/s; 600/min at 598.99/min). One message of
    burst also spaces the reservations evenly: the provider sees a steady stream, not a clump.

    The provider counts a message when it arrives, 0.1-1 s after its reservation (claim, SMTP
    session), and those delays differ: as for the LLM pacer (docs/budget.md), if every window
    of W + margin holds at most `limit` reservations, every window W of arrivals does too as
    long as the delays spread by no more than the margin. (Without one, 20/s gave 21 arrivals
    in one second of bench/send_burst.py on a loaded machine.)
    """
    if limit < 2:
        raise ValueError(f"a send rate of {limit} per {window_ms} ms cannot be kept strictly: use 2 or more")
    window = window_ms + margin_ms
    burst_ms = math.ceil(window / (limit - 1))
    while True:
        rate = limit * UNITS // (window + burst_ms)  # floor: never above the strict rate
        if rate * burst_ms >= UNITS:
            return rate, burst_ms
        burst_ms += 1  # the floor left the bucket a hair short of one message
