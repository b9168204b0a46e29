"""nurture.writing.llm in a deployment's dialect, over real HTTP to a scripted provider: the URL,
query, auth header, token parameter and extra fields each preset and override puts on the wire,
and a 400 for an unsupported parameter classified as the deployment's fault."""

from __future__ import annotations

import json
from typing import Any

import pytest

from config.deployments import Deployment, deployments_parse
from devtools.llm_stub import LLMStub, StubResponse
from nurture.errors import ConfigurationFault, PermanentError
from nurture.writing.llm import ChatMessage, chat

MESSAGES: list[ChatMessage] = [{"role": "user", "content": "Write one."}]
# OpenAI's answer to max_tokens sent to a reasoning model, as it documents and sends it.
UNSUPPORTED_MAX_TOKENS = json.dumps(
    {
        "error": {
            "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
            "Use 'max_completion_tokens' instead.",
            "type": "invalid_request_error",
            "param": "max_tokens",
            "code": "unsupported_parameter",
        }
    }
)


def _deployment(stub: LLMStub, **entry: Any) -> Deployment:
    fields = {"name": "d", "model": "gpt4o-prod", "rpm": 60, "tpm": 60_000, "base_url": stub.base_url}
    (deployment,) = deployments_parse(json.dumps([{**fields, **entry}]))
    return deployment


def test_the_azure_preset_calls_the_deployments_url_with_an_api_key_and_version(llm_stub: LLMStub) -> None:
    # given an Azure deployment
    deployment = _deployment(llm_stub, dialect="azure", api_key="azure-key-1")
    # when it is called
    chat(messages=MESSAGES, max_tokens=77, deployment=deployment)
    # then the request has Azure's shape, and the key only in its header
    (request,) = llm_stub.requests
    assert request.path == "/v1/openai/deployments/gpt4o-prod/chat/completions?api-version=2024-10-21"
    assert request.headers["api-key"] == "azure-key-1"
    assert "authorization" not in request.headers
    assert (request.json["max_tokens"], request.json["model"]) == (77, "gpt4o-prod")


def test_the_openai_preset_sends_max_completion_tokens_and_no_max_tokens(llm_stub: LLMStub) -> None:
    deployment = _deployment(llm_stub, dialect="openai", model="o3-mini", api_key="sk-o")
    chat(messages=MESSAGES, max_tokens=77, deployment=deployment)
    (request,) = llm_stub.requests
    assert request.path == "/v1/chat/completions"
    assert request.headers["authorization"] == "Bearer sk-o"
    assert request.json["max_completion_tokens"] == 77
    assert "max_tokens" not in request.json


def test_extra_headers_query_and_body_fields_arrive_as_configured(llm_stub: LLMStub) -> None:
    # given a generic server wanting a project header, a query flag and body options
    deployment = _deployment(
        llm_stub,
        api_key="sk-p",
        extra_headers={"OpenAI-Project": "proj_1"},
        extra_query={"trace": "on"},
        extra_body={"reasoning_effort": "low", "chat_template_kwargs": {"thinking": False}},
    )
    # when it is called
    chat(messages=MESSAGES, max_tokens=20, temperature=0.2, deployment=deployment)
    # then each arrives, and the client's own fields are the client's
    (request,) = llm_stub.requests
    assert request.path == "/v1/chat/completions?trace=on"
    assert request.headers["openai-project"] == "proj_1"
    assert request.json == {
        "reasoning_effort": "low",
        "chat_template_kwargs": {"thinking": False},
        "model": "gpt4o-prod",
        "messages": MESSAGES,
        "max_tokens": 20,
        "temperature": 0.2,
    }


def test_a_400_unsupported_parameter_is_the_deployments_fault(llm_stub: LLMStub) -> None:
    # given a reasoning model refusing max_tokens
    llm_stub.push(StubResponse(status=400, body=UNSUPPORTED_MAX_TOKENS))
    # when it is called
    with pytest.raises(ConfigurationFault) as caught:
        chat(messages=MESSAGES, max_tokens=20, deployment=_deployment(llm_stub, api_key="sk-secret-1"))
    # then it is a configuration fault naming the parameter (a PermanentError to those who do not
    # know the class), and the message never holds the key
    error = caught.value
    assert (error.status, error.code, error.param) == (400, "unsupported_parameter", "max_tokens")
    assert isinstance(error, PermanentError)
    assert "sk-secret-1" not in str(error)


def test_a_400_unsupported_value_is_the_deployments_fault_too(llm_stub: LLMStub) -> None:
    body = {
        "error": {
            "message": "Unsupported value: 'temperature' does not support 0.2 with this model. "
            "Only the default (1) value is supported.",
            "type": "invalid_request_error",
            "param": "temperature",
            "code": "unsupported_value",
        }
    }
    llm_stub.push(StubResponse(status=400, body=json.dumps(body)))
    with pytest.raises(ConfigurationFault) as caught:
        chat(messages=MESSAGES, max_tokens=20, temperature=0.2)
    assert (caught.value.code, caught.value.param) == ("unsupported_value", "temperature")


def test_any_other_400_stays_the_jobs_own(llm_stub: LLMStub) -> None:
    body = {
        "error": {
            "message": "bad messages",
            "type": "invalid_request_error",
            "param": "messages",
            "code": None,
        }
    }
    llm_stub.push(StubResponse(status=400, body=json.dumps(body)))
    with pytest.raises(PermanentError) as caught:
        chat(messages=MESSAGES, max_tokens=20)
    assert type(caught.value) is PermanentError
