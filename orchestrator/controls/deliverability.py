"""Hard-bounce and complaint rates per owner and per sender domain, and the rule that pauses
a scope whose rate is too high (docs/email.md, "Bounces and complaints").

A scope's rate is read over its last BOUNCE_WINDOW_SENDS delivery attempts: emails it sent
(SENT) and emails the recipient's server refused outright (CANCELLED with a permanent error,
nurture.mail.events). Of those, the bounced ones went to a lead now BOUNCED, the complained ones
to a lead now COMPLAINED. Below BOUNCE_MIN_SENDS attempts nothing is paused: one bounce in two
sends is chance, not a bad list. Past the threshold the scope is paused through
orchestrator.controls.pauses (the dispatcher and the workers honour it) until an operator resumes it.

The scopes are the owner and its sender domain. A domain several organizations send from is
judged and paused per organization (its own sends; the pause names the organization and the
domain, so that tenant's operators resume it): one tenant's bad list, or a dozen deliberate
bounces, must not stop every tenant's email. A domain one organization sends from is paused
whole. After an operator resumes an automatic pause, its scope is judged on the attempts since
the resume only: the old window would pause it again at once.

Each mailbox that serves the owner (outreach.models.Mailbox) is judged too, on the emails it
sent: over a threshold it is paused by its own flag (`active` off, `paused_reason` saying
why), so the owner's other mailboxes go on sending; an operator resumes it in the admin, and
its rates then count from the resume.

The rule (`over_threshold`, `pause_reason`) is pure; the shell reads the windows and pauses.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Iterable
from dataclasses import dataclass
from datetime import datetime
from fractions import Fraction
from typing import Any

from django.conf import settings
from django.db.models import Max, QuerySet

from orchestrator.controls.pauses import pause
from orchestrator.figures import ratio
from orchestrator.models import Pause
from outreach.models import DELIVERY_ATTEMPT, Lead, Mailbox, Organization, Outreach, Owner

# The dashboard lists at most this many owners and domains (those with any bounce or complaint).
LISTED_MAX = 50


@dataclass(frozen=True)
class MailRates:
    """One scope's window: its last attempts, and how many went to bounced / complained leads."""

    scope: str  # "owner" or "sender domain"
    name: str  # the owner's name, or the domain
    sends: int
    bounced: int
    complained: int

    @property
    def bounce_rate(self) -> float | None:
        return ratio(self.bounced, self.sends)

    @property
    def complaint_rate(self) -> float | None:
        return ratio(self.complained, self.sends)


@dataclass(frozen=True)
class Deliverability:
    """Per owner and per sender domain: the dashboard's and queue_stats' section."""

    window_sends: int
    owners: list[MailRates]
    domains: list[MailRates]


def over_threshold(*, bad: int, sends: int, max_rate: float, min_sends: int) -> bool:
    """bad / sends > max_rate, once the window holds at least `min_sends` attempts.

    Fractions, not floats: 0.05 as a float is 0.05000000000000000277, so 10 of 200 (exactly
    5 %) must compare equal to it, not below it by chance of representation.
    """
    if sends < max(min_sends, 1):
        return False
    return Fraction(bad, sends) > Fraction(str(max_rate))


def pause_reason(*, what: str, bad: int, sends: int, max_rate: float) -> str:
    """'hard-bounce rate 7.0% over the last 200 sends > 5%': shown on the pause and the waiting work."""
    return f"{what} rate {bad / sends:.1%} over the last {sends} sends > {max_rate * 100:g}%"


def deliverability_check(*, owner_id: int) -> list[Pause]:
    """After a bounce or complaint for `owner_id`'s lead: pause the owner and/or its organization
    on its sender domain if a rate is over its threshold; return the pauses that apply (new or
    existing). Each scope is judged on its attempts since an operator last resumed its automatic
    pause (`_since_resume`)."""
    owner = Owner.objects.select_related("organization").get(pk=owner_id)
    pauses = []
    for scope, attempts in _scopes_of(owner):
        since = _since_resume(scope)
        window = attempts if since is None else attempts.filter(state_changed_at__gt=since)
        sends, bounced, complained = _window(window)
        for source, what, bad, max_rate in (
            (Pause.Source.BOUNCES, "hard-bounce", bounced, settings.BOUNCE_RATE_MAX),
            (Pause.Source.COMPLAINTS, "complaint", complained, settings.COMPLAINT_RATE_MAX),
        ):
            if over_threshold(bad=bad, sends=sends, max_rate=max_rate, min_sends=settings.BOUNCE_MIN_SENDS):
                reason = pause_reason(what=what, bad=bad, sends=sends, max_rate=max_rate)
                pauses.append(pause(**scope, source=source, reason=reason)[0])
    for mailbox in Mailbox.objects.filter(owners=owner_id, active=True):
        _mailbox_judge(mailbox=mailbox)
    return pauses


def mailbox_rates(*, mailbox: Mailbox) -> MailRates:
    """A mailbox's window: its last attempts since an operator last resumed it."""
    attempts = Outreach.objects.filter(mailbox_id=mailbox.pk)
    if mailbox.resumed_at is not None:
        attempts = attempts.filter(state_changed_at__gt=mailbox.resumed_at)
    return MailRates("mailbox", mailbox.address, *_window(attempts))


