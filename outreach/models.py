"""The records: organizations, owners (execution contexts), leads, outreach and their history.

Fields, choices and constraints only. Writes live in services.py; state moves in transitions.py.
"""

from __future__ import annotations

import zoneinfo
from datetime import datetime, time
from decimal import Decimal
from email.utils import parseaddr

from django.conf import settings
from django.core.exceptions import ValidationError
from django.core.validators import MinValueValidator, RegexValidator
from django.db import connection, models
from django.db.models import Q
from django.db.models.functions import Lower, Trim

from outreach.tiers import Tier


def validate_timezone(value: str) -> None:
    try:
        zoneinfo.ZoneInfo(value)
    except (zoneinfo.ZoneInfoNotFoundError, ValueError):
        raise ValidationError(
            f"{value!r} is not a known time zone: use an IANA name such as Europe/Berlin."
        ) from None


working_days_validator = RegexValidator(
    r"^[1-7]{1,7}$", "Working days are ISO weekday digits, Monday=1 .. Sunday=7, e.g. 12345."
)


# An owner's hours that end at 00:00 end at midnight, the end of the day (00:00-00:00: all day).
MIDNIGHT = time(0)


class LeadEmailField(models.EmailField):
    """An email address as a lead's identity: trimmed and lower-cased on the way in.

    to_python also serves get_prep_value, so every ORM write *and* lookup
    (`filter(email=...)`, `email__in`) normalises its value: "Pat@Acme.com " finds
    "pat@acme.com" without each caller remembering. Raw SQL does not pass through here; the
    `lead_email_normalised` check constraint refuses what it did not normalise.
    (The local part is case-sensitive by RFC 5321; no real mailbox provider treats it so, and
    two leads differing only in case are one person.)
    """

    def to_python(self, value: object) -> str | None:
        text = super().to_python(value)
        return text.strip().lower() if isinstance(text, str) else text


MAX_NUDGES = 10


def validate_nudge_days(value: str) -> None:
    """A cadence is business-day offsets from the assignment, e.g. "3,7": nudge 1 after 3, nudge 2 after 7."""
    parts = [p.strip() for p in value.split(",")] if value.strip() else []
    if not all(p.isdigit() for p in parts) or not 1 <= len(parts) <= MAX_NUDGES:
        raise ValidationError(
            f"{value!r}: give 1 to {MAX_NUDGES} business-day offsets separated by commas, e.g. 3,7."
        )
    days = [int(p) for p in parts]
    if days != sorted(set(days)) or days[0] < 1 or days[-1] > 365:  # strictly rising
        raise ValidationError(f"{value!r}: offsets must rise from 1 to at most 365, e.g. 3,7.")


class Organization(models.Model):
    name = models.CharField(max_length=200, unique=True)
    # Per-organization LLM limits (a share of the provider key); empty = provider limits only.
    llm_rpm = models.PositiveIntegerField(null=True, blank=True, help_text="Requests/min; empty = no cap.")
    llm_tpm = models.PositiveIntegerField(null=True, blank=True, help_text="Tokens/min; empty = no cap.")
    allowed_link_domains = models.CharField(
        max_length=500, blank=True, help_text="Comma-separated domains links in emails may point to."
    )
    sender_email = models.EmailField(blank=True)
    # The prompt forbids phone numbers; nurture.writing.draft_policy refuses them unless this is set.
    allow_phone_numbers = models.BooleanField(
        default=False, db_default=False, help_text="Drafts may contain phone numbers."
    )
    # The nurture cadence: nudges after these business days (lead's time zone); owners may override.
    # db_default too: rows inserted by raw SQL (bench/dispatch.py) get the same cadence.
    nudge_days = models.CharField(
        max_length=50, default="3,7", db_default="3,7", validators=[validate_nudge_days], help_text="e.g. 3,7"
    )
    # A draft nobody approves goes stale: after this many days awaiting approval it is cancelled
    # with the reason in its history (orchestrator.controls.draft_expiry, beat entry `drafts-expire`).
    draft_expiry_days = models.PositiveIntegerField(
        null=True,
        blank=True,
        validators=[MinValueValidator(1)],
        help_text="Drafts awaiting approval longer than this many days are cancelled; empty = never.",
    )
    # Compliance text (postal address, opt-out sentence) that code appends below every email at
    # send time (nurture.mail.compliance.email_body): never shown to the model, never written by it.
    compliance_footer = models.TextField(
        blank=True,
        default="",
        db_default="",
        max_length=1000,
        help_text="Appended below every email at send time, e.g. the postal address and how to opt out.",
    )
    # Who works this organization's drafts: a non-superuser reviewer sees and approves only the
    # drafts of owners in organizations they are a member of (backoffice.admin.outreach.ApprovalQueueAdmin).
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, blank=True, related_name="organizations")
    # LLM spend per UTC day (orchestrator.controls.spend): work beyond it waits QUEUED until the next day.
    daily_spend_cap = models.DecimalField(
        max_digits=10,
        decimal_places=2,
        null=True,
        blank=True,
        validators=[MinValueValidator(Decimal("0"))],
        help_text="Dollars of LLM spend per UTC day; empty = no cap.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        permissions = [
            (
                "change_organization_settings",
                "Can change organization-wide settings (LLM caps, link domains, sender, owner weight)",
            )
        ]

    def __str__(self) -> str:
        return self.name

    @property
    def sender_address(self) -> str:
        """The bare address this organization's emails come from (DEFAULT_FROM_EMAIL when unset)."""
        sender = self.sender_email or settings.DEFAULT_FROM_EMAIL
        return parseaddr(sender)[1] or sender

    @property
    def sender_domain(self) -> str:
        """The domain of `sender_address`, lower-case: what providers and pauses count by."""
        return self.sender_address.rpartition("@")[2].lower()


