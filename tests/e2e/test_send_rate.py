"""A burst of approvals through real workers leaves no faster than the configured send rate."""

from __future__ import annotations

from collections import Counter

import pytest

from devtools.processes import ProcessGroup
from devtools.smtp_sink import SMTPSink
from nurture.review import drafts_approve
from orchestrator.figures import most_in_window
from outreach.models import Outreach, State
from tests.e2e.conftest import start_pipeline, wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner, make_reviewer

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]


def test_a_burst_of_approvals_leaves_at_no_more_than_the_send_rate(
    stack: ProcessGroup, smtp_sink: SMTPSink
) -> None:
    # given 60 drafts of three sellers, approved at once, and a provider allowing 5 emails a second
    org = make_org(sender_email="sales@burst.example")
    owners = [make_owner(organization=org, review_required=True, daily_limit=1000) for _ in range(3)]
    drafts = [
        make_outreach(
            lead=make_lead(owner=owners[i % 3]),
            state=State.AWAITING_APPROVAL,
            draft_subject="Hello",
            draft_body="A short body for the test.",
        )
        for i in range(60)
    ]
    assert drafts_approve(drafts=drafts, by=make_reviewer("burst")) == 60
    stack.env["EMAIL_RATE_PER_SECOND"] = "5"
    # when beat, the orchestrator and the send workers run
    start_pipeline(stack)
    wait_until(
        lambda: Outreach.objects.filter(state=State.SENT).count() == 60,
        timeout_s=90,
        what="60 approved emails",
        group=stack,
    )
    # then every one arrived once, and no second held more than 5 (strict: ~4/s sustained)
    smtp_sink.wait_for(60)
    assert len(smtp_sink.received_at) == 60
    assert len({m.message["Message-ID"] for m in smtp_sink.messages}) == 60
    assert most_in_window(times=smtp_sink.received_at, window_s=1.0) <= 5
    times = sorted(smtp_sink.received_at)
    assert (times[-1] - times[0]) >= 59 / 5
    # and the owners shared the rate: all three were sending from the first seconds
    first = Counter(
        Outreach.objects.filter(state=State.SENT).order_by("sent_at")[:9].values_list("owner_id", flat=True)
    )
    assert len(first) == 3
