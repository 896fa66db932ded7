"""A model per request (issue 15, item 6): HILO_MODEL_ROUTES sends each message to the first route whose rules it
meets (its length, its words, whether a tool of the turn ran), else to HILO_MODEL; each route's chain falls back
like the default one; every model call records its route. Through the real SDKs against the fake provider, on
both store backends, and the setting's every malformed form a ConfigError naming it."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from bot.config import ModelSpec, Settings
from bot.config_routes import Route
from bot.models.base import ChainResult
from bot.models.factory import build_chain
from bot.retry import RetryPolicy
from kernel.errors import ConfigError
from kernel.types import ChatMessage, InboundMessage
from memory.store import Store
from tests.fakes.model_server import FakeModelServer, calls_tool, ok, status
from tests.test_prompt_as_data import pipeline
from tests.test_tools import tool_results
from tests.waiting import no_sleep

__all__ = ["pipeline"]  # the fixture: a pipeline answered by a model of the fake provider

#: In order: the first route a message meets wins (a short question about a contract is "legal").
ROUTES = json.dumps([
    {"name": "legal", "model": "anthropic:deep", "keywords": ["contrato", "contract"], "min_chars": 10},
    {"name": "quick", "model": "openai:small", "fallbacks": ["openai:small-b"], "max_chars": 40},
])
KEYS = {"OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k"}


def say(n: int, text: str) -> InboundMessage:
    return InboundMessage(surface="telegram", sender="77", external_id=f"tg-{n}", text=text, handle="ana")


async def test_each_message_goes_to_its_route_and_each_call_records_it(
    store: Store, pipeline: Any, model_server: FakeModelServer,
) -> None:
    p = pipeline(store, "openai:big", HILO_MODEL_ROUTES=ROUTES, HILO_FALLBACK_MODELS="openai:big-b")
    model_server.script("small", [status(503)])  # the quick route's model fails once: its own fallback answers
    texts = ["hi!",                                                             # short: quick
             "Can you read this contract before I sign it tomorrow morning?",    # a keyword: legal
             "Tell me, in a few paragraphs, how bread rises and why it needs time",  # neither: the default
             "¿Qué dice el CONTRATO?"]                          # short, but a keyword (accents, case): legal
    for n, text in enumerate(texts):
        assert (await p.handle(say(n, text))).status == "ok"
    assert [r.model for r in model_server.requests] == ["small", "small-b", "deep", "big", "deep"]
    uid = await store.user_id("ana")
    assert uid is not None
    calls = await store.model_calls(uid)
    assert [(c["model"], c["route"], c["outcome"], c["fallback_from"]) for c in calls] == [
        ("openai:small", "quick", "server_error", None),
        ("openai:small-b", "quick", "ok", "openai:small"),
        ("anthropic:deep", "legal", "ok", None),
        ("openai:big", None, "ok", None),
        ("anthropic:deep", "legal", "ok", None),
    ]


async def test_a_streamed_answer_is_routed_too(model_server: FakeModelServer) -> None:
    settings = Settings.from_mapping({**KEYS, "HILO_MODEL": "openai:big", "HILO_MODEL_ROUTES": ROUTES,
                                      "OPENAI_BASE_URL": model_server.base_url + "/v1",
                                      "ANTHROPIC_BASE_URL": model_server.base_url})
    chain = build_chain(settings, policy=RetryPolicy(attempts=1, sleep=no_sleep), timeout=5)
    try:
        messages = [ChatMessage("system", "You are hilo.", block="system"),
                    ChatMessage("user", "what about the contract?", block="new_message")]
        events = [e async for e in chain.stream(messages)]
    finally:
        await chain.aclose()
    result = events[-1]
    assert isinstance(result, ChainResult)
    assert result.spec == ModelSpec("anthropic", "deep") and [c.route for c in result.calls] == ["legal"]
    assert [r.model for r in model_server.requests] == ["deep"] and model_server.requests[0].stream


async def test_the_calls_after_a_tool_ran_take_their_own_route(
    store: Store, pipeline: Any, model_server: FakeModelServer,
) -> None:
    """A cheap model decides to call a tool; once the tool ran, a stronger one (another provider) reads its result
    and answers: the tool call the first made reaches the second in the second's wire format."""
    routes = json.dumps([{"name": "after-tools", "model": "anthropic:deep", "tools": True},
                         {"name": "first", "model": "openai:small", "tools": False}])
    p = pipeline(store, "openai:big", HILO_MODEL_ROUTES=routes, HILO_TOOLS="now")
    model_server.script("small", [calls_tool("now", {}), ok("Hello there.")])
    model_server.script("deep", [ok("It is the afternoon.")])
    assert (await p.handle(say(1, "what time is it?"))).text == "It is the afternoon."
    assert (await p.handle(say(2, "thanks"))).text == "Hello there."  # no tool ran: the first route again
    assert [r.model for r in model_server.requests] == ["small", "deep", "small"]
    [result] = tool_results(model_server.requests[1])
    assert result["content"].startswith(datetime.now(UTC).strftime("%Y-%m-%d"))
    uid = await store.user_id("ana")
    assert uid is not None
    assert [(c["model"], c["route"]) for c in await store.model_calls(uid)] == [
        ("openai:small", "first"), ("anthropic:deep", "after-tools"), ("openai:small", "first")]