class VerifiedDomain(models.Model):
    """A mail domain an organization proved it owns: its sender_email must be on one of these.

    Kept by superusers only (backoffice.admin.organizations.VerifiedDomainAdmin), so one tenant cannot send
    as another by typing the other's address into its own sender field.
    """

    organization = models.ForeignKey(Organization, on_delete=models.CASCADE, related_name="verified_domains")
    domain = models.CharField(max_length=253, help_text="e.g. example.com (lower case, no @).")
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "domain"], name="verified_domain_unique_per_org")
        ]

    def __str__(self) -> str:
        return self.domain


class Owner(models.Model):
    """An execution context: an AI agent (bot user) or a human seller. Fairness is per owner."""

    class Kind(models.TextChoices):
        AGENT = "agent", "AI agent"
        HUMAN = "human", "Human seller"

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="owners")
    name = models.CharField(max_length=200)
    kind = models.CharField(max_length=10, choices=Kind.choices)
    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="owner"
    )
    daily_limit = models.PositiveIntegerField(default=50, validators=[MinValueValidator(1)])
    hours_start = models.TimeField(default=time(9, 0))
    hours_end = models.TimeField(default=time(17, 0))
    working_days = models.CharField(max_length=7, default="12345", validators=[working_days_validator])
    timezone = models.CharField(max_length=64, default="UTC", validators=[validate_timezone])
    review_required = models.BooleanField(default=False)
    # The last time review was turned off (True -> False): it lets drafts go out unread, so it
    # takes the approve permission and is recorded. `by` is NULL when no person did it (the
    # add_owner shell command); `via` then says what did.
    review_disabled_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    review_disabled_at = models.DateTimeField(null=True, blank=True)
    review_disabled_via = models.CharField(max_length=100, blank=True, default="")
    weight = models.PositiveSmallIntegerField(default=1, validators=[MinValueValidator(1)])
    active = models.BooleanField(default=True)
    # Empty = the organization's cadence (a blank string, not NULL: one "unset" value, DJ001).
    nudge_days = models.CharField(
        max_length=50,
        blank=True,
        default="",
        db_default="",
        validators=[validate_nudge_days],
        help_text="Empty = organization's.",
    )
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["organization", "name"], name="owner_unique_name_per_org"),
            # An end of 00:00 is midnight, the end of the day: 00:00-00:00 is round the clock.
            models.CheckConstraint(
                condition=Q(hours_start__lt=models.F("hours_end")) | Q(hours_end=MIDNIGHT),
                name="owner_hours_order",
            ),
            models.CheckConstraint(condition=Q(daily_limit__gte=1), name="owner_daily_limit_positive"),
            models.CheckConstraint(condition=Q(weight__gte=1), name="owner_weight_positive"),
        ]

    def __str__(self) -> str:
        return f"{self.name} ({self.get_kind_display()})"


