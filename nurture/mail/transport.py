"""Sending: the only module that talks to the mail server: Django's SMTP backend by default, or
an email provider's HTTP API through a django-anymail backend (EMAIL_BACKEND, docs/email.md).

Idempotency has two layers. The state machine makes sure only one worker sends an outreach;
for the gap it cannot close (the server accepted the message but we died before recording
SENT, so a recovery resends), every outreach has one stable Message-ID, the same on every
try, so receiving systems can recognise the duplicate.
Message-IDs and reply addresses carry random tokens (the secrets module), recorded on the row
before SMTP: a reply names its conversation by them (nurture.intake.belief), so nobody who has
not seen the email can name it.
The recipient is always the Lead row's address: nothing the model wrote decides where mail goes.
The organization's compliance footer is appended here, by code (nurture.mail.compliance), never
by the model.
"""

from __future__ import annotations

import hashlib
import logging
import re
import secrets
import smtplib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from email.utils import formataddr
from typing import Any

import requests
from anymail.backends.base import BasePayload
from anymail.exceptions import (
    AnymailError,
    AnymailInvalidAddress,
    AnymailRecipientsRefused,
    AnymailSerializationError,
    AnymailUnsupportedFeature,
)
from django.conf import settings
from django.core import signing
from django.core.exceptions import ImproperlyConfigured
from django.core.mail import BadHeaderError, EmailMessage, get_connection
from django.core.mail.backends.base import BaseEmailBackend
from urllib3.exceptions import ConnectTimeoutError, MaxRetryError, NewConnectionError

from nurture.errors import (
    OptedOut,
    PermanentError,
    PipelineError,
    PossiblySent,
    RecipientRefused,
    TransientError,
)
from nurture.mail.compliance import email_body
from outreach.models import SUPPRESSED, Outreach, lead_status

log = logging.getLogger(__name__)

UNSUBSCRIBE_SALT = "nurture.unsubscribe"
# A Message-ID's id: no brackets, whitespace or control characters (a header line break, or a
# NUL PostgreSQL would refuse when we look the id up).
_ID = r"[^<>\s\x00-\x1f\x7f]+"
_MESSAGE_ID = re.compile(rf"^<?({_ID})>?$")
_IN_BRACKETS = re.compile(rf"<({_ID})>")


@dataclass(frozen=True)
class SentEmail:
    message_id: str  # ours, in the Message-ID header: the same on every try
    esp_message_id: str  # the email provider's id for it (anymail); empty over SMTP


def send_outreach_email(
    *, outreach: Outreach, before_send: Callable[[], None] = lambda: None, lead_status_now: str | None = None
) -> SentEmail:
    """Send the outreach's draft to its lead; return the Message-IDs it went out with.

    Raises OptedOut (cancel, do not retry), TransientError or PermanentError. Call it outside
    any transaction: it does network I/O. `before_send` runs with the connection open, right
    before the message goes (MAIL FROM): the send budget's slot is kept there, as close to the
    provider's count as we can get. `lead_status_now`: the lead's status, read by the caller
    just before (the sequence gate reads it for an intro or nudge); None: read here.
    """
    # Read the status fresh, not from a cached relation: an opt-out may have landed since the
    # outreach was loaded, and this is the last moment we can still honour it.
    status = lead_status(lead_id=outreach.lead_id) if lead_status_now is None else lead_status_now
    if status in SUPPRESSED:
        raise OptedOut(
            f"lead {outreach.lead_id} opted out, bounced or complained: outreach {outreach.id} not sent"
        )
    message = outreach_email(outreach=outreach)
    try:
        message.message()  # builds the MIME message: bad headers fail here, before connecting
    except BadHeaderError as exc:
        raise PermanentError(f"cannot build the email: {exc}") from exc
    esp_message_id = _deliver(message, before_send=before_send)
    return SentEmail(message_id=message.extra_headers["Message-ID"], esp_message_id=esp_message_id)


