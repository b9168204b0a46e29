"""A local OpenAI-compatible chat-completions provider that enforces its limits like a real one.

`manage.py llm_sim`, the demo, the benchmarks and tests run it. It answers
`POST /v1/chat/completions` with plausible email text and refuses, with 429 + `retry-after`, any
request that would take requests/min or tokens/min past the limit. Mode "window" (default) is
a strict count over any sliding window (60 s): the request that would make the last window's
count exceed L is refused, so an over-eager client is caught at once, however the excess is
spread. Mode "bucket" is a continuously refilled token bucket (capacity L, refill L per
window), which is laxer: it admits up to 2L in some windows. Admission counts prompt tokens +
max_tokens, as OpenAI does; `usage` then reports what was really generated.

Imports nothing from Django, so benchmarks and tests can start it in-process. See docs/llm_sim.md.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import threading
import time
import uuid
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Literal
from urllib.parse import parse_qs, urlsplit

Mode = Literal["window", "bucket"]
MODES: tuple[Mode, ...] = ("window", "bucket")

# Test hooks: put one in the last user message (a lead's name will do: prompts quote lead data there).
MARKER_POLICY_FAIL = "SIM:POLICY_FAIL"  # 200 with an unfilled {{first_name}}: the policy check must reject it
MARKER_FAIL_500 = "SIM:FAIL_500"  # admitted (counts against the window), then 500
MARKER_FAIL_400 = "SIM:FAIL_400"  # admitted, then 400 invalid_request_error
MARKER_FAIL_429 = "SIM:FAIL_429"  # refused with 429 + retry-after 1 s whatever the window holds
MARKERS = (MARKER_POLICY_FAIL, MARKER_FAIL_500, MARKER_FAIL_400, MARKER_FAIL_429)

CHARS_PER_TOKEN = 4  # the usual rule of thumb; counts are estimates either way
DEFAULT_MAX_TOKENS = 512  # counted for admission when a request names no max_tokens
MAX_BODY_BYTES = 4 * 1024 * 1024
INJECTED_STATUSES = (500, 502, 503)


class SimConfigError(ValueError):
    """A bad setting; `field` names it so the command can name the flag."""

    def __init__(self, field_name: str, message: str) -> None:
        super().__init__(f"{field_name}: {message}")
        self.field = field_name
        self.message = message


@dataclass(frozen=True)
class SimConfig:
    rpm: int
    tpm: int
    latency_ms: float = 0.0
    jitter_ms: float | None = None  # None = half the latency: uniform in mean +- jitter
    fail_rate: float = 0.0
    mode: Mode = "window"
    window_s: float = 60.0  # tests shrink it; providers use 60
    shared_rps: float = 0.0  # another client on the same key, this many requests/s
    shared_tokens: int = 300  # tokens each of its requests counts
    seed: int = 0
    host: str = "127.0.0.1"
    port: int = 0  # 0 = any free port

    def __post_init__(self) -> None:
        problems = [
            ("rpm", _whole(self.rpm, low=1)),
            ("tpm", _whole(self.tpm, low=1)),
            ("latency_ms", _number(self.latency_ms, low=0)),
            ("jitter_ms", None if self.jitter_ms is None else _number(self.jitter_ms, low=0)),
            ("fail_rate", _number(self.fail_rate, low=0, high=1)),
            ("mode", None if self.mode in MODES else f"must be one of {', '.join(MODES)}"),
            ("window_s", _number(self.window_s, low=0.001)),
            ("shared_rps", _number(self.shared_rps, low=0, high=10_000)),
            ("shared_tokens", _whole(self.shared_tokens, low=0, high=self.tpm)),
            ("port", _whole(self.port, low=0, high=65535)),
        ]
        for name, problem in problems:
            if problem:
                raise SimConfigError(name, problem)

    @property
    def jitter(self) -> float:
        return self.latency_ms / 2 if self.jitter_ms is None else self.jitter_ms


def _whole(value: object, *, low: int, high: int | None = None) -> str | None:
    if not isinstance(value, int) or isinstance(value, bool):
        return f"must be a whole number, got {value!r}"
    return _number(value, low=low, high=high)


def _number(value: object, *, low: float, high: float | None = None) -> str | None:
    if not isinstance(value, int | float) or isinstance(value, bool) or not math.isfinite(value):
        return f"must be a finite number, got {value!r}"
    if value < low or (high is not None and value > high):
        return (
            f"must be at least {low}"
            + (f" and at most {high}" if high is not None else "")
            + f", got {value}"
        )
    return None


# --- limits --------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Decision:
    admitted: bool
    wait_s: float  # until this request could pass (0 when admitted, inf = never: too large)
    remaining_requests: int
    remaining_tokens: int
    reset_requests_s: float  # until the limit is back to its initial state (OpenAI's meaning)
    reset_tokens_s: float


class SlidingWindow:
    """Admitted (time, tokens) over the last `window_s`: the half-open window (now - W, now].

    Times must not decrease between calls (the caller holds a lock around now + call).
    """

    def __init__(self, *, window_s: float) -> None:
        self.window_s = window_s
        self._log: deque[tuple[float, int]] = deque()
        self._tokens = 0

    def counts(self, now: float) -> tuple[int, int]:
        self._prune(now)
        return len(self._log), self._tokens

    def add(self, now: float, tokens: int) -> tuple[int, int]:
        self._prune(now)
        self._log.append((now, tokens))
        self._tokens += tokens
        return len(self._log), self._tokens

    def wait_s(self, now: float, *, tokens: int, rpm: int, tpm: int) -> float:
        """Exact seconds until one request of `tokens` fits, if nothing else arrives."""
        if tokens > tpm:
            return math.inf
        count, used = self.counts(now)
        wait = 0.0
        if count + 1 > rpm:  # the (count + 1 - rpm)-th oldest entry must age out first
            wait = self._log[count - rpm][0] + self.window_s - now
        excess, freed = used + tokens - tpm, 0
        for at, size in self._log if excess > 0 else ():
            freed += size
            if freed >= excess:
                wait = max(wait, at + self.window_s - now)
                break
        return max(wait, 0.0)

    def reset_s(self, now: float) -> float:
        self._prune(now)
        return max(self._log[-1][0] + self.window_s - now, 0.0) if self._log else 0.0

    def clear(self) -> None:
        self._log.clear()
        self._tokens = 0

    def _prune(self, now: float) -> None:
        # "t + W <= now", not "t <= now - W": the same float sum as wait_s(), so an entry is out
        # exactly when a waiter was told it would be.
        while self._log and self._log[0][0] + self.window_s <= now:
            self._tokens -= self._log.popleft()[1]


class TokenBucket:
    """Capacity `capacity`, refilled continuously at capacity per `window_s`."""

    def __init__(self, *, capacity: int, window_s: float) -> None:
        self.capacity = float(capacity)
        self.rate = capacity / window_s
        self._level, self._at = float(capacity), 0.0

    def wait_s(self, now: float, amount: int) -> float:
        if amount > self.capacity:
            return math.inf
        # 1e-9: refill arithmetic may leave a hair short at exactly the time we told a waiter
        return max(amount - self._refill(now) - 1e-9, 0.0) / self.rate

    def take(self, now: float, amount: int) -> None:
        self._level = self._refill(now) - amount

    def remaining(self, now: float) -> int:
        return int(self._refill(now))

    def reset_s(self, now: float) -> float:
        return (self.capacity - self._refill(now)) / self.rate

    def _refill(self, now: float) -> float:
        if now > self._at:
            self._level, self._at = min(self.capacity, self._level + (now - self._at) * self.rate), now
        return self._level


class Limiter:
    """The provider's admission rule. The sliding window is always kept: in window mode it
    decides, in bucket mode it only observes, so /stats shows the real peak either way."""

    def __init__(self, *, rpm: int, tpm: int, window_s: float, mode: Mode) -> None:
        self.rpm, self.tpm, self.mode = rpm, tpm, mode
        self.window = SlidingWindow(window_s=window_s)
        self._buckets = (
            TokenBucket(capacity=rpm, window_s=window_s),
            TokenBucket(capacity=tpm, window_s=window_s),
        )
        self.peak_requests = self.peak_tokens = 0

    def admit(self, now: float, tokens: int, *, force_refuse: bool = False) -> Decision:
        wait = 1.0 if force_refuse else self._wait_s(now, tokens)
        if wait == 0:
            count, used = self.window.add(now, tokens)
            self.peak_requests, self.peak_tokens = max(self.peak_requests, count), max(self.peak_tokens, used)
            self._buckets[0].take(now, 1)
            self._buckets[1].take(now, tokens)
        return self._decision(now, admitted=wait == 0, wait_s=wait)

    def reset_peaks(self) -> None:
        self.peak_requests = self.peak_tokens = 0

    def clear(self) -> None:
        self.window.clear()
        self._buckets = (
            TokenBucket(capacity=self.rpm, window_s=self.window.window_s),
            TokenBucket(capacity=self.tpm, window_s=self.window.window_s),
        )

    def _wait_s(self, now: float, tokens: int) -> float:
        if self.mode == "window":
            return self.window.wait_s(now, tokens=tokens, rpm=self.rpm, tpm=self.tpm)
        return max(self._buckets[0].wait_s(now, 1), self._buckets[1].wait_s(now, tokens))

    def _decision(self, now: float, *, admitted: bool, wait_s: float) -> Decision:
        if self.mode == "bucket":
            requests, tokens = self._buckets
            return Decision(
                admitted,
                wait_s,
                requests.remaining(now),
                tokens.remaining(now),
                requests.reset_s(now),
                tokens.reset_s(now),
            )
        count, used = self.window.counts(now)
        reset = self.window.reset_s(now)
        return Decision(admitted, wait_s, max(self.rpm - count, 0), max(self.tpm - used, 0), reset, reset)


def format_duration(seconds: float) -> str:
    """OpenAI's reset style: '120ms', '1.5s', '1m0.25s'."""
    ms = max(math.ceil(seconds * 1000), 0)
    if ms < 1000:
        return f"{ms}ms"
    minutes, rest = divmod(ms, 60_000)
    secs = f"{rest / 1000:.3f}".rstrip("0").rstrip(".")
    return f"{minutes}m{secs}s" if minutes else f"{secs}s"


