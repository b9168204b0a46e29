"""The counters per owner and per triage class (outreach.counters), through the paths that count
them: the dispatcher's claims, a send, the rules at intake, the model's triage call, a person's
reclassification, approval and rejection. Exposed on /metrics with exact figures, and scoped: a
member's session sees the series of its organizations' owners and of its organizations, never
another organization's."""

from __future__ import annotations

from typing import Any

import pytest
import redis
from django.contrib import admin
from django.test import Client
from django.urls import include, path, reverse
from prometheus_client.parser import text_string_to_metric_families

from devtools.llm_stub import LLMStub
from nurture.intake.triage.intake import triage_settled_act
from nurture.intake.triage.reclassify import reply_reclassify
from nurture.reply_actions import ReplyTriage
from nurture.review import draft_approve, draft_reject
from nurture.writing.generation import outreach_generate
from orchestrator.budget import Budget, Reservation
from orchestrator.dispatch.cycle import dispatch_cycle
from outreach.models import Lead, Organization, Outreach, Owner, ReplyClass, State
from outreach.transitions import transition
from tests.factories import logged_in, make_draft, make_lead, make_org, make_outreach, make_owner, make_user

urlpatterns = [path("", include("backoffice.urls")), path("admin/", admin.site.urls)]
pytestmark = [pytest.mark.django_db, pytest.mark.urls(__name__)]

S, C = State, ReplyClass
Samples = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def _samples(client: Client) -> Samples:
    response = client.get(reverse("orchestrator:metrics"))
    assert response.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for f in text_string_to_metric_families(response.content.decode())
        for s in f.samples
    }


