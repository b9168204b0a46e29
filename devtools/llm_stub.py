"""A small real HTTP server speaking OpenAI chat-completions JSON, scripted per test.

Tests queue responses (status, headers, text, usage, delay); each request takes the next one,
or `default` when the queue is empty. Requests are recorded so tests can check what was sent.
Deliberately dumb: the limit-enforcing simulator is `llm_sim`. One exception: a reply's triage
call (nurture.writing.triage) is answered by llm_sim's keyword classifier without taking a
queued response (`triage`; set it to None to script triage answers through the queue too), so
a test scripting a reply's plan/context/message answers needs no triage answer in its queue.
"""

from __future__ import annotations

import json
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from devtools.llm_sim.content import data_block
from devtools.llm_sim.triage import TASK_MARK, triage_answer


@dataclass(frozen=True)
class StubResponse:
    status: int = 200
    text: str = "Subject: Hello\n\nHi there, a short note from the stub."
    headers: dict[str, str] = field(default_factory=dict)
    usage: tuple[int, int] | None = (12, 8)  # (prompt, completion); None = no usage object
    body: str | None = None  # raw body, overriding the JSON built from text/usage/status
    delay_s: float = 0.0
    finish_reason: str = "stop"


@dataclass(frozen=True)
class StubRequest:
    path: str
    headers: dict[str, str]
    json: Any


def _is_triage(request: StubRequest) -> bool:
    messages = request.json.get("messages") if isinstance(request.json, dict) else None
    last = (
        messages[-1].get("content")
        if isinstance(messages, list) and messages and isinstance(messages[-1], dict)
        else ""
    )
    return isinstance(last, str) and TASK_MARK in last.split("<<<DATA", 1)[0].lower()


def triage_answered(request: StubRequest) -> StubResponse:
    """llm_sim's answer to a triage prompt (devtools.llm_sim.triage)."""
    last = request.json["messages"][-1]["content"]
    return StubResponse(text=triage_answer(data_block(last)))


class _Server(ThreadingHTTPServer):
    request_queue_size = 256  # a threads-pool worker's burst of calls must queue, not be refused at connect


class LLMStub:
    def __init__(self) -> None:
        self.default = StubResponse()
        # When set, answers each request the queue does not (instead of `default`): a test that
        # needs the answer to depend on the prompt, e.g. an email quoting what it was asked.
        self.responder: Callable[[StubRequest], StubResponse] | None = None
        self.requests: list[StubRequest] = []
        self.triage: Callable[[StubRequest], StubResponse] | None = triage_answered
        self._queue: deque[StubResponse] = deque()
        self._lock = threading.Lock()
        self._server = _Server(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True  # a handler sleeping for a timeout test never blocks stop()
        # A short poll so stop() returns quickly (shutdown waits for the loop to notice).
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/v1"

    def push(self, *responses: StubResponse) -> None:
        with self._lock:
            self._queue.extend(responses)

    def next_response(self, request: StubRequest) -> StubResponse:
        with self._lock:
            self.requests.append(request)
            if self.triage is not None and _is_triage(request):
                return self.triage(request)
            if self._queue:
                return self._queue.popleft()
            responder = self.responder
        return responder(request) if responder is not None else self.default

    def start(self) -> LLMStub:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


def completion_body(response: StubResponse, *, model: str) -> str:
    if response.body is not None:
        return response.body
    if response.status >= 400:
        return json.dumps({"error": {"message": response.text, "type": "stub_error", "code": None}})
    payload: dict[str, Any] = {
        "id": "chatcmpl-stub",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": response.text},
                "finish_reason": response.finish_reason,
            }
        ],
    }
    if response.usage is not None:
        prompt, done = response.usage
        payload["usage"] = {"prompt_tokens": prompt, "completion_tokens": done, "total_tokens": prompt + done}
    return json.dumps(payload)


def _handler_for(stub: LLMStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            try:
                data = json.loads(self.rfile.read(length) or b"null")
            except ValueError:
                data = None
            request = StubRequest(self.path, {k.lower(): v for k, v in self.headers.items()}, data)
            response = stub.next_response(request)
            time.sleep(response.delay_s)
            model = data.get("model", "") if isinstance(data, dict) else ""
            body = completion_body(response, model=model).encode()
            try:
                self.send_response(response.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                for name, value in response.headers.items():
                    self.send_header(name, value)
                self.end_headers()
                self.wfile.write(body)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client gave up (a timeout test): nothing to answer

        def log_message(self, format: str, *args: Any) -> None:
            pass  # keep test output clean

    return Handler
