"""HTTP endpoints of intake: parse and check the request, call one service, shape the answer.

The reply webhook answers JSON and never a 500: an unexpected failure (e.g. the database is
down) becomes a 503 the provider will retry, and is logged with its traceback.
"""

from __future__ import annotations

import logging
import time

from django.conf import settings
from django.core import signing
from django.core.exceptions import RequestDataTooBig
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.views.decorators.csrf import csrf_exempt, csrf_protect
from django.views.decorators.http import require_http_methods, require_POST

from nurture.intake.belief import UnknownLead
from nurture.intake.replies import (
    NotBelieved,
    PayloadError,
    SignatureError,
    reply_payload_parse,
    reply_receive,
    signature_verify,
)
from nurture.mail.transport import lead_id_from_token
from nurture.sequence import lead_get, lead_opt_out
from outreach.models import Lead

log = logging.getLogger(__name__)

ONE_CLICK = "One-Click"  # RFC 8058: the body of a one-click unsubscribe is List-Unsubscribe=One-Click


@csrf_exempt  # authenticated by its HMAC signature, not by a browser session
@require_POST
def replies_webhook(request: HttpRequest) -> JsonResponse:
    try:
        return _replies_webhook(request)
    except Exception:
        log.exception("reply webhook failed")
        response = _error(503, "temporarily unavailable", "the reply was not recorded: retry later")
        response["Retry-After"] = "30"
        return response


def _replies_webhook(request: HttpRequest) -> JsonResponse:
    try:
        raw = request.body
    except RequestDataTooBig:
        return _error(413, "payload too large", f"the limit is {settings.DATA_UPLOAD_MAX_MEMORY_SIZE} bytes")
    try:
        signature_verify(
            header=request.headers.get("X-Signature"),
            body=raw,
            secret=settings.WEBHOOK_SECRET,
            now=time.time(),
        )
    except SignatureError as exc:
        return _error(401, "bad signature", str(exc))
    try:
        reply = reply_payload_parse(raw=raw)
    except PayloadError as exc:
        return JsonResponse({"error": "bad payload", "field": exc.field, "detail": str(exc)}, status=400)
    try:
        result = reply_receive(reply=reply)
    except UnknownLead as exc:
        return _error(404, "unknown lead", str(exc))
    except NotBelieved as exc:
        # in_reply_to names another lead's conversation: kept for a person, not answered.
        body = {"error": "not the lead's conversation", "field": "in_reply_to", "detail": str(exc)}
        return JsonResponse({**body, "unverified_id": exc.unverified_id}, status=409)
    recorded = {"outreach_id": result.outreach_id, "created": result.created, "joined": result.joined}
    return JsonResponse(recorded, status=202)


def _error(status: int, error: str, detail: str) -> JsonResponse:
    return JsonResponse({"error": error, "detail": detail}, status=status)


@csrf_exempt  # the RFC 8058 one-click POST comes from a mail provider with no CSRF cookie
@require_http_methods(["GET", "POST"])
def unsubscribe(request: HttpRequest, token: str) -> HttpResponse:
    if request.method == "POST" and _one_click(request):
        # The signed token is the authorisation here: only the recipient's email carries it.
        return _unsubscribe_done(request, token)
    return _unsubscribe_page(request, token)


def _one_click(request: HttpRequest) -> bool:
    try:
        return request.POST.get("List-Unsubscribe") == ONE_CLICK
    except Exception:  # a malformed multipart body: not one-click; the CSRF-checked path refuses it
        return False


@csrf_protect  # our own confirmation form: a normal CSRF-checked browser POST
def _unsubscribe_page(request: HttpRequest, token: str) -> HttpResponse:
    if request.method == "POST":
        return _unsubscribe_done(request, token)
    try:
        lead = lead_get(lead_id=lead_id_from_token(token=token))
    except signing.BadSignature:
        return _invalid(request)
    except Lead.DoesNotExist:
        return _gone(request)
    # GET never changes anything: link scanners and previews fetch GET links on their own.
    context = {"email": lead.email, "organization": lead.organization.name, "done": False}
    context["already"] = lead.status == Lead.Status.OPTED_OUT
    return render(request, "nurture/unsubscribe.html", context)


def _unsubscribe_done(request: HttpRequest, token: str) -> HttpResponse:
    try:
        result = lead_opt_out(lead_id=lead_id_from_token(token=token))
    except signing.BadSignature:
        return _invalid(request)
    except Lead.DoesNotExist:
        return _gone(request)
    context = {
        "email": result.email,
        "organization": result.organization,
        "done": True,
        "already": result.already,
    }
    return render(request, "nurture/unsubscribe.html", context)


def _invalid(request: HttpRequest) -> HttpResponse:
    return render(request, "nurture/unsubscribe_invalid.html", {"reason": "invalid"}, status=400)


def _gone(request: HttpRequest) -> HttpResponse:
    return render(request, "nurture/unsubscribe_invalid.html", {"reason": "gone"}, status=404)
