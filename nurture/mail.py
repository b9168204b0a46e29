"""Sending: the only module that talks SMTP (Django's SMTP backend).

Idempotency has two layers. The state machine makes sure only one worker sends an outreach;
for the gap it cannot close (the server accepted the message but we died before recording
SENT, so a recovery resends), every outreach has one stable Message-ID, the same on every
try, so receiving systems can recognise the duplicate.
The recipient is always the Lead row's address: nothing the model wrote decides where mail goes.
"""

from __future__ import annotations

import hashlib
import logging
import re
import smtplib
from collections.abc import Callable
from email.utils import formataddr, parseaddr
from typing import Any

from django.conf import settings
from django.core import signing
from django.core.mail import BadHeaderError, EmailMessage, get_connection
from django.core.mail.backends.base import BaseEmailBackend

from nurture.errors import OptedOut, PermanentError, PipelineError, PossiblySent, TransientError
from outreach.models import Lead, Outreach

log = logging.getLogger(__name__)

UNSUBSCRIBE_SALT = "nurture.unsubscribe"
_MESSAGE_ID = re.compile(r"^<?([^<>\s]+)>?$")


def send_outreach_email(*, outreach: Outreach) -> str:
    """Send the outreach's draft to its lead; return the Message-ID used.

    Raises OptedOut (cancel, do not retry), TransientError or PermanentError. Call it outside
    any transaction: it does network I/O.
    """
    # Read the status fresh, not from a cached relation: an opt-out may have landed since the
    # outreach was loaded, and this is the last moment we can still honour it.
    if Lead.objects.filter(id=outreach.lead_id, status=Lead.Status.OPTED_OUT).exists():
        raise OptedOut(f"lead {outreach.lead_id} opted out: outreach {outreach.id} not sent")
    message = outreach_email(outreach=outreach)
    try:
        message.message()  # builds the MIME message: bad headers fail here, before connecting
    except BadHeaderError as exc:
        raise PermanentError(f"cannot build the email: {exc}") from exc
    _deliver(message)
    return message.extra_headers["Message-ID"]


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
    return EmailMessage(
        subject=outreach.draft_subject,
        body=outreach.draft_body,
        from_email=formataddr((owner.name, _sender_address(outreach=outreach))),
        to=[lead.email],
        headers=headers,
    )


def outreach_message_id(*, outreach: Outreach) -> str:
    """`<outreach-{id}.{hash of the idempotency key}@{sender domain}>`: the same on every try.

    A Message-ID already recorded on the outreach wins, so a later change of the sender
    address cannot give a resend a new identity.
    """
    if outreach.message_id:
        return outreach.message_id
    digest = hashlib.sha256(outreach.idempotency_key.encode()).hexdigest()[:16]
    domain = _sender_address(outreach=outreach).rpartition("@")[2] or "localhost"
    return f"<outreach-{outreach.id}.{digest}@{domain}>"


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
        codes = [code for code, _ in exc.recipients.values()]
        permanent = bool(codes) and all(code >= 500 for code in codes)
        cls = PermanentError if permanent else TransientError
        return cls(f"recipient refused: {exc.recipients}", status=max(codes, default=None))
    if isinstance(exc, smtplib.SMTPConnectError | smtplib.SMTPServerDisconnected):
        return TransientError(f"mail server unavailable: {exc}")
    if isinstance(exc, smtplib.SMTPResponseException):  # sender refused, DATA refused, auth...
        cls = PermanentError if exc.smtp_code >= 500 else TransientError
        return cls(f"mail server said {exc.smtp_code}: {exc.smtp_error!r}", status=exc.smtp_code)
    if isinstance(exc, smtplib.SMTPNotSupportedError):  # e.g. STARTTLS required but not offered
        return PermanentError(f"mail server does not support what we need: {exc}")
    return TransientError(f"mail server unreachable: {exc!r}")  # OSError, timeouts, other SMTP


def _deliver(message: EmailMessage) -> None:
    connection = get_connection(fail_silently=False)
    data_sent: Callable[[], bool] = lambda: False  # noqa: E731
    try:
        connection.open()
        data_sent = _watch_data(connection)
        sent = connection.send_messages([message])
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
    sender = outreach.lead.organization.sender_email or settings.DEFAULT_FROM_EMAIL
    return parseaddr(sender)[1] or sender


def _thread_headers(*, outreach: Outreach) -> dict[str, str]:
    if not outreach.in_reply_to:
        return {}
    match = _MESSAGE_ID.match(outreach.in_reply_to.strip())
    if not match:
        # Came from an inbound webhook: never let it inject headers; send unthreaded instead.
        log.warning(
            "outreach %s: unusable in_reply_to %r, sending unthreaded", outreach.id, outreach.in_reply_to
        )
        return {}
    parent = f"<{match.group(1)}>"
    # We know only the parent's id, and RFC 5322 says References then starts with it.
    return {"In-Reply-To": parent, "References": parent}
