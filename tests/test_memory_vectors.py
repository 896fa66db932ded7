"""Memories' vectors (memory/sql_memory_vectors.py), on both backends: the embed job gives a remembered memory its
vector, merges two memories its vectors show to be the same (the highest confidence and the newest source kept;
never of another kind, never another person's), re-embeds for a changed embedder and a new wording; a question's
vector reaches a memory's relevance through its cosine; a run with nothing to do logs nothing at info.

Embedders: `Table`, whose vectors the test chooses (texts it does not know get one of their own, far from all), and
the real local model (multilingual: "I'm vegetarian" and "Soy vegetariano" are the same memory)."""

from __future__ import annotations

import asyncio
import hashlib
from collections.abc import Iterator, Mapping, Sequence
from datetime import timedelta

import pytest
import structlog.testing

from bot import commands
from bot.commands import parse
from bot.config import Settings
from bot.embedders.base import Kind, Vector
from bot.embedders.local import LocalEmbedder
from bot.embedding import embed_pending
from bot.job_list import registry
from bot.jobs import Scheduler
from kernel.types import InboundMessage
from memory.store import ContextQuery, MemoryDraft, Store

VEGETARIAN = [1.0, 0.0, 0.0, 0.0]
NO_MEAT = [0.96, 0.28, 0.0, 0.0]  # cosine 0.96 with VEGETARIAN
TEA = [0.0, 0.0, 1.0, 0.0]


class Table:
    """An embedder (bot.embedders.base.Embedder) whose vectors a test sets: `vectors[text]`, else one from the
    text's hash in the last dimensions (far from the table's)."""

    def __init__(self, vectors: Mapping[str, Sequence[float]], name: str = "test:table") -> None:
        self.vectors, self.name, self.calls = dict(vectors), name, 0

    async def start(self) -> None:
        return None

    async def embed(self, texts: Sequence[str], *, kind: Kind) -> list[Vector]:
        self.calls += 1
        return [list(self.vectors.get(t) or self._hashed(t)) for t in texts]

    @staticmethod
    def _hashed(text: str) -> list[float]:
        h = hashlib.sha256(text.encode()).digest()
        return [0.0, 0.0, h[0] / 255 - 0.5, 1.0 + h[1] / 255]

    async def aclose(self) -> None:
        return None


TABLE = {"I'm vegetarian": VEGETARIAN, "I don't eat meat": NO_MEAT, "I like tea": TEA,
         "Marta is my sister": [0.0, 1.0, 0.0, 0.0]}


async def remember(store: Store, text: str, sender: str = "42") -> str:
    m = InboundMessage(surface="telegram", sender=sender, external_id=f"x:{sender}:{text}", text=f"/remember {text}")
    command = parse(m.text)
    assert command is not None
    return await commands.run(command, m, store)


async def uid(store: Store, sender: str = "42") -> int:
    found = await store.identity_user("telegram", sender)
    assert found is not None
    return found


def query(user_id: int, store: Store, vector: Sequence[float] | None, embedder: str) -> ContextQuery:
    at = store.clock()
    return ContextQuery(user_id=user_id, surface="cli", conversation_id=None, current_message_id=None, at=at,
                        cross_since=at - timedelta(days=1), query_vector=tuple(vector) if vector else None,
                        embedder=embedder)


async def test_the_embed_job_gives_a_remembered_memory_its_vector(store: Store) -> None:
    embedder = Table(TABLE)
    await remember(store, "I like tea")
    ana = await uid(store)
    assert await store.memory_embedding_progress(embedder.name, ana) == (0, 1)
    assert (await store.load_context(query(ana, store, TEA, embedder.name))).memory_cosines == {}
    scheduler = Scheduler(store, registry(Settings(embed_batch=2), store, embedder=embedder))
    await scheduler.start()
    try:
        assert await scheduler.run_now("embed") == "ok"
    finally:
        await scheduler.stop()
    assert await store.memory_embedding_progress(embedder.name, ana) == (1, 1)
    [tea] = await store.memories(ana)
    rows = await store.load_context(query(ana, store, TEA, embedder.name))
    assert rows.memory_cosines == {tea.id: pytest.approx(1.0)}
    assert (await store.load_context(query(ana, store, TEA, "test:other"))).memory_cosines == {}
    assert (await store.load_context(query(ana, store, None, ""))).memory_cosines == {}


async def test_vector_near_duplicates_merge_keeping_the_highest_confidence_and_newest_source(store: Store) -> None:
    embedder = Table(TABLE)
    await remember(store, "I'm vegetarian")  # stated: confidence 1.0
    await remember(store, "I like tea")
    await remember(store, "I'm vegetarian", sender="bob")  # another person's: never compared with ana's
    ana, bob = await uid(store), await uid(store, "bob")
    turn = await store.ingest(InboundMessage(surface="telegram", sender="42", external_id="said-meat",
                                             text="no meat for me, thanks"), 5)
    assert turn is not None
    inferred = (await store.add_memory(ana, MemoryDraft("I don't eat meat", source="inferred", importance=0.9,
                                                        source_message_ids=(turn.message.id,)))).memory
    other_kind = (await store.add_memory(ana, MemoryDraft("I don't eat meat", kind="preference"))).memory
    assert inferred.confidence == 0.7
    done = await embed_pending(store, embedder, batch=2)
    assert (done.memories, done.merged) == (5, 1)
    current = {m.content: m for m in await store.memories(ana) if m.kind == "fact"}
    assert set(current) == {"I'm vegetarian", "I like tea"}  # the older, more confident wording stays
    merged = current["I'm vegetarian"]
    assert (merged.confidence, merged.source, merged.importance) == (1.0, "inferred", 0.9)
    assert merged.source_message_ids == (turn.message.id,) and merged.source_external_ids == ("said-meat",)
    assert await store.memory(ana, inferred.id) is None  # absorbed: one memory, not two
    assert [m.id for m in await store.memories(ana) if m.kind == "preference"] == [other_kind.id]
    assert [m.content for m in await store.memories(bob)] == ["I'm vegetarian"]
    assert await store.memory_embedding_progress(embedder.name) == (4, 4)
    assert (await embed_pending(store, embedder)).memories == 0