def test_rules_match_on_length_and_whole_words_folded() -> None:
    spec = ModelSpec("openai", "m")
    short = Route("short", (spec,), max_chars=5)
    assert short.matches("hey") and short.matches("") and not short.matches("hello!")
    words = Route("code", (spec,), min_chars=3, keywords=frozenset({"codigo", "sql"}))
    assert words.matches("Mira este CÓDIGO") and words.matches("sql?")
    assert not words.matches("codigos y sqlite")  # whole words only
    assert not words.matches("s q")  # shorter than min_chars


def test_routes_from_a_toml_file_and_their_chains(tmp_path: Path) -> None:
    path = tmp_path / "routes.toml"
    path.write_text('[[routes]]\nname = "quick"\nmodel = "openai:small"\nmax_chars = 80\n\n'
                    '[[routes]]\nmodel = "anthropic:deep"\nfallbacks = []\nkeywords = ["Contrato"]\n')
    s = Settings.from_mapping({**KEYS, "HILO_MODEL": "openai:big", "HILO_FALLBACK_MODELS": "openai:big-b",
                               "HILO_MODEL_ROUTES": str(path)})
    quick, second = s.model_routes
    # a route without fallbacks of its own falls back as HILO_MODEL does; "fallbacks": [] means none
    assert quick.models == (ModelSpec("openai", "small"), ModelSpec("openai", "big-b"))
    assert second.name == "route2" and second.models == (ModelSpec("anthropic", "deep"),)
    assert second.keywords == frozenset({"contrato"})
    assert [m.label for m in s.every_model] == ["openai:big", "openai:big-b", "openai:small", "anthropic:deep"]
    assert Settings.from_mapping(KEYS).model_routes == ()


@pytest.mark.parametrize(("raw", "says"), [
    ("[", "not valid JSON"),
    ("{}", "list of routes"),
    ("[]", "list of routes"),
    ('[{"model": "openai:m"}]', "no condition"),
    ('[{"model": "openai:m", "max_chars": 5, "temperature": 1}]', "unknown key"),
    ('[{"model": "gpt-4o", "max_chars": 5}]', "is not a model"),
    ('[{"model": "openai:m", "max_chars": -1}]', "max_chars"),
    ('[{"model": "openai:m", "max_chars": "5"}]', "max_chars"),
    ('[{"model": "openai:m", "keywords": []}]', "empty"),
    ('[{"model": "openai:m", "keywords": ["two words"]}]', "single words"),
    ('[{"model": "openai:m", "fallbacks": "openai:n", "max_chars": 5}]', "fallbacks"),
    ('[{"name": "a", "model": "openai:m", "max_chars": 5}, {"name": "a", "model": "openai:n", "min_chars": 5}]',
     "share a name"),
    ('[{"name": "bad name!", "model": "openai:m", "max_chars": 5}]', "name"),
    ('[{"model": "openai:m", "tools": "yes"}]', '"tools" must be true'),
    ("/no/such/routes.toml", "no such file"),
])
def test_a_malformed_route_names_the_setting(raw: str, says: str) -> None:
    with pytest.raises(ConfigError, match="HILO_MODEL_ROUTES") as error:
        Settings.from_mapping({**KEYS, "HILO_MODEL_ROUTES": raw})
    assert says in str(error.value)


def test_a_route_to_a_provider_without_its_key_is_refused_at_start() -> None:
    with pytest.raises(ConfigError, match="ANTHROPIC_API_KEY"):
        Settings.from_mapping({"OPENAI_API_KEY": "k",
                               "HILO_MODEL_ROUTES": '[{"model": "anthropic:deep", "min_chars": 500}]'})
