"""nurture.writing.draft_policy against hostile model output: links as a browser reads them, phone
numbers, bare domains against the real list of top-level domains."""

from __future__ import annotations

import pytest

from nurture.writing.draft_policy import check_draft

SUBJECT = "Quick question about your data team"
BODY = "Hi Pat,\n\nWould a short call next week help your team ship reports faster?\n\nBest,\nSam"
ALLOWED = frozenset({"allowed.example"})


def _body_violations(extra: str, *, allowed: frozenset[str] = ALLOWED, phones: bool = False) -> list[str]:
    return check_draft(
        subject=SUBJECT, body=f"{BODY}\n{extra}", allowed_domains=allowed, allow_phone_numbers=phones
    )


# Each row: a link a browser opens somewhere other than where a naive parser says it goes.
# Written out by hand: the host a WHATWG parser (Chrome, Firefox) would visit, or why refused.
@pytest.mark.parametrize(
    ("link", "expected"),
    [
        # urlsplit reads the host after the last "@" (allowed.example); a browser turns "\" into
        # "/" and visits evil.example.
        ("https://evil.example\\@allowed.example/", "evil.example"),
        ("https://evil.example\\\\@allowed.example", "evil.example"),
        # userinfo: the part before "@" is a user name, never the destination.
        ("https://allowed.example@evil.example", "evil.example"),
        ("https://allowed.example:pw@evil.example/x", "evil.example"),
        ("https://allowed.example%2F@evil.example", "evil.example"),
        # special schemes without slashes, or with backslashes, still have a host.
        ("https:evil.example", "evil.example"),
        ("https:/evil.example/x", "evil.example"),
        ("https:\\\\evil.example\\x", "evil.example"),
        ("HTTP://EVIL.example", "evil.example"),
        # a destination nested inside an allowed link (open redirects, tracking wrappers).
        ("https://allowed.example/r?u=https://evil.example", "evil.example"),
        ("https://allowed.example/r?u=https%3A%2F%2Fevil.example%2F", "evil.example"),
        ("https://allowed.example/r?u=https%253A%252F%252Fevil.example", "evil.example"),
        ("https://allowed.example/r?to=evil.example", "evil.example"),
        ("https://allowed.example/#next=//evil.example/", "evil.example"),
        ("https://allowed.example/go/https://evil.example/", "evil.example"),
        # percent-encoding in the host is decoded by the browser.
        ("https://%65vil.example/", "evil.example"),
        ("https://evil.example%2f.allowed.example", "not a valid link"),
        # IDN: a Cyrillic a (U+0430) is not a Latin a; judged by its punycode.
        ("https://\u0430llowed.example/", "xn--llowed-"),
        ("https://xn--llowed-2nf.example/", "xn--llowed-"),
        # numeric hosts a browser rewrites into IP addresses.
        ("http://0x7f.1/", "127.0.0.1"),
        ("http://2130706433/", "127.0.0.1"),
    ],
)
def test_hostile_links_are_refused(link: str, expected: str) -> None:
    violations = _body_violations(f"Details: {link}")

    assert violations, link
    assert any(expected in v for v in violations), violations


@pytest.mark.parametrize(
    "link",
    [
        "https://allowed.example/pricing",
        "https://docs.allowed.example/start?x=1&y=two#intro",
        "https://ALLOWED.example./path",
        "https://allowed.example/r?u=https://allowed.example/x",
        "https://allowed.example/guide/index.html?ref=node.js",
        "https://allowed.example:443/a%20b",
    ],
)
def test_allowed_links_pass(link: str) -> None:
    assert _body_violations(f"Details: {link}") == []


def test_idn_allowed_domain_matches_its_punycode_link() -> None:
    # given an organization that allows its IDN domain, written in Unicode
    allowed = frozenset({"b\u00fccher.example"})
    # when the draft links to the same host in punycode, and in Unicode
    punycode = _body_violations("See https://xn--bcher-kva.example/shop", allowed=allowed)
    unicode = _body_violations("See https://B\u00fccher.example/shop", allowed=allowed)
    # then both are the allowed host
    assert (punycode, unicode) == ([], [])


# Bare domains: the last label must be a real top-level domain (or a reserved name a mail
# client would still link), so prose with a missing space is not a "domain".
@pytest.mark.parametrize(
    "text",
    [
        "Thanks for the note.Looking forward to it.",
        "I read the report.Then I called.",
        "We built it on Node.js and sent report.pdf.",
        "e.g. the Q3 plan, i.e. version 2.5.",
    ],
)
def test_prose_is_not_a_domain(text: str) -> None:
    assert _body_violations(text) == []


@pytest.mark.parametrize(
    ("text", "domain"),
    [
        ("Visit evil.example today", "evil.example"),
        ("Visit evil.io today", "evil.io"),
        ("Visit evil.xyz today", "evil.xyz"),
        ("Visit evil.co.uk today", "evil.co.uk"),
        ("Visit evil.zip today", "evil.zip"),
        ("Visit evil.Museum today", "evil.museum"),
        ("Visit evil.xn--p1ai today", "evil.xn--p1ai"),
        ("Visit evil.\u0440\u0444 today", "evil.\u0440\u0444"),
    ],
)
def test_bare_domains_with_real_tlds_are_refused(text: str, domain: str) -> None:
    violations = _body_violations(text)

    assert any(f"domain {domain!r}" in v for v in violations), violations


@pytest.mark.parametrize(
    "text",
    [
        "Call me at (415) 555-0132 tomorrow.",
        "Ring +44 20 7946 0958 any time.",
        "Our London desk: 020 7946 0958.",
        "Call +1-202-555-0143.",
        "Try 415.555.2671 after lunch.",
        "Berlin office +49 30 901820.",
    ],
)
def test_phone_numbers_are_refused_by_default(text: str) -> None:
    violations = _body_violations(text)

    assert any("phone number" in v for v in violations), violations


def test_phone_numbers_pass_when_the_organization_allows_them() -> None:
    assert _body_violations("Call me at (415) 555-0132 tomorrow.", phones=True) == []


@pytest.mark.parametrize(
    "text",
    [
        "Shall we meet on 2024-03-15 or 15/03/2024 at 10:30?",
        "It costs $1,250,000 a year, or 12 500 EUR a month.",
        "Your order #123456789 and invoice 2024-00123 shipped.",
        "Version 2.5.1 ships in Q3 2025 with 30% lower costs, ZIP 94103.",
        "We grew from 1,200 to 35,000 users between 2019 and 2023.",
    ],
)
def test_dates_prices_and_order_numbers_are_not_phone_numbers(text: str) -> None:
    assert _body_violations(text) == []


def test_subject_phone_number_is_refused() -> None:
    violations = check_draft(subject="Call 415 555 0132", body=BODY, allowed_domains=ALLOWED)

    assert any(v.startswith("subject: phone number") for v in violations), violations
