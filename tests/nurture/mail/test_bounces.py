"""Bounces and complaints: provider tracking webhooks (django-anymail, over the real HTTP
endpoints with each provider's own authentication) and SMTP refusals from a real server
suppress the lead; past the threshold the owner and its sender domain are paused
(nurture.mail.events, orchestrator.controls.deliverability)."""

from __future__ import annotations

import io
import json
import smtplib
from typing import Any

import pytest
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from devtools.smtp_sink import SMTPSink
from nurture.errors import PermanentError, RecipientRefused, TransientError
from nurture.mail.sending import outreach_send
from nurture.mail.transport import classify_smtp_error
from orchestrator.controls.deliverability import deliverability, over_threshold, pause_reason
from orchestrator.controls.pauses import resume
from orchestrator.models import DeadLetter, Pause
from outreach.models import ErrorClass, Lead, Outreach, State
from tests.factories import logged_in, make_draft, make_lead, make_org, make_outreach, make_owner, make_user
from tests.nurture.mail.providers import emailed, mailgun, postmark, postmark_bounce, sendgrid, sendgrid_event

pytestmark = [pytest.mark.django_db, pytest.mark.usefixtures("provider_secrets")]


# --- the webhooks ------------------------------------------------------------------------------


def test_a_sendgrid_bounce_suppresses_the_lead_and_cancels_its_queued_work(client: Client) -> None:
    # given a lead emailed once, with a nudge queued
    lead = emailed(make_owner(), 1)[0]
    nudge = make_outreach(lead=lead, kind=Outreach.Kind.NUDGE, step=1)
    # when SendGrid reports a bounce
    event = sendgrid_event(
        lead.email, "bounce", type="bounce", reason="550 5.1.1 no such user", status="5.1.1"
    )
    response = sendgrid(client, [event])
    # then the lead is undeliverable and its nudge cancelled; nobody is paused (1 send)
    assert response.status_code == 200
    assert Lead.objects.get(pk=lead.pk).status == Lead.Status.BOUNCED
    assert Outreach.objects.get(pk=nudge.pk).state == State.CANCELLED
    assert not Pause.objects.exists()


def test_a_sendgrid_spam_report_marks_the_lead_complained(client: Client) -> None:
    lead = emailed(make_owner(), 1)[0]
    response = sendgrid(client, [sendgrid_event(lead.email, "spamreport")])
    assert response.status_code == 200
    assert Lead.objects.get(pk=lead.pk).status == Lead.Status.COMPLAINED


def test_a_mailgun_permanent_failure_bounces_and_a_complaint_complains(client: Client) -> None:
    # given two leads emailed
    bounced, complained = emailed(make_owner(), 2)
    # when Mailgun reports a permanent failure for one and a complaint for the other
    failed = {
        "event": "failed",
        "severity": "permanent",
        "reason": "bounce",
        "recipient": bounced.email,
        "delivery-status": {"code": 550, "message": "5.1.1 The email account does not exist"},
    }
    assert mailgun(client, failed).status_code == 200
    assert mailgun(client, {"event": "complained", "recipient": complained.email}).status_code == 200
    # then
    assert Lead.objects.get(pk=bounced.pk).status == Lead.Status.BOUNCED
    assert Lead.objects.get(pk=complained.pk).status == Lead.Status.COMPLAINED


def test_a_mailgun_temporary_failure_changes_nothing(client: Client) -> None:
    lead = emailed(make_owner(), 1)[0]
    soft = {"event": "failed", "severity": "temporary", "recipient": lead.email}
    assert mailgun(client, soft).status_code == 200
    assert Lead.objects.get(pk=lead.pk).status == Lead.Status.ACTIVE


def test_postmark_hard_bounce_and_complaint_suppress_but_a_soft_bounce_does_not(client: Client) -> None:
    # given three leads emailed
    hard, soft, spam = emailed(make_owner(), 3)
    # when Postmark reports a hard bounce, a soft bounce and a spam complaint
    for lead, kind in ((hard, "HardBounce"), (soft, "SoftBounce"), (spam, "SpamComplaint")):
        assert postmark(client, postmark_bounce(lead.email, kind)).status_code == 200
    # then
    statuses = {lead.pk: Lead.objects.get(pk=lead.pk).status for lead in (hard, soft, spam)}
    assert statuses == {
        hard.pk: Lead.Status.BOUNCED,
        soft.pk: Lead.Status.ACTIVE,
        spam.pk: Lead.Status.COMPLAINED,
    }


def test_bad_provider_authentication_is_refused_and_changes_nothing(client: Client) -> None:
    # given a lead emailed
    lead = emailed(make_owner(), 1)[0]
    # when a bounce arrives with the wrong basic auth, a complaint with a forged signature, and a
    # bounce with no auth at all
    wrong_auth = sendgrid(client, [sendgrid_event(lead.email, "bounce")], auth="anymail:guess")
    forged = mailgun(client, {"event": "complained", "recipient": lead.email}, key="not-the-key")
    no_auth = postmark(client, postmark_bounce(lead.email, "HardBounce"), auth="")
    # then each is refused with a 4xx and the lead is untouched
    assert [r.status_code for r in (wrong_auth, forged, no_auth)] == [400, 400, 400]
    assert Lead.objects.get(pk=lead.pk).status == Lead.Status.ACTIVE


