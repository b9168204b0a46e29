"""What an inbound reply is (its class), who decided it, and what each class may do alone.

The classes are the product's vocabulary for inbound mail (nurture.intake.triage decides them,
by rules first, then one classification call); an organization chooses which of them an
autonomous owner may answer without a person (Organization.reply_autonomous_classes).
"""

from __future__ import annotations

from typing import Any

from django.core.exceptions import ValidationError
from django.db import models


class ReplyClass(models.TextChoices):
    INTERESTED = "interested", "Interested or meeting request"
    QUESTION = "question", "Question"
    OBJECTION = "objection", "Objection or not interested"
    OUT_OF_OFFICE = "out_of_office", "Out of office"
    REFERRAL = "referral", "Referral (someone else to contact)"
    UNSUBSCRIBE = "unsubscribe", "Unsubscribe"
    COMPLAINT = "complaint", "Complaint, legal or pricing negotiation"
    BOUNCE_NOTICE = "bounce_notice", "Delivery failure notice"
    AUTO_REPLY = "auto_reply", "Other automatic reply"
    OTHER = "other", "Other"


class TriageBy(models.TextChoices):
    RULES = "rules", "Rules"
    MODEL = "model", "Model"
    PERSON = "person", "Person"


# The classes an autonomous owner may answer alone unless its organization says otherwise.
# Complaint/legal/pricing never is (nurture.intake.triage forces a person whatever this says);
# "other" is what the model could not place, so a person sees it.
AUTONOMOUS_DEFAULT: tuple[str, ...] = (ReplyClass.INTERESTED, ReplyClass.QUESTION)
NEVER_ALONE: frozenset[str] = frozenset({ReplyClass.COMPLAINT, ReplyClass.OTHER})


def autonomous_default() -> list[str]:
    return [str(value) for value in AUTONOMOUS_DEFAULT]


def validate_reply_autonomous_classes(value: Any) -> None:
    """Organization.reply_autonomous_classes: a list of known classes, none of NEVER_ALONE
    (admin input is checked like any other: the message says what is wrong and what to do)."""
    if not isinstance(value, list) or not all(isinstance(item, str) for item in value):
        raise ValidationError(
            'Give a list of reply classes, e.g. ["interested", "question"].', code="reply_classes"
        )
    unknown = sorted(set(value) - set(ReplyClass.values))
    if unknown:
        raise ValidationError(
            f"Unknown reply class(es): {', '.join(unknown)}. Use some of: {', '.join(ReplyClass.values)}.",
            code="reply_classes",
        )
    never = sorted(set(value) & NEVER_ALONE)
    if never:
        raise ValidationError(
            f"{', '.join(never)} can never be answered without a person: remove it from the list.",
            code="reply_classes",
        )
