"""A small real HTTP server that receives alert webhooks (Slack-compatible JSON) and records
them: for tests of orchestrator.notify, and to watch alerts locally (ALERT_WEBHOOK_URL=its url).

`status` is what it answers (set 500 to play a broken receiver); `received` holds each POST's
JSON body, whatever the answer, recorded as it arrives; `delay_s` holds each answer that long
after (a slow receiver: the sender is mid-delivery meanwhile).
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


class WebhookSink:
    def __init__(self) -> None:
        self.status = 200
        self.delay_s = 0.0
        self.received: list[Any] = []
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), _handler_for(self))
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.02,), daemon=True)

    @property
    def url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host!s}:{port}/hook"

    def start(self) -> WebhookSink:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()

    def texts(self) -> list[str]:
        with self._lock:
            return [body["text"] for body in self.received]


def _handler_for(sink: WebhookSink) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = self.rfile.read(int(self.headers.get("Content-Length", 0)))
            with sink._lock:
                sink.received.append(json.loads(body))
            time.sleep(sink.delay_s)
            self.send_response(sink.status)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read `received`
            return

    return Handler
