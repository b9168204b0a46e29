"""POST /hooks/replies/: signed, idempotent on message_id, threads the reply, never a 500."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta
from threading import Barrier
from typing import Any

import pytest
from django.db import connection
from django.test import Client
from django.utils import timezone
from hypothesis import HealthCheck, event, given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from nurture.intake.replies import signature_header
from outreach.idempotency import reply_key
from outreach.models import Lead, Outreach, State, UnverifiedInbound
from outreach.tiers import Tier
from tests.conftest import WEBHOOK_SECRET
from tests.factories import make_lead, make_org, make_outreach, make_owner

URL = "/hooks/replies/"
LEAD_EMAIL = "the-lead"  # placeholder the fuzz test swaps for the real lead's address

pytestmark = pytest.mark.usefixtures("webhook_secret")


def _post(
    client: Client,
    payload: Any,
    *,
    secret: str = WEBHOOK_SECRET,
    at: float | None = None,
    header: str | None = None,
) -> Any:
    body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    signature = header or signature_header(body=body, secret=secret, timestamp=int(at or time.time()))
    return client.post(URL, data=body, content_type="application/json", headers={"X-Signature": signature})


def _reply(lead: Lead, **overrides: Any) -> dict[str, Any]:
    return {
        "lead_email": lead.email,
        "message_id": "<reply-1@prospect.example>",
        "subject": "Re: hello",
        "body": "Sounds good, call me.",
        **overrides,
    }


def test_valid_reply_queues_top_tier_work_threaded_under_their_message(client: Client, lead: Lead) -> None:
    # given a lead with emails sent and a nudge queued
    # when the provider posts its reply
    response = _post(client, _reply(lead))
    # then 202 with the new outreach: reply tier, the inbound text, answering their message
    # under the latest email we sent (the payload did not say which one they answered)
    assert response.status_code == 202
    body = response.json()
    assert body["created"] is True
    reply = Outreach.objects.get(id=body["outreach_id"])
    assert (reply.kind, reply.tier, reply.state) == ("reply", Tier.REPLY, State.QUEUED)
    assert reply.idempotency_key == "reply:<reply-1@prospect.example>"
    assert reply.context == {
        "inbound": {
            "subject": "Re: hello",
            "body": "Sounds good, call me.",
            "message_id": "<reply-1@prospect.example>",
        }
    }
    assert (reply.in_reply_to, reply.references) == ("<reply-1@prospect.example>", "<nudge-1@us>")
    assert reply.owner_id == lead.owner_id
    # and the lead's pending nudge is cancelled, the lead marked replied
    assert Outreach.objects.get(lead=lead, step=2).state == State.CANCELLED
    lead.refresh_from_db()
    assert lead.status == Lead.Status.REPLIED


def test_reply_from_a_lead_never_emailed_answers_their_message_alone(client: Client, db: None) -> None:
    lead = make_lead()
    response = _post(client, _reply(lead))
    assert response.status_code == 202
    reply = Outreach.objects.get(id=response.json()["outreach_id"])
    assert (reply.in_reply_to, reply.references) == ("<reply-1@prospect.example>", "")


def test_bad_signature_is_refused(client: Client, lead: Lead) -> None:
    # given a body signed with another secret, and one with no signature at all
    wrong = _post(client, _reply(lead), secret="not-the-secret")
    missing = client.post(URL, data=json.dumps(_reply(lead)), content_type="application/json")
    garbled = _post(client, _reply(lead), header="t=abc,v1=zz")
    # then all are 401 and nothing was recorded
    assert [r.status_code for r in (wrong, missing, garbled)] == [401, 401, 401]
    assert wrong.json() == {"error": "bad signature", "detail": "X-Signature does not match the body"}
    assert missing.json()["detail"] == "the X-Signature header is missing"
    assert not Outreach.objects.filter(kind="reply").exists()


def test_body_changed_after_signing_is_refused(client: Client, lead: Lead) -> None:
    body = json.dumps(_reply(lead)).encode()
    header = signature_header(body=body, secret=WEBHOOK_SECRET, timestamp=int(time.time()))
    tampered = body.replace(b"call me", b"wire me money")
    response = _post(client, tampered, header=header)
    assert response.status_code == 401


@pytest.mark.parametrize("skew_s", [-301, 301, -3600])
def test_stale_or_future_timestamp_is_refused(client: Client, lead: Lead, skew_s: int) -> None:
    # given a correctly signed request whose timestamp is more than 5 minutes off
    response = _post(client, _reply(lead), at=time.time() + skew_s)
    # then it is refused as a possible replay
    assert response.status_code == 401
    assert "5 minutes" in response.json()["detail"]


def test_timestamp_within_the_window_is_accepted(client: Client, lead: Lead) -> None:
    assert _post(client, _reply(lead), at=time.time() - 290).status_code == 202


def test_signature_rotation_accepts_any_listed_v1(client: Client, lead: Lead) -> None:
    body = json.dumps(_reply(lead)).encode()
    stamp = int(time.time())
    old = signature_header(body=body, secret="old-secret", timestamp=stamp).split(",")[1]
    header = f"{signature_header(body=body, secret=WEBHOOK_SECRET, timestamp=stamp)},{old}"
    assert _post(client, body, header=header).status_code == 202


def test_duplicate_delivery_50_times_creates_one_outreach(client: Client, lead: Lead) -> None:
    # when the provider delivers the same reply 50 times
    responses = [_post(client, _reply(lead)) for _ in range(50)]
    # then the first creates it and the 49 others return the same outreach
    assert {r.status_code for r in responses} == {202}
    assert [r.json()["created"] for r in responses] == [True] + [False] * 49
    assert len({r.json()["outreach_id"] for r in responses}) == 1
    assert Outreach.objects.filter(lead=lead, kind="reply").count() == 1


@pytest.mark.django_db(transaction=True)
def test_duplicate_delivery_50_times_concurrently_creates_one_outreach() -> None:
    # given a lead with a queued nudge, and 50 identical signed deliveries
    lead = make_lead()
    make_outreach(lead=lead, kind=Outreach.Kind.NUDGE, step=1)
    payload = _reply(lead)
    barrier = Barrier(25)

    def deliver(n: int) -> tuple[int, dict[str, Any]]:
        try:
            if n < 25:
                barrier.wait(timeout=10)  # the first 25 arrive together
            response = _post(Client(), payload)
            return response.status_code, response.json()
        finally:
            connection.close()  # each thread has its own connection: leave none behind

    # when they arrive on 25 threads at once
    with ThreadPoolExecutor(max_workers=25) as pool:
        results = list(pool.map(deliver, range(50)))
    # then exactly one created the reply, all answered 202 with its id, one nudge cancel happened
    assert {status for status, _ in results} == {202}
    assert sum(body["created"] for _, body in results) == 1
    assert len({body["outreach_id"] for _, body in results}) == 1
    assert Outreach.objects.filter(lead=lead, kind="reply").count() == 1
    assert Outreach.objects.get(lead=lead, kind="nudge").events.filter(to_state=State.CANCELLED).count() == 1


def test_unknown_lead_is_404_with_a_clear_message(client: Client, db: None) -> None:
    response = _post(
        client, {"lead_email": "nobody@nowhere.example", "message_id": "<m@x>", "subject": "", "body": "hi"}
    )
    assert response.status_code == 404
    assert response.json() == {
        "error": "unknown lead",
        "detail": "no lead has the email address 'nobody@nowhere.example'",
    }


def test_lead_email_is_matched_case_insensitively(client: Client, lead: Lead) -> None:
    assert _post(client, _reply(lead, lead_email=lead.email.upper())).status_code == 202


def test_lead_in_two_organizations_goes_to_the_one_that_emailed_last(client: Client, db: None) -> None:
    # given the same address in two organizations, the second emailed more recently
    now = timezone.now()
    older = make_lead(owner=make_owner(organization=make_org()), email="pat@prospect.example")
    newer = make_lead(owner=make_owner(organization=make_org()), email="pat@prospect.example")
    make_outreach(lead=newer, state=State.SENT, sent_at=now - timedelta(hours=1), message_id="<new@us>")
    make_outreach(lead=older, state=State.SENT, sent_at=now - timedelta(days=2), message_id="<old@us>")
    # when the reply arrives
    reply = Outreach.objects.get(id=_post(client, _reply(older)).json()["outreach_id"])
    # then it belongs to the organization that emailed last, threaded under that email
    assert (reply.lead_id, reply.references) == (newer.pk, "<new@us>")


@pytest.mark.parametrize("answered", ["<old@us>", "old@us"])
def test_reply_naming_our_message_goes_to_the_organization_that_sent_it(
    client: Client, db: None, answered: str
) -> None:
    # given the same address in two organizations, the second emailed more recently
    now = timezone.now()
    older = make_lead(owner=make_owner(organization=make_org()), email="pat@prospect.example")
    newer = make_lead(owner=make_owner(organization=make_org()), email="pat@prospect.example")
    make_outreach(lead=newer, state=State.SENT, sent_at=now - timedelta(hours=1), message_id="<new@us>")
    make_outreach(lead=older, state=State.SENT, sent_at=now - timedelta(days=2), message_id="<old@us>")
    # when the reply says it answers the older organization's email (brackets or not)
    response = _post(client, _reply(older, lead_email="PAT@prospect.example", in_reply_to=answered))
    # then it lands there, not with whoever emailed last
    reply = Outreach.objects.get(id=response.json()["outreach_id"])
    assert (reply.lead_id, reply.in_reply_to, reply.references) == (
        older.pk,
        "<reply-1@prospect.example>",
        "<old@us>",
    )
    assert Lead.objects.get(pk=newer.pk).status == Lead.Status.ACTIVE


def test_reply_naming_another_leads_conversation_is_409_and_kept_unverified(client: Client, db: None) -> None:
    # given a colleague of the lead, also a lead, and the lead's conversation
    pat = make_lead(email="pat@prospect.example")
    sam = make_lead(owner=pat.owner, email="sam@prospect.example")
    make_outreach(lead=pat, state=State.SENT, sent_at=timezone.now(), message_id="<pats@us>")
    # when the integration posts a message from sam that names pat's email
    response = _post(client, _reply(sam, in_reply_to="<pats@us>"))
    # then it is not believed: nothing queued for either, and it waits for a person
    assert response.status_code == 409
    assert response.json()["field"] == "in_reply_to"
    assert not Outreach.objects.filter(kind=Outreach.Kind.REPLY).exists()
    held = UnverifiedInbound.objects.get(pk=response.json()["unverified_id"])
    assert (held.lead_id, held.sender, held.reason, held.provider) == (
        pat.pk,
        "sam@prospect.example",
        "sender_not_lead",
        "webhook",
    )


def test_reply_naming_a_message_we_never_sent_falls_back_to_the_sender(client: Client, lead: Lead) -> None:
    response = _post(client, _reply(lead, in_reply_to="<forwarded@elsewhere.example>"))
    reply = Outreach.objects.get(id=response.json()["outreach_id"])
    # their message named another thread: ours carries that thread, not a guess
    assert (reply.lead_id, reply.references) == (lead.pk, "<forwarded@elsewhere.example>")


@pytest.mark.parametrize(
    ("payload", "field"),
    [
        (b"{not json", "body"),
        (b"", "body"),
        (b"[1, 2]", "body"),
        (b'"a string"', "body"),
        ({"message_id": "<m@x>", "subject": "s", "body": "b"}, "lead_email"),
        ({"lead_email": "a@x.example", "subject": "s", "body": "b"}, "message_id"),
        ({"lead_email": "a@x.example", "message_id": "<m@x>", "body": "b"}, "subject"),
        ({"lead_email": "a@x.example", "message_id": "<m@x>", "subject": "s"}, "body"),
        ({"lead_email": 42, "message_id": "<m@x>", "subject": "s", "body": "b"}, "lead_email"),
        ({"lead_email": "a@x.example", "message_id": None, "subject": "s", "body": "b"}, "message_id"),
        ({"lead_email": "a@x.example", "message_id": "<m@x>", "subject": ["s"], "body": "b"}, "subject"),
        ({"lead_email": "a@x.example", "message_id": "<m@x>", "subject": "s", "body": {"t": 1}}, "body"),
        ({"lead_email": "not-an-email", "message_id": "<m@x>", "subject": "s", "body": "b"}, "lead_email"),
        ({"lead_email": "a@x.example", "message_id": "  ", "subject": "s", "body": "b"}, "message_id"),
        (
            {"lead_email": "a@x.example", "message_id": "<m\r\nBcc: x@y>", "subject": "s", "body": "b"},
            "message_id",
        ),
        (
            b'{"lead_email": "a@x.example", "message_id": "<m@x>", "subject": "\\ud800", "body": "b"}',
            "subject",
        ),
        (
            {
                "lead_email": "a@x.example",
                "message_id": "<m@x>",
                "subject": "s",
                "body": "b",
                "in_reply_to": 1,
            },
            "in_reply_to",
        ),
        (
            {
                "lead_email": "a@x.example",
                "message_id": "<m@x>",
                "subject": "s",
                "body": "b",
                "in_reply_to": "<a> <b>",
            },
            "in_reply_to",
        ),
        (
            {
                "lead_email": "a@x.example",
                "message_id": "<m@x>",
                "subject": "s",
                "body": "b",
                "in_reply_to": "<a@b>\r\nBcc: x@y",
            },
            "in_reply_to",
        ),
    ],
)
def test_malformed_body_is_400_naming_the_field(client: Client, db: None, payload: Any, field: str) -> None:
    response = _post(client, payload)
    assert response.status_code == 400
    assert response.json()["field"] == field


def test_nul_characters_in_the_text_are_dropped(client: Client, lead: Lead) -> None:
    response = _post(client, _reply(lead, subject="Re\u0000: hi", body="ok\u0000"))
    assert response.status_code == 202
    inbound = Outreach.objects.get(id=response.json()["outreach_id"]).context["inbound"]
    assert (inbound["subject"], inbound["body"]) == ("Re: hi", "ok")


def test_very_long_message_id_is_keyed_by_its_hash(client: Client, lead: Lead) -> None:
    message_id = "<" + "x" * 500 + "@p>"
    response = _post(client, _reply(lead, message_id=message_id))
    assert response.status_code == 202
    outreach = Outreach.objects.get(id=response.json()["outreach_id"])
    assert outreach.idempotency_key == reply_key(message_id=message_id)
    assert outreach.idempotency_key.startswith("reply:sha256:")
    assert outreach.context["inbound"]["message_id"] == message_id


def test_reply_from_an_opted_out_lead_is_recorded_but_never_answered(client: Client, db: None) -> None:
    lead = make_lead(status=Lead.Status.OPTED_OUT)
    response = _post(client, _reply(lead))
    assert response.status_code == 202
    assert Outreach.objects.get(id=response.json()["outreach_id"]).state == State.CANCELLED
    lead.refresh_from_db()
    assert lead.status == Lead.Status.OPTED_OUT


def test_only_post_is_allowed(client: Client, db: None) -> None:
    assert client.get(URL).status_code == 405


def test_unexpected_failure_is_a_clean_503_not_a_500(client: Client, lead: Lead, monkeypatch: Any) -> None:
    # given the database layer failing in a way nobody planned for
    def boom(**_: Any) -> None:
        raise RuntimeError("database went away")

    monkeypatch.setattr("nurture.views.reply_receive", boom)
    # when a valid reply arrives, then the provider is told to retry, in JSON
    response = _post(client, _reply(lead))
    assert response.status_code == 503
    assert response["Retry-After"] == "30"
    assert response.json()["error"] == "temporarily unavailable"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=6,
)
fields = {
    "lead_email": st.one_of(st.just(LEAD_EMAIL), st.emails(), st.text(), json_values),
    "message_id": st.one_of(st.text(), json_values),
    "subject": st.one_of(st.text(), json_values),
    "body": st.one_of(st.text(), json_values),
    "in_reply_to": st.one_of(st.text(), st.just("<intro@us>"), json_values),
}
# Complete payloads (mostly strings, reaching the database) and ones with fields missing.
payloads = st.fixed_dictionaries(
    {
        **fields,
        "lead_email": st.just(LEAD_EMAIL),
        "message_id": st.text(),
        "subject": st.text(),
        "body": st.text(),
    }
) | st.fixed_dictionaries({}, optional=fields)


@hypothesis_settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(payload=st.one_of(payloads, json_values), signed=st.booleans(), header=st.text(max_size=80))
def test_fuzzed_bodies_and_headers_never_produce_a_500(
    client: Client, lead: Lead, payload: Any, signed: bool, header: str
) -> None:
    # given any JSON body (sometimes naming the real lead), correctly signed or with any X-Signature
    if isinstance(payload, dict) and payload.get("lead_email") == LEAD_EMAIL:
        payload["lead_email"] = lead.email
    body = json.dumps(payload).encode()
    stamp = int(time.time())
    sent_header = signature_header(body=body, secret=WEBHOOK_SECRET, timestamp=stamp) if signed else header
    # when it is posted
    try:
        response = client.post(
            URL, data=body, content_type="application/json", headers={"X-Signature": sent_header}
        )
    except ValueError:  # the test client itself refuses header values with a newline
        return
    # then the answer is one of the contract's, never a server error
    event(f"status {response.status_code}")
    assert response.status_code in {202, 400, 401, 404, 409}
    assert "error" in response.json() or response.status_code == 202


@hypothesis_settings(
    max_examples=100, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(raw=st.binary(max_size=200))
def test_fuzzed_raw_bytes_signed_never_produce_a_500(client: Client, lead: Lead, raw: bytes) -> None:
    response = _post(client, raw)
    event(f"status {response.status_code}")
    assert response.status_code in {202, 400, 404, 409}


def test_oversized_body_is_413(client: Client, lead: Lead, settings: Any) -> None:
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 100
    response = _post(client, _reply(lead, body="x" * 500))
    assert response.status_code == 413
    assert response.json()["error"] == "payload too large"


def test_a_reply_whose_subject_asks_to_unsubscribe_opts_the_lead_out(client: Client, lead: Lead) -> None:
    # when our signed webhook delivers a new email from the lead titled "Unsubscribe", body empty
    response = _post(client, _reply(lead, subject="Unsubscribe", body=""))
    # then it is recorded, cancelled, and the lead is opted out (nurture/intake/opt_out.py)
    assert response.status_code == 202
    lead.refresh_from_db()
    assert lead.status == Lead.Status.OPTED_OUT
    assert Outreach.objects.get(lead=lead, kind=Outreach.Kind.REPLY).state == State.CANCELLED
