"""Where an inbound email's own words end and the thread it quotes begins.

One home for the mail clients' quoting conventions: the opt-out rule reads only the reply's own
text above them (nurture.intake.opt_out), the review page folds them (nurture.intake.thread).

What counts as quoted: a ">" line; the "On <date>, <name> wrote:" line a mail client puts above
the quote (also wrapped over two lines); an Outlook "-----Original Message-----" line, its rule
of underscores, or its "From: / Sent:" header block. Below an "On ... wrote:" line the quote is
its ">" lines (text after them is the sender's again: an answer written below the quote); below
an Outlook marker, whose quote has no ">" prefix, everything is quoted.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

__all__ = ["Segment", "quote_starts", "segments", "unquoted"]

_QUOTED_LINE = re.compile(r"^\s*>")
# Gmail, Apple Mail, Thunderbird: "On ..., ... wrote:" (the whole line).
_WROTE_HEADER = re.compile(r"^\s*on\s.{1,300}\swrote:", re.IGNORECASE)
# "On Mon, 23 Nov 2026 at 10:00, Sam <sam@x.example>" wrapped before "wrote:" (a long line).
_ON_LINE = re.compile(r"^\s*on\s.{1,300}$", re.IGNORECASE)
_WROTE_LINE = re.compile(r"^.{0,200}\bwrote:\s*$", re.IGNORECASE)
# Outlook: a marker line, then the message replied to, unprefixed, to the end.
_OUTLOOK_MARKER = re.compile(r"^\s*(?:-{2,}\s*original\s+message\s*-{2,}|_{10,})", re.IGNORECASE)
# Outlook's header block of the message replied to: "From: ..." then "Sent:" or "Date:".
_FROM_LINE = re.compile(r"^\s*from:\s", re.IGNORECASE)
_SENT_LINE = re.compile(r"^\s*(?:sent|date):\s", re.IGNORECASE)


@dataclass(frozen=True)
class Segment:
    """A run of an email's lines: the sender's own words, or text it quotes."""

    text: str
    quoted: bool


def quote_starts(lines: list[str], index: int) -> int:
    """How `lines[index]` opens quoted text: 0 it does not; 1 a ">" line; 2 an attribution
    ("On ... wrote:", one or two lines) above ">" lines; 3 an Outlook marker (quoted to the end)."""
    line = lines[index]
    following = lines[index + 1] if index + 1 < len(lines) else ""
    if _QUOTED_LINE.match(line):
        return 1
    if _WROTE_HEADER.match(line) or (_ON_LINE.match(line) and _WROTE_LINE.match(following)):
        return 2
    if _OUTLOOK_MARKER.match(line) or (_FROM_LINE.match(line) and _SENT_LINE.match(following)):
        return 3
    return 0


def segments(body: str) -> list[Segment]:
    """The email as runs of own and quoted lines, in order, every line kept (nothing is deleted:
    a page folds the quoted runs). Blank lines between quoted lines stay in the quote."""
    lines = body.splitlines()
    runs: list[tuple[bool, list[str]]] = []
    index = 0
    while index < len(lines):
        quoted, taken = _run(lines, index)
        if runs and runs[-1][0] == quoted:
            runs[-1][1].extend(lines[index : index + taken])
        else:
            runs.append((quoted, lines[index : index + taken]))
        index += taken
    return [
        Segment(text="\n".join(run).strip("\n"), quoted=quoted)
        for quoted, run in runs
        if "".join(run).strip()
    ]


def _run(lines: list[str], index: int) -> tuple[bool, int]:
    """(quoted, how many lines from `index`) of the run that starts there."""
    how = quote_starts(lines, index)
    if how == 3:
        return True, len(lines) - index
    if how == 0:
        return False, 1
    end = index + 1
    if how == 2:
        if not _WROTE_HEADER.match(lines[index]):
            end += 1  # the attribution's second line ("... wrote:")
        upcoming = _next_text(lines, end)
        if upcoming < len(lines) and not _QUOTED_LINE.match(lines[upcoming]):
            # An attribution with no ">" lines below it (some clients quote unprefixed): the rest.
            return True, len(lines) - index
    while end < len(lines):
        # Blank lines with more quoted lines after them stay in the quote (one fold).
        upcoming = _next_text(lines, end)
        if upcoming == len(lines) or not _QUOTED_LINE.match(lines[upcoming]):
            break
        end = upcoming + 1
    return True, end - index


def _next_text(lines: list[str], index: int) -> int:
    """The first line from `index` that is not blank (len(lines): none)."""
    while index < len(lines) and not lines[index].strip():
        index += 1
    return index


def unquoted(body: str) -> str:
    """The sender's own words, quoted runs left out (their text otherwise as written)."""
    return "\n\n".join(s.text for s in segments(body) if not s.quoted)