def limit_headers(*, rpm: int, tpm: int, decision: Decision) -> dict[str, str]:
    return {
        "x-ratelimit-limit-requests": str(rpm),
        "x-ratelimit-limit-tokens": str(tpm),
        "x-ratelimit-remaining-requests": str(decision.remaining_requests),
        "x-ratelimit-remaining-tokens": str(decision.remaining_tokens),
        "x-ratelimit-reset-requests": format_duration(decision.reset_requests_s),
        "x-ratelimit-reset-tokens": format_duration(decision.reset_tokens_s),
    }


# --- requests and answers ------------------------------------------------------------------------


class BadRequest(ValueError):
    def __init__(self, message: str, *, param: str | None = None) -> None:
        super().__init__(message)
        self.param = param


@dataclass(frozen=True)
class ChatRequest:
    model: str
    texts: tuple[tuple[str, str], ...]  # (role, text) per message
    max_tokens: int
    prompt_tokens: int

    @property
    def cost(self) -> int:
        return self.prompt_tokens + self.max_tokens  # what the provider counts at admission

    @property
    def last_user(self) -> str:
        return next((text for role, text in reversed(self.texts) if role == "user"), "")

    @classmethod
    def parse(cls, body: bytes) -> ChatRequest:
        try:
            data = json.loads(body or b"null")
        except ValueError:
            raise BadRequest("the body is not valid JSON") from None
        if not isinstance(data, dict):
            raise BadRequest("the body must be a JSON object")
        model, messages = data.get("model"), data.get("messages")
        if not isinstance(model, str) or not model:
            raise BadRequest("you must provide a model parameter", param="model")
        if data.get("stream"):
            raise BadRequest("llm_sim does not stream; send stream=false", param="stream")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty array", param="messages")
        texts = tuple(_message_text(m, index) for index, m in enumerate(messages))
        chars = sum(len(text) for _, text in texts)
        return cls(model, texts, _max_tokens(data), max(math.ceil(chars / CHARS_PER_TOKEN), 1))


