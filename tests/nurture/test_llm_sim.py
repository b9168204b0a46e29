"""The LLM provider simulator, driven over real HTTP (the openai SDK and urllib) as clients use it.

Windows are shortened (window_s=1..2) so limits can be hit and recovered from in a second.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, cast

import openai
import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from hypothesis import given, settings
from hypothesis import strategies as st

from devtools.llm_sim import (
    MARKER_FAIL_400,
    MARKER_FAIL_429,
    MARKER_FAIL_500,
    MARKER_POLICY_FAIL,
    Limiter,
    LLMSim,
    SimConfig,
    SimConfigError,
    format_duration,
)
from devtools.llm_sim.config import model_spec_parse
from nurture.errors import RateLimited
from nurture.writing.draft_policy import check_draft
from nurture.writing.llm import classify_status, parse_duration_s
from nurture.writing.prompts import PromptFacts, context_prompt, draft_parse, message_prompt, plan_prompt
from tests.e2e.conftest import wait_until

ROOT = Path(__file__).resolve().parents[2]
HTTPResult = tuple[int, dict[str, str], dict[str, Any]]
StartSim = Callable[..., LLMSim]


@pytest.fixture
def start_sim() -> Iterator[StartSim]:
    started: list[LLMSim] = []

    def start(**overrides: Any) -> LLMSim:
        sim = LLMSim(**{"rpm": 1000, "tpm": 1_000_000, "window_s": 2.0, **overrides})
        sim.start()
        started.append(sim)
        return sim

    yield start
    for sim in started:
        sim.stop()


def _client(sim: LLMSim, key: str = "k") -> openai.OpenAI:
    return openai.OpenAI(base_url=sim.base_url, api_key=key, max_retries=0, timeout=10)


def _post(
    sim: LLMSim | int,
    text: str = "Write a short intro email.",
    *,
    max_tokens: int = 50,
    key: str | None = "k",
) -> HTTPResult:
    body = {"model": "sim-1", "messages": [{"role": "user", "content": text}], "max_tokens": max_tokens}
    return _http(sim, "POST", "/v1/chat/completions", body, key=key)


def _http(
    sim: LLMSim | int, method: str, path: str, body: Any = None, *, key: str | None = None
) -> HTTPResult:
    """`sim` is a running LLMSim or the port of one (the management command's)."""
    port = sim if isinstance(sim, int) else sim.port
    data = None if body is None else json.dumps(body).encode()
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=data, method=method)
    request.add_header("Content-Type", "application/json")
    if key:
        request.add_header("Authorization", f"Bearer {key}")
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, dict(response.headers), json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, dict(error.headers), json.loads(error.read())


def _burst(sim: LLMSim, count: int, **kwargs: Any) -> list[HTTPResult]:
    with ThreadPoolExecutor(max_workers=count) as pool:
        return list(pool.map(lambda _: _post(sim, **kwargs), range(count)))


# --- answers ---------------------------------------------------------------------------------------


def test_completion_carries_text_usage_and_rate_limit_headers(start_sim: StartSim) -> None:
    # given
    sim = start_sim(rpm=10, tpm=5000)
    prompt = "Write a short intro email to a prospect."
    # when
    raw = _client(sim).chat.completions.with_raw_response.create(
        model="sim-1", messages=[{"role": "user", "content": prompt}], max_tokens=200
    )
    # then
    completion = raw.parse()
    text = completion.choices[0].message.content or ""
    assert text.startswith("Subject: ")
    assert completion.choices[0].finish_reason == "stop"
    assert completion.usage is not None
    assert completion.usage.prompt_tokens == math.ceil(len(prompt) / 4)
    assert completion.usage.completion_tokens == math.ceil(len(text) / 4)
    assert (
        completion.usage.total_tokens == completion.usage.prompt_tokens + completion.usage.completion_tokens
    )
    headers = raw.headers
    assert headers["x-ratelimit-limit-requests"] == "10"
    assert headers["x-ratelimit-limit-tokens"] == "5000"
    assert headers["x-ratelimit-remaining-requests"] == "9"
    # admission counts prompt + max_tokens, as providers do
    assert headers["x-ratelimit-remaining-tokens"] == str(5000 - completion.usage.prompt_tokens - 200)
    assert parse_duration_s(headers["x-ratelimit-reset-requests"]) == pytest.approx(2.0, abs=0.1)
    assert parse_duration_s(headers["x-ratelimit-reset-tokens"]) == pytest.approx(2.0, abs=0.1)