def outreach_email(*, outreach: Outreach) -> EmailMessage:
    if not outreach.draft_subject.strip() or not outreach.draft_body.strip():
        raise PermanentError(f"outreach {outreach.id} has no draft to send")
    lead, owner = outreach.lead, outreach.owner
    headers = {
        "Message-ID": outreach_message_id(outreach=outreach),
        "List-Unsubscribe": f"<{unsubscribe_url(lead_id=lead.id)}>",
        "List-Unsubscribe-Post": "List-Unsubscribe=One-Click",  # RFC 8058 one-click
        **_thread_headers(outreach=outreach),
    }
    reply_to = reply_address(token=outreach.reply_token) if outreach.reply_token else ""
    return EmailMessage(
        subject=outreach.draft_subject,
        body=email_body(draft_body=outreach.draft_body, footer=lead.organization.compliance_footer),
        from_email=formataddr((owner.name, _sender_address(outreach=outreach))),
        to=[lead.email],
        reply_to=[reply_to] if reply_to else None,
        headers=headers,
    )


def outreach_message_id(*, outreach: Outreach) -> str:
    """`<{random token}@{sender domain}>`: the one recorded on the outreach (before its first
    send, nurture.mail.sending), else a new one.

    Random, not derived from the id or the idempotency key: the old form
    (`<outreach-{id}.{sha256(key)[:16]}@...>`, sequential ids and hashes of public values) let
    anyone name our emails in a forged reply's References. A recorded Message-ID always wins,
    so a resend keeps it, and old rows keep theirs.
    """
    if outreach.message_id:
        return outreach.message_id
    return f"<{secrets.token_hex(16)}@{sender_domain(outreach=outreach)}>"


# The local part of a conversation's reply address: `reply+<token>`; the token is 32 lower-case
# hex digits (128 random bits), safe in any mail system's local part and in any letter case.
REPLY_LOCAL_PREFIX = "reply+"
_REPLY_TOKEN = re.compile(r"^reply\+([0-9a-f]{32})$")


def reply_token_new() -> str:
    """A new conversation token: random, never derived from ids or keys."""
    return secrets.token_hex(16)


def reply_address(*, token: str) -> str:
    """`reply+<token>@INBOUND_REPLY_DOMAIN`, the conversation's Reply-To; "" when no domain is
    configured (then emails carry no Reply-To and replies reach the From address)."""
    domain = settings.INBOUND_REPLY_DOMAIN
    return f"{REPLY_LOCAL_PREFIX}{token}@{domain}" if domain else ""


def reply_token_of(address: str) -> str | None:
    """The token of one of our reply addresses (`reply+<token>@INBOUND_REPLY_DOMAIN`, any
    letter case), or None: another address, or another domain."""
    local, _, domain = address.strip().lower().rpartition("@")
    found = _REPLY_TOKEN.match(local)
    if found is None or not settings.INBOUND_REPLY_DOMAIN or domain != settings.INBOUND_REPLY_DOMAIN:
        return None
    return found.group(1)


def sender_domain(*, outreach: Outreach) -> str:
    """The domain of the From address: what the provider's per-domain day counts (send budget)."""
    if outreach.mailbox_id is not None:
        return outreach.mailbox.domain  # type: ignore[union-attr]
    return outreach.lead.organization.sender_domain or "localhost"


def unsubscribe_token(*, lead_id: int) -> str:
    # Signed, not encrypted: the lead id is not a secret, forging someone else's opt-out is.
    # No expiry: an unsubscribe link must keep working for as long as the email exists.
    return signing.Signer(salt=UNSUBSCRIBE_SALT).sign(str(lead_id))


def lead_id_from_token(*, token: str) -> int:
    """The lead id in a token; raises django.core.signing.BadSignature if tampered or malformed."""
    value = signing.Signer(salt=UNSUBSCRIBE_SALT).unsign(token)
    if not value.isdigit():
        raise signing.BadSignature("unsubscribe token does not hold a lead id")
    return int(value)


def unsubscribe_url(*, lead_id: int) -> str:
    base = str(getattr(settings, "PUBLIC_BASE_URL", "http://127.0.0.1:8000")).rstrip("/")
    return f"{base}/unsubscribe/{unsubscribe_token(lead_id=lead_id)}/"


