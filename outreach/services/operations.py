"""Operators' actions on outreach, one row at a time: cancel, retry now, reassign, reject with
a reason (docs/operators.md, "Actions").

Each service either does its one change or raises `NotActionable` saying, for that row, why
not ("#12 is already sent"); `apply_each` runs one over many rows and reports per row what it
did and what it skipped. Tenancy is the caller's (the admin acts only on rows it lists to the
user); a reassignment across organizations is refused here too, whoever calls.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from typing import TypeVar

from django.contrib.auth.models import AbstractBaseUser
from django.db.models import Model
from django.utils import timezone

from outreach.models import Outreach, Owner, State
from outreach.transitions import AT_REST, TransitionLost, transition, update_in_place

# Not in flight, not finished: a worker holds nothing of these. DEAD rows belong to their
# dead letter (replay or cancel it there, so the letter is resolved too).

WHY_NOT = {
    State.SENT: "is already sent",
    State.CANCELLED: "is already cancelled",
    State.REJECTED: "was rejected",
    State.DEAD: "is dead: replay or cancel its dead letter under Dead letters",
    State.DISPATCHED: "is in flight (dispatched): try again once the worker is done",
    State.GENERATING: "is in flight (generating): try again once the worker is done",
    State.SENDING: "is in flight (sending): try again once the worker is done",
    State.AWAITING_APPROVAL: "is awaiting approval: approve or reject it in the approval queue",
    State.APPROVED: "is approved: it goes at the next dispatch cycle already",
}


class NotActionable(ValueError):
    """This row cannot take this action now; the message says why, naming the row."""


@dataclass
class ActionReport:
    """What one action did over the selected rows: "3 cancelled; 1 skipped: #12 is already sent."."""

    verb: str
    done: list[int] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)

    def message(self) -> str:
        text = f"{len(self.done)} {self.verb}"
        if self.skipped:
            text += f"; {len(self.skipped)} skipped: " + "; ".join(self.skipped)
        return text + "."


# Outreach, or another record an operator acts on row by row (a lead: reactivate; unverified
# inbound: accept).
Row = TypeVar("Row", bound=Model)


def apply_each(*, rows: Iterable[Row], verb: str, service: Callable[[Row], object]) -> ActionReport:
    """Run `service` on each row (oldest id first); a row it refuses, or that someone else moved
    meanwhile, is skipped with its reason, and the others still go."""
    report = ActionReport(verb=verb)
    for row in sorted(rows, key=lambda r: r.pk):
        try:
            service(row)
            report.done.append(row.pk)
        except NotActionable as exc:
            report.skipped.append(str(exc))
        except TransitionLost:
            report.skipped.append(f"#{row.pk} was moved by someone else meanwhile")
    return report


def _refuse(outreach: Outreach, allowed: tuple[State, ...]) -> None:
    if State(outreach.state) not in allowed:
        raise NotActionable(f"#{outreach.pk} {WHY_NOT.get(State(outreach.state), 'cannot')}")


def outreach_cancel(*, outreach: Outreach, by: AbstractBaseUser) -> None:
    """Cancel work that has not gone out and that no worker holds."""
    _refuse(outreach, AT_REST)
    transition(
        outreach_id=outreach.pk,
        from_=State(outreach.state),
        to=State.CANCELLED,
        note="cancelled",
        actor_id=by.pk,
    )


def outreach_retry_now(*, outreach: Outreach, by: AbstractBaseUser) -> None:
    """Make queued work due now: its wait (sequence step or backoff after a failure) is cleared,
    so the next dispatch cycle takes it if its owner has room. Attempts are kept: the retry cap
    still applies."""
    _refuse(outreach, (State.QUEUED,))
    if not update_in_place(
        outreach_id=outreach.pk,
        states=(State.QUEUED,),
        note="retry now",
        actor_id=by.pk,
        not_before=timezone.now(),
        blocked_reason="",
    ):
        raise TransitionLost(outreach.pk, (State.QUEUED,), State.QUEUED)


def outreach_reassign(*, outreach: Outreach, to: Owner, by: AbstractBaseUser) -> None:
    """Give work at rest to another owner of the same organization (the lead keeps its owner:
    later steps of its sequence go to that one)."""
    _refuse(outreach, AT_REST)
    if to.organization_id != outreach.owner.organization_id:
        raise NotActionable(
            f"#{outreach.pk} belongs to {outreach.owner.organization}; {to.name} is an owner of "
            f"{to.organization}: work never moves between organizations"
        )
    if to.pk == outreach.owner_id:
        raise NotActionable(f"#{outreach.pk} is already {to.name}'s")
    if not update_in_place(
        outreach_id=outreach.pk,
        states=AT_REST,
        note=f"reassigned from {outreach.owner.name} to {to.name}",
        actor_id=by.pk,
        owner_id=to.pk,
        blocked_reason="",
    ):
        raise TransitionLost(outreach.pk, AT_REST, State(outreach.state))
