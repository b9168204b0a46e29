"""Mailboxes' counters: each mailbox's day (its cap, or its warm-up step while it ramps), the
spacing between its sends, and each recipient domain's day per organization.

One atomic script per message (mailbox_reserve.lua) takes, in turn from the owner's round-robin
counter, the first of the owner's mailboxes that has room today and whose spacing has passed,
and counts the message in that mailbox's day and in the recipient domain's day; or takes
nothing and says how long to wait. So two workers cannot both take a mailbox's last unit, nor
both send from one mailbox inside its spacing. The spacing after each send is drawn by the
caller between the mailbox's minimum and maximum (`spacing_draw`): jitter, so a mailbox does
not send like a clock. `mailbox_release` gives the day counts back when the email never left.

Keys, beside the send budget's under the same hash tag (core.py):
  {P}:mbx:rr:<owner>            str  the owner's round-robin counter
  {P}:mbx:day:<mailbox>:<n>     str  messages of the mailbox on UTC day n (since 1970)
  {P}:mbx:next:<mailbox>        str  when the mailbox may send again (ms since 1970)
  {P}:rcpt:day:<org>:<h>:<n>    str  messages of the organization to recipient domain hashed h on day n
"""

from __future__ import annotations

import contextlib
import random
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Final

from orchestrator.budget.core import BudgetCore, BudgetUnavailable
from orchestrator.budget.sends import DAY_MS, SendDenied, _domain_key, until_next_day_ms

TWO_DAYS_MS: Final = 2 * DAY_MS

# Why a send, or an owner's LLM work, waits when none of its mailboxes may send (a person resumes one).
MAILBOXES_PAUSED = "every mailbox of this owner is paused"


def ramp_cap(*, daily_cap: int, ramp_start: int, ramp_step: int, ramp_from: date, today: date) -> int:
    """A mailbox's cap on `today`: `ramp_start` on its first day, `ramp_step` more each day after,
    never above `daily_cap`; 0 before its first day."""
    days = (today - ramp_from).days
    if days < 0:
        return 0
    return min(daily_cap, ramp_start + ramp_step * days)


def spacing_draw(*, min_s: int, max_s: int, rng: random.Random | None = None) -> int:
    """Milliseconds until the mailbox's next send: uniform in [min_s, max_s] seconds."""
    return (rng or random).randint(min_s * 1000, max_s * 1000)


@dataclass(frozen=True, slots=True)
class MailboxTerms:
    """One mailbox as the script takes it: its cap today and the spacing after this send."""

    id: int
    address: str
    cap_today: int
    spacing_ms: int


@dataclass(frozen=True, slots=True)
class MailboxGrant:
    """One message may leave from `mailbox_id` (None: the organization's sender address).
    Give it back with `mailbox_release` if the email never left."""

    mailbox_id: int | None
    counted: tuple[str, ...] = ()
    spacing_key: str = ""  # the mailbox's next-send key (mailbox_defer)


@dataclass(frozen=True, slots=True)
class MailboxUsage:
    sent_today: int
    next_at_ms: int  # 0: may send now


class Mailboxes(BudgetCore):
    def clock_ms(self) -> int:
        """Now in ms: the injected clock in tests, this process's otherwise (the UTC day)."""
        return self._clock() if self._clock is not None else int(time.time() * 1000)

    def mailbox_reserve(
        self,
        *,
        owner_id: int,
        organization_id: int,
        mailboxes: Sequence[MailboxTerms],
        recipient_domain: str,
        recipient_cap: int | None,
    ) -> MailboxGrant | SendDenied:
        """One message from one of `mailboxes` (round robin) and in the recipient domain's day.
        No mailboxes and no recipient cap: a grant for the default sender, without Redis."""
        if not mailboxes and recipient_cap is None:
            return MailboxGrant(mailbox_id=None)
        now_ms = self.clock_ms()
        day = str(now_ms // DAY_MS)
        rcpt = self.key("rcpt", "day", str(organization_id), _domain_key(recipient_domain.lower()), day)
        keys = [self.key("mbx", "rr", str(owner_id)), rcpt]
        args: list[object] = [self.now_arg(), TWO_DAYS_MS, -1 if recipient_cap is None else recipient_cap]
        args.append(len(mailboxes))
        for box in mailboxes:
            keys += [self._day_key(box.id, day), self._next_key(box.id)]
            args += [box.cap_today, box.spacing_ms]
        try:
            granted, index, wait, kind = self.run("MAILBOX_RESERVE", keys, args)
        except BudgetUnavailable:
            if self.failure_policy == "closed":
                return SendDenied(
                    self.unavailable_wait_ms(), "mailbox budget unavailable (Redis down, closed policy)"
                )
            return MailboxGrant(mailbox_id=mailboxes[0].id if mailboxes else None)
        if granted:
            counted = [rcpt] if recipient_cap is not None else []
            if index:
                counted.append(self._day_key(mailboxes[index - 1].id, day))
            return MailboxGrant(
                mailbox_id=mailboxes[index - 1].id if index else None,
                counted=tuple(counted),
                spacing_key=self._next_key(mailboxes[index - 1].id) if index else "",
            )
        resumes = until_next_day_ms(now_ms=now_ms)
        if kind == 3:
            return SendDenied(
                resumes,
                f"recipient domain {recipient_domain}: {recipient_cap}/day reached, resumes 00:00 UTC",
            )
        if kind == 2:
            return SendDenied(resumes, f"mailboxes' day reached ({_caps(mailboxes)}), resumes 00:00 UTC")
        return SendDenied(int(wait), f"mailbox spacing: next send in {-(-int(wait) // 1000)}s")

    def mailbox_release(self, *, grant: MailboxGrant) -> None:
        """The email never left: its message goes back to the mailbox's and recipient domain's day."""
        if grant.counted:
            with contextlib.suppress(BudgetUnavailable):  # stays counted: the safe side
                self.run("MAILBOX_RELEASE", list(grant.counted), [])

    def mailbox_defer(self, *, grant: MailboxGrant, by_ms: int) -> None:
        """The email leaves `by_ms` later than its grant (it waited for the account's send rate):
        the mailbox's next send moves as far, so the spacing holds between arrivals, not grants."""
        if grant.spacing_key and by_ms > 0:
            with contextlib.suppress(Exception):  # Redis down: the spacing is only shorter by the wait
                self._redis.incrby(grant.spacing_key, by_ms)

    def mailbox_usage(self, *, mailbox_ids: Sequence[int]) -> dict[int, MailboxUsage]:
        """Each mailbox's sends today and when it may send next (dashboard, queue_stats, room)."""
        if not mailbox_ids:
            return {}
        day = str(self.clock_ms() // DAY_MS)
        keys = [k for i in mailbox_ids for k in (self._day_key(i, day), self._next_key(i))]
        try:
            values = self._redis.mget(keys)
        except Exception:  # Redis down: nothing known, nothing counted
            values = [None] * len(keys)
        return {
            i: MailboxUsage(sent_today=int(values[2 * n] or 0), next_at_ms=int(values[2 * n + 1] or 0))
            for n, i in enumerate(mailbox_ids)
        }

    def _day_key(self, mailbox_id: int, day: str) -> str:
        return self.key("mbx", "day", str(mailbox_id), day)

    def _next_key(self, mailbox_id: int) -> str:
        return self.key("mbx", "next", str(mailbox_id))


def _caps(mailboxes: Sequence[MailboxTerms]) -> str:
    return ", ".join(f"{box.address} {box.cap_today}/day" for box in mailboxes)
