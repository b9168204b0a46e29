"""The LLM client: the only module that talks to the provider (any OpenAI-compatible endpoint).

One call = one HTTP request (`POST {base_url}/chat/completions`, or the path, query, auth
header, token parameter and extra fields of the deployment's dialect: config.dialects), never
retried here: retrying
is a decision for the pipeline (backoff, attempt caps, dead letters) and every retry must pass
the budget again, so a hidden retry would both double-spend and hide 429s from the limiter.
The request is plain JSON over a pooled httpx2 client, not the openai SDK: the SDK's request
building and response models cost a generation worker about a quarter of its CPU at 3,000
requests/min (py-spy), for a wire format of four fields each way.
Every failure leaves this module as one class of nurture.errors, classified here only.
Budget settlement is the caller's job: this module returns usage and rate-limit headers.
"""

from __future__ import annotations

import email.utils
import json
import math
import os
import re
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache
from typing import Any, Literal, TypedDict
from urllib.parse import quote

import httpx2
from django.conf import settings

from config import dialects
from config.deployments import Deployment
from config.dialects import Dialect
from nurture.errors import (
    ConfigurationFault,
    PermanentError,
    PipelineError,
    RateLimited,
    RateLimitInfo,
    TransientError,
)

# When a 429 carries no retry-after and no reset time, wait this long before re-queueing.
DEFAULT_RETRY_AFTER_S = 5.0
# A broken or hostile retry-after must not park work for days; a re-queued job that is still
# early just meets another 429, which costs one request.
MAX_RETRY_AFTER_S = 3600.0
# Statuses that may pass on a retry besides 5xx: request timeout, conflict (the SDK retries these too).
_TRANSIENT_4XX = frozenset({408, 409})
# Statuses about the deployment, not the request (key, permission, model): a configuration fault.
_CONFIGURATION = frozenset({401, 403, 404})


class ChatMessage(TypedDict):
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True)
class LLMResult:
    text: str
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    headers: dict[str, str]  # the raw x-ratelimit-* headers, lower-cased names
    rate_limits: RateLimitInfo
    finish_reason: str | None = None
    usage_estimated: bool = False  # the provider sent no usage: tokens are a chars/4 estimate
    request_id: str | None = None
    processing_ms: int | None = None  # openai-processing-ms: the provider's time after arrival


def chat(
    *,
    messages: Sequence[ChatMessage],
    max_tokens: int,
    temperature: float | None = None,
    model: str = "",
    deployment: Deployment | None = None,
) -> LLMResult:
    """One chat completion on `deployment` (its base_url, key and model; default: LLM_BASE_URL,
    LLM_API_KEY, LLM_MODEL). Raises RateLimited, TransientError or PermanentError (of which
    ConfigurationFault), nothing else."""
    api_key = (deployment and deployment.api_key) or settings.LLM_API_KEY
    if not api_key:  # configuration, not luck
        raise PermanentError("LLM client misconfigured: LLM_API_KEY is not set")
    request = provider_request(
        dialect=deployment.dialect if deployment else dialects.DEFAULT,
        base_url=(deployment and deployment.base_url) or settings.LLM_BASE_URL,
        api_key=api_key,
        model=model or (deployment and deployment.model) or settings.LLM_MODEL,
        messages=messages,
        max_tokens=max_tokens,
        temperature=temperature,
    )
    try:
        with _clients_for_settings().lend() as client:
            response = client.post(
                request.url, params=request.params, content=request.content, headers=request.headers
            )
    except httpx2.TimeoutException as exc:
        raise TransientError(f"LLM provider unreachable: request timed out ({exc})") from exc
    except httpx2.HTTPError as exc:  # connection refused or reset, protocol errors
        raise TransientError(f"LLM provider unreachable: {exc}") from exc
    if response.status_code >= 400:
        code, message, param = _error_detail(response.content)
        raise classify_status(
            status=response.status_code, headers=response.headers, code=code, message=message, param=param
        )
    return _result(content=response.content, headers=response.headers, messages=messages)


@dataclass(frozen=True)
class ProviderRequest:
    url: str
    params: dict[str, str]
    headers: dict[str, str]  # holds the key: never logged
    content: bytes


