"""nurture.writing.llm over real HTTP: every provider answer lands in exactly one error class."""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from email.utils import formatdate
from typing import Any

import pytest

from devtools.llm_sim.protocol import ChatRequest
from devtools.llm_stub import LLMStub, StubRequest, StubResponse
from devtools.smtp_sink import free_port
from nurture.errors import ConfigurationFault, PermanentError, PipelineError, RateLimited, TransientError
from nurture.writing.llm import (
    DEFAULT_RETRY_AFTER_S,
    MAX_RETRY_AFTER_S,
    ChatMessage,
    chat,
    parse_duration_s,
    prompt_tokens_estimate,
    rate_limit_info,
    retry_after_s,
)
from outreach.models import ErrorClass

MESSAGES: list[ChatMessage] = [
    {"role": "system", "content": "You write emails."},
    {"role": "user", "content": "Write one."},
]
LIMIT_HEADERS = {
    "x-ratelimit-limit-requests": "300",
    "x-ratelimit-limit-tokens": "300000",
    "x-ratelimit-remaining-requests": "299",
    "x-ratelimit-remaining-tokens": "299400",
    "x-ratelimit-reset-requests": "200ms",
    "x-ratelimit-reset-tokens": "1m0.5s",
}


def _raises(stub: LLMStub, response: StubResponse, error: type[PipelineError]) -> Any:
    stub.push(response)
    with pytest.raises(error) as caught:
        chat(messages=MESSAGES, max_tokens=50)
    assert type(caught.value) is error, f"classified as {type(caught.value).__name__}"
    return caught.value


def test_chat_returns_text_usage_and_rate_limit_headers(llm_stub: LLMStub) -> None:
    # given
    llm_stub.push(StubResponse(text="Subject: Hi\n\nBody", usage=(120, 40), headers=LIMIT_HEADERS))
    # when
    result = chat(messages=MESSAGES, max_tokens=50)
    # then
    assert result.text == "Subject: Hi\n\nBody"
    assert (result.prompt_tokens, result.completion_tokens, result.total_tokens) == (120, 40, 160)
    assert not result.usage_estimated
    assert result.headers == LIMIT_HEADERS
    limits = result.rate_limits
    assert (limits.limit_requests, limits.remaining_requests, limits.remaining_tokens) == (300, 299, 299400)
    assert (limits.reset_requests_s, limits.reset_tokens_s) == (0.2, 60.5)


def test_chat_sends_model_messages_max_tokens_and_key(llm_stub: LLMStub) -> None:
    chat(messages=MESSAGES, max_tokens=77)

    request = llm_stub.requests[0]
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-test"
    assert request.json["model"] == "stub-1"
    assert request.json["messages"] == MESSAGES
    assert request.json["max_tokens"] == 77


def test_sdk_retries_are_off(llm_stub: LLMStub) -> None:
    # given a failure followed by a success the SDK could have retried into
    llm_stub.push(StubResponse(status=500), StubResponse(text="too late"))
    # when / then: one request, one classified error; retrying is the pipeline's decision
    with pytest.raises(TransientError):
        chat(messages=MESSAGES, max_tokens=50)
    assert len(llm_stub.requests) == 1


def test_429_with_retry_after_is_rate_limited_with_headers(llm_stub: LLMStub) -> None:
    headers = {**LIMIT_HEADERS, "x-ratelimit-remaining-requests": "0", "retry-after": "7"}

    error = _raises(llm_stub, StubResponse(status=429, headers=headers), RateLimited)

    assert error.retry_after_s == 7.0
    assert error.status == 429
    assert error.rate_limits.remaining_requests == 0
    assert error.rate_limits.remaining_tokens == 299400
    assert error.rate_limits.raw["x-ratelimit-reset-tokens"] == "1m0.5s"


def test_429_retry_after_ms_wins_over_seconds(llm_stub: LLMStub) -> None:
    headers = {"retry-after-ms": "1500", "retry-after": "9"}

    error = _raises(llm_stub, StubResponse(status=429, headers=headers), RateLimited)

    assert error.retry_after_s == 1.5


def test_429_insufficient_quota_is_permanent(llm_stub: LLMStub) -> None:
    # A billing quota does not reset in a minute: waiting and re-queueing would loop forever.
    body = '{"error": {"message": "You exceeded your current quota", "code": "insufficient_quota"}}'

    _raises(llm_stub, StubResponse(status=429, body=body), PermanentError)


