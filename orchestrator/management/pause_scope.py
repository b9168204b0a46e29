"""What the `pause` and `resume` commands share: their scope options and turning names into
rows, with errors that say which option was wrong and what exists instead."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.management.base import CommandError, CommandParser

from outreach.models import Organization, Owner
from outreach.tiers import Tier

TIERS = {t.name.lower(): t for t in Tier}
LISTED = 20  # names shown in an error: enough to spot a typo, not a dump of every tenant


@dataclass(frozen=True)
class Scope:
    organization: Organization | None
    owner: Owner | None
    tier: Tier | None
    sender_domain: str

    @property
    def empty(self) -> bool:
        return (
            self.organization is None and self.owner is None and self.tier is None and not self.sender_domain
        )


def add_scope_arguments(parser: CommandParser) -> None:
    parser.add_argument("--org", metavar="NAME", help="An organization, by name.")
    parser.add_argument("--owner", metavar="NAME", help="An owner, by name (within --org when given).")
    parser.add_argument("--tier", choices=sorted(TIERS), help="One tier only.")
    parser.add_argument(
        "--sender-domain", metavar="D", default="", help="A sender domain, e.g. mail.example.com."
    )


def scope_from(options: dict[str, Any]) -> Scope:
    organization = _organization(options["org"]) if options.get("org") else None
    owner = _owner(options["owner"], organization) if options.get("owner") else None
    tier = TIERS[options["tier"]] if options.get("tier") else None
    return Scope(
        organization=organization,
        owner=owner,
        tier=tier,
        sender_domain=(options.get("sender_domain") or "").strip().lower(),
    )


def user_named(username: str | None) -> AbstractBaseUser | None:
    if not username:
        return None
    user = get_user_model()._default_manager.filter(username=username).first()
    if user is None:
        raise CommandError(f"--by: no user named {username!r}; give an existing username, or leave --by out.")
    return user


def _names(rows: Any) -> str:
    names = [str(n) for n in rows[: LISTED + 1]]
    more = ", ..." if len(names) > LISTED else ""
    return ", ".join(names[:LISTED]) + more if names else "none"


def _organization(name: str) -> Organization:
    found = Organization.objects.filter(name=name).first()
    if found is None:
        known = Organization.objects.order_by("name").values_list("name", flat=True)
        raise CommandError(f"--org: no organization named {name!r}; organizations: {_names(known)}.")
    return found


def _owner(name: str, organization: Organization | None) -> Owner:
    rows = Owner.objects.filter(name=name).select_related("organization")
    if organization is not None:
        rows = rows.filter(organization=organization)
    found = list(rows[:2])
    if len(found) == 1:
        return found[0]
    if found:
        orgs = Owner.objects.filter(name=name).order_by("organization__name")
        raise CommandError(
            f"--owner: owners named {name!r} exist in several organizations "
            f"({_names(orgs.values_list('organization__name', flat=True))}): add --org NAME."
        )
    known = Owner.objects.order_by("name")
    where = "" if organization is None else f" in {organization.name}"
    if organization is not None:
        known = known.filter(organization=organization)
    raise CommandError(
        f"--owner: no owner named {name!r}{where}; owners{where}: {_names(known.values_list('name', flat=True))}."
    )