def provider_request(
    *,
    dialect: Dialect,
    base_url: str,
    api_key: str,
    model: str,
    messages: Sequence[ChatMessage],
    max_tokens: int,
    temperature: float | None,
) -> ProviderRequest:
    """The HTTP request of one chat completion in the provider's dialect (pure): its path,
    query, auth header, extra headers, the token limit under the name the provider takes, and
    the extra body fields (which cannot replace model, messages or the token limit: the
    dialect's parser refuses them)."""
    body: dict[str, Any] = {
        **dialect.body_fields(),
        "model": model,
        "messages": list(messages),
        dialect.token_param: max_tokens,
    }
    if temperature is not None:
        body["temperature"] = temperature
    auth = {"Authorization": f"Bearer {api_key}"} if dialect.auth == "bearer" else {"api-key": api_key}
    return ProviderRequest(
        url=base_url.rstrip("/") + dialect.path.replace("{model}", quote(model, safe="")),
        params=dict(dialect.extra_query),
        headers={**dict(dialect.extra_headers), **auth, "Content-Type": "application/json"},
        content=json.dumps(body).encode(),
    )


def _error_detail(content: bytes) -> tuple[str | None, str, str | None]:
    """(code, message, param) of an OpenAI-style error body `{"error": {"code", "message",
    "param"}}`; the raw text when it is not one (a proxy's HTML page)."""
    try:
        error = json.loads(content)["error"]
        code, param = error.get("code"), error.get("param")
        return (
            (str(code) if code is not None else None),
            str(error.get("message") or ""),
            (str(param) if param is not None else None),
        )
    except (ValueError, TypeError, KeyError, AttributeError):
        return None, content.decode("utf-8", "replace"), None


# A 400 about the request's shape rather than its content: the deployment's dialect is wrong
# for its model (max_tokens sent to a reasoning model, a field it does not take). Every call to
# it would be refused alike, so it is the deployment's fault, not the job's.
_UNSUPPORTED_CODES = frozenset({"unsupported_parameter", "unsupported_value"})


def classify_status(
    *,
    status: int,
    headers: Mapping[str, str],
    code: str | None = None,
    message: str = "",
    param: str | None = None,
) -> PipelineError:
    """Map an HTTP error status to the taxonomy. Public so the simulator and tests share it."""
    info = rate_limit_info(headers)
    text = f"LLM provider answered {status}: {message[:300]}"
    if status == 429 and code == "insufficient_quota":
        # A billing quota, not a rate window: waiting does not help, so it is not a RateLimited.
        return PermanentError(text, status=status, rate_limits=info)
    if status == 429:
        return RateLimited(text, retry_after_s=retry_after_s(headers, info), rate_limits=info)
    if status >= 500 or status in _TRANSIENT_4XX:
        return TransientError(text, status=status, rate_limits=info)
    if status in _CONFIGURATION:
        return ConfigurationFault(text, status=status, code=code, rate_limits=info)
    if status == 400 and (code in _UNSUPPORTED_CODES or message.startswith("Unsupported parameter")):
        return ConfigurationFault(text, status=status, code=code, param=param, rate_limits=info)
    if 400 <= status < 500:
        return PermanentError(text, status=status, rate_limits=info)
    return TransientError(text, status=status, rate_limits=info)


def _result(*, content: bytes, headers: Mapping[str, str], messages: Sequence[ChatMessage]) -> LLMResult:
    info = rate_limit_info(headers)
    try:
        completion = json.loads(content)
        choice = completion["choices"][0]
        text = choice["message"]["content"] or ""
        finish_reason = choice.get("finish_reason")
        usage = _usage(usage=completion.get("usage"), messages=messages, text=text)
    except (ValueError, TypeError, KeyError, AttributeError, IndexError) as exc:
        # A 200 we cannot read is most often a proxy or gateway glitch; the next try may be fine.
        raise TransientError(f"unreadable LLM response: {exc!r}", rate_limits=info) from exc
    if not isinstance(text, str) or not text.strip():
        if finish_reason == "content_filter":
            raise PermanentError("LLM refused the prompt (content filter)", rate_limits=info)
        raise TransientError("LLM returned an empty completion", rate_limits=info)
    return LLMResult(
        text=text,
        **usage,
        headers=dict(info.raw),
        rate_limits=info,
        finish_reason=finish_reason,
        request_id=headers.get("x-request-id"),
        processing_ms=_int(headers.get("openai-processing-ms")),
    )


