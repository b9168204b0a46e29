"""Priority tiers, as plain data (no Django): the dispatcher's pure core imports this."""

from __future__ import annotations

from enum import IntEnum


class Tier(IntEnum):
    """Lower value = served first. A prospect who answered outranks any cold email."""

    REPLY = 1
    INTRO = 2
    NUDGE = 3
