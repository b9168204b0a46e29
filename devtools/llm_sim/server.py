"""The HTTP server: admission, injected faults, replies, /stats."""

from __future__ import annotations

import hashlib
import json
import math
import random
import re
import threading
import time
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import parse_qs, urlsplit

from devtools.llm_sim.config import (
    INJECTED_STATUSES,
    MARKER_FAIL_400,
    MARKER_FAIL_429,
    MARKER_FAIL_500,
    MAX_BODY_BYTES,
    SimConfig,
)
from devtools.llm_sim.content import completion_text
from devtools.llm_sim.latency import latency_model
from devtools.llm_sim.limits import Decision, Limiter, limit_headers
from devtools.llm_sim.protocol import (
    AZURE_401,
    AZURE_DEPLOYMENT_NOT_FOUND,
    UNSUPPORTED_MAX_TOKENS,
    BadRequest,
    ChatRequest,
    Reply,
    azure_error,
    completion_payload,
    error_reply,
)

_COUNTERS = (
    "requests",  # every POST to chat completions
    "admitted",  # counted against the window (includes injected and marker failures)
    "rejected_429",
    "injected_5xx",  # --fail-rate
    "marker_errors",  # SIM:FAIL_500 / SIM:FAIL_400
    "bad_requests",  # unreadable requests (never counted against the window)
    "unauthorized",
    "unknown_model",  # 404 model_not_found / DeploymentNotFound (only when --model lists the models served)
    "unsupported_parameter",  # dialect reasoning: 400 for max_tokens
    "not_found",  # dialect azure: 404 for a chat request without api-version, or on /v1/...
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
        # One limiter per model when models are listed (`limiter_for`), each its own provider key.
        self.model_limiters = {
            name: Limiter(rpm=rpm, tpm=tpm, window_s=c.window_s, mode=c.mode) for name, rpm, tpm in c.models
        }
        self._lock = threading.Lock()  # one lock: admission must see every earlier admission
        self._rng = random.Random(c.seed)
        self.latency = latency_model(config=c)
        self._stopping = threading.Event()
        self._server: _Server | None = None
        self._threads: list[threading.Thread] = []
        self.started_at = datetime.now(UTC)
        self._in_flight = 0  # the provider's state, not a counter: a stats reset keeps it
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
        """The LLM_BASE_URL (or a deployment's base_url) of this simulator: Azure's is the
        resource endpoint, the path is the client's (/openai/deployments/<name>/...)."""
        root = f"http://{self.config.host}:{self.port}"
        return root if self.config.dialect == "azure" else f"{root}/v1"

    def _spawn(self, target: Any, *args: Any) -> None:
        thread = threading.Thread(target=target, args=args, daemon=True, name=f"llm-sim-{target.__name__}")
        thread.start()
        self._threads.append(thread)

    # chat completions

    def handle_chat(
        self,
        *,
        authorization: str | None,
        body: bytes,
        api_key: str | None = None,
        deployment: str | None = None,
        query: str = "",
    ) -> Reply:
        """One chat completion: auth and route in the configured dialect, parse, admit at
        arrival, then answer or fail. `api_key`, `deployment` and `query` are Azure's: its key
        header, the deployment named in the path, and the query string (api-version)."""
        azure = self.config.dialect == "azure"
        key = ((api_key or "").strip() or None) if azure else _bearer(authorization)
        with self._lock:
            self._counts["requests"] += 1
            if key is not None:
                self._keys.add(hashlib.sha256(key.encode()).hexdigest())  # never keep the keys themselves
        if key is None:
            self._count("unauthorized")
            if azure:
                return azure_error(401, "401", AZURE_401)
            message = "You didn't provide an API key (Authorization: Bearer KEY)."
            return error_reply(401, message, kind="invalid_request_error", code="invalid_api_key")
        if azure and not parse_qs(query).get("api-version", [""])[0].strip():
            self._count("not_found")  # Azure's answer to a request without api-version
            return azure_error(404, "404", "Resource not found")
        try:
            request = ChatRequest.parse(body, model=deployment)
        except BadRequest as exc:
            self._count("bad_requests")
            return error_reply(400, str(exc), kind="invalid_request_error", code=None, param=exc.param)
        if self.config.dialect == "reasoning" and request.token_param == "max_tokens":
            self._count("unsupported_parameter")
            return error_reply(
                400,
                UNSUPPORTED_MAX_TOKENS,
                kind="invalid_request_error",
                code="unsupported_parameter",
                param="max_tokens",
            )
        limiter = self.limiter_for(request.model)
        if limiter is None:
            self._count("unknown_model")
            if azure:
                return azure_error(404, "DeploymentNotFound", AZURE_DEPLOYMENT_NOT_FOUND)
            message = f"The model `{request.model}` does not exist or you do not have access to it."
            return error_reply(404, message, kind="invalid_request_error", code="model_not_found")
        refusal, headers, delay, status = self._admit(request, limiter)
        if refusal is not None:
            return refusal
        reply = self._failure(request, status) or self._answer(request)
        # OpenAI's header: the time spent on the request after it arrived (rounded down, so the
        # budget's arrival-spread samples, round trip less this, stay upper bounds).
        reply.headers = {**headers, "openai-processing-ms": str(int(delay * 1000))}
        reply.delay_s = delay
        return reply

    def limiter_for(self, model: str) -> Limiter | None:
        """The limits a request for `model` counts against; None: no such model here."""
        if not self.model_limiters:
            return self.limiter
        return self.model_limiters.get(model)

    def _admit(
        self, request: ChatRequest, limiter: Limiter
    ) -> tuple[Reply | None, dict[str, str], float, int]:
        """Admission at arrival, as providers count it: (refusal or None, headers, latency, 5xx)."""
        with self._lock:  # one lock: admission sees every earlier one; seeded draws in arrival order
            now = time.monotonic()
            decision = limiter.admit(now, request.cost, force_refuse=MARKER_FAIL_429 in request.last_user)
            headers = limit_headers(rpm=limiter.rpm, tpm=limiter.tpm, decision=decision)
            per_model = self._per_model.setdefault(request.model, {"admitted": 0, "rejected_429": 0})
            if not decision.admitted:
                self._note(now, rejected_429=1)
                per_model["rejected_429"] += 1
                return self._refusal(request, decision, headers), headers, 0.0, 0
            self._note(now, admitted=1, tokens=request.cost)
            per_model["admitted"] += 1
            delay = self.latency.sample_s(self._rng)
            self._delays["count"] += 1
            self._delays["total_s"] += delay
            self._delays["max_s"] = max(self._delays["max_s"], delay)
            return None, headers, delay, self._injected_status(now)

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
                "in_flight": self._in_flight,  # chat requests received and not yet answered
                "peak_in_flight": self._peak_in_flight,
                "latency": {
                    "model": self.latency.describe(),
                    "drawn": int(self._delays["count"]),
                    "mean_ms": round(1000 * self._delays["total_s"] / max(self._delays["count"], 1), 1),
                    "max_ms": round(1000 * self._delays["max_s"], 1),
                },
                "config": {
                    "latency_ms": c.latency_ms,
                    "jitter_ms": c.jitter,
                    "latency_median_ms": c.latency_median_ms,
                    "latency_sigma": c.sigma if c.latency_median_ms is not None else None,
                    "latency_max_ms": c.latency_max_ms,
                    "latency_histogram_size": len(c.latency_histogram),
                    "fail_rate": c.fail_rate,
                    "shared_rps": c.shared_rps,
                    "shared_tokens": c.shared_tokens,
                    "seed": c.seed,
                },
                "shared": dict(self._shared),
                "models": {
                    name: {
                        "limits": {"rpm": lim.rpm, "tpm": lim.tpm},
                        "window": dict(zip(("requests", "tokens"), lim.window.counts(now), strict=True)),
                        "peak_window": {"requests": lim.peak_requests, "tokens": lim.peak_tokens},
                        **self._per_model.get(name, {"admitted": 0, "rejected_429": 0}),
                    }
                    for name, lim in self.model_limiters.items()
                },
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
            for limiter in (self.limiter, *self.model_limiters.values()):
                limiter.reset_peaks()
                if limits:
                    limiter.clear()

    def _reset_counters(self) -> None:
        self._counts = dict.fromkeys(_COUNTERS, 0)
        self._shared = dict.fromkeys(_SHARED_COUNTERS, 0)
        self._per_model: dict[str, dict[str, int]] = {}
        self._keys: set[str] = set()
        self._delays = {"count": 0, "total_s": 0.0, "max_s": 0.0}
        self._peak_in_flight = self._in_flight
        self._minutes: dict[int, dict[str, int]] = {}
        self._since, self._since_mono = datetime.now(UTC), time.monotonic()

    def in_flight_change(self, delta: int) -> None:
        """A chat request opened (+1) or answered (-1): how many the provider is working on at once."""
        with self._lock:
            self._in_flight += delta
            self._peak_in_flight = max(self._peak_in_flight, self._in_flight)

    def count_request(self, name: str) -> None:
        """A chat request refused before it reached handle_chat (a route the dialect lacks)."""
        with self._lock:
            self._counts["requests"] += 1
            self._counts[name] += 1

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


_CHAT_PATHS = ("/v1/chat/completions", "/chat/completions")
_AZURE_CHAT = re.compile(r"^/openai/deployments/([A-Za-z0-9_.\-]{1,64})/chat/completions$")

_GET_ROUTES: dict[str, Any] = {
    "/health": lambda sim: {"status": "ok"},
    "/stats": lambda sim: sim.stats(),
    "/v1/models": lambda sim: {
        "object": "list",
        "data": [
            {"id": name, "object": "model", "owned_by": "llm_sim"}
            for name in (sim.model_limiters or ["sim-1"])
        ],
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
        azure = _AZURE_CHAT.match(path) if sim.config.dialect == "azure" else None
        if method == "POST" and (azure or path in _CHAT_PATHS):
            sim.in_flight_change(+1)
            try:
                self._send(self._chat(sim, body=body, query=url.query, deployment=azure and azure[1]))
            finally:
                sim.in_flight_change(-1)
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

    def _chat(self, sim: LLMSim, *, body: bytes, query: str, deployment: str | None) -> Reply:
        if sim.config.dialect == "azure" and deployment is None:  # /v1/chat/completions on Azure
            sim.count_request("not_found")
            return azure_error(404, "404", "Resource not found")
        return sim.handle_chat(
            authorization=self.headers.get("Authorization"),
            api_key=self.headers.get("api-key"),
            body=body,
            deployment=deployment,
            query=query,
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
