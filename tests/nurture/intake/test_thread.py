"""The conversation a reviewer reads: order, quotes folded (never deleted), joined messages,
hostile context shapes; and the excerpt the approval list shows."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from nurture.intake.quoting import Segment, segments, unquoted
from nurture.intake.thread import InboundRecord, SentRecord, excerpt, reply_inbound, thread_build

T0 = datetime(2026, 11, 20, 9, 0, tzinfo=UTC)

GMAIL_REPLY = (
    "Sounds good, what does a pilot cost?\n"
    "\n"
    "On Mon, 23 Nov 2026 at 10:00, Sam <sam@seller.example> wrote:\n"
    "> Hi Pat,\n"
    ">\n"
    "> Would a short call help?\n"
)


def _sent(n: int, *, days: int, body: str = "Hi Pat") -> SentRecord:
    return SentRecord(outreach_id=n, subject=f"ours {n}", body=body, sent_at=T0 + timedelta(days=days))


def test_the_thread_is_in_order_ours_and_theirs_with_joined_messages_after_the_first() -> None:
    # given two emails we sent, an earlier reply, and the reply under review with two joined
    earlier = InboundRecord(
        outreach_id=10,
        created_at=T0 + timedelta(days=1, hours=2),
        context={"inbound": {"subject": "Re: ours 1", "body": "Not now.", "message_id": "<a@x>"}},
    )
    current = InboundRecord(
        outreach_id=11,
        created_at=T0 + timedelta(days=3, hours=1),
        context={
            "inbound": {"subject": "Re: ours 2", "body": "Interested!", "message_id": "<b@x>"},
            "joined": [
                {"subject": "Re: ours 2", "body": "Also: pricing?", "message_id": "<c@x>"},
                {"subject": "Re: ours 2", "body": "And a pilot?", "message_id": "<d@x>"},
            ],
        },
    )
    # when the thread is built (inputs in no particular order)
    thread = thread_build(sent=[_sent(2, days=3), _sent(1, days=0)], inbound=[current, earlier])
    # then: ours 1, their "Not now.", ours 2, then the reply's first message and the joined two
    assert [(m.ours, m.subject, [s.text for s in m.segments], m.joined) for m in thread] == [
        (True, "ours 1", ["Hi Pat"], False),
        (False, "Re: ours 1", ["Not now."], False),
        (True, "ours 2", ["Hi Pat"], False),
        (False, "Re: ours 2", ["Interested!"], False),
        (False, "Re: ours 2", ["Also: pricing?"], True),
        (False, "Re: ours 2", ["And a pilot?"], True),
    ]
    assert [m.reply_id for m in thread] == [None, 10, None, 11, 11, 11]


def test_a_recorded_arrival_time_orders_a_joined_message_before_a_later_email_of_ours() -> None:
    record = InboundRecord(
        outreach_id=5,
        created_at=T0,
        context={
            "inbound": {"subject": "s", "body": "first"},
            "joined": [
                {"subject": "s", "body": "second", "received_at": (T0 + timedelta(minutes=5)).isoformat()}
            ],
        },
    )
    thread = thread_build(sent=[_sent(1, days=1, body="our answer")], inbound=[record])
    assert [m.segments[0].text for m in thread] == ["first", "second", "our answer"]


def test_quoted_text_is_folded_apart_not_deleted() -> None:
    assert segments(GMAIL_REPLY) == [
        Segment("Sounds good, what does a pilot cost?", quoted=False),
        Segment(
            "On Mon, 23 Nov 2026 at 10:00, Sam <sam@seller.example> wrote:\n> Hi Pat,\n>\n> Would a short call help?",
            quoted=True,
        ),
    ]


@pytest.mark.parametrize(
    ("body", "expected"),
    [
        # an answer written inline, between quoted lines: three runs
        (
            "> Can you do Tuesday?\nYes, 10:00.\n> And the price?\n\n> Per seat?\nSee below.",
            [
                (True, "> Can you do Tuesday?"),
                (False, "Yes, 10:00."),
                (True, "> And the price?\n\n> Per seat?"),
                (False, "See below."),
            ],
        ),
        # the attribution wrapped over two lines
        (
            "Yes.\nOn Mon, 23 Nov 2026 at 10:00, Sam Seller <sam@seller.example>\nwrote:\n> Hi",
            [
                (False, "Yes."),
                (True, "On Mon, 23 Nov 2026 at 10:00, Sam Seller <sam@seller.example>\nwrote:\n> Hi"),
            ],
        ),
        # Outlook: everything below the marker, unprefixed
        (
            "Thanks\n-----Original Message-----\nFrom: Sam\nSent: Monday\nHi Pat",
            [(False, "Thanks"), (True, "-----Original Message-----\nFrom: Sam\nSent: Monday\nHi Pat")],
        ),
        (
            "Thanks\nFrom: Sam <sam@x.example>\nSent: Monday\nHi Pat",
            [(False, "Thanks"), (True, "From: Sam <sam@x.example>\nSent: Monday\nHi Pat")],
        ),
        # an attribution with no ">" under it: the rest is the quote
        ("Ok\nOn Mon, Sam wrote:\nHi Pat\nBest", [(False, "Ok"), (True, "On Mon, Sam wrote:\nHi Pat\nBest")]),
        # a line that merely mentions writing is the sender's own
        ("On Monday I said no.\nStill no.", [(False, "On Monday I said no.\nStill no.")]),
        ("", []),
    ],
)
def test_quote_runs(body: str, expected: list[tuple[bool, str]]) -> None:
    assert [(s.quoted, s.text) for s in segments(body)] == expected


def test_the_excerpt_is_the_prospects_own_words_on_one_line_and_short() -> None:
    assert excerpt(GMAIL_REPLY) == "Sounds good, what does a pilot cost?"
    long = "word " * 100
    cut = excerpt(long)
    assert len(cut) == 120
    assert cut.endswith("\u2026")
    assert excerpt("> only a quote") == ""
    assert unquoted("a\n> b\nc") == "a\n\nc"


@pytest.mark.parametrize(
    "context",
    [None, "text", [], {"inbound": "x"}, {"inbound": {"body": 5}, "joined": "nope"}, {"joined": [None, 3]}],
)
def test_a_context_of_another_shape_gives_no_messages_or_empty_text_never_an_error(context: object) -> None:
    found = reply_inbound(context)
    assert all(m == {"subject": "", "body": "", "received_at": ""} for m in found)
    thread = thread_build(sent=[], inbound=[InboundRecord(outreach_id=1, created_at=T0, context=context)])
    assert all(m.segments == () for m in thread)


def test_a_huge_body_is_cut_for_the_page_and_says_so() -> None:
    record = InboundRecord(
        outreach_id=1, created_at=T0, context={"inbound": {"subject": "s", "body": "x" * 50_000}}
    )
    (message,) = thread_build(sent=[], inbound=[record])
    assert message.cut
    assert len(message.segments[0].text) == 20_000
