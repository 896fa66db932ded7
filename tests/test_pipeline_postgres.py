"""Two hilo processes on one Postgres database: turns of one conversation still run one at a time.

Two stores (two connection pools, as two `hilo serve` processes would have) and two pipelines share the database;
the first turn's model is slow. The second turn must wait for it, across the processes, and see its reply."""

from __future__ import annotations

import asyncio
from typing import Any

from bot.config import Settings
from bot.models.factory import build_chain
from bot.models.retry import RetryPolicy
from bot.pipeline import Pipeline
from bot.types import InboundMessage
from memory.open import open_store
from tests.fakes.model_server import FakeModelServer, slow
from tests.fakes.postgres import SERVER, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)


async def no_sleep(_: float) -> None:
    return None


async def test_turns_of_one_conversation_never_interleave_across_processes(model_server: FakeModelServer) -> None:
    url = SERVER.create_database()
    settings = Settings.from_mapping({"HILO_MODEL": "openai:m1", "OPENAI_BASE_URL": model_server.base_url + "/v1",
                                      "HILO_DATABASE_URL": url})
    stores = [open_store(url), open_store(url)]
    chains: list[Any] = []
    pipelines = []
    for store in stores:
        await store.open()
        chain = build_chain(settings, policy=RetryPolicy(attempts=1, sleep=no_sleep), timeout=10)
        chains.append(chain)
        pipelines.append(Pipeline(settings, store, chain))
    try:
        # the conversation exists before the race (first contact is serialized separately)
        await pipelines[0].handle(InboundMessage(surface="telegram", sender="9", external_id="p0", text="hello"))
        model_server.enqueue(slow(0.6))
        first = asyncio.create_task(pipelines[0].handle(
            InboundMessage(surface="telegram", sender="9", external_id="p1", text="first question")))
        await asyncio.sleep(0.2)
        second = await pipelines[1].handle(
            InboundMessage(surface="telegram", sender="9", external_id="p2", text="second question"))
        out1 = await first
        assert out1.status == second.status == "ok"
        contents = [m["content"] for m in model_server.requests_for("m1")[-1].body["messages"]]
        assert "first question" in contents and out1.text in contents  # process 2 waited for process 1's answer
        assert contents[-1] == "second question"
    finally:
        for chain in chains:
            await chain.aclose()
        for store in stores:
            await store.close()


async def test_nul_inside_text_is_stored_without_it_and_answered() -> None:
    """Postgres refuses NUL in text columns: the message is kept, without its NULs, instead of being lost."""
    store = open_store(SERVER.create_database())
    await store.open()
    settings = Settings()
    chain = build_chain(settings)
    try:
        out = await Pipeline(settings, store, chain).handle(
            InboundMessage(surface="whatsapp", sender="+34600", external_id="SMnul", text="hi\x00there"))
        assert out.status == "ok" and "hithere" in out.text
        data = await store.inspect("whatsapp:+34600")
        assert [m["content"] for c in data["conversations"] for m in c["messages"] if m["role"] == "user"] == [
            "hithere"]
    finally:
        await chain.aclose()
        await store.close()


async def test_nul_in_metadata_is_dropped_too() -> None:
    """A NUL in a WhatsApp profile name would lose the message on Postgres the same way (jsonb): the metadata an
    InboundMessage carries loses its NULs as well, at any depth."""
    msg = InboundMessage(surface="whatsapp", sender="+34601", external_id="SMid", text="hello",
                         metadata={"profile_name": "Ana\x00", "media": [{"type": "image/\x00png"}], "n": 1})
    assert msg.metadata == {"profile_name": "Ana", "media": [{"type": "image/png"}], "n": 1}
    store = open_store(SERVER.create_database())
    await store.open()
    settings = Settings()
    chain = build_chain(settings)
    try:
        out = await Pipeline(settings, store, chain).handle(msg)
        assert out.status == "ok"
        data = await store.inspect("whatsapp:+34601")
        [user_message] = [m for c in data["conversations"] for m in c["messages"] if m["role"] == "user"]
        assert user_message["metadata"]["profile_name"] == "Ana"
    finally:
        await chain.aclose()
        await store.close()