def classify_smtp_error(exc: Exception) -> PipelineError:
    """SMTP failures to the taxonomy: no connection or 4xx -> transient, 5xx refusal -> permanent.
    (A connection lost after DATA is PossiblySent: `_deliver` tells that case apart first.)"""
    if isinstance(exc, smtplib.SMTPRecipientsRefused):
        replies = list(exc.recipients.values())
        codes = [code for code, _ in replies]
        permanent = bool(codes) and all(code >= 500 for code in codes)
        bounced = permanent and all(_address_refused(code, text) for code, text in replies)
        cls = RecipientRefused if bounced else PermanentError if permanent else TransientError
        return cls(f"recipient refused: {exc.recipients}", status=max(codes, default=None))
    if isinstance(exc, smtplib.SMTPDataError) and _address_refused(exc.smtp_code, exc.smtp_error):
        return RecipientRefused(
            f"recipient refused at DATA: {exc.smtp_code} {exc.smtp_error!r}", status=exc.smtp_code
        )
    if isinstance(exc, smtplib.SMTPConnectError | smtplib.SMTPServerDisconnected):
        return TransientError(f"mail server unavailable: {exc}")
    if isinstance(exc, smtplib.SMTPResponseException):  # sender refused, DATA refused, auth...
        cls = PermanentError if exc.smtp_code >= 500 else TransientError
        return cls(f"mail server said {exc.smtp_code}: {exc.smtp_error!r}", status=exc.smtp_code)
    if isinstance(exc, smtplib.SMTPNotSupportedError):  # e.g. STARTTLS required but not offered
        return PermanentError(f"mail server does not support what we need: {exc}")
    return TransientError(f"mail server unreachable: {exc!r}")  # OSError, timeouts, other SMTP


# A 5xx refusal is about the address (a hard bounce), at RCPT or at DATA (servers that check
# recipients late), when its enhanced status says so (RFC 3463: 5.1.x addressing, 5.2.1 mailbox
# disabled), or, with no enhanced status, when its basic code means "no such mailbox". Others
# are not the lead's fault and must not suppress it: "5.7.1 relaying denied" is our server's
# configuration, "5.7.1 spam" our content, "5.2.2 mailbox full" passes.
_ADDRESS_CODES = (550, 551, 553)
_ENHANCED_STATUS = re.compile(rb"^\s*5\.(\d{1,3})\.(\d{1,3})\b")


def _address_refused(code: int, text: bytes | str) -> bool:
    raw = text if isinstance(text, bytes) else str(text).encode()
    if code < 500:
        return False
    enhanced = _ENHANCED_STATUS.match(raw)
    if enhanced is None:
        return code in _ADDRESS_CODES
    return enhanced.group(1) == b"1" or enhanced.groups() == (b"2", b"1")


def classify_esp_error(exc: AnymailError) -> PipelineError:
    """An email provider's API failure to the taxonomy, as classify_smtp_error does for SMTP.

    Only what certainly never reached the provider, or an answer saying it did not take the
    email, is a plain failure: no connection (refused, DNS, connect timeout) is transient, and
    so are 408 and 429; another 4xx, an invalid address, a feature it lacks are permanent; a
    recipient it refuses (anymail's AnymailRecipientsRefused: Postmark's inactive recipient,
    ErrorCode 406, and the like) is a hard bounce, as a 5xx at RCPT is over SMTP. Everything
    else may have queued the email, so it is PossiblySent (resent once, then a person decides):
    a 5xx (a provider can fail after queueing), a connection dropped or reset after the request
    went out, a read timeout, an answer we cannot read. Calling those transient let the retry
    rules send one email up to RETRY_MAX_ATTEMPTS times.
    """
    if isinstance(exc, AnymailRecipientsRefused):
        return RecipientRefused(f"email provider refused the recipient: {exc}")
    if isinstance(exc, AnymailInvalidAddress | AnymailUnsupportedFeature | AnymailSerializationError):
        return PermanentError(f"email provider cannot send this message: {exc}")
    status = exc.status_code
    if status is None and _never_reached_provider(exc):
        return TransientError(f"email provider unreachable: {exc}")
    if status in (408, 429):
        return TransientError(f"email provider asked us to come back later ({status}): {exc}", status=status)
    if status is not None and 400 <= status < 500:
        return PermanentError(f"email provider refused the message ({status}): {exc}", status=status)
    return PossiblySent(f"email provider may have the email (no clear refusal): {exc}", status=status)


