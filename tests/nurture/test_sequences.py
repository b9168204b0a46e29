"""Sequences: nudges in business days in the lead's time zone (frozen time passed in as `now`),
and the sequence stopping on a reply, a conversion or an opt-out."""

from __future__ import annotations

from datetime import UTC, date, datetime
from zoneinfo import ZoneInfo

import pytest
from django.core.exceptions import ValidationError

from nurture.intake.assignment import assignment_create, assignment_run
from nurture.intake.cadence import add_business_days, nudge_times
from nurture.intake.csv_file import LeadRow
from nurture.intake.replies import InboundReply, reply_receive
from nurture.sequence import lead_mark_converted, lead_opt_out, sequence_stop
from outreach.models import Lead, Outreach, OutreachEvent, Owner, State, validate_nudge_days
from tests.factories import make_lead, make_org, make_outreach, make_owner

TOKYO, NEW_YORK, LOS_ANGELES = (
    ZoneInfo("Asia/Tokyo"),
    ZoneInfo("America/New_York"),
    ZoneInfo("America/Los_Angeles"),
)


@pytest.mark.parametrize(
    ("start", "n", "expected"),
    [
        (date(2024, 3, 8), 3, date(2024, 3, 13)),  # Friday + 3 = Wednesday
        (date(2024, 3, 4), 3, date(2024, 3, 7)),  # Monday + 3 = Thursday
        (date(2024, 3, 4), 5, date(2024, 3, 11)),  # Monday + 5 = next Monday
        (date(2024, 3, 7), 7, date(2024, 3, 18)),  # Thursday + 7 = Monday after next
        (date(2024, 3, 9), 1, date(2024, 3, 11)),  # Saturday + 1 = Monday
        (date(2024, 3, 10), 5, date(2024, 3, 15)),  # Sunday + 5 = Friday
        (date(2024, 3, 9), 10, date(2024, 3, 22)),  # Saturday + 10 = Friday after next
    ],
)
def test_business_days_skip_weekends(start: date, n: int, expected: date) -> None:
    assert add_business_days(day=start, n=n) == expected


def test_friday_afternoon_in_tokyo_nudges_on_wednesday_and_the_week_after() -> None:
    # given an assignment on Friday 16:00 in Tokyo
    assigned = datetime(2024, 3, 8, 16, 0, tzinfo=TOKYO)
    # when the default cadence is scheduled
    first, second = nudge_times(assigned_at=assigned, tz="Asia/Tokyo", days=[3, 7])
    # then nudge 1 is Wednesday 09:00 and nudge 2 the Tuesday after, both Tokyo time
    assert first == datetime(2024, 3, 13, 9, 0, tzinfo=TOKYO)
    assert second == datetime(2024, 3, 19, 9, 0, tzinfo=TOKYO)


def test_the_same_instant_is_a_different_local_day_in_each_time_zone() -> None:
    # given Sunday 20:00 UTC: already Monday 05:00 in Tokyo, still Sunday 13:00 in Los Angeles
    assigned = datetime(2024, 3, 10, 20, 0, tzinfo=UTC)
    # when each lead's first nudge is scheduled 3 business days out
    [tokyo] = nudge_times(assigned_at=assigned, tz="Asia/Tokyo", days=[3])
    [los_angeles] = nudge_times(assigned_at=assigned, tz="America/Los_Angeles", days=[3])
    # then Tokyo counts from Monday (-> Thursday), Los Angeles from the weekend (-> Wednesday)
    assert tokyo == datetime(2024, 3, 14, 9, 0, tzinfo=TOKYO)
    assert los_angeles == datetime(2024, 3, 13, 9, 0, tzinfo=LOS_ANGELES)


def test_nudge_stays_at_nine_local_across_a_daylight_saving_change() -> None:
    # given a Friday assignment in New York, the weekend before clocks go forward (10 March 2024)
    assigned = datetime(2024, 3, 8, 10, 0, tzinfo=NEW_YORK)
    # when the nudge is scheduled
    [nudge] = nudge_times(assigned_at=assigned, tz="America/New_York", days=[3])
    # then it is 09:00 EDT on Wednesday, i.e. 13:00 UTC (it would be 14:00 UTC in winter)
    assert nudge.astimezone(UTC) == datetime(2024, 3, 13, 13, 0, tzinfo=UTC)


@pytest.mark.parametrize("value", ["3,7", "1", "2,4,6,8,10", " 3 , 7 "])
def test_valid_cadences(value: str) -> None:
    validate_nudge_days(value)


@pytest.mark.parametrize(
    "value", ["", "0,3", "7,3", "3,3", "3;7", "x", "400", ",".join(map(str, range(1, 13)))]
)
def test_invalid_cadences_are_refused(value: str) -> None:
    with pytest.raises(ValidationError):
        validate_nudge_days(value)


# --- the sequence as loaded, and how it stops --------------------------------------------------


def _assign(*, owner: Owner, now: datetime, tz: str = "Asia/Tokyo", email: str = "lead@x.example") -> Lead:
    row = LeadRow(
        line=2,
        email=email,
        first_name="A",
        last_name="",
        company="",
        title="",
        timezone=tz,
        owner_id=owner.pk,
    )
    batch, ids = assignment_create(
        organization_id=owner.organization_id, file_name="f.csv", file_sha256="0" * 64, rows=[row], now=now
    )
    assignment_run(batch_id=batch.pk, child_ids=ids)
    return Lead.objects.get(email=email)


def _queued(lead: Lead) -> list[tuple[str, int, datetime]]:
    rows = Outreach.objects.filter(lead=lead).order_by("step")
    return [(o.kind, o.step, o.not_before) for o in rows]


