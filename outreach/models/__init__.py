"""The records: organizations, owners (execution contexts), leads, outreach and their history.

Fields, choices and constraints only, one module per entity; `queries` holds the raw SQL.
Writes live in outreach.services; state moves in outreach.transitions.

Every public name is re-exported here: callers import `from outreach.models import X`, and the
migrations name validators and fields as `outreach.models.<name>`.
"""

from __future__ import annotations

from outreach.models.assignment import AssignmentBatch, AssignmentItem
from outreach.models.inbound import UnverifiedInbound
from outreach.models.leads import SUPPRESSED, Lead, LeadEmailField, LeadEvent
from outreach.models.lookups import AnyOf, any_of, int_array, text_array
from outreach.models.mailboxes import Mailbox, mailbox_domain_check
from outreach.models.metrics import MetricCounter, OwnerCounter
from outreach.models.organizations import Organization, VerifiedDomain
from outreach.models.outreach import (
    DELIVERY_ATTEMPT,
    DraftForApproval,
    ErrorClass,
    Outreach,
    OutreachEvent,
    State,
)
from outreach.models.owners import MIDNIGHT, Owner, OwnerDailySends, OwnersVersion
from outreach.models.prepared import Prepared
from outreach.models.queries import lead_status, owner_daily_sends_record
from outreach.models.referrals import ReferralProposal
from outreach.models.triage import AUTONOMOUS_DEFAULT, NEVER_ALONE, ReplyClass, TriageBy
from outreach.models.validators import (
    DAY_NAMES,
    MAX_NUDGES,
    validate_nudge_days,
    validate_timezone,
    working_days_text,
    working_days_validator,
)

__all__ = [
    "AUTONOMOUS_DEFAULT",
    "DAY_NAMES",
    "DELIVERY_ATTEMPT",
    "MAX_NUDGES",
    "MIDNIGHT",
    "NEVER_ALONE",
    "SUPPRESSED",
    "AnyOf",
    "AssignmentBatch",
    "AssignmentItem",
    "DraftForApproval",
    "ErrorClass",
    "Lead",
    "LeadEmailField",
    "LeadEvent",
    "Mailbox",
    "MetricCounter",
    "Organization",
    "Outreach",
    "OutreachEvent",
    "Owner",
    "OwnerCounter",
    "OwnerDailySends",
    "OwnersVersion",
    "Prepared",
    "ReferralProposal",
    "ReplyClass",
    "State",
    "TriageBy",
    "UnverifiedInbound",
    "VerifiedDomain",
    "any_of",
    "int_array",
    "lead_status",
    "mailbox_domain_check",
    "owner_daily_sends_record",
    "text_array",
    "validate_nudge_days",
    "validate_timezone",
    "working_days_text",
    "working_days_validator",
]