def _message_text(message: object, index: int) -> tuple[str, str]:
    if not isinstance(message, dict) or not isinstance(message.get("role"), str):
        raise BadRequest(f"messages[{index}] must be an object with a role", param=f"messages[{index}]")
    content = message.get("content")
    if isinstance(content, list):  # content parts: [{"type": "text", "text": ...}]
        content = " ".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    if not isinstance(content, str):
        raise BadRequest(f"messages[{index}].content must be a string", param=f"messages[{index}].content")
    return message["role"], content


def _max_tokens(data: dict[str, Any]) -> int:
    value = data.get("max_tokens", data.get("max_completion_tokens"))
    if value is None:
        return DEFAULT_MAX_TOKENS
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise BadRequest(f"max_tokens must be a positive integer, got {value!r}", param="max_tokens")
    return value


@dataclass
class Reply:
    status: int
    payload: dict[str, Any]
    headers: dict[str, str] = field(default_factory=dict)
    delay_s: float = 0.0


def error_reply(status: int, message: str, *, kind: str, code: str | None, param: str | None = None) -> Reply:
    return Reply(status, {"error": {"message": message, "type": kind, "param": param, "code": code}})


def completion_payload(*, request: ChatRequest, text: str) -> dict[str, Any]:
    """The chat.completion object; text longer than max_tokens is cut, as a model would stop."""
    finish = "stop"
    if math.ceil(len(text) / CHARS_PER_TOKEN) > request.max_tokens:
        text, finish = text[: request.max_tokens * CHARS_PER_TOKEN], "length"
    done = max(math.ceil(len(text) / CHARS_PER_TOKEN), 1)
    return {
        "id": f"chatcmpl-sim-{uuid.uuid4().hex[:24]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": request.model,
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": finish}],
        "usage": {
            "prompt_tokens": request.prompt_tokens,
            "completion_tokens": done,
            "total_tokens": request.prompt_tokens + done,
        },
    }


