"""What code adds to every email, whatever the model or a reviewer wrote: the compliance footer.

One home for the text that goes out, so the mail module (the wire) and the approval queue (what
a reviewer sees before approving) cannot disagree about it.
"""

from __future__ import annotations

# RFC 3676's signature separator: mail clients quote a reply without what follows it, so the
# footer is not sent back to us inside the prospect's reply (and from there into a prompt).
SIGNATURE_SEPARATOR = "-- \n"


def footer_block(*, footer: str) -> str:
    """The lines appended below the draft ("" when the organization has no footer)."""
    footer = footer.replace("\r\n", "\n").strip()
    return f"{SIGNATURE_SEPARATOR}{footer}" if footer else ""


def email_body(*, draft_body: str, footer: str) -> str:
    """The draft with the organization's footer below it; the draft alone when there is none."""
    block = footer_block(footer=footer)
    return f"{draft_body.rstrip()}\n\n{block}" if block else draft_body