# requests wraps urllib3's reason (a MaxRetryError holding it) in its own exception, which
# anymail wraps again: these are the links followed to find what happened first.
_NO_CONNECTION = (requests.ConnectTimeout, NewConnectionError, ConnectTimeoutError)


def _never_reached_provider(exc: BaseException) -> bool:
    """True when no connection was made (refused, DNS failed, connect timeout): the request
    never left. A TLS or proxy failure, a reset or a read timeout is not this: the request may
    have gone out."""
    seen: object = exc
    for _ in range(8):  # anymail -> requests -> MaxRetryError -> urllib3's reason, and some slack
        if isinstance(seen, _NO_CONNECTION):
            return True
        if isinstance(seen, MaxRetryError):
            seen = seen.reason
        elif isinstance(seen, BaseException):
            first = seen.args[0] if seen.args else None
            seen = seen.__cause__ or (first if isinstance(first, BaseException) else None)
        else:
            return False
    return False


def esp_idempotency_key(*, message_id: str) -> str:
    """The provider's idempotency key for an email: derived from its Message-ID, so a resend
    carries the same key and a provider that honours keys sends it once."""
    return "outreach-" + hashlib.sha256(message_id.encode()).hexdigest()[:40]


def _pass_idempotency_key(connection: BaseEmailBackend, message: EmailMessage) -> None:
    """Give the provider our key where it takes one. Resend reads an `Idempotency-Key` HTTP
    header (24 hours); Brevo an `idempotencyKey` in the request's email headers (15 minutes).
    Postmark, Mailgun, SendGrid and the others anymail 15.2 speaks document none that we found:
    the header is ignored there (and honoured by any that adds it), and the stable Message-ID
    is all the receiving side has to drop a second copy. Amazon SES (boto3, no session) gets
    none (docs/email.md)."""
    key = esp_idempotency_key(message_id=message.extra_headers["Message-ID"])
    session = getattr(connection, "session", None)
    if isinstance(session, requests.Session):  # anymail's HTTP backends, one session per send
        session.headers["Idempotency-Key"] = key
    if getattr(connection, "esp_name", "") in ("Brevo", "SendinBlue"):
        message.extra_headers["idempotencyKey"] = key


def _deliver(message: EmailMessage, *, before_send: Callable[[], None]) -> str:
    """Hand the message to the configured backend; return the provider's id for it ("" over SMTP)."""
    try:
        connection = get_connection(fail_silently=False)
    except ImproperlyConfigured as exc:  # e.g. an anymail backend without its API key
        raise PermanentError(f"the email backend is not configured: {exc}") from exc
    data_sent: Callable[[], bool] = lambda: False  # noqa: E731
    try:
        connection.open()
        _pass_idempotency_key(connection, message)
        _tracking_off(connection, message)
        data_sent = _watch_data(connection)
        before_send()
        sent = connection.send_messages([message])
    except AnymailError as exc:  # before OSError: anymail's HTTP errors are requests' OSErrors too
        _close_quietly(connection)
        raise classify_esp_error(exc) from exc
    except (smtplib.SMTPException, OSError) as exc:
        _close_quietly(connection)
        # After DATA, a lost connection or a timeout is not a refusal: the server may have the
        # email (a refusal is an answer: SMTPResponseException). Resending blindly mails twice.
        if data_sent() and not isinstance(exc, smtplib.SMTPResponseException):
            raise PossiblySent(f"mail server gave no answer after DATA: {exc!r}") from exc
        raise classify_smtp_error(exc) from exc
    # Accepted by the server: a failing QUIT from here on must not turn into a resend.
    _close_quietly(connection)
    if sent != 1:
        raise TransientError("mail server did not accept the message")
    return _esp_message_id(message)


def _tracking_off(connection: BaseEmailBackend, message: EmailMessage) -> None:
    """Ask the provider for no open pixel and no rewritten links (anymail's `track_opens` and
    `track_clicks`, which each backend turns into its API's fields: Postmark's TrackOpens and
    TrackLinks, Mailgun's o:tracking-*, SendGrid's tracking_settings, ...). Cold email with
    them reads as bulk mail to spam filters and shares the tracking domain's reputation, and
    nothing here reads opens or clicks. A provider whose API has no per-message switch (Amazon
    SES, Brevo, ...) would refuse the send if given one: it tracks as its account or
    configuration set says (docs/email.md)."""
    if esp_takes_tracking_flags(type(connection)):
        message.track_clicks = False  # type: ignore[attr-defined]  # read by anymail's payloads
        message.track_opens = False  # type: ignore[attr-defined]