# --- the threshold -----------------------------------------------------------------------------


def test_past_the_bounce_threshold_the_owner_and_its_sender_domain_are_paused(client: Client) -> None:
    # given an owner with 40 emails sent, 2 of them to leads that bounced (5 %: not over)
    org = make_org(sender_email="ann@sales.example")
    owner = make_owner(organization=org)
    leads = emailed(owner, 40)
    Lead.objects.filter(pk__in=[leads[0].pk, leads[1].pk]).update(status=Lead.Status.BOUNCED)
    queued = make_outreach(lead=make_lead(owner=owner))
    # when a third bounce is reported (7.5 %)
    assert sendgrid(client, [sendgrid_event(leads[2].email, "bounce", type="bounce")]).status_code == 200
    # then the owner and the sender domain are paused automatically, with the rate as the reason
    reason = "hard-bounce rate 7.5% over the last 40 sends > 5%"
    owner_pause = Pause.objects.get(owner=owner, resumed_at__isnull=True)
    domain_pause = Pause.objects.get(sender_domain="sales.example", resumed_at__isnull=True)
    assert (owner_pause.source, owner_pause.reason) == (Pause.Source.BOUNCES, reason)
    assert (domain_pause.source, domain_pause.reason) == (Pause.Source.BOUNCES, reason)
    assert Outreach.objects.get(pk=queued.pk).state == State.QUEUED  # waits; not cancelled
    # and the figures show it, per owner and per domain
    figures = deliverability()
    assert [(r.name, r.sends, r.bounced, r.complained) for r in figures.owners] == [(owner.name, 40, 3, 0)]
    assert [(r.name, r.bounce_rate) for r in figures.domains] == [("sales.example", 0.075)]
    # when an operator resumes them, they are lifted
    assert resume(pauses=[owner_pause, domain_pause], by=None) == 2
    assert not Pause.objects.filter(resumed_at__isnull=True).exists()


def test_a_small_sample_does_not_pause(client: Client) -> None:
    # given an owner with two emails sent
    owner = make_owner()
    lead = emailed(owner, 2)[0]
    # when one bounces (50 %, but 2 sends < BOUNCE_MIN_SENDS)
    sendgrid(client, [sendgrid_event(lead.email, "bounce", type="bounce")])
    # then the lead is suppressed and nobody is paused
    assert Lead.objects.get(pk=lead.pk).status == Lead.Status.BOUNCED
    assert not Pause.objects.exists()


def test_one_complaint_in_200_sends_pauses_for_complaints(client: Client) -> None:
    owner = make_owner()
    leads = emailed(owner, 200)
    sendgrid(client, [sendgrid_event(leads[7].email, "spamreport")])
    owner_pause = Pause.objects.get(owner=owner)
    assert owner_pause.source == Pause.Source.COMPLAINTS
    assert owner_pause.reason == "complaint rate 0.5% over the last 200 sends > 0.3%"


@pytest.mark.parametrize(
    ("bad", "sends", "max_rate", "min_sends", "paused"),
    [
        (10, 200, 0.05, 20, False),  # exactly 5 %: not over
        (11, 200, 0.05, 20, True),
        (1, 2, 0.05, 20, False),  # 50 %, but a sample of 2
        (2, 20, 0.05, 20, True),  # 10 % at the minimum sample
        (0, 0, 0.05, 20, False),
        (1, 200, 0.003, 20, True),  # 0.5 % of complaints
        (1, 400, 0.003, 20, False),  # 0.25 %
        (3, 1000, 0.003, 20, False),  # exactly 0.3 %
    ],
)
def test_over_threshold(bad: int, sends: int, max_rate: float, min_sends: int, paused: bool) -> None:
    assert over_threshold(bad=bad, sends=sends, max_rate=max_rate, min_sends=min_sends) is paused


def test_pause_reason_reads_as_the_rule() -> None:
    assert (
        pause_reason(what="hard-bounce", bad=14, sends=200, max_rate=0.05)
        == "hard-bounce rate 7.0% over the last 200 sends > 5%"
    )


# --- SMTP refusals -----------------------------------------------------------------------------


def test_a_5xx_at_rcpt_suppresses_the_lead_without_a_retry_or_a_dead_letter(smtp_sink: SMTPSink) -> None:
    # given a draft on its way to an address the mail server refuses for good, and a nudge queued
    lead = make_lead()
    smtp_sink.refusals[lead.email] = f"550 5.1.1 <{lead.email}>: no such user"
    draft = make_draft(lead=lead, state=State.DISPATCHED)
    nudge = make_outreach(lead=lead, kind=Outreach.Kind.NUDGE, step=1)
    # when it is sent
    assert outreach_send(outreach_id=draft.pk) == State.CANCELLED
    # then nothing arrived, the outreach is cancelled (not retried, not dead-lettered), the lead
    # undeliverable, its nudge cancelled, and the refusal counts as an attempt that bounced
    assert smtp_sink.messages == []
    row = Outreach.objects.get(pk=draft.pk)
    assert (row.state, row.error_class, row.attempts, row.send_attempts) == (
        State.CANCELLED,
        ErrorClass.PERMANENT,
        0,
        0,
    )
    assert "550" in row.last_error
    assert not DeadLetter.objects.exists()
    assert Lead.objects.get(pk=lead.pk).status == Lead.Status.BOUNCED
    assert Outreach.objects.get(pk=nudge.pk).state == State.CANCELLED
    assert [(r.sends, r.bounced) for r in deliverability().owners] == [(1, 1)]


