"""Call-time pacing and adaptation: the provider's view of the shared key.

The dispatcher reserves at dispatch, but the provider counts a call when it arrives, 0.5-20 s
later, and calls from different reservations can bunch up. So every provider call first asks
`acquire_call`, which checks a log of our calls over the provider's sliding 60 s window (plus a
margin for arrival jitter: the measured spread plus a floor, at most `Limits.margin_ms`) and
either logs the call or says how long until the window has room: the provider never sees more
than its limit from us in any window. The log
is kept a minute longer than that, so that a provider report arriving up to a minute after its
call can still count our calls in the window it describes.

Other systems may share the key. Provider headers say how much of the window is left; what the
window held beyond our own calls is theirs, and our limit follows the configured one less
that, up or down, at every answer (a 429 meanwhile widens a safety gap). Without such headers
a 429 blocks calls for Retry-After, and halves the limit (once per interval) if we were sending
near it: a 429 that comes while we send little, as through a provider outage, is not about our
share. Limits then recover additively, `Adaptive.step_fraction` per interval. All of it lives
in Redis: the next reserve, headroom or acquire_call sees it. Each answer is also one sample
of the spread that sizes the margin (`Spread`, docs/budget.md).
"""

from __future__ import annotations

import contextlib
import json
import time
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from orchestrator.budget.core import KINDS, BudgetCore, BudgetUnavailable, ScriptCall
from orchestrator.budget.values import PROVIDER, CallSlot, Limits, ProviderReport


