"""A real HTTP server that answers like Postmark's send API (`POST /email`), for anymail's
Postmark backend pointed at it (ANYMAIL_POSTMARK_API_URL). It records every request it read,
whatever it then does with it.

`answer` decides what happens once the request is read:
- "ok": 200 with a MessageID, as Postmark documents;
- "error": 500 with a JSON error body (the request was read: the provider may have it);
- "drop": no answer at all, the connection closed (a reset after the request went out);
- "inactive": 422 with ErrorCode 406, Postmark's refusal of an address that bounced before or
  complained ("You tried to send to recipient(s) that have been marked as inactive.").
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler
from typing import Any, Literal

from devtools.webhook_sink import WebhookSink

Answer = Literal["ok", "error", "drop", "inactive"]


@dataclass(frozen=True)
class Received:
    headers: dict[str, str]
    body: dict[str, Any]

    @property
    def message_id(self) -> str:
        """Our Message-ID, as anymail's Postmark backend puts it in the payload's Headers."""
        return next(h["Value"] for h in self.body.get("Headers", []) if h["Name"] == "Message-ID")


class PostmarkStub(WebhookSink):
    """devtools.webhook_sink's server (start, stop, `received`), answering as Postmark."""

    def __init__(self, *, answer: Answer = "ok") -> None:
        super().__init__()
        self.answer: Answer = answer
        self._server.RequestHandlerClass = _handler_for(self)

    @property
    def url(self) -> str:  # the API's base: anymail's Postmark backend adds `email`
        return super().url.removesuffix("hook")

    def requests(self) -> list[Received]:
        with self._lock:
            return list(self.received)


def _handler_for(stub: PostmarkStub) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))))
            with stub._lock:
                stub.received.append(Received(headers=dict(self.headers.items()), body=body))
            if stub.answer == "drop":
                self.close_connection = True  # read it, answer nothing: the client sees a reset
                return
            to = body.get("To", "")
            status, answer = {
                "ok": (200, {"To": to, "MessageID": str(uuid.uuid4()), "ErrorCode": 0, "Message": "OK"}),
                "error": (500, {"ErrorCode": 500, "Message": "Internal server error."}),
                "inactive": (
                    422,
                    {
                        "ErrorCode": 406,
                        "Message": "You tried to send to recipient(s) that have been marked as inactive.\n"
                        f" Found inactive addresses: {to.lower()}.\n Inactive recipients are ones that "
                        "have generated a hard bounce, a spam complaint, or a manual suppression.",
                    },
                ),
            }[stub.answer]
            raw = json.dumps(answer).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)

        def log_message(self, format: str, *args: Any) -> None:  # quiet: tests read `received`
            return

    return Handler
