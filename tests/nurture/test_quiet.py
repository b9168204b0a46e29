"""When a reply falls due (nurture.quiet): the quiet period's arithmetic and whose setting wins.
Pure: no database, no clock."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest

from nurture.quiet import quiet_period_s, reply_due, reply_quiet_s
from outreach.models import Organization

T0 = datetime(2026, 11, 26, 12, 0, 0, tzinfo=UTC)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


@pytest.mark.parametrize(
    ("last_message_s", "quiet_s", "not_before_s", "due_s"),
    [
        # a first message: due a quiet period after it
        (0, 60, None, 60),
        (0, 10, None, 10),
        # 0: answered at once, as before the quiet period
        (0, 0, None, 0),
        # a later message pushes the answer out: 60 s after it, not after the first
        (2, 60, 60, 62),
        (2, 10, 10, 12),
        (2, 0, 0, 2),
        # a wait the reply already has (a backoff after a failed attempt) is kept
        (2, 10, 300, 300),
        # a message joining late in a long quiet period: from it, whatever came before
        (59, 60, 60, 119),
    ],
)
def test_a_reply_is_due_a_quiet_period_after_the_last_message(
    last_message_s: int, quiet_s: int, not_before_s: int | None, due_s: int
) -> None:
    # given the lead's last message, the quiet period and the reply's current not_before
    not_before = None if not_before_s is None else at(not_before_s)
    # when the reply's due time is worked out
    due = reply_due(last_message_at=at(last_message_s), quiet_s=quiet_s, not_before=not_before)
    # then it is the quiet period after the last message, never earlier than it was
    assert due == at(due_s)


@pytest.mark.parametrize(
    ("organization_s", "default_s", "expected"),
    [
        (None, 60, 60),  # no setting of its own: REPLY_QUIET_S
        (None, 0, 0),
        (5, 60, 5),  # its own wins, shorter
        (300, 60, 300),  # or longer
        (0, 60, 0),  # 0 is a setting (answer at once), not "unset"
    ],
)
def test_the_organizations_quiet_period_wins_over_the_default(
    organization_s: int | None, default_s: int, expected: int
) -> None:
    assert quiet_period_s(organization_s=organization_s, default_s=default_s) == expected


def test_the_default_is_reply_quiet_s(settings: Any) -> None:
    # given REPLY_QUIET_S=45, one organization with no setting and one with 7 s
    settings.REPLY_QUIET_S = 45
    # then the first waits 45 s, the second 7 s (an unsaved row: nothing read from a database)
    assert reply_quiet_s(organization=Organization(name="a")) == 45
    assert reply_quiet_s(organization=Organization(name="b", reply_quiet_s=7)) == 7
