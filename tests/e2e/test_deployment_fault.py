"""A misconfigured deployment pauses the pipeline instead of burning the queue.

Before: a wrong model name made every call answer 404 model_not_found, each a PermanentError,
and the whole backlog was dead-lettered within minutes (348 outreach in three minutes, tried as
a new user would). Now the deployment's breaker opens after LLM_FAULT_THRESHOLD refusals, work
waits QUEUED saying which deployment and what to fix, nothing is dead-lettered or charged an
attempt, and the pipeline resumes by itself once a probe call succeeds.
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest

from devtools.llm_stub import LLMStub, StubResponse
from devtools.processes import ProcessGroup
from devtools.smtp_sink import SMTPSink
from orchestrator.deployments.breaker import KEY_PREFIX
from outreach.models import Outreach, State
from outreach.transitions import IN_FLIGHT
from tests.e2e.conftest import ARTIFACTS, purge_broker, stack_env_for_test, start_pipeline, wait_until
from tests.factories import make_lead, make_org, make_outreach, make_owner

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]

PROBE_S = 3  # LLM_FAULT_PROBE_S: an open breaker lets a probe through after this long

NOT_FOUND = StubResponse(
    status=404,
    body=json.dumps(
        {
            "error": {
                "message": "The model `larg` does not exist",
                "type": "invalid_request_error",
                "code": "model_not_found",
            }
        }
    ),
)


def _breaker_opened_ms(client: Any) -> int:
    """When a deployment's breaker last opened (Redis time, ms): every refusal while it is open
    opens it again (orchestrator.deployments.breaker)."""
    opened = [client.hget(key, "opened_ms") for key in client.scan_iter(match=f"{KEY_PREFIX}*")]
    return max((int(ms) for ms in opened if ms is not None), default=0)


def test_a_wrong_model_name_pauses_work_and_resumes_after_a_probe(
    request: pytest.FixtureRequest, redis_client: Any, smtp_sink: SMTPSink, llm_stub: LLMStub
) -> None:
    # given a deployment whose model name is wrong (the provider answers 404 model_not_found)
    # and 30 outreach of an autonomous owner
    llm_stub.default = NOT_FOUND
    deployments = [{"name": "large", "model": "larg", "rpm": 600, "tpm": 600_000}]
    purge_broker()
    env = stack_env_for_test(
        llm_base_url=llm_stub.base_url,
        smtp_port=smtp_sink.port,
        LLM_DEPLOYMENTS=json.dumps(deployments),
        LLM_FAULT_THRESHOLD="3",
        LLM_FAULT_PROBE_S=str(PROBE_S),
    )
    group = ProcessGroup(log_dir=ARTIFACTS / request.node.name, env=env)
    owner = make_owner(organization=make_org())
    ids = [make_outreach(lead=make_lead(owner=owner)).pk for _ in range(30)]
    try:
        # when the pipeline runs for a while against it
        start_pipeline(group)
        wait_until(
            lambda: (
                Outreach.objects.filter(pk__in=ids, blocked_reason__contains="misconfigured").count() >= 20
            ),
            timeout_s=60,
            what="work waiting on the misconfigured deployment",
            group=group,
        )
        # and a probe interval later still: the breaker opened again (a probe refused, or a
        # late call) and no job is in flight
        rows = Outreach.objects.filter(pk__in=ids)
        opened_ms = _breaker_opened_ms(redis_client)
        wait_until(
            lambda: (
                _breaker_opened_ms(redis_client) >= opened_ms + PROBE_S * 1000
                and not rows.filter(state__in=IN_FLIGHT).exists()
            ),
            timeout_s=60,
            what="the breaker opened again a probe interval on, no job in flight",
            group=group,
        )
        # then nothing is dead-lettered or charged an attempt, work waits QUEUED saying why,
        # and the provider saw a handful of calls (the threshold, what was in flight, probes),
        # not the backlog's 30 x 3
        assert not rows.filter(state=State.DEAD).exists()
        assert not rows.filter(attempts__gt=0).exists()
        assert Counter(rows.values_list("state", flat=True))[State.QUEUED] >= 25
        reason = rows.filter(state=State.QUEUED).exclude(blocked_reason="").first()
        assert reason is not None
        assert reason.blocked_reason.startswith("deployment 'large#0' misconfigured: 404 model_not_found")
        assert "check LLM_DEPLOYMENTS" in reason.blocked_reason
        assert len(llm_stub.requests) < 30
        # when the provider serves the model again (the operator fixed it)
        llm_stub.default = StubResponse()
        # then a probe succeeds and the whole backlog is written and sent, by itself
        wait_until(
            lambda: rows.filter(state=State.SENT).count() == 30, timeout_s=90, what="30 sent", group=group
        )
        assert not rows.filter(state=State.DEAD).exists()
        assert {r.json["model"] for r in llm_stub.requests} == {"larg"}
    finally:
        group.stop()
