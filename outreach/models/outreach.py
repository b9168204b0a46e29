"""Outreach (the unit of work), its states and error classes, its history, the approval queue."""

from __future__ import annotations

from decimal import Decimal

from django.conf import settings
from django.db import models
from django.db.models import Q

from outreach.models.leads import Lead
from outreach.models.mailboxes import Mailbox
from outreach.models.owners import Owner
from outreach.models.triage import ReplyClass, TriageBy
from outreach.tiers import Tier


class State(models.TextChoices):
    QUEUED = "queued", "Queued"
    DISPATCHED = "dispatched", "Dispatched"
    GENERATING = "generating", "Generating"
    AWAITING_APPROVAL = "awaiting_approval", "Awaiting approval"
    APPROVED = "approved", "Approved (queued to send)"
    SENDING = "sending", "Sending"
    SENT = "sent", "Sent"
    REJECTED = "rejected", "Rejected"
    CANCELLED = "cancelled", "Cancelled"
    DEAD = "dead", "Dead"


class ErrorClass(models.TextChoices):
    RATE_LIMITED = "rate_limited", "Rate limited (429)"
    TRANSIENT = "transient", "Transient"
    PERMANENT = "permanent", "Permanent"
    POLICY = "policy", "Policy check failed"
    EXHAUSTED = "exhausted", "Retries exhausted"
    STUCK = "stuck", "Stuck (recovered)"
    # The mail server may have accepted the email, twice: a person has to find out.
    POSSIBLY_SENT = "possibly_sent", "Possibly sent (unconfirmed)"


# A delivery attempt: an email sent, or one the recipient's server refused for good (a hard
# bounce at SMTP, cancelled with a permanent error by nurture.mail.events). The bounce and
# complaint rates are over an owner's or sender domain's latest ones (orchestrator.controls.deliverability).
DELIVERY_ATTEMPT = Q(state="sent") | Q(state="cancelled", error_class="permanent")