def test_three_generation_steps_get_fitting_answers_that_pass_the_policy(start_sim: StartSim) -> None:
    # given: the real prompts of the pipeline
    sim = start_sim()
    facts = PromptFacts(
        kind="intro",
        step=0,
        sender={"name": "Atlas (agent)", "organization": "Acme"},
        lead={
            "first_name": "Dana",
            "last_name": "Ng",
            "company": "Globex",
            "title": "Head of Sales",
            "timezone": "UTC",
        },
    )
    client = _client(sim)

    def ask(messages: Any) -> str:
        reply = client.chat.completions.create(model="sim-1", messages=messages, max_tokens=400)
        return reply.choices[0].message.content or ""

    # when
    plan = ask(plan_prompt(facts=facts))
    notes = ask(context_prompt(facts=facts, plan=plan))
    email = ask(message_prompt(facts=facts, plan=plan, notes=notes))
    # then
    assert "Subject:" not in plan
    assert "Dana" in plan
    assert "Subject:" not in notes
    assert "Dana works at Globex as Head of Sales." in notes
    draft = draft_parse(text=email, kind="intro")
    assert draft.subject_found
    assert draft.body.startswith("Hi Dana,")
    assert draft.body.endswith("Atlas")  # "(agent)" dropped: only name-like text is echoed
    assert check_draft(subject=draft.subject, body=draft.body, allowed_domains=()) == []


def test_lead_text_that_is_not_a_name_is_never_echoed(start_sim: StartSim) -> None:
    # given: untrusted lead data with a domain and an address in it
    sim = start_sim()
    facts = PromptFacts(
        kind="nudge",
        step=1,
        sender={"name": "Maria", "organization": "Acme"},
        lead={
            "first_name": "visit evil.example",
            "last_name": "",
            "company": "x@y.io",
            "title": "",
            "timezone": "",
        },
    )
    # when
    reply = _client(sim).chat.completions.create(
        model="sim-1", messages=cast(Any, message_prompt(facts=facts, plan="p", notes="n")), max_tokens=400
    )
    # then
    draft = draft_parse(text=reply.choices[0].message.content or "", kind="nudge")
    assert draft.body.startswith("Hi there,")
    assert check_draft(subject=draft.subject, body=draft.body, allowed_domains=()) == []


# --- limits ----------------------------------------------------------------------------------------


def test_burst_over_rpm_gets_429s_and_no_window_exceeds_the_limit(start_sim: StartSim) -> None:
    # given
    sim = start_sim(rpm=5, tpm=1_000_000)
    # when: 12 concurrent requests
    results = _burst(sim, 12)
    # then
    statuses = sorted(status for status, _, _ in results)
    assert statuses == [200] * 5 + [429] * 7
    for status, headers, body in results:
        if status != 429:
            continue
        assert 1 <= int(headers["retry-after"]) <= 2
        assert 0 < int(headers["retry-after-ms"]) <= 2000
        assert headers["x-ratelimit-remaining-requests"] == "0"
        assert body["error"]["type"] == body["error"]["code"] == "rate_limit_exceeded"
        error = classify_status(status=429, headers=headers, code=body["error"]["code"])
        assert isinstance(error, RateLimited)
        assert 0 < error.retry_after_s <= 2
    stats = _http(sim, "GET", "/stats")[2]
    assert stats["peak_window"]["requests"] == 5
    assert (stats["requests"], stats["admitted"], stats["rejected_429"]) == (12, 5, 7)


def test_tokens_per_minute_count_prompt_plus_max_tokens(start_sim: StartSim) -> None:
    # given: each request counts ceil(8/4)=2 prompt + 100 max tokens = 102
    sim = start_sim(rpm=100, tpm=300)
    # when
    results = [_post(sim, "12345678", max_tokens=100) for _ in range(3)]
    too_large = _post(sim, "12345678", max_tokens=400)
    # then
    assert [status for status, _, _ in results] == [200, 200, 429]
    assert results[1][1]["x-ratelimit-remaining-tokens"] == str(300 - 204)
    assert "tokens" in results[2][2]["error"]["message"]
    assert too_large[0] == 429
    assert "too large" in too_large[2]["error"]["message"]
    assert _http(sim, "GET", "/stats")[2]["peak_window"]["tokens"] == 204


def test_requests_pass_again_once_the_window_moves_on(start_sim: StartSim) -> None:
    # given: the limit used up
    sim = start_sim(rpm=2, window_s=1.0)
    assert [_post(sim)[0] for _ in range(2)] == [200, 200]
    status, headers, _ = _post(sim)
    assert status == 429
    # when: waiting as told
    time.sleep(int(headers["retry-after-ms"]) / 1000 + 0.02)
    # then
    assert _post(sim)[0] == 200
    assert _http(sim, "GET", "/stats")[2]["peak_window"]["requests"] == 2