@pytest.mark.parametrize("status", [500, 502, 503, 504, 408])
def test_server_errors_are_transient(llm_stub: LLMStub, status: int) -> None:
    error = _raises(llm_stub, StubResponse(status=status, headers=LIMIT_HEADERS), TransientError)

    assert error.status == status
    assert error.rate_limits.remaining_requests == 299  # headers kept on errors too


@pytest.mark.parametrize("status", [400, 422])
def test_client_errors_are_permanent(llm_stub: LLMStub, status: int) -> None:
    error = _raises(llm_stub, StubResponse(status=status), PermanentError)

    assert error.status == status


@pytest.mark.parametrize("status", [401, 403, 404])
def test_deployment_errors_are_configuration_faults(llm_stub: LLMStub, status: int) -> None:
    # given: the key, its permission or the model is wrong: every call would fail alike
    body = '{"error": {"message": "The model does not exist", "code": "model_not_found"}}'

    # when
    error = _raises(llm_stub, StubResponse(status=status, body=body), ConfigurationFault)

    # then: a configuration fault (still a PermanentError to handlers that do not know it)
    assert (error.status, error.code, isinstance(error, PermanentError)) == (status, "model_not_found", True)


def test_timeout_is_transient(llm_stub: LLMStub, settings: Any) -> None:
    settings.LLM_TIMEOUT_S = 0.3
    started = time.monotonic()

    _raises(llm_stub, StubResponse(delay_s=2.0), TransientError)

    assert time.monotonic() - started < 1.5  # our timeout, not the server's delay


def test_connection_refused_is_transient(settings: Any) -> None:
    settings.LLM_BASE_URL, settings.LLM_API_KEY = f"http://127.0.0.1:{free_port()}/v1", "sk-test"

    with pytest.raises(TransientError, match="unreachable"):
        chat(messages=MESSAGES, max_tokens=50)


def test_unreadable_200_is_transient(llm_stub: LLMStub) -> None:
    _raises(llm_stub, StubResponse(body="<html>gateway hiccup</html>"), TransientError)


def test_empty_completion_is_transient(llm_stub: LLMStub) -> None:
    _raises(llm_stub, StubResponse(text=""), TransientError)


def test_content_filter_is_permanent(llm_stub: LLMStub) -> None:
    _raises(llm_stub, StubResponse(text="", finish_reason="content_filter"), PermanentError)


def test_missing_usage_is_estimated(llm_stub: LLMStub) -> None:
    llm_stub.push(StubResponse(text="x" * 400, usage=None))

    result = chat(messages=MESSAGES, max_tokens=50)

    assert result.usage_estimated
    assert result.completion_tokens == 101
    assert result.total_tokens == result.prompt_tokens + result.completion_tokens


@pytest.mark.parametrize(
    ("headers", "expected"),
    [
        ({"retry-after-ms": "250"}, 0.25),
        ({"retry-after": "3"}, 3.0),
        ({"retry-after": "2.5"}, 2.5),
        ({"Retry-After": "4"}, 4.0),
        ({"retry-after": "soon"}, DEFAULT_RETRY_AFTER_S),
        ({}, DEFAULT_RETRY_AFTER_S),
        ({"retry-after": "-5"}, 0.0),
        ({"retry-after": "99999999"}, MAX_RETRY_AFTER_S),
        ({"retry-after": "nan"}, DEFAULT_RETRY_AFTER_S),
        # no retry-after: wait for the limit that ran out
        ({"x-ratelimit-remaining-tokens": "0", "x-ratelimit-reset-tokens": "12s"}, 12.0),
        (
            {
                "x-ratelimit-remaining-requests": "0",
                "x-ratelimit-reset-requests": "2s",
                "x-ratelimit-reset-tokens": "30s",
            },
            2.0,
        ),
        ({"x-ratelimit-reset-requests": "2s", "x-ratelimit-reset-tokens": "30s"}, 30.0),
    ],
)
def test_retry_after_s(headers: dict[str, str], expected: float) -> None:
    assert retry_after_s(headers, rate_limit_info(headers)) == expected


def test_retry_after_http_date() -> None:
    headers = {"retry-after": formatdate(time.time() + 30, usegmt=True)}

    assert 25 <= retry_after_s(headers, rate_limit_info(headers)) <= 31


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("1s", 1.0),
        ("20ms", 0.02),
        ("6m0s", 360.0),
        ("1h2m3.5s", 3723.5),
        ("12", 12.0),
        ("0.5", 0.5),
        ("", None),
        ("soon", None),
        ("5x", None),
        ("1s garbage", None),
        (None, None),
    ],
)
def test_parse_duration_s(value: str | None, expected: float | None) -> None:
    result = parse_duration_s(value)

    assert result is None if expected is None else result == pytest.approx(expected)


