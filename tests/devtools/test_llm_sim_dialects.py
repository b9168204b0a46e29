"""llm_sim's dialects over real HTTP: a reasoning model refusing max_tokens as OpenAI does, and
classic Azure OpenAI (deployments URL, api-key header, api-version) answering in Azure's error
shapes; the official openai SDK's clients (OpenAI, AzureOpenAI) are the reference for the
requests a real client sends."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from openai.types.chat import ChatCompletionMessageParam

from devtools.llm_sim import LLMSim, SimConfigError

MESSAGES: list[ChatCompletionMessageParam] = [{"role": "user", "content": "Write a short intro email."}]
Result = tuple[int, dict[str, Any]]


@pytest.fixture
def sim(request: pytest.FixtureRequest) -> Iterator[LLMSim]:
    config: dict[str, Any] = request.param
    provider = LLMSim(rpm=100, tpm=100_000, window_s=2.0, **config)
    provider.start()
    yield provider
    provider.stop()


def _post(sim: LLMSim, path: str, body: dict[str, Any], headers: dict[str, str]) -> Result:
    request = urllib.request.Request(
        f"http://127.0.0.1:{sim.port}{path}", data=json.dumps(body).encode(), method="POST"
    )
    for name, value in {"Content-Type": "application/json", **headers}.items():
        request.add_header(name, value)
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())


REASONING = pytest.mark.parametrize("sim", [{"dialect": "reasoning"}], indirect=True)
AZURE = pytest.mark.parametrize(
    "sim", [{"dialect": "azure", "models": (("gpt4o-prod", 100, 100_000),)}], indirect=True
)
AZURE_CHAT = "/openai/deployments/gpt4o-prod/chat/completions"


@REASONING
def test_a_reasoning_model_refuses_max_tokens_as_openai_does_and_counts_nothing(sim: LLMSim) -> None:
    body = {"model": "o3-mini", "messages": MESSAGES, "max_tokens": 50}
    status, answer = _post(sim, "/v1/chat/completions", body, {"Authorization": "Bearer k"})
    assert (status, answer) == (
        400,
        {
            "error": {
                "message": "Unsupported parameter: 'max_tokens' is not supported with this model. "
                "Use 'max_completion_tokens' instead.",
                "type": "invalid_request_error",
                "param": "max_tokens",
                "code": "unsupported_parameter",
            }
        },
    )
    stats = sim.stats()
    assert (stats["unsupported_parameter"], stats["admitted"], stats["window"]["requests"]) == (1, 0, 0)


@REASONING
def test_a_reasoning_model_answers_max_completion_tokens(sim: LLMSim) -> None:
    client = openai.OpenAI(base_url=sim.base_url, api_key="k", max_retries=0, timeout=10)
    completion = client.chat.completions.create(
        model="o3-mini",
        messages=MESSAGES,
        max_completion_tokens=300,
    )
    assert (completion.choices[0].message.content or "").startswith("Subject: ")
    assert sim.stats()["tokens"] == completion.usage.prompt_tokens + 300  # type: ignore[union-attr]


@AZURE
def test_azure_answers_the_official_azure_client(sim: LLMSim) -> None:
    # given the openai SDK's AzureOpenAI client (deployments URL, api-key header, api-version)
    client = openai.AzureOpenAI(
        azure_endpoint=sim.base_url, api_key="azure-key", api_version="2024-10-21", max_retries=0, timeout=10
    )
    # when it asks the deployment
    completion = client.chat.completions.create(model="gpt4o-prod", messages=MESSAGES, max_tokens=200)
    # then the simulator answers as the deployment
    assert completion.model == "gpt4o-prod"
    assert sim.stats()["models"]["gpt4o-prod"]["admitted"] == 1


@AZURE
@pytest.mark.parametrize(
    ("path", "headers", "expected"),
    [
        # a bearer key, as an OpenAI client sends it: Azure wants api-key
        (
            AZURE_CHAT + "?api-version=2024-10-21",
            {"Authorization": "Bearer azure-key"},
            (401, "401", "Access denied due to invalid subscription key or wrong API endpoint."),
        ),
        # no api-version
        (AZURE_CHAT, {"api-key": "azure-key"}, (404, "404", "Resource not found")),
        # a deployment the resource does not have
        (
            "/openai/deployments/gpt4o-typo/chat/completions?api-version=2024-10-21",
            {"api-key": "azure-key"},
            (404, "DeploymentNotFound", "The API deployment for this resource does not exist."),
        ),
        # OpenAI's path on an Azure resource
        (
            "/v1/chat/completions?api-version=2024-10-21",
            {"api-key": "azure-key"},
            (404, "404", "Resource not found"),
        ),
    ],
)
def test_azure_refuses_a_wrong_request_in_azures_error_shape(
    sim: LLMSim, path: str, headers: dict[str, str], expected: tuple[int, str, str]
) -> None:
    status, answer = _post(
        sim, path, {"model": "gpt4o-prod", "messages": MESSAGES, "max_tokens": 20}, headers
    )
    assert set(answer["error"]) == {"code", "message"}
    assert (status, answer["error"]["code"]) == expected[:2]
    assert answer["error"]["message"].startswith(expected[2])
    assert sim.stats()["admitted"] == 0


def test_an_unknown_dialect_is_refused_naming_the_setting() -> None:
    with pytest.raises(SimConfigError) as caught:
        LLMSim(rpm=1, tpm=1, dialect="anthropic")
    assert str(caught.value) == "dialect: must be one of openai, reasoning, azure"
