"""/unsubscribe/<token>/: a confirmation page (GET, changes nothing), a CSRF-checked form POST,
and the RFC 8058 one-click POST mail providers send; a tampered token is a 400 page."""

from __future__ import annotations

from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from nurture.mail.transport import unsubscribe_token, unsubscribe_url
from outreach.models import Lead, LeadEvent, Outreach, State
from tests.factories import make_lead, make_org, make_owner

pytestmark = pytest.mark.django_db

ONE_CLICK = "List-Unsubscribe=One-Click"
PENDING = (State.QUEUED, State.AWAITING_APPROVAL, State.APPROVED)
LEFT_ALONE = (State.DISPATCHED, State.GENERATING, State.SENDING, State.SENT, State.DEAD)


@pytest.fixture
def lead_history() -> dict[str, Any]:
    """A lead with one outreach in each state, none of it sent before."""
    return {"email": "pat@prospect.example", "emailed": False, "states": PENDING + LEFT_ALONE}


def _url(lead_id: int) -> str:
    return reverse("nurture:unsubscribe", args=[unsubscribe_token(lead_id=lead_id)])


def _states(lead: Lead) -> dict[str, str]:
    return {o.idempotency_key: o.state for o in Outreach.objects.filter(lead=lead)}


def _assert_opted_out_with_pending_cancelled(lead: Lead) -> None:
    lead.refresh_from_db()
    assert lead.status == Lead.Status.OPTED_OUT
    states = sorted(Outreach.objects.filter(lead=lead).values_list("state", flat=True))
    assert states == sorted([State.CANCELLED] * len(PENDING) + list(LEFT_ALONE))


def test_the_list_unsubscribe_url_is_served_here(lead: Lead) -> None:
    assert unsubscribe_url(lead_id=lead.pk).endswith(_url(lead.pk))


def test_get_shows_a_confirmation_form_and_changes_nothing(lead: Lead) -> None:
    # given a lead with pending outreach
    before = _states(lead)
    # when the link is opened (or prefetched by a link scanner)
    response = Client(enforce_csrf_checks=True).get(_url(lead.pk))
    # then a page with a CSRF-protected POST form is shown, and nothing changed
    assert response.status_code == 200
    page = response.content.decode()
    assert 'method="post"' in page
    assert "csrfmiddlewaretoken" in page
    assert "pat@prospect.example" in page
    lead.refresh_from_db()
    assert lead.status == Lead.Status.ACTIVE
    assert _states(lead) == before


def test_confirming_the_form_opts_out_and_cancels_all_pending_outreach(lead: Lead) -> None:
    # given the confirmation page, opened in a browser that enforces CSRF
    browser = Client(enforce_csrf_checks=True)
    browser.get(_url(lead.pk))
    token = browser.cookies["csrftoken"].value
    # when the form is submitted with its CSRF token
    response = browser.post(_url(lead.pk), {"csrfmiddlewaretoken": token})
    # then the lead is opted out and everything not yet sending is cancelled
    assert response.status_code == 200
    assert "You are unsubscribed" in response.content.decode()
    _assert_opted_out_with_pending_cancelled(lead)


def test_form_post_without_csrf_token_is_refused(lead: Lead) -> None:
    response = Client(enforce_csrf_checks=True).post(_url(lead.pk), {"something": "else"})
    assert response.status_code == 403
    lead.refresh_from_db()
    assert lead.status == Lead.Status.ACTIVE


@pytest.mark.parametrize("content_type", ["application/x-www-form-urlencoded", "multipart/form-data"])
def test_one_click_post_from_a_mail_provider_opts_out_without_csrf(lead: Lead, content_type: str) -> None:
    # given a mail provider's RFC 8058 one-click POST: no cookies, no CSRF token
    provider = Client(enforce_csrf_checks=True)
    if content_type == "multipart/form-data":
        response = provider.post(_url(lead.pk), {"List-Unsubscribe": "One-Click"})
    else:
        response = provider.post(_url(lead.pk), ONE_CLICK, content_type=content_type)
    # then it is honoured
    assert response.status_code == 200
    _assert_opted_out_with_pending_cancelled(lead)


