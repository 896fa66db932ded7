"""Structured output (bot/models/structured.py) through the real openai and anthropic SDKs against the fake provider:
what each request carries on the wire (OpenAI's strict json_schema response format, Anthropic's forced tool), the
JSON text each answer becomes, the chain's retry policy, and the echo model passed over."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable

import pytest

from bot.config import Settings
from bot.models.base import AllModelsFailed
from bot.models.chain import ModelChain
from bot.models.factory import build_chain
from bot.models.structured import OutputSchema
from bot.retry import RetryPolicy
from kernel.types import ChatMessage
from tests.fakes import recorded_shapes as rec
from tests.fakes.model_server import FakeModelServer, ok, replay, status
from tests.waiting import no_sleep

SCHEMA = OutputSchema("record_city", "The person's city.", {
    "type": "object", "additionalProperties": False, "required": ["city"],
    "properties": {"city": {"type": "string"}},
})
MESSAGES = [ChatMessage("system", "Extract."), ChatMessage("user", "I live in Lisbon")]
ANSWER = {"city": "Lisbon"}


@pytest.fixture
async def make_chain(model_server: FakeModelServer) -> AsyncIterator[Callable[..., ModelChain]]:
    chains: list[ModelChain] = []

    def make(model: str, *fallbacks: str) -> ModelChain:
        settings = Settings.from_mapping({
            "HILO_MODEL": model, "HILO_FALLBACK_MODELS": ",".join(fallbacks),
            "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": model_server.base_url + "/v1",
            "ANTHROPIC_API_KEY": "ak-test", "ANTHROPIC_BASE_URL": model_server.base_url,
        })
        chain = build_chain(settings, policy=RetryPolicy(attempts=2, sleep=no_sleep), timeout=5)
        chains.append(chain)
        return chain

    yield make
    for chain in chains:
        await chain.aclose()


async def test_openai_asks_for_a_strict_json_schema_and_returns_the_content(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer,
) -> None:
    model_server.enqueue(ok(json.dumps(ANSWER)))
    result = await make_chain("openai:m1").complete_json(MESSAGES, SCHEMA)
    assert json.loads(result.text) == ANSWER and result.completion.outcome == "ok"
    [request] = model_server.requests
    assert request.body["response_format"] == {"type": "json_schema", "json_schema": {
        "name": "record_city", "description": "The person's city.", "schema": dict(SCHEMA.schema), "strict": True}}
    assert request.body["messages"] == [{"role": "system", "content": "Extract."},
                                        {"role": "user", "content": "I live in Lisbon"}]


async def test_anthropic_forces_one_tool_and_returns_its_input(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer,
) -> None:
    model_server.enqueue(ok(json.dumps(ANSWER)))
    result = await make_chain("anthropic:c1").complete_json(MESSAGES, SCHEMA)
    assert json.loads(result.text) == ANSWER and result.completion.outcome == "ok"
    [request] = model_server.requests
    assert request.body["tools"] == [{"name": "record_city", "description": "The person's city.",
                                      "input_schema": dict(SCHEMA.schema)}]
    assert request.body["tool_choice"] == {"type": "tool", "name": "record_city"}
    assert request.body["system"] == "Extract."


async def test_anthropic_recorded_tool_use_of_another_tool_is_an_empty_answer(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer,
) -> None:
    # the provider's own recording: a tool_use block of `get_weather`, not the tool that was forced
    model_server.enqueue(replay(body=rec.ANTHROPIC_TOOL_ONLY_JSON))
    result = await make_chain("anthropic:c1").complete_json(MESSAGES, SCHEMA)
    assert (result.text, result.completion.outcome) == ("", "empty")


async def test_a_transient_failure_is_retried_then_the_fallback_answers(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer,
) -> None:
    model_server.script("m1", [status(503), status(503)])
    model_server.script("c1", [ok(json.dumps(ANSWER))])
    result = await make_chain("openai:m1", "anthropic:c1").complete_json(MESSAGES, SCHEMA)
    assert result.spec.label == "anthropic:c1" and json.loads(result.text) == ANSWER
    assert [(c.model, c.outcome) for c in result.calls] == [
        ("openai:m1", "server_error"), ("openai:m1", "server_error"), ("anthropic:c1", "ok")]


async def test_echo_is_passed_over_and_an_echo_only_chain_cannot_answer(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer,
) -> None:
    echo_only = make_chain("echo")
    assert not echo_only.structured()
    with pytest.raises(AllModelsFailed) as failed:
        await echo_only.complete_json(MESSAGES, SCHEMA)
    assert failed.value.calls == []
    model_server.enqueue(ok(json.dumps(ANSWER)))
    mixed = make_chain("echo", "openai:m1")
    assert mixed.structured()
    result = await mixed.complete_json(MESSAGES, SCHEMA)
    assert result.spec.label == "openai:m1" and [c.model for c in result.calls] == ["openai:m1"]


async def test_a_sibling_chain_has_breakers_of_its_own(
    make_chain: Callable[..., ModelChain], model_server: FakeModelServer,
) -> None:
    chain = make_chain("openai:m1")
    sibling = chain.sibling()
    assert sibling.providers == chain.providers and sibling.policy is chain.policy
    model_server.script("m1", default=status(503))
    for _ in range(5):  # the default threshold
        with pytest.raises(AllModelsFailed):
            await sibling.complete_json(MESSAGES, SCHEMA)
    assert sibling.breakers["openai:m1"].state == "open"
    assert chain.breakers["openai:m1"].state == "closed"
