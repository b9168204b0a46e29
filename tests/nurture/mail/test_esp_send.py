"""Sending through an email provider's API (django-anymail), with anymail's test backend: no
network. The provider's message id is stored beside ours; its failures are classified."""

from __future__ import annotations

from typing import Any

import pytest
import requests
from anymail.backends.test import EmailBackend as AnymailTestBackend
from anymail.exceptions import (
    AnymailError,
    AnymailInvalidAddress,
    AnymailRecipientsRefused,
    AnymailRequestsAPIError,
)
from django.core import mail

from nurture.errors import PermanentError, PossiblySent, TransientError
from nurture.mail.sending import outreach_send
from nurture.mail.transport import classify_esp_error
from outreach.models import Outreach, State
from tests.factories import DRAFT_BODY, DRAFT_SUBJECT, make_lead, make_org, make_outreach, make_owner

pytestmark = pytest.mark.django_db


@pytest.fixture
def outreach(settings: Any) -> Outreach:
    settings.EMAIL_BACKEND = "anymail.backends.test.EmailBackend"
    org = make_org(
        sender_email="sales@seller.example", compliance_footer="Seller Ltd, 1 Main St, Springfield"
    )
    lead = make_lead(owner=make_owner(organization=org), email="pat@prospect.example")
    return make_outreach(
        lead=lead,
        state=State.DISPATCHED,
        draft_subject=DRAFT_SUBJECT,
        draft_body=DRAFT_BODY,
        in_reply_to="<theirs@prospect.example>",
        references="<ours@seller.example>",
    )


def test_provider_message_id_is_stored_beside_ours(outreach: Outreach) -> None:
    # when the send worker sends through the provider
    assert outreach_send(outreach_id=outreach.pk) == State.SENT
    # then the provider's id (the test backend's: the outbox position) is recorded with ours
    outreach.refresh_from_db()
    [sent] = mail.outbox
    status: Any = sent.anymail_status  # type: ignore[union-attr]  # set by anymail's backends
    assert outreach.esp_message_id == str(status.message_id) == "0"
    assert outreach.message_id  # recorded by the claim, before the provider call
    assert outreach.reply_token
    assert sent.reply_to == [f"reply+{outreach.reply_token}@reply.localhost"]


def test_provider_gets_our_headers_and_the_footer_the_model_never_wrote(outreach: Outreach) -> None:
    outreach_send(outreach_id=outreach.pk)

    params: Any = mail.outbox[0].anymail_test_params  # type: ignore[union-attr]  # anymail's test backend
    outreach.refresh_from_db()
    assert params["extra_headers"]["Message-ID"] == outreach.message_id
    assert params["extra_headers"]["In-Reply-To"] == "<theirs@prospect.example>"
    assert params["extra_headers"]["References"] == "<ours@seller.example> <theirs@prospect.example>"
    assert params["text_body"] == f"{DRAFT_BODY}\n\n-- \nSeller Ltd, 1 Main St, Springfield"
    assert outreach.draft_body == DRAFT_BODY


def _http(status: int) -> AnymailRequestsAPIError:
    response = requests.Response()
    response.status_code, response.reason = status, "x"
    return AnymailRequestsAPIError("refused", response=response)


def _requests_failure(cause: type[requests.RequestException]) -> AnymailError:
    # anymail raises a class that is both its API error and the requests exception
    return type("AnymailRequestsAPIError", (AnymailRequestsAPIError, cause), {})("Error posting")


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_http(400), PermanentError),
        (_http(401), PermanentError),
        (_http(422), PermanentError),
        (_http(408), TransientError),
        (_http(429), TransientError),
        (_http(500), TransientError),
        (_http(503), TransientError),
        (AnymailRecipientsRefused(), PermanentError),
        (AnymailInvalidAddress("bad address"), PermanentError),
        (_requests_failure(requests.ConnectionError), TransientError),
        (_requests_failure(requests.ConnectTimeout), TransientError),
        (_requests_failure(requests.ReadTimeout), PossiblySent),
    ],
)
def test_provider_failures_are_classified(error: Any, expected: type[Exception]) -> None:
    assert type(classify_esp_error(error)) is expected


class RefusingBackend(AnymailTestBackend):
    """anymail's test backend, answering as a provider that refuses the message (HTTP 400)."""

    def post_to_esp(self, payload: Any, message: Any) -> Any:
        raise _http(400)


def test_provider_refusal_ends_as_a_permanent_dead_letter(outreach: Outreach, settings: Any) -> None:
    settings.EMAIL_BACKEND = f"{__name__}.RefusingBackend"
    # when the send runs, then it is dead at once, not retried
    assert outreach_send(outreach_id=outreach.pk) == State.DEAD
    assert Outreach.objects.get(pk=outreach.pk).esp_message_id == ""
