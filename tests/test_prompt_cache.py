"""Prompt caching (issue 15, item 7): the context's stable part (system prompt, the person's facts) comes first and
is marked for Anthropic's cache; OpenAI caches the same prefix by itself; the cached tokens the providers report
are recorded in model_calls and priced at the cached-input price. Asserted on the wire and in the store, through
the real openai and anthropic SDKs against the fake provider (tests/fakes/prompt_cache.py: the providers'
accounting, their 1,024-token minimum included), on both store backends."""

from __future__ import annotations

from typing import Any

import pytest

from bot.pipeline import Pipeline
from bot.prices import Price
from kernel import tokens
from kernel.types import InboundMessage
from memory.store import Store
from tests.fakes.model_server import FakeModelServer
from tests.fakes.prompt_cache import words
from tests.test_prompt_as_data import SYSTEM_PROMPT, pipeline

__all__ = ["pipeline"]  # the fixture: a pipeline answered by a model of the fake provider

PRICE = Price(3.0, 15.0, 0.3)
PRICE_JSON = f'{{"in": {PRICE.input}, "out": {PRICE.output}, "cached": {PRICE.cached}}}'
PRICES = f'{{"c1": {PRICE_JSON}, "m1": {PRICE_JSON}}}'  # HILO_PRICES for the fake's two models
#: Enough of what a person told hilo that the stable prefix passes the providers' 1,024-token minimum.
#: (Each fact its own words: similar ones would be merged into one memory.)
FACTS = [" ".join(f"{word}{chr(97 + i % 26)}{chr(97 + i // 26)}" for word in (
    "cousin lives village coast works baker opens shop every morning closes afternoon except market days "
    "sells bread cakes pies neighbours").split()) for i in range(48)]


async def two_turns(store: Store, pipeline: Pipeline) -> list[dict[str, Any]]:
    """A first turn, the person's facts stored, then two turns: the model calls of those two."""
    first = InboundMessage(surface="web", sender="ana-web", external_id="w-1", text="hello there", handle="ana")
    assert (await pipeline.handle(first)).status == "ok"
    uid = await store.user_id("ana")
    assert uid is not None
    for fact in FACTS:
        await store.remember(uid, fact, tokens.count(fact))
    for i, text in enumerate(["what does my cousin do?", "when does the shop open?"]):
        msg = InboundMessage(surface="web", sender="ana-web", external_id=f"w-{i + 2}", text=text, handle="ana")
        assert (await pipeline.handle(msg)).status == "ok"
    return (await store.model_calls(uid))[1:]


def cost(tokens_in: int, tokens_out: int, cached: int) -> float:
    return ((tokens_in - cached) * PRICE.input + cached * (PRICE.cached or 0) + tokens_out * PRICE.output) / 1e6


async def test_anthropic_caches_the_system_prompt_and_facts_and_the_reads_are_recorded(
    store: Store, pipeline: Any, model_server: FakeModelServer,
) -> None:
    calls = await two_turns(store, pipeline(store, "anthropic:c1", HILO_CONTEXT_BUDGET="8000", HILO_PRICES=PRICES))
    first, second = model_server.requests[1:]
    # the stable prefix is the first system block, marked; the recalled and recent parts follow, unmarked
    for request in (first, second):
        stable, *rest = request.body["system"]
        assert stable["cache_control"] == {"type": "ephemeral"}
        assert stable["text"].startswith(SYSTEM_PROMPT + "\n\n") and FACTS[-1] in stable["text"]
        assert all("cache_control" not in block for block in rest)
    assert first.body["system"][0] == second.body["system"][0]  # the same prefix, turn after turn
    prefix = words(second.body["system"][0]["text"])
    assert prefix >= 1024
    # the first turn wrote the cache, the second read it: recorded, and priced at the cached price
    assert [c["tokens_cached"] for c in calls] == [0, prefix]
    for call in calls:
        assert call["tokens_in"] > prefix  # every input token, cached or not
        assert call["cost_usd"] == pytest.approx(cost(call["tokens_in"], call["tokens_out"], call["tokens_cached"]))
    assert calls[1]["cost_usd"] < cost(calls[1]["tokens_in"], calls[1]["tokens_out"], 0)


async def test_openai_reads_the_same_prefix_from_its_cache_and_the_reads_are_recorded(
    store: Store, pipeline: Any, model_server: FakeModelServer,
) -> None:
    calls = await two_turns(store, pipeline(store, "openai:m1", HILO_CONTEXT_BUDGET="8000", HILO_PRICES=PRICES))
    first, second = model_server.requests[1:]
    stable = first.body["messages"][:2]
    assert [m["role"] for m in stable] == ["system", "system"]
    assert stable[0]["content"] == SYSTEM_PROMPT and FACTS[-1] in stable[1]["content"]
    assert second.body["messages"][:2] == stable  # the same prefix comes first, turn after turn
    prefix = sum(words(m["content"]) for m in stable)
    assert prefix >= 1024
    # OpenAI reports what it read from the cache in 128-token steps past 1,024 (at least the stable prefix)
    assert calls[0]["tokens_cached"] == 0
    assert calls[1]["tokens_cached"] == 1024 + (prefix - 1024) // 128 * 128
    assert calls[1]["cost_usd"] == pytest.approx(cost(calls[1]["tokens_in"], calls[1]["tokens_out"],
                                                      calls[1]["tokens_cached"]))