def test_second_opt_out_is_harmless_and_says_so(lead: Lead) -> None:
    client = Client(enforce_csrf_checks=True)
    client.post(_url(lead.pk), ONE_CLICK, content_type="application/x-www-form-urlencoded")
    again = client.post(_url(lead.pk), ONE_CLICK, content_type="application/x-www-form-urlencoded")
    assert again.status_code == 200
    assert "You had already unsubscribed" in again.content.decode()
    assert "already unsubscribed" in client.get(_url(lead.pk)).content.decode()
    # and the lead's history says once why it was opted out
    events = LeadEvent.objects.filter(lead=lead).values_list("from_status", "to_status", "note")
    assert list(events) == [(Lead.Status.ACTIVE, Lead.Status.OPTED_OUT, "unsubscribe link")]


@pytest.mark.parametrize("method", ["get", "one-click", "form"])
def test_tampered_token_is_a_400_page_never_a_500(lead: Lead, method: str) -> None:
    # given a token for lead 1 whose id was changed to another lead's
    token = unsubscribe_token(lead_id=lead.pk)
    forged = f"{lead.pk + 1}:{token.split(':', 1)[1]}"
    url = reverse("nurture:unsubscribe", args=[forged])
    client = Client(enforce_csrf_checks=method != "form")
    # when it is used
    if method == "get":
        response = client.get(url)
    elif method == "one-click":
        response = client.post(url, ONE_CLICK, content_type="application/x-www-form-urlencoded")
    else:
        response = client.post(url, {})
    # then a plain 400 page explains it, and nobody was opted out
    assert response.status_code == 400
    assert "not valid" in response.content.decode()
    assert not Lead.objects.filter(status=Lead.Status.OPTED_OUT).exists()


@pytest.mark.parametrize("token", ["garbage", "1", ":", "1:", "x:y:z", "%00"])
def test_malformed_tokens_are_400(client: Client, token: str) -> None:
    assert client.get(f"/unsubscribe/{token}/").status_code == 400


def test_token_of_a_lead_that_no_longer_exists_is_404(client: Client) -> None:
    response = client.get(_url(999_999))
    assert response.status_code == 404
    assert "no longer hold" in response.content.decode()


def test_opt_out_is_per_organization(lead: Lead) -> None:
    # given the same address as a lead of another organization
    other = make_lead(owner=make_owner(organization=make_org()), email=lead.email)
    # when the first one unsubscribes
    Client().post(_url(lead.pk), ONE_CLICK, content_type="application/x-www-form-urlencoded")
    # then only that sender's lead is opted out
    other.refresh_from_db()
    assert other.status == Lead.Status.ACTIVE


@pytest.mark.parametrize(("fallbacks", "status"), [(["old-key-" + "k" * 50], 200), ([], 400)])
def test_a_link_from_before_a_key_rotation_opts_out_while_the_old_key_is_a_fallback(
    lead: Lead, settings: Any, fallbacks: list[str], status: int
) -> None:
    # given a link in an email sent before the key rotation (Django's Signer reads both
    # SECRET_KEY and SECRET_KEY_FALLBACKS when built: nurture.mail.transport builds one per call)
    settings.SECRET_KEY = "old-key-" + "k" * 50
    url = _url(lead.pk)
    # when the key is rotated, with or without the old key among the fallbacks
    settings.SECRET_KEY, settings.SECRET_KEY_FALLBACKS = "new-key-" + "k" * 50, fallbacks
    response = Client().post(url, ONE_CLICK, content_type="application/x-www-form-urlencoded")
    # then the one-click opt-out works only while the old key is a fallback
    assert response.status_code == status
    lead.refresh_from_db()
    assert (lead.status == Lead.Status.OPTED_OUT) == (status == 200)