def test_bucket_mode_refills_continuously(start_sim: StartSim) -> None:
    # given: 4 per 2 s = one request back every 0.5 s
    sim = start_sim(rpm=4, window_s=2.0, mode="bucket")
    assert [_post(sim)[0] for _ in range(4)] == [200] * 4
    status, headers, _ = _post(sim)
    assert status == 429
    assert 300 <= int(headers["retry-after-ms"]) <= 500
    # when
    time.sleep(int(headers["retry-after-ms"]) / 1000 + 0.02)
    # then: one more, not a whole new window
    assert [_post(sim)[0] for _ in range(2)] == [200, 429]


def test_shared_client_consumes_the_same_window(start_sim: StartSim) -> None:
    # given: another client on the key, 10 requests/s, for a second
    sim = start_sim(rpm=20, window_s=2.0, shared_rps=10, shared_tokens=5)
    wait_until(
        lambda: sim.stats()["shared"]["admitted"] >= 5, timeout_s=5, what="the other client's requests"
    )
    shared_before = sim.stats()["shared"]["admitted"]
    # when
    results = _burst(sim, 20)
    # then: what the other client used is not ours to use
    admitted = sum(status == 200 for status, _, _ in results)
    stats = sim.stats()
    assert shared_before >= 5
    assert admitted <= 20 - shared_before
    assert stats["peak_window"]["requests"] <= 20
    assert stats["shared"]["tokens"] == 5 * stats["shared"]["admitted"]


def test_window_limiter_is_strict_exact_and_reports_the_true_peak() -> None:
    # given / when / then: see the property below; one hand-checked case first
    limiter = Limiter(rpm=2, tpm=100, window_s=10, mode="window")
    assert limiter.admit(0.0, 10).admitted
    assert limiter.admit(1.0, 10).admitted
    refused = limiter.admit(5.0, 10)
    assert not refused.admitted
    assert refused.wait_s == pytest.approx(5.0)
    assert limiter.admit(10.0, 10).admitted  # the call at 0.0 left the window (now - 10, now]


@settings(max_examples=150, deadline=None)
@given(
    rpm=st.integers(1, 6),
    tpm=st.integers(10, 60),
    arrivals=st.lists(st.tuples(st.integers(0, 300), st.integers(1, 25)), min_size=1, max_size=60),
)
def test_window_never_exceeds_limits_and_refuses_only_when_it_must(
    rpm: int, tpm: int, arrivals: list[tuple[int, int]]
) -> None:
    # given: arrivals on a 0.1 s grid against a 10 s window
    window = 10.0
    limiter = Limiter(rpm=rpm, tpm=tpm, window_s=window, mode="window")
    log: list[tuple[float, int]] = []

    def room(at: float, tokens: int) -> bool:
        inside = [size for t, size in log if t <= at < t + window]
        return len(inside) + 1 <= rpm and sum(inside) + tokens <= tpm

    # when / then
    for step, tokens in sorted(arrivals):
        now = step / 10
        decision = limiter.admit(now, tokens)
        assert decision.admitted == room(now, tokens)
        if decision.admitted:
            log.append((now, tokens))
        elif not math.isinf(decision.wait_s):  # exact: room after the wait, none just before
            assert room(now + decision.wait_s + 1e-9, tokens)
            assert decision.wait_s < 1e-6 or not room(now + decision.wait_s - 1e-6, tokens)
    peak = max(sum(1 for u, _ in log if u <= t < u + window) for t, _ in log) if log else 0
    assert limiter.peak_requests == peak <= rpm


@given(seconds=st.floats(0, 10_000))
def test_reset_durations_read_back_with_the_client_parser(seconds: float) -> None:
    parsed = parse_duration_s(format_duration(seconds))
    assert parsed is not None
    assert seconds <= parsed + 1e-9 <= seconds + 0.0011


# --- failures, markers, auth -----------------------------------------------------------------------


def test_fail_rate_injects_5xx_at_about_the_rate_and_repeats_with_the_seed(start_sim: StartSim) -> None:
    # given
    runs = [start_sim(fail_rate=0.3, seed=7), start_sim(fail_rate=0.3, seed=7)]
    # when
    statuses = [[_post(sim)[0] for _ in range(150)] for sim in runs]
    # then
    failed = [s for s in statuses[0] if s != 200]
    assert 0.2 * 150 <= len(failed) <= 0.4 * 150
    assert set(failed) <= {500, 502, 503}
    assert len(set(failed)) > 1
    assert statuses[0] == statuses[1]
    stats = _http(runs[0], "GET", "/stats")[2]
    assert stats["injected_5xx"] == len(failed)
    assert stats["admitted"] == 150  # failed calls still count against the window


