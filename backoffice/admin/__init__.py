"""Every ModelAdmin of the product, registered when Django's admin autodiscovers this module
(users: registered by the site, backoffice/site.py)."""

from backoffice.admin import (  # noqa: F401
    approvals,
    dead_letters,
    inbound,
    leads,
    mailboxes,
    organizations,
    outreach,
    owners,
    pauses,
    referrals,
    uploads,
)
