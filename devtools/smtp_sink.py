"""A real SMTP server for tests: aiosmtpd on 127.0.0.1 and a free port, keeping what it receives.

Tests can make it refuse recipients with a chosen reply (e.g. "550 5.1.1 no such user" or
"451 4.3.0 try later") to exercise the SMTP error classification, and make it slow to answer
DATA (`data_delay_s`): the message is stored, delivered as far as the recipient is concerned,
before the "250", so a sender that dies or loses its database in that gap cannot know; or
drop the connection instead of answering DATA at all (`drop_after_data`): the message is
stored and the sender sees a disconnect, the "possibly sent" case.
"""

from __future__ import annotations

import asyncio
import email
import email.policy
import logging
import threading
import time
from dataclasses import dataclass
from email.message import EmailMessage
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
        parsed = email.message_from_bytes(envelope.original_content, policy=email.policy.default)
        self.sink.add(ReceivedMessage(envelope.mail_from, list(envelope.rcpt_tos), parsed))
        await asyncio.sleep(self.sink.data_delay_s)
        if self.sink.drop_after_data:
            server.transport.abort()  # no "250": the sender cannot know the message arrived
            return "421 closing"  # never reaches the sender: the transport is gone
        return "250 Message accepted"


class SMTPSink:
    def __init__(self) -> None:
        self.refusals: dict[str, str] = {}  # recipient address -> SMTP reply to RCPT
        self.data_delay_s = 0.0  # wait this long after storing a message before answering "250"
        self.drop_after_data = False  # store the message, then drop the connection unanswered
        self.received_at: list[float] = []  # time.time() of each stored message
        self._received: list[ReceivedMessage] = []
        self._lock = threading.Lock()
        self._controller: Controller | None = None
        self.port = 0

    @property
    def messages(self) -> list[ReceivedMessage]:
        with self._lock:
            return list(self._received)

    def add(self, message: ReceivedMessage) -> None:
        with self._lock:
            self._received.append(message)
            self.received_at.append(time.time())

    def wait_for(self, count: int, *, timeout_s: float = 5.0) -> list[ReceivedMessage]:
        deadline = time.monotonic() + timeout_s
        while len(self.messages) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        return self.messages

    def start(self) -> SMTPSink:
        logging.getLogger("mail.log").setLevel(logging.WARNING)  # aiosmtpd logs every SMTP line
        # aiosmtpd connects to its own port to check readiness, so it needs a real port number
        # up front: take a free one from the OS; retry in the rare case another process grabs it.
        for _ in range(5):
            controller = Controller(_Handler(self), hostname="127.0.0.1", port=free_port())
            try:
                controller.start()
            except (OSError, RuntimeError):
                continue
            self._controller, self.port = controller, controller.port
            return self
        raise RuntimeError("could not start the SMTP sink on a free port")

    def stop(self) -> None:
        if self._controller is not None:
            self._controller.stop()
