"""What counts as a reply asking us to stop (nurture/intake/opt_out.py): a table written out by
hand, positives and negatives, body and subject, with and without a quoted thread."""

from __future__ import annotations

import pytest

from nurture.intake.opt_out import reply_asks_to_stop

QUOTED_GMAIL = (
    "\n\nOn Mon, 23 Nov 2026 at 10:00, Sam Seller <sam@seller.example> wrote:\n"
    "Hi Pat, unsubscribe here if you must. Stop by our booth!\n"
)
QUOTED_WRAPPED = (
    "\n\nOn Mon, Nov 23, 2026 at 10:00 AM Sam Seller from Seller Inc <sam@seller.example>\n"
    "wrote:\n"
    "Reply STOP to opt out.\n"
)
QUOTED_OUTLOOK = (
    "\n\n-----Original Message-----\nFrom: Sam Seller\nSent: Monday\nSubject: opt out anytime\n"
    "To unsubscribe, reply STOP.\n"
)
OUTLOOK_HEADERS = "\n\nFrom: Sam Seller <sam@seller.example>\nSent: Monday, 23 November 2026 10:00\nSTOP\n"
OUR_FOOTER = "\n\n-- \nSeller Inc, 1 Main St. Reply STOP or unsubscribe: https://x.example/u/abc\n"

# (body, subject) -> asks to stop
ASKS_TO_STOP = [
    ("STOP", "Re: Quick question"),
    ("stop", "Re: Quick question"),
    ("Stop.", "Re: Quick question"),
    ("STOP STOP STOP", "Re: Quick question"),
    ("Please stop!", "Re: Quick question"),
    ("stop it", "Re: Quick question"),
    ("Unsubscribe", "Re: Quick question"),
    ("unsubscribe me please", "Re: Quick question"),
    ("Please unsubscribe me from these emails.", "Re: Quick question"),
    ("How do I unsubscribe from this?", "Re: Quick question"),
    ("remove me", "Re: Quick question"),
    ("Remove", "Re: Quick question"),
    ("Please remove me from your list", "Re: Quick question"),
    ("Please remove me from your mailing list. Thanks", "Re: Quick question"),
    ("Kindly remove my email address from your database.", "Re: Quick question"),
    ("Take me off your list", "Re: Quick question"),
    ("take me off your mailing list asap", "Re: Quick question"),
    ("Take me off.", "Re: Quick question"),
    ("opt out", "Re: Quick question"),
    ("I'd like to opt-out.", "Re: Quick question"),
    ("I want to opt out of these emails", "Re: Quick question"),
    ("Do not contact me", "Re: Quick question"),
    ("Please do not contact me again.", "Re: Quick question"),
    ("Don't email me again", "Re: Quick question"),
    ("Don\u2019t email me again", "Re: Quick question"),  # a typographic apostrophe
    ("Never e-mail us again!", "Re: Quick question"),
    ("Not interested, stop emailing", "Re: Quick question"),
    ("Not interested stop emailing me", "Re: Quick question"),
    ("Stop sending me these.", "Re: Quick question"),
    ("Please stop contacting me", "Re: Quick question"),
    ("Quit spamming me", "Re: Quick question"),
    ("Stop contacting my team.", "Re: Quick question"),
    ("No more emails please.", "Re: Quick question"),
    ("I don't want any more emails from you", "Re: Quick question"),
    ("I do not wish to be contacted", "Re: Quick question"),
    ("Leave me alone.", "Re: Quick question"),
    ("Thanks, but no.\n\nPlease remove me from your list.", "Re: Quick question"),
    ("Bitte abmelden.", "AW: Quick question"),
    ("Merci de me désabonner", "RE: Quick question"),
    # the subject: a new email, or a reply whose subject the sender replaced
    ("", "Unsubscribe"),
    ("", "STOP"),
    ("", "Re: STOP"),
    ("", "Please remove me from your list"),
    ("Hi,", "Remove me"),
    # the request above the quoted thread
    ("STOP" + QUOTED_GMAIL, "Re: Quick question"),
    ("please remove me from your list" + QUOTED_OUTLOOK, "Re: Quick question"),
]

ASKS_NOTHING = [
    ("Yes, Tuesday works.", "Re: Quick question"),
    ("Don't stop sending me these, they're great!", "Re: Quick question"),
    ("Please don't stop.", "Re: Quick question"),
    ("What stops you from shipping faster?", "Re: Quick question"),
    ("Stop by our booth at the fair on Tuesday.", "Re: Quick question"),
    ("We should stop sending invoices by hand.", "Re: Quick question"),
    ("I want to stop writing reports by hand", "Re: Quick question"),
    ("I don't want to unsubscribe, keep them coming", "Re: Quick question"),
    ("Why would I unsubscribe? This is useful.", "Re: Quick question"),
    ("Can you remove me from the CC and add my colleague?", "Re: Quick question"),
    ("Don't email me before Tuesday, I'm travelling.", "Re: Quick question"),
    ("Please don't send the pricing yet.", "Re: Quick question"),
    # a no is not a stop: the sequence ends as with any reply, and the owner may answer it
    ("Not interested.", "Re: Quick question"),
    ("Not interested right now, maybe next quarter.", "Re: Quick question"),
    # a reply's subject is ours echoed (the model wrote it): only a bare request counts there
    ("Sounds good.", "Re: Stop chasing invoices"),
    ("Sounds good.", "Re: Stop sending invoices by hand"),
    ("Sounds good.", "Re: How to unsubscribe from manual reporting"),
    # what the reply quotes, or our footer below "-- ", is not the reply
    ("Sounds good, see you Tuesday." + QUOTED_GMAIL, "Re: Quick question"),
    ("Sounds good." + QUOTED_WRAPPED, "Re: Quick question"),
    ("Sounds good." + QUOTED_OUTLOOK, "Re: Quick question"),
    ("Sounds good." + OUTLOOK_HEADERS, "Re: Quick question"),
    ("Sounds good." + OUR_FOOTER, "Re: Quick question"),
    ("Sounds good.\n> STOP\n> unsubscribe", "Re: Quick question"),
    ("", ""),
]


@pytest.mark.parametrize(("body", "subject"), ASKS_TO_STOP)
def test_a_request_to_stop_is_recognised(body: str, subject: str) -> None:
    assert reply_asks_to_stop(subject=subject, body=body) is True


@pytest.mark.parametrize(("body", "subject"), ASKS_NOTHING)
def test_other_replies_are_not_a_request_to_stop(body: str, subject: str) -> None:
    assert reply_asks_to_stop(subject=subject, body=body) is False