def test_markers_force_each_outcome(start_sim: StartSim) -> None:
    # given
    sim = start_sim()
    client = _client(sim)

    def ask(marker: str) -> str:
        messages: Any = [{"role": "user", "content": f"Write an email to {marker}."}]
        return (
            client.chat.completions.create(model="sim-1", messages=messages, max_tokens=300)
            .choices[0]
            .message.content
            or ""
        )

    # when / then
    draft = draft_parse(text=ask(MARKER_POLICY_FAIL), kind="intro")
    assert "{{first_name}}" in draft.body
    assert any(
        "placeholder" in v for v in check_draft(subject=draft.subject, body=draft.body, allowed_domains=())
    )
    with pytest.raises(openai.InternalServerError):
        ask(MARKER_FAIL_500)
    with pytest.raises(openai.BadRequestError):
        ask(MARKER_FAIL_400)
    with pytest.raises(openai.RateLimitError) as refused:
        ask(MARKER_FAIL_429)
    assert refused.value.response.headers["retry-after"] == "1"
    stats = sim.stats()
    assert (stats["admitted"], stats["marker_errors"], stats["rejected_429"]) == (3, 2, 1)


def test_missing_key_is_401_and_distinct_keys_are_counted(start_sim: StartSim) -> None:
    # given
    sim = start_sim()
    # when
    anonymous = _post(sim, key=None)
    for key in ("a", "b", "a"):
        assert _post(sim, key=key)[0] == 200
    # then
    assert anonymous[0] == 401
    assert anonymous[2]["error"]["code"] == "invalid_api_key"
    stats = sim.stats()
    assert (stats["distinct_keys"], stats["unauthorized"], stats["admitted"]) == (2, 1, 3)


def test_bad_request_is_400_naming_the_field(start_sim: StartSim) -> None:
    sim = start_sim()
    status, _, body = _http(sim, "POST", "/v1/chat/completions", {"model": "m", "messages": []}, key="k")
    assert status == 400
    assert body["error"]["param"] == "messages"
    assert sim.stats()["admitted"] == 0


def test_latency_is_applied_and_concurrent_requests_overlap(start_sim: StartSim) -> None:
    # given
    sim = start_sim(latency_ms=1500, jitter_ms=0)
    # when
    began = time.monotonic()
    results = _burst(sim, 6)
    elapsed = time.monotonic() - began
    # then: each answer waited out the latency, and all six were held at once (how soon after
    # one another they arrived is the machine's business: a loaded one spreads them out)
    assert all(status == 200 for status, _, _ in results)
    assert elapsed >= 1.5
    assert sim.stats()["peak_in_flight"] == 6


def test_stats_reset_health_and_per_minute_series(start_sim: StartSim) -> None:
    # given
    sim = start_sim(rpm=3)
    for _ in range(4):
        _post(sim)
    # when
    before = _http(sim, "GET", "/stats")[2]
    assert _http(sim, "POST", "/stats/reset")[0] == 200
    after = _http(sim, "GET", "/stats")[2]
    # then
    assert _http(sim, "GET", "/health")[:1] == (200,)
    assert before["per_minute"] == [
        {
            "minute": 0,
            "admitted": 3,
            "tokens": 3 * (7 + 50),
            "rejected_429": 1,
            "injected_5xx": 0,
            "shared_admitted": 0,
        }
    ]
    assert before["limits"] == {"rpm": 3, "tpm": 1_000_000, "window_s": 2.0, "mode": "window"}
    assert (after["requests"], after["admitted"], after["per_minute"], after["peak_window"]["requests"]) == (
        0,
        0,
        [],
        0,
    )
    assert after["window"]["requests"] == 3  # the provider still remembers the calls...
    assert _post(sim)[0] == 429
    assert _http(sim, "POST", "/stats/reset?limits=1")[0] == 200  # ...unless told to forget them
    assert _post(sim)[0] == 200


def test_config_rejects_bad_values_naming_the_setting() -> None:
    for bad, field in (({"rpm": 0}, "rpm"), ({"fail_rate": 1.5}, "fail_rate"), ({"mode": "x"}, "mode")):
        with pytest.raises(SimConfigError) as error:
            SimConfig(**{"rpm": 10, "tpm": 100, **bad})  # type: ignore[arg-type]
        assert error.value.field == field


# --- the management command ------------------------------------------------------------------------