class Lead(models.Model):
    class Status(models.TextChoices):
        ACTIVE = "active", "Active"
        REPLIED = "replied", "Replied"
        OPTED_OUT = "opted_out", "Opted out"
        CONVERTED = "converted", "Converted"
        # Set from the mail side (nurture.intake.deliverability): never emailed again.
        BOUNCED = "bounced", "Undeliverable (hard bounce)"
        COMPLAINED = "complained", "Complained (marked as spam)"

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="leads")
    owner = models.ForeignKey(Owner, on_delete=models.PROTECT, related_name="leads")
    email = LeadEmailField()
    first_name = models.CharField(max_length=100, blank=True)
    last_name = models.CharField(max_length=100, blank=True)
    company = models.CharField(max_length=200, blank=True)
    title = models.CharField(max_length=200, blank=True)
    timezone = models.CharField(max_length=64, default="UTC", validators=[validate_timezone])
    status = models.CharField(max_length=12, choices=Status.choices, default=Status.ACTIVE)
    created_at = models.DateTimeField(auto_now_add=True)

    class Meta:
        constraints = [
            # With lead_email_normalised below, unique whatever the case an address was typed in.
            models.UniqueConstraint(fields=["organization", "email"], name="lead_unique_email_per_org"),
            models.CheckConstraint(
                condition=Q(email=Lower(Trim("email"))),
                name="lead_email_normalised",
                violation_error_message="A lead's email is stored trimmed and lower-case.",
            ),
        ]

    def __str__(self) -> str:
        return f"{self.first_name} {self.last_name} <{self.email}>".strip()


# Leads nothing may be sent to, whatever the kind of email: they said no, or their mailbox did.
SUPPRESSED = frozenset({Lead.Status.OPTED_OUT, Lead.Status.BOUNCED, Lead.Status.COMPLAINED})


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

    lead = models.ForeignKey(Lead, on_delete=models.PROTECT, related_name="outreach")
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
        settings.AUTH_USER_MODEL, null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    approved_at = models.DateTimeField(null=True, blank=True)
    sent_at = models.DateTimeField(null=True, blank=True)
    message_id = models.CharField(max_length=255, blank=True)
    in_reply_to = models.CharField(max_length=255, blank=True, help_text="Message-ID this email answers.")
    # The thread above `in_reply_to`, oldest first, space-separated (the References header less
    # its last id): for a reply, our email the prospect answered, and what came before it.
    references = models.TextField(blank=True, default="", db_default="")
    # The email provider's own id for the sent message (anymail's message_id; empty over SMTP):
    # what its tracking webhooks and support tickets name.
    esp_message_id = models.CharField(max_length=255, blank=True, default="", db_default="")
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
            # orchestrator.dispatch.reads.approved_candidates: approved drafts waiting to be sent.
            models.Index(
                fields=["owner", "state_changed_at", "id"],
                condition=Q(state="approved"),
                name="outreach_approved_by_owner",
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
            # orchestrator.dispatch.reads.spend_capped_owners: an owner's spend since the UTC
            # day began. Partial: only drafts that cost something.
            models.Index(
                fields=["owner", "generated_at"], condition=Q(llm_cost__gt=0), name="outreach_spend_by_owner"
            ),
        ]
        constraints = [
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

    outreach = models.ForeignKey(Outreach, on_delete=models.CASCADE, related_name="events")
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


class OwnerDailySendsManager(models.Manager["OwnerDailySends"]):
    def record(self, *, owner_id: int, sent_at: datetime) -> None:
        """Count one email sent at `sent_at` on the owner's local day (one upsert).

        Called in the transaction that records SENT (outreach.transitions), so the count and the
        sent rows cannot disagree. The day is the owner's calendar day at `sent_at` in its time
        zone today; moving an owner to another zone mid-day leaves that day's count where it was.
        """
        zone = Owner.objects.values_list("timezone", flat=True).get(pk=owner_id)
        day = sent_at.astimezone(zoneinfo.ZoneInfo(zone)).date()
        table = self.model._meta.db_table
        with connection.cursor() as cursor:
            cursor.execute(
                f"INSERT INTO {table} (owner_id, day, sent) VALUES (%s, %s, 1) "
                f"ON CONFLICT (owner_id, day) DO UPDATE SET sent = {table}.sent + 1",
                [owner_id, day],
            )


class OwnerDailySends(models.Model):
    """Emails an owner sent on one local calendar day.

    The dispatcher checks every owner's daily limit each cycle; reading one row per owner keeps
    that cost proportional to owners, where counting the day's SENT rows grew with the day's
    history (see orchestrator.dispatch.reads.used_today). Written only by `record` above.
    """

    owner = models.ForeignKey(Owner, on_delete=models.CASCADE, related_name="daily_sends")
    day = models.DateField()  # the owner's local date
    sent = models.PositiveIntegerField(default=0)

    objects = OwnerDailySendsManager()

    class Meta:
        verbose_name_plural = "owner daily sends"
        constraints = [models.UniqueConstraint(fields=["owner", "day"], name="owner_daily_sends_unique")]

    def __str__(self) -> str:
        return f"{self.owner_id} on {self.day}: {self.sent}"


class MetricCounter(models.Model):
    """One shard of one Prometheus counter (or histogram bucket, sum or count) of the pipeline.

    Counted where the event happens: outreach.counters adds to these rows in the transaction
    that records the state change (so a rolled-back or lost move counts nothing), and reads
    them back summed over shards for /metrics. Never pruned: retention deletes history, not
    these totals, so they only ever grow (docs/architecture.md, "Metrics").
    """

    name = models.CharField(max_length=80)
    labels = models.CharField(max_length=200, blank=True)  # "k=v,k=v", keys sorted
    # Writers spread over a few rows per series (by process id): concurrent transitions then
    # rarely wait on one hot row's lock until the other's commit.
    shard = models.PositiveSmallIntegerField(default=0)
    value = models.BigIntegerField(default=0)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["name", "labels", "shard"], name="metric_counter_unique")
        ]

    def __str__(self) -> str:
        return f"{self.name}{{{self.labels}}}[{self.shard}] = {self.value}"


