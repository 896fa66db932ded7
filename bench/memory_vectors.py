"""Vectors for bench/memory_bench.py: a disk cache of embeddings, and the "bm25 + emb" reference row.

Embedding the recall corpus (37k messages) with the local model takes minutes on two busy cores, so every vector
the bench asks for goes through `CachedEmbedder`: an Embedder (bot/embedders/base.py's Protocol) in front of the
real one that keeps each vector on disk, keyed by (embedder name, kind, sha256 of the text), in a SQLite file
(bench/results/vector-cache.db, ignored by git; `--vector-cache PATH` elsewhere). A re-run embeds only what is
new. The cache is for recall only: latency (bench/memory_latency.py) times the real embedder, never the cache.

  bm25 + emb  plain BM25 (bench/memory_recall.Baselines' index and terms) fused with the cosine between the
              question's and each message's vector: 0.5 * z(bm25) + 0.5 * z(cosine), the z-scores taken over all of
              the person's messages (a message BM25 does not match scores 0 there), greedy by the fused score
              until the budget is full, as the bm25 row fills it. A reference for what fusion alone gives.
"""

from __future__ import annotations

import hashlib
import sqlite3
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.memory_corpus import Corpus, Question
from bench.memory_recall import Baselines
from bot.embedders.base import Embedder, Kind, Vector
from memory.search_terms import search_terms

DEFAULT_CACHE = Path(__file__).resolve().parent / "results" / "vector-cache.db"
BATCH = 64


class CachedEmbedder:
    """`inner` with every vector kept on disk: the same name and dim, so vectors are those of `inner`.
    `embedded` / `hits` count texts; `seconds` is the time spent in `inner` (what a cold run costs)."""

    def __init__(self, inner: Embedder, path: Path = DEFAULT_CACHE) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        path.parent.mkdir(parents=True, exist_ok=True)
        self.db = sqlite3.connect(path)
        self.db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vec BLOB NOT NULL)")
        self.embedded = 0
        self.hits = 0
        self.seconds = 0.0

    def _key(self, text: str, kind: Kind) -> str:
        return f"{self.name}|{kind}|{hashlib.sha256(text.encode()).hexdigest()}"

    async def start(self) -> None:
        await self.inner.start()

    async def embed(self, texts: Sequence[str], *, kind: Kind) -> list[Vector]:
        rows: list[Vector] = (await self.embed_array(texts, kind=kind)).tolist()
        return rows

    async def embed_array(self, texts: Sequence[str], *, kind: Kind) -> np.ndarray:
        """One float32 row per text (unit length, as `inner` gives them)."""
        keys = [self._key(t, kind) for t in texts]
        found: dict[str, np.ndarray] = {}
        unique = list(dict.fromkeys(keys))
        for i in range(0, len(unique), 500):
            chunk = unique[i:i + 500]
            rows = self.db.execute(f"SELECT key, vec FROM vectors WHERE key IN ({','.join('?' * len(chunk))})",
                                   chunk).fetchall()
            found |= {k: np.frombuffer(v, dtype=np.float32) for k, v in rows}
        todo = {k: t for k, t in zip(keys, texts, strict=True) if k not in found}
        self.hits += len(keys) - sum(k in todo for k in keys)
        items = list(todo.items())
        for i in range(0, len(items), BATCH):
            batch = items[i:i + BATCH]
            t0 = time.perf_counter()
            vectors = await self.inner.embed([t for _, t in batch], kind=kind)
            self.seconds += time.perf_counter() - t0
            self.embedded += len(batch)
            arrays = [np.asarray(v, dtype=np.float32) for v in vectors]
            self.db.executemany("INSERT OR REPLACE INTO vectors (key, vec) VALUES (?, ?)",
                                [(k, a.tobytes()) for (k, _), a in zip(batch, arrays, strict=True)])
            self.db.commit()
            found |= {k: a for (k, _), a in zip(batch, arrays, strict=True)}
        return np.stack([found[k] for k in keys]) if keys else np.zeros((0, self.dim), dtype=np.float32)

    async def aclose(self) -> None:
        self.db.close()
        await self.inner.aclose()


def zscores(values: np.ndarray) -> np.ndarray:
    """(x - mean) / std; all zeros when the values do not vary."""
    std = float(values.std())
    return (values - values.mean()) / std if std > 0 else np.zeros_like(values)


def fused_order(lexical: np.ndarray, cosine: np.ndarray, weight: float = 0.5) -> list[int]:
    """Indexes by (1 - weight) * z(lexical) + weight * z(cosine), best first (ties: the later index first,
    as the bm25 row breaks ties by newest)."""
    fused = (1 - weight) * zscores(lexical) + weight * zscores(cosine)
    return sorted(range(len(fused)), key=lambda i: (-fused[i], -i))


class Bm25Emb:
    """The "bm25 + emb" row over `base`'s index: call `prepare` once (it embeds the corpus and the questions)."""

    def __init__(self, base: Baselines, corpus: Corpus, embedder: CachedEmbedder, weight: float = 0.5) -> None:
        self.base = base
        self.corpus = corpus
        self.embedder = embedder
        self.weight = weight
        self.ids: dict[str, list[str]] = {}  # person -> their messages' external ids, oldest first
        self.vectors: dict[str, np.ndarray] = {}
        self.questions: dict[str, np.ndarray] = {}
        self.ranked: dict[str, list[str]] = {}

    async def prepare(self) -> dict[str, Any]:
        t0 = time.perf_counter()
        for person in dict.fromkeys(m.user for m in self.corpus.messages):
            msgs = self.corpus.by_user(person)
            self.ids[person] = [m.external_id for m in msgs]
            self.vectors[person] = await self.embedder.embed_array([m.content for m in msgs], kind="passage")
        qs = self.corpus.questions
        rows = await self.embedder.embed_array([q.text for q in qs], kind="query")
        self.questions = {q.id: rows[i] for i, q in enumerate(qs)}
        return {"seconds": time.perf_counter() - t0, "embedded": self.embedder.embedded,
                "cached": self.embedder.hits, "embed_seconds": self.embedder.seconds}

    def bm25_scores(self, q: Question) -> dict[str, float]:
        """External id -> BM25 relevance (higher is better) of the person's messages the terms match."""
        terms = search_terms(q.text)
        if not terms:
            return {}
        match = " OR ".join(f'"{t}"' for t in terms)
        rows = self.base.db.execute("SELECT ext, bm25(fts) FROM fts WHERE fts MATCH ? AND owner = ?",
                                    (f"content : ({match})", q.user)).fetchall()
        return {ext: -score for ext, score in rows}

    def order(self, q: Question) -> list[str]:
        if q.id not in self.ranked:
            ids = self.ids[q.user]
            scores = self.bm25_scores(q)
            lexical = np.array([scores.get(e, 0.0) for e in ids])
            cosine = self.vectors[q.user] @ self.questions[q.id]
            self.ranked[q.id] = [ids[i] for i in fused_order(lexical, cosine, self.weight)]
        return self.ranked[q.id]

    async def __call__(self, q: Question, budget: int) -> set[str]:
        left, found = self.base.avail(q, budget), set()
        for ext in self.order(q):
            if self.base.cost[ext] <= left:
                left -= self.base.cost[ext]
                found.add(ext)
        return found
