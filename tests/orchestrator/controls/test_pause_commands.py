"""`manage.py pause` and `manage.py resume`: by name, with errors that say which option was
wrong and what exists; and the active pauses in `queue_stats` and on the dashboard."""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import CommandError, call_command
from django.urls import reverse

from nurture.review import draft_reject
from orchestrator.controls import pauses
from orchestrator.models import Pause
from outreach.models import Outreach
from outreach.tiers import Tier
from tests.factories import logged_in, make_draft, make_lead, make_org, make_owner, make_user

pytestmark = pytest.mark.django_db


def _run(name: str, *args: str) -> str:
    out = io.StringIO()
    call_command(name, *args, stdout=out)
    return out.getvalue()


def test_pause_an_owner_by_name_then_resume_it_by_the_same_names() -> None:
    # given Acme's owner Ann and an operator account
    org = make_org(name="Acme")
    ann = make_owner(organization=org, name="Ann")
    make_user("alice")
    # when the operator pauses her, saying why
    out = _run("pause", "--org", "Acme", "--owner", "Ann", "--reason", "new copy", "--by", "alice")
    # then she is paused by alice, and the output says what and by whom
    stop = Pause.objects.get(resumed_at=None)
    assert (stop.owner, stop.organization, stop.reason, str(stop.created_by)) == (
        ann,
        org,
        "new copy",
        "alice",
    )
    assert out.startswith(f"paused #{stop.pk}: owner Ann (paused by alice at ")
    # when paused again, nothing new
    assert _run("pause", "--org", "Acme", "--owner", "Ann").startswith(f"already paused #{stop.pk}")
    # when resumed by the same names
    out = _run("resume", "--org", "Acme", "--owner", "Ann", "--by", "alice")
    stop.refresh_from_db()
    assert stop.resumed_at is not None
    assert out.startswith(f"resumed #{stop.pk}: owner Ann")


def test_pause_a_tier_of_an_organization_and_a_sender_domain_everywhere() -> None:
    make_org(name="Acme")
    _run("pause", "--org", "Acme", "--tier", "nudge")
    _run("pause", "--sender-domain", "Mail.Example.com", "--reason", "bounces")
    scopes = sorted(p.scope_text() for p in pauses.active())
    assert scopes == ["organization Acme, tier nudge", "sender domain mail.example.com"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--org", "Acme Inc"], "--org: no organization named 'Acme Inc'; organizations: Acme, Beta."),
        (
            ["--org", "Acme", "--owner", "Zed"],
            "--owner: no owner named 'Zed' in Acme; owners in Acme: Ann, Sam.",
        ),
        (
            ["--owner", "Sam"],
            "--owner: owners named 'Sam' exist in several organizations (Acme, Beta): add --org NAME.",
        ),
        (["--org", "Acme", "--by", "nobody"], "--by: no user named 'nobody'"),
        ([], "Say what to pause"),
    ],
)
def test_pause_names_the_option_that_is_wrong_and_what_exists(args: list[str], message: str) -> None:
    acme, beta = make_org(name="Acme"), make_org(name="Beta")
    make_owner(organization=acme, name="Ann")
    make_owner(organization=acme, name="Sam")
    make_owner(organization=beta, name="Sam")
    with pytest.raises(CommandError) as error:
        _run("pause", *args)
    assert message in str(error.value)
    assert not Pause.objects.exists()


def test_resume_by_id_and_all() -> None:
    org = make_org(name="Acme")
    first, _ = pauses.pause(organization=org)
    second, _ = pauses.pause(organization=org, tier=Tier.NUDGE)
    third, _ = pauses.pause(sender_domain="mail.example.com")
    assert _run("resume", "--id", str(first.pk)).startswith(f"resumed #{first.pk}: organization Acme")
    out = _run("resume", "--all")
    assert out.splitlines()[0].startswith(f"resumed #{second.pk}: organization Acme, tier nudge")
    assert out.splitlines()[1].startswith(f"resumed #{third.pk}: sender domain mail.example.com")
    assert pauses.active() == []


def test_resume_with_no_match_lists_the_active_pauses() -> None:
    make_org(name="Acme")
    stop, _ = pauses.pause(organization=make_org(name="Beta"))
    with pytest.raises(CommandError) as error:
        _run("resume", "--org", "Acme")
    assert f"No active pause matches; active pauses: #{stop.pk} organization Beta." in str(error.value)
    with pytest.raises(CommandError, match="Say what to resume"):
        _run("resume", "--all", "--id", "3")


def test_queue_stats_lists_active_pauses_and_rejections_by_reason() -> None:
    # given a paused owner and two drafts rejected for the same reason
    make_user("alice")
    org = make_org(name="Acme")
    owner = make_owner(organization=org, name="Ann")
    _run("pause", "--org", "Acme", "--owner", "Ann", "--reason", "new copy", "--by", "alice")
    reviewer = make_user("rev")
    for _ in range(2):
        draft_reject(outreach=make_draft(lead=make_lead(owner=owner)), by=reviewer, reason="wrong tone")
    # when queue_stats runs, as JSON and as text
    data = json.loads(_run("queue_stats", "--json"))
    text = _run("queue_stats")
    # then both list the pause (scope, who, since, reason, source) and the reasons counted
    [listed] = data["pauses"]
    assert (listed["scope"], listed["created_by"], listed["reason"], listed["source"]) == (
        "owner Ann",
        "alice",
        "new copy",
        "operator",
    )
    assert listed["created_at"]
    assert data["rejected_by_reason"] == [{"reason": "wrong tone", "drafts": 2}]
    assert "owner Ann" in text
    assert "rejected: wrong tone" in text


def test_the_dashboard_shows_own_and_global_pauses_but_not_another_organizations() -> None:
    # given a pause of Acme's owner, one of Beta, and a global tier pause
    acme, beta = make_org(name="Acme"), make_org(name="Beta")
    pauses.pause(owner=make_owner(organization=acme, name="Ann"), by=make_user("alice"), reason="new copy")
    pauses.pause(organization=beta, reason="Beta's own business")
    pauses.pause(tier=Tier.NUDGE, reason="provider trouble")
    rejected = make_draft(lead=make_lead(owner=make_owner(organization=beta)))
    draft_reject(outreach=rejected, by=make_user("rev"), reason="Beta's secret")
    viewer = make_user("viewer", permissions=["view_queue_health"], organizations=[acme])
    # when Acme's operator opens the dashboard
    page = logged_in(viewer).get(reverse("orchestrator:queue-health")).content.decode()
    # then they see their pause (who, reason) and the global one, not Beta's pause or reasons
    held = page[page.index('id="held"') : page.index('id="failures"')]
    assert "owner Ann" in held
    assert "alice" in held
    assert "new copy" in held
    assert "tier nudge" in held
    assert "Beta" not in held
    assert Outreach.objects.filter(rejected_reason="Beta's secret").exists()