def _of(samples: Samples, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    return {labels: value for (n, labels), value in samples.items() if n == name}


def _owner(owner: Owner) -> tuple[tuple[str, str], ...]:
    return (("owner_id", str(owner.pk)),)


def _class(org: Organization, reply_class: str, **more: str) -> tuple[tuple[str, str], ...]:
    return tuple(sorted({"organization_id": str(org.pk), "reply_class": reply_class, **more}.items()))


def test_the_dispatchers_claims_and_a_send_count_per_owner(
    budget: Budget, redis_client: redis.Redis, django_capture_on_commit_callbacks: Any
) -> None:
    # given owner a with two intros to write, owner b with an approved draft to send, c idle
    org = make_org()
    a, b, _idle = (make_owner(organization=org) for _ in range(3))
    intros = [make_outreach(lead=make_lead(owner=a)) for _ in range(2)]
    approved = make_draft(lead=make_lead(owner=b), state=S.APPROVED)
    # when a cycle claims them all, and b's email is sent
    with django_capture_on_commit_callbacks(execute=True):
        report = dispatch_cycle(budget=budget)
    assert (sorted(report.generation), report.send) == (sorted(o.pk for o in intros), [approved.pk])
    transition(outreach_id=approved.pk, from_=S.DISPATCHED, to=S.SENDING)
    transition(outreach_id=approved.pk, from_=S.SENDING, to=S.SENT)
    # and one of a's drafts, written, goes to send on its own (no claim of the dispatcher's)
    transition(outreach_id=intros[0].pk, from_=S.DISPATCHED, to=S.GENERATING)
    transition(outreach_id=intros[0].pk, from_=S.GENERATING, to=S.DISPATCHED)
    # then a was dispatched twice and sent nothing, b dispatched once and sent once, c has no series
    samples = _samples(Client())
    assert _of(samples, "outreach_owner_dispatched_total") == {_owner(a): 2, _owner(b): 1}
    assert _of(samples, "outreach_owner_sent_total") == {_owner(b): 1}
    assert samples[("outreach_sent_total", ())] == 1


def _reply(owner: Owner, **fields: Any) -> Outreach:
    return make_outreach(
        lead=make_lead(owner=owner, status=Lead.Status.REPLIED), kind=Outreach.Kind.REPLY, **fields
    )


def test_each_way_a_class_is_decided_counts_under_its_class_and_who_decided(
    budget: Budget, llm_stub: LLMStub, redis_client: redis.Redis
) -> None:
    org = make_org()
    owner = make_owner(organization=org, review_required=False)
    # given a reply the rules settle at intake (an automatic reply)
    settled = _reply(owner)
    triage_settled_act(reply=settled, triage=ReplyTriage(C.AUTO_REPLY, "Auto-Submitted: auto-replied"))
    # and one the model's triage call classes as an objection (not answered: cancelled)
    reservation = budget.reserve(requests=4, tokens=2400)
    assert isinstance(reservation, Reservation)
    objection = _reply(
        owner,
        state=S.DISPATCHED,
        reservation_id=reservation.id,
        context={"inbound": {"subject": "Re: hi", "body": "Not interested, thanks.", "message_id": "<n@x>"}},
    )
    assert outreach_generate(outreach_id=objection.pk, budget=budget) == S.CANCELLED
    # when a person reclassifies the objection as interest
    reply_reclassify(outreach_id=objection.pk, reply_class=C.INTERESTED, by_id=make_user("ops").pk)
    # then each decision is counted once, the person's under the new class (the model's stays)
    assert _of(_samples(Client()), "outreach_replies_classified_total") == {
        _class(org, C.AUTO_REPLY, by="rules"): 1,
        _class(org, C.OBJECTION, by="model"): 1,
        _class(org, C.INTERESTED, by="person"): 1,
    }


def test_a_persons_approvals_and_rejections_of_reply_drafts_count_per_class(
    redis_client: redis.Redis,
) -> None:
    # given reply drafts awaiting approval: two questions and a complaint, and an intro's draft
    org = make_org()
    owner = make_owner(organization=org)
    questions = [
        make_draft(lead=make_lead(owner=owner), kind=Outreach.Kind.REPLY, reply_class=C.QUESTION)
        for _ in range(2)
    ]
    complaint = make_draft(lead=make_lead(owner=owner), kind=Outreach.Kind.REPLY, reply_class=C.COMPLAINT)
    intro = make_draft(lead=make_lead(owner=owner))
    ops = make_user("ops")
    # when a person approves a question and the intro, rejects the other question and the complaint
    draft_approve(outreach=questions[0], by=ops)
    draft_approve(outreach=intro, by=ops)
    draft_reject(outreach=questions[1], by=ops, reason="off topic")
    draft_reject(outreach=complaint, by=ops)
    # then the reply drafts' decisions are counted per class (the intro's is no reply's)
    samples = _samples(Client())
    assert _of(samples, "outreach_reply_drafts_decided_total") == {
        _class(org, C.QUESTION, decision="approved"): 1,
        _class(org, C.QUESTION, decision="rejected"): 1,
        _class(org, C.COMPLAINT, decision="rejected"): 1,
    }
    # and none awaits approval now (a gauge of now, every class listed, zeros included)
    assert _of(samples, "outreach_replies_awaiting_approval")[(("reply_class", "complaint"),)] == 0


def test_a_members_scrape_shows_its_organizations_owner_and_class_series_and_no_others(
    redis_client: redis.Redis, settings: Any
) -> None:
    # given two organizations, each with an owner who dispatched, sent, had a reply classified
    # and a reply draft approved
    settings.METRICS_TOKEN = "s3cret"
    ours, theirs = make_org(name="Ours"), make_org(name="Theirs")
    owners = {}
    for org in (ours, theirs):
        owner = owners[org.pk] = make_owner(organization=org)
        draft = make_draft(lead=make_lead(owner=owner), kind=Outreach.Kind.REPLY, reply_class=C.QUESTION)
        draft_approve(outreach=draft, by=make_user(f"ops-{org.pk}"))
        for from_, to in ((S.APPROVED, S.DISPATCHED), (S.DISPATCHED, S.SENDING), (S.SENDING, S.SENT)):
            transition(outreach_id=draft.pk, from_=from_, to=to)
        triage_settled_act(reply=_reply(owner), triage=ReplyTriage(C.OUT_OF_OFFICE, "out of office"))
    member = make_user("member", permissions=["view_queue_health"], organizations=[ours])
    # when the member's session and the platform's scraper read /metrics
    as_member = _samples(logged_in(member))
    as_scraper = _samples(Client(HTTP_AUTHORIZATION="Bearer s3cret"))
    # then the member sees its owner's and its organization's series, exactly
    mine, other = owners[ours.pk], owners[theirs.pk]
    assert _of(as_member, "outreach_owner_dispatched_total") == {_owner(mine): 1}
    assert _of(as_member, "outreach_owner_sent_total") == {_owner(mine): 1}
    assert _of(as_member, "outreach_replies_classified_total") == {
        _class(ours, C.OUT_OF_OFFICE, by="rules"): 1
    }
    assert _of(as_member, "outreach_reply_drafts_decided_total") == {
        _class(ours, C.QUESTION, decision="approved"): 1
    }
    # and nothing labelled with the other organization or its owner, nor the platform's totals
    labels = {
        v for (_, series), _ in as_member.items() for k, v in series if k in ("owner_id", "organization_id")
    }
    assert labels == {str(mine.pk), str(ours.pk)}
    assert ("outreach_sent_total", ()) not in as_member
    # while the platform's scraper sees both organizations' series
    assert _of(as_scraper, "outreach_owner_sent_total") == {_owner(mine): 1, _owner(other): 1}
    assert _of(as_scraper, "outreach_reply_drafts_decided_total") == {
        _class(ours, C.QUESTION, decision="approved"): 1,
        _class(theirs, C.QUESTION, decision="approved"): 1,
    }
    assert as_scraper[("outreach_sent_total", ())] == 2
