"""Reading the providers' authentication and spam verdicts (nurture.intake.verdicts): pure, table-driven.

Expected verdicts are written out by hand, not built from the module's tables."""

from __future__ import annotations

from typing import Any

import pytest
from anymail.inbound import AnymailInboundMessage
from django.http import QueryDict

from nurture.intake.verdicts import Verdict, authentication_results, verdicts_read


@pytest.mark.parametrize(
    ("header", "expected"),
    [
        (
            "mx.google.com; dkim=pass header.i=@prospect.example; spf=pass (google.com: domain of "
            "pat@prospect.example designates 1.2.3.4 as permitted sender) smtp.mailfrom=pat@prospect.example; "
            "dmarc=pass (p=REJECT sp=REJECT dis=NONE) header.from=prospect.example",
            [("dkim", "pass", False), ("spf", "pass", False), ("dmarc", "pass", False)],
        ),
        (
            "amazonses.com; spf=softfail (spfCheck: 203.0.113.9 is neither permitted nor denied) "
            "smtp.mailfrom=pat@prospect.example; dkim=temperror; dmarc=fail header.from=prospect.example;",
            [("spf", "softfail", True), ("dkim", "temperror", False), ("dmarc", "fail", True)],
        ),
        (
            "inbound.example; spf=none; dkim=none; dmarc=none; arc=fail",
            [("spf", "none", False), ("dkim", "none", False), ("dmarc", "none", False)],
        ),
        ("example.net; DKIM=PermError (bad key) header.d=x", [("dkim", "permerror", True)]),
        ("example.net; none", []),
    ],
)
def test_authentication_results_are_read_per_method(
    header: str, expected: list[tuple[str, str, bool]]
) -> None:
    found = authentication_results([header])

    assert [(v.check, v.result, v.failed) for v in found] == expected


def _message(headers: list[tuple[str, str]], **attributes: Any) -> AnymailInboundMessage:
    message = AnymailInboundMessage.construct(from_email="pat@prospect.example", headers=headers, text="Hi")
    for name, value in attributes.items():
        setattr(message, name, value)
    return message


def test_received_spf_mailgun_headers_and_the_spam_flag() -> None:
    message = _message(
        [
            (
                "Received-SPF",
                "SoftFail (mailgun.org: transitioning domain of prospect.example) client-ip=1.2.3.4",
            ),
            ("X-Mailgun-Spf", "Neutral"),
            ("X-Mailgun-Dkim-Check-Result", "Fail"),
        ],
        spam_detected=True,
    )

    assert verdicts_read(message=message) == (
        Verdict("Received-SPF", "spf", "softfail"),
        Verdict("X-Mailgun-Spf", "spf", "neutral"),
        Verdict("X-Mailgun-Dkim-Check-Result", "dkim", "fail"),
        Verdict("spam_detected", "spam", "spam"),
    )


@pytest.mark.parametrize(("score", "result"), [(4.9, "pass"), (5.0, "spam"), (12.3, "spam")])
def test_a_score_without_a_flag_is_spam_from_five(score: float, result: str) -> None:
    assert verdicts_read(message=_message([], spam_score=score)) == (Verdict("spam_score", "spam", result),)


def test_amazon_ses_receipt_verdicts() -> None:
    # the SNS notification's receipt, as Amazon SES documents it
    receipt = {
        "spamVerdict": {"status": "PASS"},
        "virusVerdict": {"status": "FAIL"},
        "spfVerdict": {"status": "GRAY"},
        "dkimVerdict": {"status": "PROCESSING_FAILED"},
        "dmarcVerdict": {"status": "FAIL"},
        "recipients": ["reply+0123@reply.example.com"],
    }

    found = verdicts_read(
        message=_message([]), esp_event={"notificationType": "Received", "receipt": receipt}
    )

    assert [(v.check, v.result, v.failed) for v in found] == [
        ("spf", "gray", False),
        ("dkim", "processing_failed", False),
        ("dmarc", "fail", True),
        ("spam", "pass", False),
        ("virus", "fail", True),
    ]


def test_sendgrid_spf_and_dkim_fields() -> None:
    class Post:  # SendGrid's inbound view hands anymail the Django request as esp_event
        POST = QueryDict(mutable=True)

    Post.POST.update({"SPF": "fail", "dkim": "{@prospect.example : pass, @relay.example : fail}"})

    found = verdicts_read(message=_message([]), esp_event=Post())

    assert [(v.source, v.check, v.result) for v in found] == [
        ("SPF", "spf", "fail"),
        ("dkim", "dkim", "pass"),
        ("dkim", "dkim", "fail"),
    ]


def test_no_verdict_at_all_is_none_read() -> None:
    assert verdicts_read(message=_message([("Subject", "Re: hi")])) == ()
