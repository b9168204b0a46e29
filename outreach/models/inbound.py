"""Unverified inbound: an email that claims to be a lead's reply but is not believed
(nurture.intake.belief), kept for a person to read and, if it is the lead's, accept."""

from __future__ import annotations

from django.conf import settings
from django.db import models

from outreach.models.leads import Lead
from outreach.models.organizations import Organization
from outreach.models.outreach import Outreach


class UnverifiedInbound(models.Model):
    """One inbound email not believed to be its lead's reply: what it said and why it was held.

    Never its attachments, and its text capped (nurture.intake.unverified): a person reads it,
    nothing answers it. Accepting it (permission `accept_unverifiedinbound`) runs the normal
    reply intake for the claimed lead and records who did it.
    """

    class Reason(models.TextChoices):
        SENDER_NOT_LEAD = "sender_not_lead", "Sender is not the conversation's lead"
        AUTHENTICATION = "authentication", "SPF, DKIM or DMARC failed"
        SPAM = "spam", "The provider flagged it as spam or a virus"
        OTHER_CONVERSATION = "other_conversation", "Reply address and thread name different conversations"
        UNKNOWN_ADDRESS = "unknown_address", "Sent to a reply address we never gave out"
        NO_CONVERSATION = "no_conversation", "From a lead's address, but names no conversation"

    class Status(models.TextChoices):
        HELD = "held", "Held (not answered)"
        ACCEPTED = "accepted", "Accepted as the lead's reply"

    # Null when no organization can be told (reply addresses of several organizations): then
    # only superusers see it.
    organization = models.ForeignKey(
        Organization, null=True, blank=True, on_delete=models.CASCADE, related_name="unverified_inbound"
    )
    # The lead whose reply it claims to be (the conversation it names, else the sender's lead).
    lead = models.ForeignKey(Lead, null=True, blank=True, on_delete=models.CASCADE, related_name="+")
    provider = models.CharField(max_length=40, blank=True, help_text="Which webhook delivered it.")
    # One row per email however often it is delivered: outreach.idempotency.reply_key of its Message-ID.
    key = models.CharField(max_length=200, unique=True)
    message_id = models.TextField()
    sender = models.CharField(max_length=320)
    recipients = models.TextField(blank=True, help_text="Envelope recipient, To and Cc, one per line.")
    subject = models.CharField(max_length=300, blank=True)
    body = models.TextField(blank=True)
    in_reply_to = models.TextField(blank=True)
    references = models.TextField(blank=True, help_text="The References read (at most 20).")
    verdicts = models.JSONField(default=list, blank=True, help_text="Authentication and spam verdicts seen.")
    reason = models.CharField(max_length=24, choices=Reason.choices)
    detail = models.CharField(max_length=300, blank=True)
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.HELD)
    received_at = models.DateTimeField(auto_now_add=True)
    accepted_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    accepted_at = models.DateTimeField(null=True, blank=True)
    # The reply outreach the acceptance created or joined.
    outreach = models.ForeignKey(Outreach, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")

    class Meta:
        verbose_name = "unverified inbound email"
        verbose_name_plural = "unverified inbound"
        permissions = [("accept_unverifiedinbound", "Can accept unverified inbound as the lead's reply")]
        indexes = [models.Index(fields=["organization", "status", "received_at"])]

    def __str__(self) -> str:
        return f"{self.sender}: {self.subject or '(no subject)'}"