@pytest.mark.slow
def test_command_serves_until_sigterm_and_exits_zero() -> None:
    # given
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings", "PYTHONUNBUFFERED": "1"}
    command = [sys.executable, "manage.py", "llm_sim", "--port", str(port), "--rpm", "7", "--tpm", "9000"]
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        # when
        health = _wait_for_health(port)
        status, headers, _ = _post(port)
    finally:
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=10)
    # then
    assert health
    assert status == 200
    assert headers["x-ratelimit-limit-requests"] == "7"
    assert process.returncode == 0, err
    assert f"http://127.0.0.1:{port}/v1" in out
    assert "stopped" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--rpm", "0"], "--rpm: must be at least 1"),
        (["--tpm", "-5"], "--tpm: must be at least 1"),
        (["--fail-rate", "1.5"], "--fail-rate: must be at least 0 and at most 1"),
        (["--latency-ms", "-1"], "--latency-ms: must be at least 0"),
        (["--rpm", "abc"], "invalid int value: 'abc'"),
        (["--mode", "fast"], "invalid choice: 'fast'"),
    ],
)
def test_command_rejects_bad_flags_with_a_clear_message(argv: list[str], message: str) -> None:
    with pytest.raises(CommandError, match=message.replace("(", r"\(")):
        call_command("llm_sim", "--port", "0", *argv)


@pytest.mark.slow
def test_a_sigterm_as_soon_as_health_answers_stops_it_cleanly() -> None:
    # given the command started five times, each told to stop the moment /health first answers
    # (until 2026-12-06 it served before it handled SIGTERM: 2 of 20 such starts on a loaded
    # machine died of the signal, exit -15, as one CI run did)
    codes = []
    for _ in range(5):
        with socket.socket() as probe:
            probe.bind(("127.0.0.1", 0))
            port = probe.getsockname()[1]
        env = {**os.environ, "DJANGO_SETTINGS_MODULE": "config.test_settings", "PYTHONUNBUFFERED": "1"}
        process = subprocess.Popen(
            [sys.executable, "manage.py", "llm_sim", "--port", str(port)],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        try:
            assert _wait_for_health(port, poll_s=0.001)
        finally:
            process.send_signal(signal.SIGTERM)
            out, _ = process.communicate(timeout=10)
        codes.append((process.returncode, "stopped" in out))
    # then each stopped as asked: exit 0, saying so
    assert codes == [(0, True)] * 5


def _wait_for_health(port: int, timeout_s: float = 15.0, poll_s: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=1) as response:
                return response.status == 200
        except OSError:
            time.sleep(poll_s)
    return False


# --- several models ------------------------------------------------------------------------------


def _ask(sim: LLMSim, model: str) -> HTTPResult:
    body = {"model": model, "messages": [{"role": "user", "content": "Write an intro."}], "max_tokens": 20}
    return _http(sim, "POST", "/v1/chat/completions", body, key="k")


def test_each_model_served_has_limits_of_its_own(start_sim: StartSim) -> None:
    # given a small model allowing 4 requests per window and a large one allowing 2
    sim = start_sim(models=(("small", 4, 100_000), ("large", 2, 100_000)))
    # when each is asked 4 times
    small = [_ask(sim, "small")[0] for _ in range(4)]
    large = [_ask(sim, "large")[0] for _ in range(4)]
    # then the large model's limit refused its last two, and did not touch the small one's
    assert (small, large) == ([200] * 4, [200, 200, 429, 429])
    models = sim.stats()["models"]
    assert (models["small"]["admitted"], models["large"]["admitted"], models["large"]["rejected_429"]) == (
        4,
        2,
        2,
    )
    assert _ask(sim, "large")[1]["x-ratelimit-limit-requests"] == "2"


def test_a_model_not_served_answers_404_model_not_found(start_sim: StartSim) -> None:
    sim = start_sim(models=(("small", 4, 100_000),))

    status, _, body = _ask(sim, "larg")

    assert (status, body["error"]["code"]) == (404, "model_not_found")
    assert sim.stats()["unknown_model"] == 1


@pytest.mark.parametrize(
    ("models", "message"),
    [
        ((("a", 1, 10), ("a", 2, 10)), "models: each model once, got a, a"),
        ((("a", 0, 10),), "models: model 'a': must be at least 1"),
    ],
)
def test_bad_model_lists_name_the_setting(models: Any, message: str) -> None:
    with pytest.raises(SimConfigError, match=message):
        SimConfig(rpm=10, tpm=1000, models=models)


def test_the_model_flag_is_name_rpm_tpm() -> None:
    assert model_spec_parse("small:600:600000") == ("small", 600, 600000)
    with pytest.raises(SimConfigError, match="expected NAME:RPM:TPM"):
        model_spec_parse("small:600")