# --- content -------------------------------------------------------------------------------------
# Everything below writes text our policy check accepts: no links, no addresses, no placeholders.
# Lead data is untrusted, so only name-like values are echoed (letters, spaces, ' - &).

_NAME = re.compile(r"^[^\W\d_](?:[^\W\d_]|[ '&-]){0,39}$")
_SUBJECTS = {
    "intro": ["A quick idea for {company}", "Hello from {sender}", "Less follow-up work for {company}"],
    "nudge": ["Following up", "One more thought for {company}", "Circling back"],
    "reply": ["Re: your message", "Re: our conversation", "Re: next steps"],
}
_OPENERS = {
    "intro": [
        "I hope your week is off to a good start. Teams like yours often tell us that follow-up work "
        "eats into the time they would rather spend with customers.",
        "I came across {company} recently and thought a short note might be useful. Many teams we work "
        "with wanted a calmer way to keep every conversation moving.",
        "I will keep this brief. We help sales teams stay in touch with every prospect without adding "
        "hours to their week, and {company} seemed like a good fit.",
    ],
    "nudge": [
        "I wanted to follow up on my earlier note in case it got buried in a busy week.",
        "Just bringing my last message back to the top of your inbox, with one new thought.",
        "I know things get hectic, so here is a short follow-up to my previous email.",
    ],
    "reply": [
        "Thank you for getting back to me, I appreciate you taking the time.",
        "Thanks for your reply, that is really helpful context.",
        "Great to hear from you, and thank you for the thoughtful answer.",
    ],
}
_VALUES = [
    "Our customers usually see their response times drop within the first month, and their people "
    "get back a few hours every week.",
    "The setup is light: most teams are running within a day, and nothing changes about the tools "
    "they already use.",
    "What people like most is that nothing slips through the cracks, even in the busiest weeks.",
    "A team of a similar size to yours cut the time spent on routine follow-ups roughly in half.",
]
_ASKS = [
    "Would a fifteen-minute call next week be useful to see if this fits?",
    "If it sounds relevant, I would be glad to walk you through how a similar team approached it. "
    "Would Tuesday or Thursday suit you?",
    "Is this worth a short conversation, or would it be better to check back next quarter?",
]
_SIGNOFFS = ["Best regards", "Kind regards", "Thanks", "All the best"]
Picker = Callable[[list[str]], str]