class Pacing(BudgetCore):
    def acquire_call(
        self, *, tokens: int, scopes: Sequence[str] = (PROVIDER,), also: Sequence[ScriptCall] = ()
    ) -> CallSlot:
        """Log one provider call of `tokens` (prompt + max output) now, or say how long to wait.

        The LLM client calls this right before each HTTP call: sleep `wait_ms` and ask again
        when it is short, re-queue the job when it is long. Never raises on Redis failure.
        `also`: the job's previous answer's report (`report_call`), sent first in the same
        round trip, so this call's limits already follow it.
        """
        keys: list[str] = []
        args: list[Any] = [self.now_arg(), tokens, self.adaptive.interval_ms]
        for scope in scopes:
            limits = self.limits_for(scope)
            if not 0 <= tokens <= limits.tpm:
                raise ValueError(
                    f"a call of {tokens} tokens can never fit scope {scope!r} ({limits.tpm}/min)"
                )
            keys += self._call_log_keys(scope)
            step = self.adaptive.step
            args += [
                limits.rpm,
                limits.tpm,
                step(limits.rpm),
                step(limits.tpm),
                limits.margin_floor_ms,
                limits.margin_ms,
            ]
        try:
            wait, scope_index, kind, now = self.run("ACQUIRE_CALL", keys, args, also=also)
        except BudgetUnavailable:
            if self.failure_policy == "closed":
                return CallSlot(wait_ms=self.unavailable_wait_ms(), bucket="redis")
            return CallSlot(wait_ms=0, unmetered=True)
        if wait:
            return CallSlot(wait_ms=wait, bucket=f"{scopes[scope_index - 1]}:{KINDS[kind]}")
        return CallSlot(wait_ms=0, at_ms=now)

    def report_provider(
        self,
        *,
        remaining_requests: int | None,
        remaining_tokens: int | None,
        reset_requests_s: float | None = None,
        reset_tokens_s: float | None = None,
        sent_at_ms: int | None = None,
        processing_ms: int | None = None,
        scope: str = PROVIDER,
    ) -> None:
        """Feed the provider's x-ratelimit-remaining-* (and reset) headers of one response now.

        `sent_at_ms` is the `CallSlot.at_ms` of that call: the remaining counts describe the
        window ending then, and the time from it to this report, less `processing_ms` (the
        provider's `openai-processing-ms`, if it says), is one sample of the spread that sizes
        the pacer's margin. Reset times are recorded for visibility only: under a sliding
        window the room comes back call by call, and blocking until a full reset would waste
        the window whenever we run at the limit (remaining 0 is then normal). A worker sends
        its reports with its next budget call instead (`report_call`).
        """
        report = ProviderReport(
            remaining_requests=remaining_requests,
            remaining_tokens=remaining_tokens,
            reset_requests_s=reset_requests_s,
            reset_tokens_s=reset_tokens_s,
            sent_at_ms=sent_at_ms,
            processing_ms=processing_ms,
            scope=scope,
        )
        call = self.report_call(report)
        with contextlib.suppress(BudgetUnavailable):  # advisory: the pacer and the buckets still hold
            self.run(call.name, call.keys, call.args)

    def report_call(self, report: ProviderReport) -> ScriptCall:
        """The REPORT script call for `report`, to run now or with another budget call (`also=`)."""
        limits = self.limits_for(report.scope)
        a = self.adaptive
        headers = json.dumps(
            {
                "remaining_requests": report.remaining_requests,
                "remaining_tokens": report.remaining_tokens,
                "reset_requests_s": report.reset_requests_s,
                "reset_tokens_s": report.reset_tokens_s,
                "sent_at_ms": report.sent_at_ms,
            }
        )
        late_ms = (
            0 if report.answered_s is None else max(0, int((time.monotonic() - report.answered_s) * 1000))
        )
        args = [
            self.now_arg(),
            "" if report.sent_at_ms is None else report.sent_at_ms,
            "" if report.remaining_requests is None else report.remaining_requests,
            "" if report.remaining_tokens is None else report.remaining_tokens,
            *self._adaptation_args(limits),
            a.tolerance(limits.rpm),
            a.tolerance(limits.tpm),
            headers,
            a.release(limits.rpm),
            a.release(limits.tpm),
            "" if report.processing_ms is None else max(0, int(report.processing_ms)),
            self.spread.samples,
            self.spread.min_samples,
            self.spread.quantile,
            self.spread.factor,
            late_ms,
        ]
        return ScriptCall(
            "REPORT", [*self._call_log_keys(report.scope), self.key("spread", report.scope)], args
        )

    def report_429(
        self,
        *,
        retry_after_s: float | None = None,
        sent_at_ms: int | None = None,
        tokens: int | None = None,
        scope: str = PROVIDER,
    ) -> None:
        """The provider refused a call: hold calls for Retry-After (default 1 s). While its answers
        carry remaining counts, widen the safety gap under them; otherwise cut the limits if our
        own calls of the last interval were near them (`Adaptive.busy_fraction`). `sent_at_ms`
        (the call's `CallSlot.at_ms`) takes the refused call out of our log, its request and its
        tokens (`tokens`: the one of them logged in that ms): the provider did not count it."""
        a, limits = self.adaptive, self.limits_for(scope)
        retry_ms = 1_000 if retry_after_s is None else max(0, int(retry_after_s * 1000))
        args = [
            self.now_arg(),
            retry_ms,
            *self._adaptation_args(limits),
            a.decrease,
            a.busy_fraction,
            a.tolerance(limits.rpm),
            a.tolerance(limits.tpm),
            "" if sent_at_ms is None else sent_at_ms,
            "" if tokens is None else tokens,
        ]
        with contextlib.suppress(BudgetUnavailable):
            self.run("REPORT_429", self._call_log_keys(scope), args)

    def _call_log_keys(self, scope: str) -> list[str]:
        """KEYS of the scripts that read a scope's call log and adapt its limits."""
        return [self.key("calls", scope), self.key("callmeta", scope), self.key("rate", scope)]

    def _adaptation_args(self, limits: Limits) -> list[int]:
        """ARGV the adapting scripts share: interval, configured r/t, step r/t, floor r/t."""
        a = self.adaptive
        return [
            a.interval_ms,
            limits.rpm,
            limits.tpm,
            a.step(limits.rpm),
            a.step(limits.tpm),
            a.floor(limits.rpm),
            a.floor(limits.tpm),
        ]

    def snapshot(self, *, scopes: Sequence[str] = (PROVIDER,)) -> dict[str, Any]:
        """Everything the budget decides on, for dashboards and `queue_stats`."""
        keys: list[str | bytes] = [*self.plan(tuple(scopes)).keys[:2]]
        scope_args: list[int] = []
        for scope in scopes:
            keys += [self.key(kind, scope) for kind in ("bucket", "rate", "calls", "callmeta")]
            scope_args += self.bucket_args(scope)
        base: dict[str, Any] = {
            "failure_policy": self.failure_policy,
            "circuit": self.breaker.state,
            "configured": {s: asdict(self.limits_for(s)) for s in scopes},
            "reservation_ttl_ms": self.reservation_ttl_ms,
        }
        try:
            raw = self.run(
                "SNAPSHOT",
                keys,
                [self.now_arg(), self.adaptive.interval_ms, *scope_args],
            )
        except BudgetUnavailable:
            return {**base, "redis": "unavailable"}
        data = json.loads(raw)
        for scope, info in zip(scopes, data.pop("scopes") or [], strict=True):
            if info.get("last_report"):
                info["last_report"] = json.loads(info["last_report"])
            base.setdefault("scopes", {})[scope] = info
        return {**base, **data, "redis": "ok"}