async def test_a_more_confident_newer_wording_wins_and_is_embedded_again(store: Store) -> None:
    embedder = Table(TABLE)
    ana = await store.user_id("ana", create=True)
    assert ana is not None
    older = (await store.add_memory(ana, MemoryDraft("I don't eat meat", source="observed"))).memory
    await embed_pending(store, embedder)
    await store.add_memory(ana, MemoryDraft("I'm vegetarian"))  # no shared word: a new memory, stated
    done = await embed_pending(store, embedder)
    assert (done.memories, done.merged) == (1, 1)
    [kept] = await store.memories(ana)
    assert (kept.id, kept.content, kept.confidence, kept.source) == (older.id, "I'm vegetarian", 1.0, "stated")
    rows = await store.load_context(query(ana, store, VEGETARIAN, embedder.name))
    assert rows.memory_cosines == {older.id: pytest.approx(1.0)}  # the vector of the wording it kept
    # a lexical merge rewording it (no vector given) leaves it without one until the job embeds it again
    await store.add_memory(ana, MemoryDraft("I'm a vegetarian", source="stated"))
    assert await store.memory_embedding_progress(embedder.name, ana) == (0, 1)
    assert (await embed_pending(store, embedder)).memories == 1


async def test_two_people_linked_into_one_have_their_near_duplicate_memories_merged(store: Store) -> None:
    # each embedded while apart (nothing to merge), then linked: the job must compare them again (found by the
    # isolation property test: remember, remember, link)
    embedder = Table(TABLE)
    await remember(store, "I'm vegetarian", sender="1")
    await remember(store, "I don't eat meat", sender="2")
    assert (await embed_pending(store, embedder)).merged == 0
    handle = await store.identity_handle("telegram", "1")
    assert handle is not None
    assert await store.link_identity(handle, "telegram", "2", "test") == await uid(store, "1")
    done = await embed_pending(store, embedder)
    assert (done.memories, done.merged) == (1, 1)
    [kept] = await store.memories(await uid(store, "1"))
    assert kept.content == "I don't eat meat"  # both stated: the newer wording, as a merge keeps it


async def test_a_changed_embedder_re_embeds_the_memories(store: Store) -> None:
    first, second = Table(TABLE), Table(TABLE, name="test:second")
    for text in ("I like tea", "Marta is my sister"):
        await remember(store, text)
    await embed_pending(store, first)
    assert (await embed_pending(store, second)).memories == 2
    ana = await uid(store)
    assert await store.memory_embedding_progress(first.name, ana) == (0, 2)
    assert await store.memory_embedding_progress(second.name, ana) == (2, 2)


async def test_an_embed_job_with_nothing_to_do_logs_nothing_at_info(store: Store) -> None:
    embedder = Table(TABLE)
    await remember(store, "I like tea")
    scheduler = Scheduler(store, registry(Settings(), store, embedder=embedder))
    await scheduler.start()
    try:
        with structlog.testing.capture_logs() as busy:
            assert await scheduler.run_now("embed") == "ok"
        with structlog.testing.capture_logs() as idle:
            assert await scheduler.run_now("embed") == "ok"
    finally:
        await scheduler.stop()
    done = [e for e in busy if e["event"] == "embed.done"]
    assert [(e["log_level"], e["messages"], e["memories"], e["merged"]) for e in done] == [("info", 0, 1, 0)]
    assert [e["log_level"] for e in busy if e["event"] == "job.finished" and e["job"] == "embed"] == ["info"]
    quiet = [e for e in idle if e.get("job") == "embed" or e["event"].startswith(("embed", "embedding"))]
    # (debug lines may be filtered out before capture, depending on the logging set up earlier in the session)
    assert [e for e in quiet if e["log_level"] != "debug"] == []


@pytest.fixture(scope="module")
def local_embedder() -> Iterator[LocalEmbedder]:
    embedder = LocalEmbedder()
    yield embedder
    asyncio.run(embedder.aclose())


async def test_the_local_model_merges_one_memory_said_in_two_languages(store: Store,
                                                                      local_embedder: LocalEmbedder) -> None:
    for text in ("I'm vegetarian", "I work at Acme", "Soy vegetariano", "Marta is my sister"):
        await remember(store, text)
    done = await embed_pending(store, local_embedder)
    assert (done.memories, done.merged) == (4, 1)
    assert sorted(m.content for m in await store.memories(await uid(store))) == [
        "I work at Acme", "Marta is my sister", "Soy vegetariano"]  # equally confident: the newer wording