def completion_text(request: ChatRequest) -> str:
    """A plausible answer, varied by a hash of the prompt (same prompt, same answer)."""
    prompt = request.last_user
    facts = _facts(prompt)
    pick = _picker(json.dumps(request.texts))
    task = prompt.split("<<<DATA", 1)[0].lower()  # the instructions, not the (untrusted) data
    # The message step asks for a "Subject:" line; the context step for facts; the plan step says plan.
    if "subject:" not in task and re.search(r"\b(context|facts|notes)\b", task):
        role = f" as {facts['title']}" if facts["title"] else ""
        return (
            f"{facts['first']} works at {facts['company']}{role}. There is no detail in the data that "
            "calls for a specific claim, so the email should stay short and about their team's "
            "follow-up workload."
        )
    if "subject:" not in task and re.search(r"\bplan\b", task):
        ask = pick(["a fifteen-minute call", "a short reply", "a quick demo"])
        return (
            f"Write a short, friendly {facts['kind']} email to {facts['first']} at {facts['company']} with "
            f"one call to action, {ask}. Keep the tone warm, concise and free of pressure."
        )
    return _email(facts=facts, pick=pick, policy_fail=MARKER_POLICY_FAIL in prompt)


def _email(*, facts: dict[str, str], pick: Picker, policy_fail: bool) -> str:
    def fill(template: str) -> str:  # safe: _safe() values never contain braces
        return template.format(company=facts["company"], sender=facts["sender"])

    opener, value, ask = fill(pick(_OPENERS[facts["kind"]])), pick(_VALUES), pick(_ASKS)
    greeting = "Hi {{first_name}}," if policy_fail else f"Hi {facts['first']},"
    subject = fill(pick(_SUBJECTS[facts["kind"]]))
    signed = f"{pick(_SIGNOFFS)},\n{facts['sender']}"
    return f"Subject: {subject}\n\n{greeting}\n\n{opener} {value}\n\n{ask}\n\n{signed}"


def _picker(seed_text: str) -> Picker:
    digest = hashlib.sha256(seed_text.encode()).digest()
    counter = iter(range(len(digest)))

    def pick(options: list[str]) -> str:
        return options[digest[next(counter)] % len(options)]

    return pick


def _facts(prompt: str) -> dict[str, str]:
    data = _data_block(prompt)
    prospect, sender = data.get("prospect") or {}, data.get("sender") or {}
    kind = data.get("email_kind") if data.get("email_kind") in _OPENERS else None
    lowered = prompt.split("<<<DATA", 1)[0].lower()  # the task, not the (untrusted) data
    if kind is None:
        kind = "reply" if "answer" in lowered else "nudge" if "follow-up" in lowered else "intro"
    return {
        "kind": kind,
        "first": _safe(prospect, "first_name", "there"),
        "company": _safe(prospect, "company", "your team"),
        "title": _safe(prospect, "title", ""),
        "sender": _safe(sender, "name", "Alex"),
    }


def _data_block(prompt: str) -> dict[str, Any]:
    """The JSON between '<<<DATA ...' and 'DATA>>>' that nurture.prompts writes; {} if absent."""
    start, end = prompt.find("<<<DATA"), prompt.rfind("DATA>>>")
    if start < 0 or end < start:
        return {}
    try:
        data = json.loads(prompt[prompt.find("\n", start) + 1 : end])
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _safe(data: Any, key: str, default: str) -> str:
    value = " ".join(str(data.get(key) or "").split()) if isinstance(data, dict) else ""
    value = re.sub(r"\s*\([\w ]*\)$", "", value)  # "Atlas (agent)" -> "Atlas"
    return value if _NAME.match(value) else default


# --- the server ----------------------------------------------------------------------------------