def test_a_4xx_at_rcpt_is_still_a_retry(smtp_sink: SMTPSink) -> None:
    lead = make_lead()
    smtp_sink.refusals[lead.email] = "451 4.3.0 try later"
    draft = make_draft(lead=lead, state=State.DISPATCHED)
    assert outreach_send(outreach_id=draft.pk) == State.APPROVED
    assert Lead.objects.get(pk=lead.pk).status == Lead.Status.ACTIVE


def test_nothing_is_sent_to_a_complained_lead_even_a_reply(smtp_sink: SMTPSink) -> None:
    lead = make_lead(status=Lead.Status.COMPLAINED)
    draft = make_draft(lead=lead, kind=Outreach.Kind.REPLY, state=State.DISPATCHED)
    assert outreach_send(outreach_id=draft.pk) == State.CANCELLED
    assert smtp_sink.messages == []


# --- where an operator sees it -----------------------------------------------------------------


def test_queue_stats_and_the_dashboard_show_counts_and_rates_per_owner_and_domain(redis_client: Any) -> None:
    # given an owner on sales.example with 4 sends: one bounced, one complained
    owner = make_owner(name="Ann", organization=make_org(sender_email="ann@sales.example"))
    leads = emailed(owner, 4)
    Lead.objects.filter(pk=leads[0].pk).update(status=Lead.Status.BOUNCED)
    Lead.objects.filter(pk=leads[1].pk).update(status=Lead.Status.COMPLAINED)
    # when queue_stats prints JSON and its table, and staff open the dashboard
    out = io.StringIO()
    call_command("queue_stats", "--json", stdout=out)
    figures = json.loads(out.getvalue())["deliverability"]
    table = io.StringIO()
    call_command("queue_stats", stdout=table)
    user = make_user("ops", staff=True, permissions=["view_queue_health"])
    user.organizations.add(owner.organization)
    page = logged_in(user).get(reverse("orchestrator:queue-health")).content.decode()
    # then each shows the owner's and the domain's counts and rates
    row = {"sends": 4, "bounced": 1, "complained": 1, "bounce_rate": 0.25, "complaint_rate": 0.25}
    assert figures["owners"] == [{"scope": "owner", "name": "Ann", **row}]
    assert figures["sender_domains"] == [{"scope": "sender domain", "name": "sales.example", **row}]
    assert "Bounces and complaints, last 200 sends" in table.getvalue()
    assert "sales.example" in table.getvalue()
    section = page[page.index('id="deliverability"') :]
    assert "<td>Ann</td>" in section
    assert "<td>sales.example</td>" in section
    assert "25.0%" in section


@pytest.mark.parametrize(
    ("code", "text", "error"),
    [
        (550, b"5.1.1 <pat@prospect.example>: Recipient address rejected", RecipientRefused),
        (550, b"Requested action not taken: mailbox unavailable", RecipientRefused),
        (554, b"5.7.1 Message rejected as spam", PermanentError),  # our content, not the address
        (550, b"5.7.1 Message rejected as spam", PermanentError),
        (452, b"4.2.2 Mailbox full", TransientError),
    ],
)
def test_a_refusal_at_data_is_a_bounce_only_when_it_is_about_the_address(
    code: int, text: bytes, error: type[Exception]
) -> None:
    assert type(classify_smtp_error(smtplib.SMTPDataError(code, text))) is error


def test_a_member_sees_only_their_organizations_bounces(redis_client: Any) -> None:
    # given two organizations on one sender domain, each with a bounced lead
    ours = make_owner(name="Ours", organization=make_org(sender_email="a@shared.example"))
    theirs = make_owner(name="Theirs", organization=make_org(sender_email="b@shared.example"))
    for owner in (ours, theirs):
        Lead.objects.filter(pk=emailed(owner, 2)[0].pk).update(status=Lead.Status.BOUNCED)
    # when a member of the first opens the dashboard
    user = make_user("member", staff=True, permissions=["view_queue_health"])
    user.organizations.add(ours.organization)
    page = logged_in(user).get(reverse("orchestrator:queue-health")).content.decode()
    section = page[page.index('id="deliverability"') : page.index('id="deferred"')]
    # then they see their owner, and the domain counted over their sends only
    assert "<td>Ours</td>" in section
    assert "Theirs" not in section
    assert [
        (r.name, r.sends, r.bounced) for r in deliverability(organization_ids=[ours.organization_id]).domains
    ] == [("shared.example", 2, 1)]
