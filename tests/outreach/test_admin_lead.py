from __future__ import annotations

import pytest
from django.urls import reverse

from outreach.models import Lead, Outreach, State
from tests.factories import logged_in, make_lead, make_outreach, make_user

pytestmark = pytest.mark.django_db


def test_mark_converted_action_stops_the_sequence() -> None:
    # given a lead with a queued nudge, and an operator
    lead = make_lead()
    nudge = make_outreach(lead=lead, kind=Outreach.Kind.NUDGE, step=1)
    client = logged_in(make_user("ops", superuser=True))
    # when the operator marks the lead converted from the lead list
    response = client.post(
        reverse("admin:outreach_lead_changelist"), {"action": "mark_converted", "_selected_action": [lead.pk]}
    )
    # then the lead is converted and its pending nudge cancelled
    assert response.status_code == 302
    lead.refresh_from_db()
    nudge.refresh_from_db()
    assert (lead.status, nudge.state) == (Lead.Status.CONVERTED, State.CANCELLED)