class DraftForApproval(Outreach):
    """The approval queue in admin: drafts awaiting a person's decision."""

    class Meta:
        proxy = True
        verbose_name = "draft awaiting approval"
        verbose_name_plural = "approval queue"

    def __str__(self) -> str:
        return f"{self.get_kind_display()} to {self.lead}: {self.draft_subject or '(no subject)'}"


class AssignmentBatch(models.Model):
    """One `assign_leads` run: the parent of one child per lead in the file.

    Fan-in without waiting: whoever finishes children (the command in-process, or Celery
    workers with --fan-out) adds them to `children_done` in the same transaction as their
    writes, and a conditional UPDATE (children_done = children_total) completes the parent.
    Nobody blocks on the children; the command only reads these counters.
    """

    class Status(models.TextChoices):
        LOADING = "loading", "Loading"
        COMPLETED = "completed", "Completed"

    organization = models.ForeignKey(Organization, on_delete=models.PROTECT, related_name="assignments")
    file_name = models.CharField(max_length=500)
    file_sha256 = models.CharField(max_length=64)
    rows = models.PositiveIntegerField(help_text="Data rows in the file.")
    children_total = models.PositiveIntegerField()
    children_done = models.PositiveIntegerField(default=0)
    leads_created = models.PositiveIntegerField(default=0)
    leads_existing = models.PositiveIntegerField(default=0, help_text="Already there: kept unchanged.")
    outreach_created = models.PositiveIntegerField(default=0)
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.LOADING)
    created_at = models.DateTimeField(help_text="The assignment time: the sequences' anchor.")
    completed_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        verbose_name_plural = "assignment batches"
        constraints = [
            models.CheckConstraint(
                condition=Q(children_done__lte=models.F("children_total")), name="assignment_done_le_total"
            ),
        ]

    def __str__(self) -> str:
        return f"assignment #{self.pk} {self.file_name} ({self.children_done}/{self.children_total})"


class AssignmentItem(models.Model):
    """One lead of an assignment: the validated CSV row (so a worker needs only ids) and its outcome."""

    class Status(models.TextChoices):
        PENDING = "pending", "Pending"
        DONE = "done", "Done"

    class Outcome(models.TextChoices):
        NEW = "new", "New lead: sequence queued"
        EXISTING = "existing", "Existing lead: kept; sequence queued if it had none"
        STOPPED = "stopped", "Existing lead replied/opted out/converted: nothing queued"

    batch = models.ForeignKey(AssignmentBatch, on_delete=models.CASCADE, related_name="children")
    line = models.PositiveIntegerField(help_text="Line in the CSV file (header = 1).")
    email = models.EmailField()
    first_name = models.CharField(max_length=100, blank=True)
    last_name = models.CharField(max_length=100, blank=True)
    company = models.CharField(max_length=200, blank=True)
    title = models.CharField(max_length=200, blank=True)
    timezone = models.CharField(max_length=64)
    owner = models.ForeignKey(Owner, on_delete=models.PROTECT, related_name="+")
    lead = models.ForeignKey(Lead, null=True, blank=True, on_delete=models.SET_NULL, related_name="+")
    status = models.CharField(max_length=8, choices=Status.choices, default=Status.PENDING)
    outcome = models.CharField(max_length=8, choices=Outcome.choices, blank=True)
    done_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["batch", "email"], name="assignment_item_unique_email"),
        ]

    def __str__(self) -> str:
        return f"line {self.line}: {self.email} [{self.status}]"