def _mailbox_judge(*, mailbox: Mailbox) -> None:
    """Pause the mailbox (its own flag) when a rate of its window is over its threshold."""
    rates = mailbox_rates(mailbox=mailbox)
    for what, bad, max_rate in (
        ("hard-bounce", rates.bounced, settings.BOUNCE_RATE_MAX),
        ("complaint", rates.complained, settings.COMPLAINT_RATE_MAX),
    ):
        if over_threshold(bad=bad, sends=rates.sends, max_rate=max_rate, min_sends=settings.BOUNCE_MIN_SENDS):
            reason = pause_reason(what=what, bad=bad, sends=rates.sends, max_rate=max_rate)
            # Guarded on `active`: two bounces judged at once pause it once, with one reason.
            Mailbox.objects.filter(pk=mailbox.pk, active=True).update(active=False, paused_reason=reason)
            return


def _scopes_of(owner: Owner) -> list[tuple[dict[str, Any], QuerySet[Outreach]]]:
    """The scopes an owner's bounce is judged in, each with its attempts: the owner, and its
    sender domain. A domain several organizations send from is judged, and paused, per
    organization (its sends on the domain): one tenant's bad list must not stop the others;
    only a domain one organization sends from is paused whole."""
    organization = owner.organization
    domain = organization.sender_domain
    # An organization sends from its one sender domain: its sends on the domain are all of its
    # sends, and when it is the domain's only sender, the domain's.
    sends_on_domain = Outreach.objects.filter(lead__organization_id=organization.pk)
    domain_scope: dict[str, Any] = {"sender_domain": domain}
    if len(_organizations_on(domain)) > 1:
        domain_scope["organization"] = organization
    return [({"owner": owner}, Outreach.objects.filter(owner_id=owner.pk)), (domain_scope, sends_on_domain)]


def _since_resume(scope: dict[str, Any]) -> datetime | None:
    """When an operator last resumed an automatic pause of exactly this scope: the rates count
    attempts after it only. Otherwise the very window that paused the scope pauses it again at
    the next late bounce of an email sent before the resume, and the resume means nothing; so a
    resumed scope is judged on what it sends from then on (BOUNCE_MIN_SENDS of them at least)."""
    exact = {"organization": None, "owner": None, "sender_domain": "", **scope}
    if exact["owner"] is not None:
        exact["organization"] = exact["owner"].organization
    return Pause.objects.filter(
        **exact,
        tier__isnull=True,
        source__in=[Pause.Source.BOUNCES, Pause.Source.COMPLAINTS],
        resumed_at__isnull=False,
    ).aggregate(last=Max("resumed_at"))["last"]


def deliverability(*, organization_ids: Collection[int] | None = None) -> Deliverability:
    """The owners and sender domains with any bounce or complaint, worst first.

    Scoped (`organization_ids`): only those organizations' owners, and each domain's figures
    over those organizations' sends only (another tenant on the same domain stays unseen).
    """
    scoped = Outreach.objects.all()
    # Starting from the (few) bounced and complained leads, not from the outreach history.
    suppressed = Lead.objects.filter(status__in=[Lead.Status.BOUNCED, Lead.Status.COMPLAINED])
    if organization_ids is not None:
        scoped = scoped.filter(lead__organization_id__in=organization_ids)
        suppressed = suppressed.filter(organization_id__in=organization_ids)
    owners = Owner.objects.filter(pk__in=suppressed.values("owner_id")).order_by("name")[:LISTED_MAX]
    organizations = Organization.objects.filter(pk__in=suppressed.values("organization_id"))
    owner_rows = [MailRates("owner", o.name, *_window(scoped.filter(owner_id=o.pk))) for o in owners]
    domain_rows = [
        MailRates("sender domain", domain, *_window(_on_domain(domain, within=scoped)))
        for domain in sorted({o.sender_domain for o in organizations})[:LISTED_MAX]
    ]
    return Deliverability(
        window_sends=settings.BOUNCE_WINDOW_SENDS,
        owners=_worst_first(owner_rows),
        domains=_worst_first(domain_rows),
    )


def _window(attempts: QuerySet[Outreach]) -> tuple[int, int, int]:
    """(attempts, bounced, complained) among the last BOUNCE_WINDOW_SENDS attempts."""
    statuses = list(
        attempts.filter(DELIVERY_ATTEMPT)
        .order_by("-state_changed_at", "-id")
        .values_list("lead__status", flat=True)[: settings.BOUNCE_WINDOW_SENDS]
    )
    return len(statuses), statuses.count(Lead.Status.BOUNCED), statuses.count(Lead.Status.COMPLAINED)


def _on_domain(domain: str, *, within: QuerySet[Outreach] | None = None) -> QuerySet[Outreach]:
    """Outreach of every organization sending from `domain`."""
    rows = Outreach.objects.all() if within is None else within
    return rows.filter(lead__organization_id__in=_organizations_on(domain))


def _organizations_on(domain: str) -> list[int]:
    """The organizations sending from `domain` (a property, not a column: the organizations
    are few, so they are grouped here)."""
    by_domain: dict[str, list[int]] = defaultdict(list)
    for organization in Organization.objects.only("id", "sender_email"):
        by_domain[organization.sender_domain].append(organization.pk)
    return by_domain.get(domain, [])


def _worst_first(rows: Iterable[MailRates]) -> list[MailRates]:
    return sorted(rows, key=lambda r: (-(r.bounce_rate or 0.0), -(r.complaint_rate or 0.0), r.name))