@pytest.mark.django_db
def test_assignment_queues_intro_now_and_nudges_by_the_organizations_cadence() -> None:
    # given an organization nudging after 2 and 4 business days, assignment Friday 16:00 Tokyo
    owner = make_owner(organization=make_org(nudge_days="2,4"))
    now = datetime(2024, 3, 8, 16, 0, tzinfo=TOKYO)
    # when a Tokyo lead is assigned
    lead = _assign(owner=owner, now=now)
    # then the intro is due at once and the nudges on Tuesday and Thursday, 09:00 Tokyo
    assert _queued(lead) == [
        ("intro", 0, now),
        ("nudge", 1, datetime(2024, 3, 12, 9, 0, tzinfo=TOKYO)),
        ("nudge", 2, datetime(2024, 3, 14, 9, 0, tzinfo=TOKYO)),
    ]


@pytest.mark.django_db
def test_an_owner_cadence_overrides_the_organizations() -> None:
    # given an owner with its own cadence of a single nudge after 5 business days
    owner = make_owner(nudge_days="5")
    now = datetime(2024, 3, 8, 16, 0, tzinfo=TOKYO)
    # when a lead is assigned to it
    lead = _assign(owner=owner, now=now)
    # then only that nudge is queued, a week later
    assert _queued(lead)[1:] == [("nudge", 1, datetime(2024, 3, 15, 9, 0, tzinfo=TOKYO))]


@pytest.mark.django_db
def test_nudges_follow_the_leads_time_zone_not_the_owners() -> None:
    # given a Tokyo-based owner and a lead in Los Angeles, assigned Sunday 20:00 UTC
    owner = make_owner(timezone="Asia/Tokyo")
    lead = _assign(owner=owner, now=datetime(2024, 3, 10, 20, 0, tzinfo=UTC), tz="America/Los_Angeles")
    # then the first nudge is Wednesday 09:00 in Los Angeles
    assert _queued(lead)[1][2] == datetime(2024, 3, 13, 9, 0, tzinfo=LOS_ANGELES)


@pytest.fixture
def lead_in_sequence(db: None) -> Lead:
    """A lead whose intro was sent and whose two nudges wait in the queue."""
    lead = make_lead()
    make_outreach(lead=lead, state=State.SENT, message_id="<intro-1@example.com>")
    for step in (1, 2):
        make_outreach(lead=lead, kind=Outreach.Kind.NUDGE, step=step)
    return lead


def _states(lead: Lead, kind: str) -> list[str]:
    return list(
        Outreach.objects.filter(lead=lead, kind=kind).order_by("step").values_list("state", flat=True)
    )


def test_reply_stops_the_nudges(lead_in_sequence: Lead) -> None:
    # given a lead in its sequence
    lead = lead_in_sequence
    # when the lead replies
    reply_receive(
        reply=InboundReply(lead_email=lead.email, message_id="<r1@p>", subject="Re", body="Tell me more")
    )
    # then the nudges are cancelled (with history), the reply queued, the lead marked replied
    assert _states(lead, "nudge") == [State.CANCELLED, State.CANCELLED]
    assert _states(lead, "reply") == [State.QUEUED]
    assert OutreachEvent.objects.filter(outreach__lead=lead, to_state=State.CANCELLED).count() == 2
    lead.refresh_from_db()
    assert lead.status == Lead.Status.REPLIED


def test_converted_stops_the_sequence(lead_in_sequence: Lead) -> None:
    # given a lead in its sequence
    lead = lead_in_sequence
    # when it is marked converted
    cancelled = lead_mark_converted(lead=lead)
    # then its nudges are cancelled and its status is converted; the sent intro is untouched
    assert len(cancelled) == 2
    assert _states(lead, "nudge") == [State.CANCELLED, State.CANCELLED]
    assert _states(lead, "intro") == [State.SENT]
    assert lead.status == Lead.Status.CONVERTED


def test_opt_out_cancels_everything_pending_and_leaves_in_flight_work_to_the_pipeline(db: None) -> None:
    # given a lead with outreach in every state
    lead = make_lead()
    by_state = {state: make_outreach(lead=lead, state=state) for state in State}
    # when the lead opts out
    result = lead_opt_out(lead_id=lead.pk)
    # then every piece not yet sending is cancelled; in-flight and finished work is untouched
    pending = {State.QUEUED, State.AWAITING_APPROVAL, State.APPROVED}
    assert set(result.cancelled) == {by_state[s].pk for s in pending}
    for state, outreach in by_state.items():
        outreach.refresh_from_db()
        assert outreach.state == (State.CANCELLED if state in pending else state)
    lead.refresh_from_db()
    assert lead.status == Lead.Status.OPTED_OUT


def test_an_opted_out_lead_stays_opted_out_when_converted(db: None) -> None:
    lead = make_lead(status=Lead.Status.OPTED_OUT)
    lead_mark_converted(lead=lead)
    assert lead.status == Lead.Status.OPTED_OUT


def test_stopping_a_sequence_leaves_replies_and_in_flight_nudges_alone(lead_in_sequence: Lead) -> None:
    # given a queued reply and a nudge already being generated
    lead = lead_in_sequence
    reply = make_outreach(lead=lead, kind=Outreach.Kind.REPLY)
    generating = make_outreach(lead=lead, kind=Outreach.Kind.NUDGE, step=3, state=State.GENERATING)
    # when the sequence stops
    sequence_stop(lead_id=lead.pk, reason="test")
    # then only the not-yet-started nudges were cancelled
    reply.refresh_from_db()
    generating.refresh_from_db()
    assert (reply.state, generating.state) == (State.QUEUED, State.GENERATING)
    assert _states(lead, "nudge") == [State.CANCELLED, State.CANCELLED, State.GENERATING]