def esp_takes_tracking_flags(backend: type) -> bool:
    """Whether an email backend's API takes per-message tracking flags: an anymail backend
    whose payload class implements both setters (anymail's base refuses them as unsupported).
    Cheap enough per send: a look through the backend module's names."""
    module = sys.modules.get(backend.__module__)
    payloads = [
        cls
        for cls in (vars(module).values() if module else ())
        if isinstance(cls, type) and issubclass(cls, BasePayload) and cls.__module__ == backend.__module__
    ]
    setters = ("set_track_clicks", "set_track_opens")
    return any(
        all(getattr(cls, name) is not getattr(BasePayload, name) for name in setters) for cls in payloads
    )


def _esp_message_id(message: EmailMessage) -> str:
    """anymail's `anymail_status.message_id`: one id, or a set when it differs per recipient
    (we send to one recipient, but a provider may still answer with a set)."""
    status = getattr(message, "anymail_status", None)
    found = getattr(status, "message_id", None)
    if found is None:
        return ""
    return " ".join(sorted(str(item) for item in found)) if isinstance(found, set) else str(found)


def _watch_data(connection: BaseEmailBackend) -> Callable[[], bool]:
    """Note when the DATA command goes out on Django's SMTP connection; a backend that is not
    SMTP (console, locmem) has no DATA, so nothing is ever "possibly sent" there."""
    smtp = getattr(connection, "connection", None)
    if not isinstance(smtp, smtplib.SMTP):
        return lambda: False
    started = False
    data = smtp.data

    def watched(msg: Any) -> tuple[int, bytes]:
        nonlocal started
        started = True
        return data(msg)

    smtp.data = watched  # type: ignore[method-assign]
    return lambda: started


def _close_quietly(connection: BaseEmailBackend) -> None:
    try:
        connection.close()
    except (smtplib.SMTPException, OSError):
        log.warning("SMTP connection did not close cleanly", exc_info=True)


def _sender_address(*, outreach: Outreach) -> str:
    """The mailbox it leaves from, else the organization's sender address (the default mailbox)."""
    if outreach.mailbox_id is not None:
        return outreach.mailbox.address  # type: ignore[union-attr]
    return outreach.lead.organization.sender_address


def _thread_headers(*, outreach: Outreach) -> dict[str, str]:
    """In-Reply-To names the message we answer (for a reply, the prospect's); References is the
    thread above it (for a reply, our email they answered), then that message: RFC 5322 3.6.4,
    what mail clients thread by."""
    if not outreach.in_reply_to:
        return {}
    parent = message_id_normalised(outreach.in_reply_to)
    if parent is None:
        # Came from an inbound webhook: never let it inject headers; send unthreaded instead.
        log.warning(
            "outreach %s: unusable in_reply_to %r, sending unthreaded", outreach.id, outreach.in_reply_to
        )
        return {}
    chain = [ref for ref in message_ids(outreach.references) if ref != parent]
    return {"In-Reply-To": parent, "References": " ".join([*chain, parent])}


def message_id_normalised(value: str) -> str | None:
    """One Message-ID as `<id>` (a webhook may send it without brackets); None if `value` is not
    exactly one id: a stray word or an attempt to inject a header line is not a Message-ID."""
    match = _MESSAGE_ID.match(value.strip())
    return f"<{match.group(1)}>" if match else None


def message_id_bare(value: str) -> str:
    """An id without its angle brackets: providers report and quote the same id with or without
    them (Mailgun's ids have brackets, SendGrid's and Postmark's not)."""
    return value.strip().removeprefix("<").removesuffix(">")


def message_ids(value: str) -> list[str]:
    """The `<id>`s of a References header (or of our stored `references`), in order; anything
    between them is dropped."""
    return [f"<{found}>" for found in _IN_BRACKETS.findall(value)]