# Characters per token, the rule of thumb providers' limiters estimate a prompt with.
CHARS_PER_TOKEN = 4


def prompt_tokens_estimate(messages: Sequence[ChatMessage]) -> int:
    """What a provider's token limit counts for these messages' prompt: their characters / 4,
    ROUNDED UP, as OpenAI-style limiters (and llm_sim) do. Rounding down under-counted every call
    by up to a token, so a window the pacer had filled to the limit was over it at the provider:
    a 429 at full use."""
    return max(math.ceil(sum(len(m["content"]) for m in messages) / CHARS_PER_TOKEN), 1)


def _usage(*, usage: Any, messages: Sequence[ChatMessage], text: str) -> dict[str, Any]:
    if isinstance(usage, dict) and usage.get("total_tokens"):
        return {
            "prompt_tokens": int(usage.get("prompt_tokens") or 0),
            "completion_tokens": int(usage.get("completion_tokens") or 0),
            "total_tokens": int(usage["total_tokens"]),
        }
    # Some compatible servers omit usage. The budget must still be settled with something
    # close, or it would refund tokens the provider did count; ~4 chars per token.
    prompt = prompt_tokens_estimate(messages)
    done = math.ceil(len(text) / CHARS_PER_TOKEN) + 1
    return {
        "prompt_tokens": prompt,
        "completion_tokens": done,
        "total_tokens": prompt + done,
        "usage_estimated": True,
    }


def _clients_for_settings() -> _Clients:
    timeout = float(getattr(settings, "LLM_TIMEOUT_S", 30.0))
    connections = int(getattr(settings, "LLM_MAX_CONNECTIONS", 100))
    # lru_cache does not hold back concurrent misses: without the lock, a threads-pool
    # worker's first burst of jobs would each build clients of their own.
    with _clients_lock:
        return _clients(timeout, connections, os.getpid())


_clients_lock = threading.Lock()
# Hosts a lent client keeps a connection to: the deployments' hosts a worker calls.
HOSTS_PER_CLIENT = 4


class _Clients:
    """The process's HTTP clients to the provider, lent one per call: at most `connections`
    calls at once (a call past them waits up to the timeout for one, as it would for a pooled
    connection: then it is a timeout), and each client keeps its connection to each host it
    called alive for its next call, so as many connections stay open as the worker runs calls.
    The last client given back is lent first, so a quiet worker reuses warm connections.

    Not one client with a pool of `connections`: its pool's bookkeeping walks every connection
    on each request and each response (httpcore2 `_assign_requests_to_connections`), about
    2 ms of CPU a call at 200 connections, a tenth of a generation job's CPU
    (bench/llm_concurrency.py --rounds, docs/benchmarks.md). A lent client's pool holds a
    connection or so. They share one TLS context (one CA bundle read, not one per client)."""

    def __init__(self, *, timeout_s: float, connections: int) -> None:
        self.timeout_s = timeout_s
        self._timeout = httpx2.Timeout(timeout_s, connect=min(timeout_s, 5.0))
        self._limits = httpx2.Limits(
            max_connections=HOSTS_PER_CLIENT, max_keepalive_connections=HOSTS_PER_CLIENT
        )
        self._tls = httpx2.create_ssl_context()
        self._calls = threading.BoundedSemaphore(connections)
        self._idle: list[httpx2.Client] = []
        self._lock = threading.Lock()

    @contextmanager
    def lend(self) -> Iterator[httpx2.Client]:
        if not self._calls.acquire(timeout=self.timeout_s):
            raise httpx2.PoolTimeout(f"no connection free in {self.timeout_s:g} s (LLM_MAX_CONNECTIONS)")
        try:
            with self._lock:
                client = self._idle.pop() if self._idle else None
            if client is None:
                client = httpx2.Client(timeout=self._timeout, limits=self._limits, verify=self._tls)
            try:
                yield client
            finally:
                with self._lock:
                    self._idle.append(client)
        finally:
            self._calls.release()