def test_error_classes_are_known_error_classes() -> None:
    from nurture.errors import OptedOut, PolicyViolation

    for cls in (TransientError, PermanentError, RateLimited, PolicyViolation, OptedOut):
        assert cls.error_class in ErrorClass.values


def test_missing_api_key_is_permanent(settings: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    settings.LLM_API_KEY = ""

    with pytest.raises(PermanentError, match="misconfigured"):
        chat(messages=MESSAGES, max_tokens=50)


class _CountingStub(LLMStub):
    """Holds each request 1 s and counts how many it holds at once."""

    def __init__(self) -> None:
        super().__init__()
        self.in_flight = self.peak = 0

    def next_response(self, request: StubRequest) -> StubResponse:
        with self._lock:
            self.in_flight += 1
            self.peak = max(self.peak, self.in_flight)
        time.sleep(1.0)
        with self._lock:
            self.in_flight -= 1
        return super().next_response(request)


@pytest.mark.parametrize("connections", [8, 32])
def test_calls_in_flight_per_process_are_as_many_as_the_client_pool_allows(
    settings: Any, connections: int
) -> None:
    # given a provider taking 1 s a call and a client pool of `connections`
    stub = _CountingStub()
    stub.start()
    settings.LLM_BASE_URL, settings.LLM_API_KEY = stub.base_url, "sk-test"
    settings.LLM_MAX_CONNECTIONS = connections
    # when 32 threads of one process call at once (a threads-pool worker)
    try:
        with ThreadPoolExecutor(max_workers=32) as pool:
            results = list(pool.map(lambda _: chat(messages=MESSAGES, max_tokens=10), range(32)))
    finally:
        stub.stop()
    # then all succeed, never more at the provider than the pool allows, and with a pool as
    # large as the concurrency, more than a small pool would let through
    assert len(results) == 32
    assert stub.peak <= connections
    if connections == 32:
        assert stub.peak > 8


def test_a_call_that_finds_no_connection_free_within_the_timeout_is_a_transient_failure(
    settings: Any,
) -> None:
    # given a provider taking 1 s a call, one connection per process and a 3 s timeout
    stub = _CountingStub()
    stub.start()
    settings.LLM_BASE_URL, settings.LLM_API_KEY = stub.base_url, "sk-test"
    settings.LLM_MAX_CONNECTIONS, settings.LLM_TIMEOUT_S = 1, 3.0

    def call(_: int) -> str:
        try:
            return chat(messages=MESSAGES, max_tokens=10).text
        except TransientError as exc:
            return str(exc)

    # when five threads call at once: the fifth would wait 4 s for the connection
    try:
        with ThreadPoolExecutor(max_workers=5) as pool:
            outcomes = list(pool.map(call, range(5)))
    finally:
        stub.stop()
    # then one call at a time reached the provider, the first ones answered, and a call that
    # waited past the timeout failed as a timeout naming the setting (retried by the pipeline)
    waited_out = [o for o in outcomes if "LLM_MAX_CONNECTIONS" in o]
    assert stub.peak == 1
    assert len(waited_out) >= 1
    assert all(o.startswith("LLM provider unreachable: request timed out") for o in waited_out)
    assert len(stub.requests) == 5 - len(waited_out) >= 2


def test_the_client_pool_defaults_to_the_generation_workers_concurrency() -> None:
    from django.conf import settings

    from config.queues import Queue
    from config.workers import WORKERS

    assert WORKERS[Queue.GENERATION].concurrency == settings.LLM_MAX_CONNECTIONS


@pytest.mark.parametrize("chars", [1, 3, 4, 5, 4001, 13_003])
def test_the_prompt_estimate_counts_what_the_providers_limit_counts(chars: int) -> None:
    # given messages whose characters are not a multiple of 4
    messages: list[ChatMessage] = [
        {"role": "system", "content": "s" * (chars // 2)},
        {"role": "user", "content": "u" * (chars - chars // 2)},
    ]
    body = json.dumps({"model": "m", "messages": messages, "max_tokens": 300}).encode()
    # then our estimate is what llm_sim (an OpenAI-style limiter) counts at admission: rounded up
    # (rounding down under-counted each call, and a full window went over at the provider: 429)
    assert prompt_tokens_estimate(messages) + 300 == ChatRequest.parse(body).cost
