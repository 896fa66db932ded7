"""Embedding messages and questions (bot/embedding.py) on every backend: the backfill and the embed job, resumable;
a changed embedder re-embeds; a turn's question embedded within its timeout (else lexical only, logged); the
OpenAI-compatible path through the fake /v1/embeddings; the real local model finding a paraphrase that shares no
word with the question; a Postgres without pgvector that migrates and runs lexical only, saying so once."""

from __future__ import annotations

import asyncio
import threading
from collections.abc import AsyncIterator, Iterator
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
import structlog.testing

from bot.config import Settings
from bot.embedders.base import EmbeddingError
from bot.embedders.factory import announce
from bot.embedders.local import LocalEmbedder
from bot.embedders.none import NoEmbedder
from bot.embedders.openai_compat import OpenAIEmbedder
from bot.embedding import embed_pending
from bot.job_list import registry
from bot.jobs import Scheduler
from bot.pipeline import Pipeline
from bot.retry import RetryPolicy
from kernel.types import InboundMessage
from memory.open import open_store
from memory.store import Ingested, Store
from tests.fakes.model_behaviours import held, ok, status
from tests.fakes.model_server import FakeModelServer

T0 = datetime.now(UTC).replace(microsecond=0) - timedelta(days=30)
FILLER = ["the weather was lovely on the coast", "I finished the quarterly report at work",
          "my cousin visits in June", "we watched a film about pirates", "the train was late again"]


async def say(store: Store, ext: str, text: str, minutes: int = 0) -> Ingested:
    turn = await store.ingest(InboundMessage(surface="telegram", sender="ana", external_id=ext, text=text,
                                             received_at=T0 + timedelta(minutes=minutes), handle="ana"),
                              token_count=len(text.split()))
    assert turn is not None
    return turn


@pytest.fixture
async def fake_openai(model_server: FakeModelServer) -> AsyncIterator[OpenAIEmbedder]:
    embedder = OpenAIEmbedder(model="embed-fake", api_key="sk-test", base_url=f"{model_server.base_url}/v1",
                              timeout=5, batch_size=3, policy=RetryPolicy(attempts=2, sleep=lambda s: _none()))
    yield embedder
    await embedder.aclose()


async def _none() -> None:
    return None


@pytest.fixture(scope="module")
def local_embedder() -> Iterator[LocalEmbedder]:
    embedder = LocalEmbedder()
    yield embedder
    asyncio.run(embedder.aclose())


class Stopped(Exception):
    """What the interrupted backfill below dies of (a stand-in for Ctrl-C between two batches)."""


async def test_the_backfill_resumes_where_it_was_stopped(store: Store, fake_openai: OpenAIEmbedder,
                                                         model_server: FakeModelServer) -> None:
    turns = [await say(store, f"m{i}", f"message number {i}", i) for i in range(10)]
    batches: list[int] = []

    def stop_after_two(n: int) -> None:
        batches.append(n)
        if len(batches) == 2:
            raise Stopped

    with pytest.raises(Stopped):
        await embed_pending(store, fake_openai, batch=3, on_batch=stop_after_two)
    assert await store.embedding_progress(fake_openai.name) == (6, 10)
    sent_before = len(model_server.requests)
    result = await embed_pending(store, fake_openai, batch=3)
    assert (result.messages, result.last_id) == (4, turns[-1].message.id)
    assert [r.body["input"] for r in model_server.requests[sent_before:]] == [
        [f"message number {i}" for i in (6, 7, 8)], ["message number 9"]]
    assert await store.embedding_progress(fake_openai.name) == (10, 10)
    assert (await embed_pending(store, fake_openai, batch=3)).messages == 0


async def test_a_failed_batch_keeps_what_was_stored(store: Store, fake_openai: OpenAIEmbedder,
                                                    model_server: FakeModelServer) -> None:
    for i in range(5):
        await say(store, f"m{i}", f"message number {i}", i)
    model_server.script("embed-fake", [ok(), status(400)])
    with pytest.raises(EmbeddingError):
        await embed_pending(store, fake_openai, batch=3)
    assert await store.embedding_progress(fake_openai.name) == (3, 5)


async def test_a_new_embedder_name_re_embeds_everything(store: Store, fake_openai: OpenAIEmbedder,
                                                        local_embedder: LocalEmbedder) -> None:
    ana = [await say(store, f"m{i}", text, i) for i, text in enumerate(FILLER)]
    await embed_pending(store, fake_openai, batch=2)
    assert (await embed_pending(store, local_embedder, batch=2)).messages == len(FILLER)
    assert await store.embedding_progress(fake_openai.name) == (0, len(FILLER))
    vector = (await local_embedder.embed([FILLER[3]], kind="query"))[0]
    hits = await store.search_vectors(ana[0].user_id, vector, local_embedder.name, limit=1)
    assert list(hits) == [ana[3].message.id]
    assert await store.search_vectors(ana[0].user_id, vector[:8], fake_openai.name) == {}


async def test_the_embed_job_embeds_new_messages_in_one_process(store: Store, fake_openai: OpenAIEmbedder) -> None:
    for i in range(4):
        await say(store, f"m{i}", f"message number {i}", i)
    jobs = registry(Settings(embed_batch=3), store, embedder=fake_openai)
    assert [j.name for j in jobs] == ["cleanup", "memory_expiry", "media_retention", "embed"]
    assert "embed" not in [j.name for j in registry(Settings(), store, embedder=NoEmbedder())]
    scheduler = Scheduler(store, jobs)
    await scheduler.start()
    try:
        assert await scheduler.run_now("embed") == "ok"
        assert await store.embedding_progress(fake_openai.name) == (4, 4)
        await say(store, "m4", "one more", 10)
        assert await scheduler.run_now("embed") == "ok"
        assert await store.embedding_progress(fake_openai.name) == (5, 5)
    finally:
        await scheduler.stop()