@lru_cache(maxsize=4)
def _clients(timeout_s: float, connections: int, pid: int) -> _Clients:
    # Cached per process (pid in the key): never clients inherited across a prefork fork, whose
    # sockets the parent would share. A threads-pool worker's threads share them, and so do
    # its deployments (a client keeps a connection per host).
    del pid
    return _Clients(timeout_s=timeout_s, connections=connections)


# --- provider headers --------------------------------------------------------------------------


def rate_limit_info(headers: Mapping[str, str]) -> RateLimitInfo:
    """Parse x-ratelimit-{limit,remaining,reset}-{requests,tokens}; unreadable values are None."""
    raw = {k.lower(): v for k, v in headers.items() if k.lower().startswith("x-ratelimit-")}
    return RateLimitInfo(
        limit_requests=_int(raw.get("x-ratelimit-limit-requests")),
        limit_tokens=_int(raw.get("x-ratelimit-limit-tokens")),
        remaining_requests=_int(raw.get("x-ratelimit-remaining-requests")),
        remaining_tokens=_int(raw.get("x-ratelimit-remaining-tokens")),
        reset_requests_s=parse_duration_s(raw.get("x-ratelimit-reset-requests")),
        reset_tokens_s=parse_duration_s(raw.get("x-ratelimit-reset-tokens")),
        raw=raw,
    )


def retry_after_s(headers: Mapping[str, str], info: RateLimitInfo) -> float:
    """Seconds to wait after a 429: retry-after-ms, retry-after (seconds or HTTP date), the
    reset time of the exhausted limit, else DEFAULT_RETRY_AFTER_S; clamped to [0, MAX]."""
    lower = {k.lower(): v for k, v in headers.items()}
    seconds = _float(lower.get("retry-after-ms"))
    if seconds is not None:
        return _clamp(seconds / 1000)
    seconds = _retry_after_header(lower.get("retry-after"))
    if seconds is None:
        seconds = _exhausted_reset_s(info)
    return _clamp(DEFAULT_RETRY_AFTER_S if seconds is None else seconds)


def _retry_after_header(value: str | None) -> float | None:
    if value is None:
        return None
    seconds = _float(value)
    if seconds is not None:
        return seconds
    try:
        parsed = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    return parsed.timestamp() - time.time()


def _exhausted_reset_s(info: RateLimitInfo) -> float | None:
    # Wait for the limit that ran out; if the headers do not say which, for the later reset.
    if info.remaining_tokens == 0 and info.reset_tokens_s is not None:
        return info.reset_tokens_s
    if info.remaining_requests == 0 and info.reset_requests_s is not None:
        return info.reset_requests_s
    resets = [s for s in (info.reset_requests_s, info.reset_tokens_s) if s is not None]
    return max(resets) if resets else None


_DURATION_PART = re.compile(r"(\d+(?:\.\d+)?)(ms|h|m|s)")
_UNIT_S = {"h": 3600.0, "m": 60.0, "s": 1.0, "ms": 0.001}


def parse_duration_s(value: str | None) -> float | None:
    """'1s', '6m0s', '20ms', '1h2m3.5s' (OpenAI style) or plain seconds -> seconds."""
    if value is None:
        return None
    text = value.strip().lower()
    plain = _float(text)
    if plain is not None:
        return max(plain, 0.0)
    parts = _DURATION_PART.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        return None
    return sum(float(n) * _UNIT_S[u] for n, u in parts)


def _float(value: str | None) -> float | None:
    try:
        number = float(value) if value is not None else None
    except ValueError:
        return None
    return number if number is not None and math.isfinite(number) else None


def _int(value: str | None) -> int | None:
    number = _float(value)
    return int(number) if number is not None else None


def _clamp(seconds: float) -> float:
    return min(max(seconds, 0.0), MAX_RETRY_AFTER_S)