_COUNTERS = (
    "requests",  # every POST to chat completions
    "admitted",  # counted against the window (includes injected and marker failures)
    "rejected_429",
    "injected_5xx",  # --fail-rate
    "marker_errors",  # SIM:FAIL_500 / SIM:FAIL_400
    "bad_requests",  # unreadable requests (never counted against the window)
    "unauthorized",
    "completed",  # 200 answers
    "tokens",  # counted at admission: prompt + max_tokens
    "prompt_tokens",  # usage of the 200 answers
    "completion_tokens",
)
_SHARED_COUNTERS = ("attempted", "admitted", "rejected", "tokens")


class LLMSim:
    """The simulator: `start()` serves in a background thread, `stop()` ends it, `stats()` reads it."""

    def __init__(self, **settings: Any) -> None:
        self.config = settings.pop("config", None) or SimConfig(**settings)
        c = self.config
        self.limiter = Limiter(rpm=c.rpm, tpm=c.tpm, window_s=c.window_s, mode=c.mode)
        self._lock = threading.Lock()  # one lock: admission must see every earlier admission
        self._rng = random.Random(c.seed)
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._threads: list[threading.Thread] = []
        self.started_at = datetime.now(UTC)
        self._reset_counters()

    # lifecycle

    def start(self) -> int:
        """Bind, serve in a daemon thread, start the shared client if any; returns the port."""
        self._server = _Server((self.config.host, self.config.port), _Handler)
        self._server.sim = self
        self._spawn(self._server.serve_forever, 0.05)
        if self.config.shared_rps > 0:
            self._spawn(self._shared_loop)
        return self.port

    def stop(self) -> None:
        self._stopping.set()
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
        for thread in self._threads:
            thread.join(timeout=5)

    @property
    def port(self) -> int:
        assert self._server is not None, "start() first"
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        return f"http://{self.config.host}:{self.port}/v1"

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=f"llm-sim-{target.__name__}")
        thread.start()
        self._threads.append(thread)

    # chat completions

    def handle_chat(self, *, authorization: str | None, body: bytes) -> Reply:
        """One POST /v1/chat/completions: auth, parse, admit at arrival, then answer or fail."""
        key = _bearer(authorization)
        with self._lock:
            self._counts["requests"] += 1
            if key is not None:
                self._keys.add(hashlib.sha256(key.encode()).hexdigest())  # never keep the keys themselves
        if key is None:
            self._count("unauthorized")
            message = "You didn't provide an API key (Authorization: Bearer KEY)."
            return error_reply(401, message, kind="invalid_request_error", code="invalid_api_key")
        try:
            request = ChatRequest.parse(body)
        except BadRequest as exc:
            self._count("bad_requests")
            return error_reply(400, str(exc), kind="invalid_request_error", code=None, param=exc.param)
        refusal, headers, delay, status = self._admit(request)
        if refusal is not None:
            return refusal
        reply = self._failure(request, status) or self._answer(request)
        reply.headers, reply.delay_s = headers, delay
        return reply

    def _admit(self, request: ChatRequest) -> tuple[Reply | None, dict[str, str], float, int]:
        """Admission at arrival, as providers count it: (refusal or None, headers, latency, 5xx)."""
        with self._lock:  # one lock: admission sees every earlier one; seeded draws in arrival order
            now = time.monotonic()
            decision = self.limiter.admit(
                now, request.cost, force_refuse=MARKER_FAIL_429 in request.last_user
            )
            headers = limit_headers(rpm=self.config.rpm, tpm=self.config.tpm, decision=decision)
            if not decision.admitted:
                self._note(now, rejected_429=1)
                return self._refusal(request, decision, headers), headers, 0.0, 0
            self._note(now, admitted=1, tokens=request.cost)
            return None, headers, self._latency_s(), self._injected_status(now)

    def _failure(self, request: ChatRequest, injected: int) -> Reply | None:
        """An injected 5xx or a marker's error; admitted first, so it still counts in the window."""
        if injected:
            return error_reply(injected, f"(simulated) {_5XX[injected]}", kind="server_error", code=None)
        for marker, status, kind in (
            (MARKER_FAIL_500, 500, "server_error"),
            (MARKER_FAIL_400, 400, "invalid_request_error"),
        ):
            if marker in request.last_user:
                self._count("marker_errors")
                return error_reply(status, f"simulated {status} ({marker})", kind=kind, code=None)
        return None

    def _answer(self, request: ChatRequest) -> Reply:
        payload = completion_payload(request=request, text=completion_text(request))
        with self._lock:
            self._counts["completed"] += 1
            self._counts["prompt_tokens"] += payload["usage"]["prompt_tokens"]
            self._counts["completion_tokens"] += payload["usage"]["completion_tokens"]
        return Reply(200, payload)

    def _refusal(self, request: ChatRequest, decision: Decision, headers: dict[str, str]) -> Reply:
        c = self.config
        if math.isinf(decision.wait_s):  # OpenAI answers a request larger than the limit with a 429 too
            message = f"Request too large: {request.cost} tokens (prompt + max_tokens), limit {c.tpm}/min."
            wait_s = c.window_s
        else:
            limits = f"{c.rpm} requests/min, {c.tpm} tokens/min"
            message = f"Rate limit reached ({limits}): retry after {decision.wait_s:.3f}s."
            wait_s = decision.wait_s
        reply = error_reply(429, message, kind="rate_limit_exceeded", code="rate_limit_exceeded")
        retry = {
            "retry-after": str(max(math.ceil(wait_s), 1)),
            "retry-after-ms": str(max(math.ceil(wait_s * 1000), 1)),
        }
        reply.headers = {**headers, **retry}
        return reply

    def _latency_s(self) -> float:
        mean, jitter = self.config.latency_ms, self.config.jitter
        return max(self._rng.uniform(mean - jitter, mean + jitter), 0.0) / 1000 if mean or jitter else 0.0

    def _injected_status(self, now: float) -> int:
        if self.config.fail_rate <= 0 or self._rng.random() >= self.config.fail_rate:
            return 0
        self._note(now, injected_5xx=1)
        return self._rng.choice(INJECTED_STATUSES)

    # the other client on the key

    def _shared_loop(self) -> None:
        interval, next_at = 1 / self.config.shared_rps, time.monotonic()
        while not self._stopping.is_set():
            with self._lock:
                now = time.monotonic()
                admitted = self.limiter.admit(now, self.config.shared_tokens).admitted
                self._note_shared(now, admitted=admitted)
            next_at = max(next_at + interval, time.monotonic() - interval)  # no catch-up storm after a stall
            self._stopping.wait(max(next_at - time.monotonic(), 0))

    # counters and /stats

    def stats(self) -> dict[str, Any]:
        with self._lock:
            now = time.monotonic()
            requests, tokens = self.limiter.window.counts(now)
            c = self.config
            return {
                **self._counts,
                "distinct_keys": len(self._keys),
                "window": {"requests": requests, "tokens": tokens},
                "peak_window": {"requests": self.limiter.peak_requests, "tokens": self.limiter.peak_tokens},
                "limits": {"rpm": c.rpm, "tpm": c.tpm, "window_s": c.window_s, "mode": c.mode},
                "config": {
                    "latency_ms": c.latency_ms,
                    "jitter_ms": c.jitter,
                    "fail_rate": c.fail_rate,
                    "shared_rps": c.shared_rps,
                    "shared_tokens": c.shared_tokens,
                    "seed": c.seed,
                },
                "shared": dict(self._shared),
                "started_at": self.started_at.isoformat(),
                "counters_since": self._since.isoformat(),
                "uptime_s": round(now - self._since_mono, 3),
                "per_minute": [{"minute": m, **row} for m, row in sorted(self._minutes.items())],
            }

    def reset_stats(self, *, limits: bool = False) -> None:
        """Zero the counters, peaks and series. The window itself is the provider's memory and
        stays (the next peak still sees calls made just before), unless `limits`."""
        with self._lock:
            self._reset_counters()
            self.limiter.reset_peaks()
            if limits:
                self.limiter.clear()

    def _reset_counters(self) -> None:
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._shared = dict.fromkeys(_SHARED_COUNTERS, 0)
        self._keys: set[str] = set()
        self._minutes: dict[int, dict[str, int]] = {}
        self._since, self._since_mono = datetime.now(UTC), time.monotonic()

    def _count(self, name: str) -> None:
        with self._lock:
            self._counts[name] += 1

    def _note(self, now: float, **increments: int) -> None:
        row = self._series(now)
        for name, value in increments.items():
            self._counts[name] += value
            row[name] += value

    def _note_shared(self, now: float, *, admitted: bool) -> None:
        self._shared["attempted"] += 1
        self._shared["admitted" if admitted else "rejected"] += 1
        self._shared["tokens"] += self.config.shared_tokens if admitted else 0
        self._series(now)["shared_admitted"] += int(admitted)

    def _series(self, now: float) -> dict[str, int]:
        minute = int((now - self._since_mono) // 60)  # real minutes, whatever window_s is: for charts
        return self._minutes.setdefault(
            minute,
            dict.fromkeys(("admitted", "tokens", "rejected_429", "injected_5xx", "shared_admitted"), 0),
        )


def _bearer(authorization: str | None) -> str | None:
    scheme, _, key = (authorization or "").strip().partition(" ")
    return key.strip() or None if scheme.lower() == "bearer" else None


_5XX = {
    500: "The server had an error while processing your request.",
    502: "Bad gateway.",
    503: "The engine is currently overloaded, please try again later.",
}


_GET_ROUTES: dict[str, Any] = {
    "/health": lambda sim: {"status": "ok"},
    "/stats": lambda sim: sim.stats(),
    "/v1/models": lambda sim: {
        "object": "list",
        "data": [{"id": "sim-1", "object": "model", "owned_by": "llm_sim"}],
    },
}


class _Server(ThreadingHTTPServer):
    daemon_threads = True  # a handler sleeping out its latency never blocks stop()
    request_queue_size = 256  # bursts of concurrent clients must queue, not be refused at connect
    sim: LLMSim


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keep-alive, as the SDK's connection pool expects
    server: _Server

    def do_GET(self) -> None:
        self._route("GET")

    def do_POST(self) -> None:
        self._route("POST")

    def _route(self, method: str) -> None:
        body = self._body()
        if body is None:
            return
        url = urlsplit(self.path)
        path, sim = url.path.rstrip("/"), self.server.sim
        if method == "POST" and path in ("/v1/chat/completions", "/chat/completions"):
            self._send(sim.handle_chat(authorization=self.headers.get("Authorization"), body=body))
        elif method == "POST" and path == "/stats/reset":
            limits = parse_qs(url.query).get("limits", ["0"])[0].lower() in ("1", "true", "yes")
            sim.reset_stats(limits=limits)
            self._send(Reply(200, {"reset": True, "limits": limits}))
        elif method == "GET" and path in _GET_ROUTES:
            self._send(Reply(200, _GET_ROUTES[path](sim)))
        else:
            self._send(
                error_reply(404, f"no route {method} {path}", kind="invalid_request_error", code="not_found")
            )

    def _body(self) -> bytes | None:
        # Always read the whole body: on a keep-alive connection unread bytes would be taken
        # for the next request.
        try:
            length = int(self.headers.get("Content-Length") or 0)
        except ValueError:
            length = -1
        if not 0 <= length <= MAX_BODY_BYTES:
            self.close_connection = True
            self._send(
                error_reply(413, "bad or too large Content-Length", kind="invalid_request_error", code=None)
            )
            return None
        return self.rfile.read(length) if length else b""

    def _send(self, reply: Reply) -> None:
        if reply.delay_s:
            time.sleep(reply.delay_s)  # the model "thinking": concurrent requests overlap (threaded)
        body = json.dumps(reply.payload).encode()
        try:
            self.send_response(reply.status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.send_header("x-request-id", f"req_sim_{uuid.uuid4().hex[:16]}")
            for name, value in reply.headers.items():
                self.send_header(name, value)
            self.end_headers()
            self.wfile.write(body)
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True  # the client gave up (its timeout): nothing to answer

    def log_message(self, format: str, *args: Any) -> None:
        pass  # one line per request would drown the demo's logs; /stats has the numbers
