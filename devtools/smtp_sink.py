"""The one SMTP sink: aiosmtpd on a free port (or a given one), counting what it receives per
Message-ID and, for tests, keeping the messages too. Tests, benchmarks, the demo and the
compose "sim" profile all use it (`python -m devtools.smtp_sink --port 1025` runs it alone).

Tests can make it refuse recipients with a chosen reply (e.g. "550 5.1.1 no such user" or
"451 4.3.0 try later") to exercise the SMTP error classification, and make it slow to answer
DATA (`data_delay_s`): the message is stored, delivered as far as the recipient is concerned,
before the "250", so a sender that dies or loses its database in that gap cannot know; or
drop the connection instead of answering DATA at all (`drop_after_data`): the message is
stored and the sender sees a disconnect, the "possibly sent" case.
"""

from __future__ import annotations

import argparse
import asyncio
import email
import email.policy
import logging
import threading
import time
from collections import Counter
from dataclasses import dataclass
from email.message import EmailMessage
from email.parser import BytesHeaderParser
from typing import Any

from aiosmtpd.controller import Controller

from devtools.processes import free_port


@dataclass(frozen=True)
class ReceivedMessage:
    mail_from: str
    rcpt_tos: list[str]
    message: EmailMessage


class _Handler:
    def __init__(self, sink: SMTPSink) -> None:
        self.sink = sink

    async def handle_RCPT(
        self, server: Any, session: Any, envelope: Any, address: str, rcpt_options: Any
    ) -> str:
        refusal = self.sink.refusals.get(address)
        if refusal:
            return refusal
        envelope.rcpt_tos.append(address)
        return "250 OK"

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.sink.receive(
            mail_from=envelope.mail_from, rcpt_tos=list(envelope.rcpt_tos), raw=envelope.original_content
        )
        await asyncio.sleep(self.sink.data_delay_s)
        if self.sink.drop_after_data:
            server.transport.abort()  # no "250": the sender cannot know the message arrived
            return "421 closing"  # never reaches the sender: the transport is gone
        return "250 Message accepted"


def normalise_message_id(value: str) -> str:
    """`<Abc@Host>` and `abc@host` name the same message."""
    return value.strip().strip("<>").lower()


class SMTPSink:
    """`keep_messages=False` (benchmarks, the demo: tens of thousands of emails) only counts."""

    def __init__(self, *, keep_messages: bool = True, host: str = "127.0.0.1", port: int = 0) -> None:
        self.refusals: dict[str, str] = {}  # recipient address -> SMTP reply to RCPT
        self.data_delay_s = 0.0  # wait this long after storing a message before answering "250"
        self.drop_after_data = False  # store the message, then drop the connection unanswered
        self.received_at: list[float] = []  # time.time() of each stored message
        self.keep_messages, self.host, self.port = keep_messages, host, port
        self._received: list[ReceivedMessage] = []
        self._count = 0
        self._by_message_id: Counter[str] = Counter()
        self._headers = BytesHeaderParser()
        self._lock = threading.Lock()
        self._controller: Controller | None = None

    @property
    def messages(self) -> list[ReceivedMessage]:
        with self._lock:
            return list(self._received)

    def receive(self, *, mail_from: str, rcpt_tos: list[str], raw: bytes) -> None:
        message_id = normalise_message_id(str(self._headers.parsebytes(raw).get("Message-ID", "")))
        parsed = email.message_from_bytes(raw, policy=email.policy.default) if self.keep_messages else None
        with self._lock:
            self._count += 1
            self._by_message_id[message_id] += 1
            self.received_at.append(time.time())
            if isinstance(parsed, EmailMessage):
                self._received.append(ReceivedMessage(mail_from, rcpt_tos, parsed))

    def snapshot(self) -> tuple[int, Counter[str]]:
        """(messages received, how many times each normalised Message-ID arrived)."""
        with self._lock:
            return self._count, Counter(self._by_message_id)

    def wait_for(self, count: int, *, timeout_s: float = 5.0) -> list[ReceivedMessage]:
        deadline = time.monotonic() + timeout_s
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.messages

    def start(self) -> SMTPSink:
        logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd logs every SMTP line
        # aiosmtpd connects to its own port to check readiness, so it needs a real port number
        # up front: take a free one from the OS; retry in the rare case another process grabs it.
        for _ in range(1 if self.port else 5):
            controller = Controller(_Handler(self), hostname=self.host, port=self.port or free_port())
            try:
                controller.start()
            except (OSError, RuntimeError):
                continue
            self._controller, self.port = controller, controller.port
            return self
        raise RuntimeError(f"could not start the SMTP sink on {self.host}:{self.port or 'a free port'}")

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()


def main(argv: list[str] | None = None) -> None:
    """Run a counting sink until interrupted (the demo's and compose's stand-in mail server)."""
    parser = argparse.ArgumentParser(prog="python -m devtools.smtp_sink", description=main.__doc__)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=1025)
    args = parser.parse_args(argv)
    sink = SMTPSink(keep_messages=False, host=args.host, port=args.port).start()
    print(f"SMTP sink on {args.host}:{sink.port}", flush=True)
    try:
        while True:
            time.sleep(60)
    except KeyboardInterrupt:
        pass
    finally:
        sink.stop()


if __name__ == "__main__":
    main()
