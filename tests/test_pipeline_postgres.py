"""The pipeline on Postgres: what Postgres refuses (NUL in text and jsonb) is dropped, the message kept.

Turns across processes (two pipelines, two pools, one database; also behind pgbouncer) are in test_turn_lease.py."""

from __future__ import annotations

from bot.config import Settings
from bot.models.factory import build_chain
from bot.pipeline import Pipeline
from kernel.types import InboundMessage
from memory.open import open_store
from tests.fakes.postgres import SERVER, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)


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