class Outreach(models.Model):
    """The unit of work: one email (reply, intro or nudge) to one lead, written then sent."""

    class Kind(models.TextChoices):
        REPLY = "reply", "Reply"
        INTRO = "intro", "Intro"
        NUDGE = "nudge", "Nudge"

    KIND_TIER = {Kind.REPLY: Tier.REPLY, Kind.INTRO: Tier.INTRO, Kind.NUDGE: Tier.NUDGE}

    # No index of its own: outreach_lead_state (lead, state) leads with it.
    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, related_name="outreach", db_index=False)
    owner = models.ForeignKey(Owner, on_delete=models.PROTECT, related_name="outreach")
    kind = models.CharField(max_length=8, choices=Kind.choices)
    tier = models.PositiveSmallIntegerField(choices=[(t.value, t.name.lower()) for t in Tier])
    state = models.CharField(max_length=20, choices=State.choices, default=State.QUEUED)
    not_before = models.DateTimeField(help_text="Not dispatched before this time (sequence step or backoff).")
    idempotency_key = models.CharField(max_length=200, unique=True)
    step = models.PositiveSmallIntegerField(default=0, help_text="Sequence step: 0 intro, 1.. nudges.")
    context = models.JSONField(
        default=dict, blank=True, help_text="Kind-specific input, e.g. the inbound reply."
    )
    # A reply's later messages from the lead, joined into it before its draft was written
    # (context["joined"]; nurture.intake.replies). Recording a draft is guarded on this count:
    # a draft written before the last join lacks its text and is written again.
    inbound_joined = models.PositiveSmallIntegerField(default=0, db_default=0)
    attempts = models.PositiveSmallIntegerField(default=0)
    # Tries that may have reached the mail server: +1 on every DISPATCHED -> SENDING, -1 when the
    # server certainly refused. Recovery resends an unconfirmed send once, never twice
    # (nurture.retry_rules.send_unconfirmed). Replay does not reset it.
    send_attempts = models.PositiveSmallIntegerField(default=0)
    # Re-queues after the provider's 429, since the last replay: capped by RETRY_MAX_RATE_LIMITED.
    rate_limited = models.PositiveSmallIntegerField(default=0)
    last_error = models.TextField(blank=True)
    error_class = models.CharField(max_length=16, choices=ErrorClass.choices, blank=True)
    blocked_reason = models.CharField(max_length=200, blank=True, help_text="Why queued work is waiting.")
    # One LLM budget reservation per deployment the job uses, space-separated (budget.reservation_ids).
    reservation_id = models.CharField(max_length=255, blank=True)
    # Where each step runs (orchestrator.deployments.placement.Route): the dispatcher's placement.
    llm_route = models.CharField(max_length=255, blank=True)
    draft_subject = models.CharField(max_length=300, blank=True)
    draft_body = models.TextField(blank=True)
    # A reviewer's "why not": counted by reason on the queue-health dashboard (its history
    # event also says "rejected: <reason>").
    rejected_reason = models.CharField(max_length=200, blank=True)
    approved_by = models.ForeignKey(
        settings.AUTH_USER_MODEL,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="+",
        db_index=False,  # outreach_approved_by_set: only the rows someone approved
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    # `<random token@sender domain>` (nurture.mail.transport.outreach_message_id), recorded before
    # SMTP and kept for a resend. Random, so a reply's In-Reply-To / References cannot be guessed.
    message_id = models.CharField(max_length=255, blank=True)
    # The conversation's reply address is `reply+<this>@INBOUND_REPLY_DOMAIN` (the email's
    # Reply-To): random, recorded with the Message-ID before SMTP, unique while not empty.
    # An inbound email sent to it names this outreach, hence its lead and organization.
    reply_token = models.CharField(max_length=32, blank=True, default="", db_default="")
    in_reply_to = models.CharField(max_length=255, blank=True, help_text="Message-ID this email answers.")
    # The thread above `in_reply_to`, oldest first, space-separated (the References header less
    # its last id): for a reply, our email the prospect answered, and what came before it.
    references = models.TextField(blank=True, default="", db_default="")
    # The email provider's own id for the sent message (anymail's message_id; empty over SMTP):
    # what its tracking webhooks and support tickets name.
    esp_message_id = models.CharField(max_length=255, blank=True, default="", db_default="")
    # The mailbox it left from (set at the send claim); NULL: the organization's sender address.
    mailbox = models.ForeignKey(
        Mailbox,
        null=True,
        blank=True,
        on_delete=models.SET_NULL,
        related_name="outreach",
        db_index=False,  # outreach_mailbox_set: only the rows that left from a mailbox
    )
    # A reply's triage (nurture.intake.triage): its class, why, and who decided it (rules, the
    # model, or a person reclassifying it: that choice is also in the history). Empty: not a
    # reply, or not triaged yet.
    reply_class = models.CharField(
        max_length=16, choices=ReplyClass.choices, blank=True, default="", db_default=""
    )
    reply_class_reason = models.CharField(max_length=300, blank=True, default="", db_default="")
    reply_class_by = models.CharField(
        max_length=8, choices=TriageBy.choices, blank=True, default="", db_default=""
    )
    tokens_used = models.PositiveIntegerField(default=0)
    llm_calls = models.PositiveSmallIntegerField(default=0)
    # Spend (orchestrator.controls.spend): the provider's counts of the written draft, their price at
    # LLM_PRICES, and when it was written (the UTC day its organization's daily cap counts it in).
    llm_input_tokens = models.PositiveIntegerField(default=0, db_default=0)
    llm_output_tokens = models.PositiveIntegerField(default=0, db_default=0)
    llm_cost = models.DecimalField(max_digits=12, decimal_places=6, default=Decimal(0), db_default=Decimal(0))
    generated_at = models.DateTimeField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)
    state_changed_at = models.DateTimeField()

    class Meta:
        verbose_name_plural = "outreach"
        # One permission per operator action (docs/operators.md, "Actions"), so a team can let
        # someone retry stuck work without letting them cancel or move it.
        permissions = [
            ("approve_outreach", "Can approve, edit-and-approve or reject drafts"),
            ("cancel_outreach", "Can cancel outreach that has not been sent"),
            ("retry_outreach", "Can retry queued outreach now (skip its wait or backoff)"),
            ("reassign_outreach", "Can reassign outreach to another owner of its organization"),
            ("reject_outreach", "Can reject drafts with a reason from the approval queue"),
            ("reclassify_outreach", "Can change a reply's triage class"),
        ]
        indexes = [
            # orchestrator.dispatch.reads.ready_candidates: per-owner top-k of ready work in one
            # tier (LATERAL ... WHERE owner_id=? AND tier=? AND state='queued' AND
            # not_before<=now ORDER BY not_before, id LIMIT k). Partial, so its size is the
            # queue's, not the history's, and the scan stops after k rows.
            models.Index(
                fields=["owner", "tier", "not_before", "id"],
                condition=Q(state="queued"),
                name="outreach_ready_by_owner_tier",
            ),
            # orchestrator.dispatch.reads.ready_owners: the owners with ready work in a tier, by a
            # loose scan (the next owner after the last found: one probe each), which stops after
            # a window's worth; the index above leads with the owner, so it cannot skip to a tier.
            models.Index(
                fields=["tier", "owner", "not_before"],
                condition=Q(state="queued"),
                name="outreach_ready_by_tier_owner",
            ),
            # orchestrator.dispatch.reads.approved_candidates: approved drafts waiting to be sent.
            models.Index(
                fields=["owner", "state_changed_at", "id"],
                condition=Q(state="approved"),
                name="outreach_approved_by_owner",
            ),
            # orchestrator.dispatch.cycle.notes: the next queued rows with no draft, of all owners,
            # to say why LLM work waits (a misconfigured deployment) without sorting the queue. Its
            # condition names draft_body, so the per-owner selection queries (which do not) are
            # never planned on it instead of outreach_ready_by_owner_tier.
            models.Index(
                fields=["not_before", "id"],
                condition=Q(state="queued", draft_body=""),
                name="outreach_queued_in_line",
            ),
            # orchestrator.failures.recovery.recover_stuck: in-flight work older than the timeout.
            models.Index(
                fields=["state_changed_at"],
                condition=Q(state__in=["dispatched", "generating", "sending"]),
                name="outreach_in_flight_age",
            ),
            # orchestrator.metrics.depth.finished_counts: SENT counted from a narrow index.
            models.Index(
                fields=["owner", "sent_at"], condition=Q(state="sent"), name="outreach_sent_by_owner"
            ),
            # admin approval queue: drafts per owner, oldest first.
            models.Index(
                fields=["owner", "state_changed_at"],
                condition=Q(state="awaiting_approval"),
                name="outreach_awaiting_by_owner",
            ),
            models.Index(fields=["lead", "state"], name="outreach_lead_state"),
            # nurture.intake.replies: an inbound reply finds the email it answers by its
            # In-Reply-To / References, which name our Message-ID or (a provider that rewrites
            # it, e.g. Amazon SES) the provider's id. Partial: most rows were never sent.
            models.Index(fields=["message_id"], condition=~Q(message_id=""), name="outreach_message_id"),
            models.Index(
                fields=["esp_message_id"], condition=~Q(esp_message_id=""), name="outreach_esp_message_id"
            ),
            # orchestrator.controls.deliverability._window: an owner's latest delivery attempts
            # (ORDER BY state_changed_at DESC LIMIT BOUNCE_WINDOW_SENDS), read at every bounce
            # or complaint; partial, so the scan stops after the window, whatever the history.
            models.Index(
                fields=["owner", "state_changed_at"],
                condition=DELIVERY_ATTEMPT,
                name="outreach_attempts_by_owner",
            ),
            # orchestrator.dispatch.reads.organization_spend: an owner's spend since the UTC
            # day began. Partial: only drafts that cost something.
            models.Index(
                fields=["owner", "generated_at"], condition=Q(llm_cost__gt=0), name="outreach_spend_by_owner"
            ),
            # The two nullable foreign keys set late in a row's life (its approval, its send
            # claim): their lookups (SET NULL when a user or mailbox goes; a mailbox's delivery
            # attempts, orchestrator.controls.deliverability) name a value, so a partial index
            # serves them, and a row gets an entry only once it has one, not on every state move.
            models.Index(
                fields=["approved_by"],
                condition=Q(approved_by__isnull=False),
                name="outreach_approved_by_set",
            ),
            models.Index(fields=["mailbox"], condition=Q(mailbox__isnull=False), name="outreach_mailbox_set"),
        ]
        constraints = [
            # nurture.intake.belief: an inbound email's reply address finds its conversation by
            # this token (the unique index is that lookup's). Partial: unsent rows have none.
            models.UniqueConstraint(
                fields=["reply_token"], condition=~Q(reply_token=""), name="outreach_reply_token_unique"
            ),
            models.CheckConstraint(
                condition=(
                    Q(kind="reply", tier=Tier.REPLY)
                    | Q(kind="intro", tier=Tier.INTRO)
                    | Q(kind="nudge", tier=Tier.NUDGE)
                ),
                name="outreach_tier_matches_kind",
            ),
        ]

    def __str__(self) -> str:
        return f"#{self.pk} {self.kind} to {self.lead_id} [{self.state}]"


class OutreachEvent(models.Model):
    """One row per transition (and per attempt outcome): the outreach's history."""

    # No index of its own: the (outreach, at) index leads with it.
    outreach = models.ForeignKey(Outreach, on_delete=models.CASCADE, related_name="events", db_index=False)
    from_state = models.CharField(max_length=20, choices=State.choices)
    to_state = models.CharField(max_length=20, choices=State.choices)
    at = models.DateTimeField(auto_now_add=True)
    attempt = models.PositiveSmallIntegerField(default=0)
    error_class = models.CharField(max_length=16, choices=ErrorClass.choices, blank=True)
    note = models.TextField(blank=True)
    actor = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )

    class Meta:
        ordering = ["at", "id"]
        indexes = [models.Index(fields=["outreach", "at"])]

    def __str__(self) -> str:
        return f"{self.from_state} -> {self.to_state}"


class DraftForApproval(Outreach):
    """The approval queue in admin: drafts awaiting a person's decision."""

    class Meta:
        proxy = True
        verbose_name = "draft awaiting approval"
        verbose_name_plural = "approval queue"

    def __str__(self) -> str:
        return f"{self.get_kind_display()} to {self.lead}: {self.draft_subject or '(no subject)'}"