async def test_a_paraphrase_is_found_only_through_its_vector(store: Store, local_embedder: LocalEmbedder) -> None:
    peanuts = await say(store, "p", "I'm allergic to peanuts", 0)
    for i, text in enumerate(FILLER * 4):
        await say(store, f"f{i}", f"{text} ({i})", i + 1)
    await embed_pending(store, local_embedder, batch=8)
    question = "Which food should I avoid for health reasons?"
    settings = Settings(context_budget=1000)
    for embedder, found in ((None, False), (local_embedder, True)):
        ctx = await Pipeline(settings, store, chain=None, embedder=embedder).assemble_context(  # type: ignore[arg-type]
            user_id=peanuts.user_id, surface="web", conversation_id=None, current_message_id=None,
            text=question, at=T0 + timedelta(days=3))
        recalled = [i.message_id for i in ctx.items if i.kind == "recalled_message"]
        assert (peanuts.message.id in recalled) is found, (embedder, recalled)


def best_recalled(ctx: Any) -> int | None:
    """The recalled message the pool ranked first (its episode's other messages may come with it)."""
    recalled = [i for i in ctx.items if i.kind == "recalled_message"]
    return max(recalled, key=lambda i: i.scores["pool"]).message_id if recalled else None


async def test_a_late_question_embedding_leaves_the_turn_lexical_and_says_so(
    store: Store, model_server: FakeModelServer, fake_openai: OpenAIEmbedder,
) -> None:
    turn = await say(store, "m0", "my bike is red")
    for i, text in enumerate(FILLER):
        await say(store, f"f{i}", text, i + 1)
    await embed_pending(store, fake_openai)
    gate = threading.Event()
    model_server.script("embed-fake", [held(gate)])
    pipeline = Pipeline(Settings(embed_query_timeout=0.2), store, chain=None, embedder=fake_openai)  # type: ignore[arg-type]
    try:
        with structlog.testing.capture_logs() as logs:
            ctx = await pipeline.assemble_context(user_id=turn.user_id, surface="web", conversation_id=None,
                                                  current_message_id=None, text="what colour is my bike?",
                                                  at=T0 + timedelta(days=3))
    finally:
        gate.set()
    assert best_recalled(ctx) == turn.message.id  # by "bike": lexical only, no cosine among the scores
    assert all("vector" not in i.scores for i in ctx.items if i.kind == "recalled_message")
    failed = [e for e in logs if e["event"] == "embedding.query_failed"]
    assert failed == [{"event": "embedding.query_failed", "embedder": "openai:embed-fake", "user_id": turn.user_id,
                       "chars": 23, "error": "TimeoutError", "ms": failed[0]["ms"], "log_level": "warning"}]


async def test_a_postgres_without_pgvector_migrates_and_runs_lexical_only(
    fake_openai: OpenAIEmbedder, postgres_without_vectors: str,
) -> None:
    store = open_store(postgres_without_vectors)
    await store.open()
    try:
        assert store.vector_status is not None and "pgvector" in store.vector_status
        turn = await say(store, "m0", "my bike is red")
        for i, text in enumerate(FILLER):
            await say(store, f"f{i}", text, i + 1)
        assert await store.write_vectors("e1", [(turn.message.id, [1.0, 0.0])]) == 0
        assert await store.search_vectors(turn.user_id, [1.0, 0.0], "e1") == {}
        assert "embed" not in [j.name for j in registry(Settings(), store, embedder=fake_openai)]
        ctx = await Pipeline(Settings(), store, chain=None, embedder=fake_openai).assemble_context(  # type: ignore[arg-type]
            user_id=turn.user_id, surface="web", conversation_id=None, current_message_id=None,
            text="what colour is my bike?", at=T0 + timedelta(days=3))
        assert best_recalled(ctx) == turn.message.id
        assert all("vector" not in i.scores for i in ctx.items if i.kind == "recalled_message")
        with structlog.testing.capture_logs() as logs:
            announce(Settings(), fake_openai, store.vector_status)
        assert [(e["event"], e["retrieval"], e["reason"]) for e in logs] == [
            ("embedder.none", "lexical only", store.vector_status)]
        assert await store.forget("ana")
    finally:
        await store.close()


@pytest.fixture
def postgres_without_vectors() -> str:
    """A database of the session's Postgres where hilo's migration is told to keep no vectors (as on a server
    without the pgvector package, or a role that may not create the extension)."""
    from tests.fakes.postgres import SERVER, db_name

    url = SERVER.create_database()
    SERVER.query("postgres", f'ALTER DATABASE "{db_name(url)}" SET hilo.vectors = off')
    return url


async def test_the_local_model_loads_at_start_not_in_a_persons_first_turn(tmp_path: Any) -> None:
    # No job runs here (an empty registry): before, the model loaded in the embed job's first run only when it found
    # something to embed, else in the first turn, which waited for it (1.0-1.3 s on the EPYC host, against a
    # HILO_EMBED_QUERY_TIMEOUT of 2 s: a slower machine's first turn recalled lexically)
    from bot.jobs import JobRegistry
    from tests.fakes.daemon import running_daemon
    from tests.waiting import wait_until

    settings = Settings(database_url=f"sqlite:///{tmp_path / 'hilo.db'}", secret_key="test-secret", embedder="local")
    async with running_daemon(settings, jobs=JobRegistry()) as client:
        embedder = client.app.state.hilo["embedder"]  # type: ignore[attr-defined]
        assert isinstance(embedder, LocalEmbedder)
        await wait_until(lambda: embedder.loaded, "the model loaded at start, with no turn and no job", seconds=60)
        r = await client.post("/api/session")
        assert r.status_code == 200
