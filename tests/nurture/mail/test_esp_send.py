"""Sending through an email provider's API (django-anymail): with anymail's test backend (no
network), and with a real local HTTP server answering as Postmark's API does (postmark_stub).
The provider's message id is stored beside ours; its failures are classified; an email whose
fate is unknown reaches the provider at most twice."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import requests
from anymail.backends.brevo import EmailBackend as BrevoBackend
from anymail.backends.postmark import EmailBackend as PostmarkBackend
from anymail.backends.test import EmailBackend as AnymailTestBackend
from anymail.exceptions import (
    AnymailError,
    AnymailInvalidAddress,
    AnymailRecipientsRefused,
    AnymailRequestsAPIError,
)
from django.core import mail
from django.core.mail.backends.smtp import EmailBackend as SMTPBackend
from urllib3.exceptions import MaxRetryError, NameResolutionError, NewConnectionError, ProtocolError

from devtools.processes import free_port
from nurture.errors import PermanentError, PossiblySent, RecipientRefused, TransientError
from nurture.mail.sending import outreach_send
from nurture.mail.transport import (
    classify_esp_error,
    esp_idempotency_key,
    esp_takes_tracking_flags,
    send_outreach_email,
)
from orchestrator.models import DeadLetter
from outreach.models import ErrorClass, Lead, Outreach, State
from tests.factories import DRAFT_BODY, DRAFT_SUBJECT, make_lead, make_org, make_outreach, make_owner
from tests.nurture.mail.postmark_stub import PostmarkStub

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


def test_cold_email_asks_the_provider_for_no_open_or_click_tracking(outreach: Outreach) -> None:
    # An open pixel and rewritten links mark cold email as bulk mail to spam filters, and the
    # tracking domain's reputation is shared: the provider's tracking is off for every send.
    outreach_send(outreach_id=outreach.pk)
    params: Any = mail.outbox[0].anymail_test_params  # type: ignore[union-attr]  # anymail's test backend
    assert params["track_clicks"] is False
    assert params["track_opens"] is False


def test_only_providers_whose_api_takes_tracking_flags_are_given_them() -> None:
    # Brevo (like Amazon SES) has no per-message switch: anymail would refuse the send; its
    # tracking is the account's setting (docs/email.md). SMTP has none to give.
    assert esp_takes_tracking_flags(PostmarkBackend)
    assert esp_takes_tracking_flags(AnymailTestBackend)
    assert not esp_takes_tracking_flags(BrevoBackend)
    assert not esp_takes_tracking_flags(SMTPBackend)


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


def _requests_failure(
    cause: type[requests.RequestException], reason: Exception | None = None
) -> AnymailError:
    # anymail raises a class that is both its API error and the requests exception, from the
    # requests exception, which holds urllib3's reason (as requests' HTTPAdapter raises it)
    err = cause(reason) if reason is not None else cause()
    error = type("AnymailRequestsAPIError", (AnymailRequestsAPIError, cause), {})("Error posting")
    error.__cause__ = err
    return error


def _no_connection(reason: Exception) -> Exception:
    return MaxRetryError(None, "/email", reason)  # type: ignore[arg-type]  # no pool: not needed here


@pytest.mark.parametrize(
    ("error", "expected"),
    [
        (_http(400), PermanentError),
        (_http(401), PermanentError),
        (_http(422), PermanentError),
        (_http(408), TransientError),
        (_http(429), TransientError),
        # the provider answered, but not with a refusal: it may have queued the email
        (_http(500), PossiblySent),
        (_http(502), PossiblySent),
        (_http(503), PossiblySent),
        (_http(200), PossiblySent),  # a 2xx we could not read (anymail: "Invalid JSON")
        (AnymailRecipientsRefused(), RecipientRefused),
        (AnymailInvalidAddress("bad address"), PermanentError),
        # certainly before the request left: no connection, no DNS, connect timeout
        (
            _requests_failure(requests.ConnectionError, _no_connection(NewConnectionError(None, "refused"))),  # type: ignore[arg-type]
            TransientError,
        ),
        (
            _requests_failure(
                requests.ConnectionError,
                _no_connection(NameResolutionError("api.postmarkapp.com", None, OSError("no DNS"))),  # type: ignore[arg-type]
            ),
            TransientError,
        ),
        (_requests_failure(requests.ConnectTimeout), TransientError),
        # after the request may have left: reset, dropped, read timeout, or we cannot tell
        (
            _requests_failure(
                requests.ConnectionError, ProtocolError("Connection aborted.", ConnectionResetError())
            ),
            PossiblySent,
        ),
        (_requests_failure(requests.ConnectionError), PossiblySent),
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


# --- a real HTTP server answering as Postmark's API (postmark_stub) ---------------------------


@pytest.fixture
def postmark(settings: Any) -> Iterator[PostmarkStub]:
    stub = PostmarkStub()
    stub.start()
    settings.EMAIL_BACKEND = "anymail.backends.postmark.EmailBackend"
    settings.ANYMAIL = {"POSTMARK_SERVER_TOKEN": "server-token", "POSTMARK_API_URL": stub.url}
    yield stub
    stub.stop()


def _send_until_done(outreach_id: int) -> State | None:
    """The send, then each time the row goes back to APPROVED the dispatcher's hand-out again
    (DISPATCHED), until it ends: what the running system does, without the waits."""
    for _ in range(10):
        state = outreach_send(outreach_id=outreach_id)
        if state != State.APPROVED:
            return state
        Outreach.objects.filter(pk=outreach_id, state=State.APPROVED).update(state=State.DISPATCHED)
    raise AssertionError("the send never ended")


@pytest.mark.parametrize("answer", ["error", "drop"])
def test_a_provider_that_may_have_the_email_gets_it_at_most_twice(
    outreach: Outreach, postmark: PostmarkStub, answer: Any
) -> None:
    # given a provider that reads every request, then answers 500 (or closes the connection)
    postmark.answer = answer
    # when the send runs until the work ends
    final = _send_until_done(outreach.pk)
    # then it reached the provider twice at most, both times as the same email with the same
    # idempotency key, and a person decides (a possibly-sent dead letter), not a third try
    outreach.refresh_from_db()
    received = postmark.requests()
    assert final == State.DEAD
    assert len(received) == 2
    assert {r.message_id for r in received} == {outreach.message_id}
    assert {r.headers["Idempotency-Key"] for r in received} == {
        esp_idempotency_key(message_id=outreach.message_id)
    }
    assert DeadLetter.objects.get(outreach=outreach).failure_class == ErrorClass.POSSIBLY_SENT


def test_a_provider_that_was_never_reached_is_retried_as_transient(outreach: Outreach, settings: Any) -> None:
    # given no provider listening at the API address (connection refused: nothing left)
    settings.EMAIL_BACKEND = "anymail.backends.postmark.EmailBackend"
    settings.ANYMAIL = {"POSTMARK_SERVER_TOKEN": "t", "POSTMARK_API_URL": f"http://127.0.0.1:{free_port()}/"}
    # when we send, then it is a plain transient failure, retried with backoff as before
    with pytest.raises(TransientError) as caught:
        send_outreach_email(outreach=outreach)
    assert not isinstance(caught.value, PossiblySent)


def test_the_provider_accepting_the_email_records_its_id(outreach: Outreach, postmark: PostmarkStub) -> None:
    assert outreach_send(outreach_id=outreach.pk) == State.SENT
    outreach.refresh_from_db()
    [received] = postmark.requests()
    assert received.message_id == outreach.message_id
    assert received.headers["X-Postmark-Server-Token"] == "server-token"
    # tracking off, in Postmark's documented fields (TrackOpens, TrackLinks)
    assert received.body["TrackOpens"] is False
    assert received.body["TrackLinks"] == "None"
    assert outreach.esp_message_id  # Postmark's MessageID


def test_a_recipient_the_provider_refuses_is_suppressed_not_dead_lettered(
    outreach: Outreach, postmark: PostmarkStub
) -> None:
    # given Postmark refusing the lead's address as inactive (ErrorCode 406: it bounced before
    # or complained), and a nudge queued for the same lead
    postmark.answer = "inactive"
    nudge = make_outreach(lead=outreach.lead, kind=Outreach.Kind.NUDGE, step=1)
    # when it is sent
    final = outreach_send(outreach_id=outreach.pk)
    # then, as for a 5xx at RCPT over SMTP: cancelled, the lead bounced, its other work
    # cancelled, no retry and no dead letter
    row = Outreach.objects.get(pk=outreach.pk)
    assert (final, row.state, row.error_class, row.attempts, row.send_attempts) == (
        State.CANCELLED,
        State.CANCELLED,
        ErrorClass.PERMANENT,
        0,
        0,
    )
    assert len(postmark.requests()) == 1
    assert not DeadLetter.objects.exists()
    assert Lead.objects.get(pk=outreach.lead_id).status == Lead.Status.BOUNCED
    assert Outreach.objects.get(pk=nudge.pk).state == State.CANCELLED
