"""Chat-completions requests in, OpenAI-shaped replies out."""

from __future__ import annotations

import json
import math
import time
import uuid
from dataclasses import dataclass, field
from typing import Any

from devtools.llm_sim.config import CHARS_PER_TOKEN, DEFAULT_MAX_TOKENS


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
    token_param: str | None = None  # the name the limit came under: max_tokens, max_completion_tokens

    @property
    def cost(self) -> int:
        return self.prompt_tokens + self.max_tokens  # what the provider counts at admission

    @property
    def last_user(self) -> str:
        return next((text for role, text in reversed(self.texts) if role == "user"), "")

    @classmethod
    def parse(cls, body: bytes, *, model: str | None = None) -> ChatRequest:
        """`model`: the model the URL names (Azure's deployment), over the body's, which may be absent."""
        try:
            data = json.loads(body or b"null")
        except ValueError:
            raise BadRequest("the body is not valid JSON") from None
        if not isinstance(data, dict):
            raise BadRequest("the body must be a JSON object")
        model, messages = model or data.get("model"), data.get("messages")
        if not isinstance(model, str) or not model:
            raise BadRequest("you must provide a model parameter", param="model")
        if data.get("stream"):
            raise BadRequest("llm_sim does not stream; send stream=false", param="stream")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty array", param="messages")
        texts = tuple(_message_text(m, index) for index, m in enumerate(messages))
        chars = sum(len(text) for _, text in texts)
        token_param = next((p for p in ("max_tokens", "max_completion_tokens") if p in data), None)
        prompt_tokens = max(math.ceil(chars / CHARS_PER_TOKEN), 1)
        return cls(model, texts, _max_tokens(data), prompt_tokens, token_param)


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


# The providers' own words, so a client is tested against what it will really read.
UNSUPPORTED_MAX_TOKENS = (
    "Unsupported parameter: 'max_tokens' is not supported with this model. "
    "Use 'max_completion_tokens' instead."
)
AZURE_401 = (
    "Access denied due to invalid subscription key or wrong API endpoint. Make sure to provide a "
    "valid key for an active subscription and use a correct regional API endpoint for your resource."
)
AZURE_DEPLOYMENT_NOT_FOUND = (
    "The API deployment for this resource does not exist. If you created the deployment within "
    "the last 5 minutes, please wait a moment and try again."
)


def azure_error(status: int, code: str, message: str) -> Reply:
    """Azure OpenAI's error shape: `{"error": {"code", "message"}}`, no type or param."""
    return Reply(status, {"error": {"code": code, "message": message}})


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
