"""The hilo rows of bench/memory_bench.py run by ANOTHER checkout's code ("today": main before issue 11's work).

Not imported by the bench: bench/memory_rows.py runs this file in a subprocess with the other checkout first on
the path (cwd and PYTHONPATH = that checkout), so `bot`, `memory` and `kernel` are its modules, and hands it the
data as JSON. It therefore imports nothing from bench/ and only the public API a checkout has had since
issue 10: `memory.open.open_store`, `memory.store.ImportRow`, `import_rows`, `user_id`, `bot.config.Settings`,
`bot.pipeline.Pipeline.assemble_context`.

    python bench/memory_today.py IN.json OUT.json

IN: {"src": checkout, "budgets": [...], "now": iso, "databases": {backend: url}, "messages": [{external_id,
user, surface, role, content, created_at, conversation}], "questions": [{id, user, text}],
"latency": {"queries": n, "budget": b, "embedder": bool, "seed": n, "sizes": [{"size": n, "databases": {...},
"messages": [...], "questions": [...], "now": iso}]}}
OUT: {"modules": memory's file, "recall": {backend: {budget: {question id: [external ids]}}},
"spent": {backend: {budget: mean tokens}}, "latency": {backend: {size: {p50_ms, p99_ms, messages[, emb]}}}}

With "embedder" and a checkout whose store keeps vectors and whose Pipeline takes an embedder (issue 11's), the
latency job also times the "+emb" row as bench/memory_latency.py does: the same synthetic vectors (numpy's
generator seeded with "seed", written in the same order through the store's vector API), the local embedder
embedding each question inside the timed span; blocks of BLOCK questions, the two rows taking turns. Its figures
are the cell's "emb": {p50_ms, p99_ms, embed_p50_ms}.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import statistics
import sys
import time
from datetime import datetime
from pathlib import Path
from typing import Any


def _rows(messages: list[dict[str, Any]]) -> list[Any]:
    from kernel import tokens
    from memory.store import ImportRow

    return [ImportRow(user=m["user"], surface=m["surface"], role=m["role"], content=m["content"],
                      created_at=datetime.fromisoformat(m["created_at"]), token_count=tokens.count(m["content"]),
                      external_id=m["external_id"], conversation=m["conversation"]) for m in messages]


async def _open(url: str, messages: list[dict[str, Any]]) -> Any:
    from memory.open import open_store

    store = open_store(url)
    await store.open()
    rows = _rows(messages)
    for i in range(0, len(rows), 5000):
        await store.import_rows(rows[i:i + 5000])
    if url.startswith("sqlite:///"):
        import sqlite3

        conn = sqlite3.connect(url.removeprefix("sqlite:///"))
        conn.execute("ANALYZE")
        conn.close()
    else:
        import asyncpg

        conn = await asyncpg.connect(url)
        await conn.execute("ANALYZE")
        await conn.close()
    return store


def _pipelines(store: Any, url: str, budgets: list[int]) -> dict[int, Any]:
    from bot.config import Settings
    from bot.pipeline import Pipeline

    base = Settings.from_mapping({"HILO_DATABASE_URL": url, "HILO_EMBEDDER": "none"})
    return {b: Pipeline(dataclasses.replace(base, context_budget=b), store, chain=None) for b in budgets}


async def _context(pipeline: Any, uid: int, text: str, now: datetime) -> Any:
    return await pipeline.assemble_context(user_id=uid, surface="web", conversation_id=None,
                                           current_message_id=None, text=text, at=now)


async def recall(job: dict[str, Any]) -> tuple[dict[str, Any], dict[str, Any]]:
    now = datetime.fromisoformat(job["now"])
    found: dict[str, Any] = {}
    spent: dict[str, Any] = {}
    for backend, url in job["databases"].items():
        store = await _open(url, job["messages"])
        try:
            pipelines = _pipelines(store, url, job["budgets"])
            uids: dict[str, int] = {}
            for b, pipeline in pipelines.items():
                cell, used = found.setdefault(backend, {}).setdefault(str(b), {}), []
                for q in job["questions"]:
                    if q["user"] not in uids:
                        uids[q["user"]] = await store.user_id(q["user"])
                    ctx = await _context(pipeline, uids[q["user"]], q["text"], now)
                    used.append(ctx.tokens["total"])
                    cell[q["id"]] = sorted(i.external_id for i in ctx.items if i.external_id is not None)
                spent.setdefault(backend, {})[str(b)] = statistics.fmean(used)
        finally:
            await store.close()
    return found, spent


#: questions timed in a row before the other row takes its turn (bench/memory_latency.py's BLOCK)
BLOCK = 25


def _stats(ms: list[float]) -> dict[str, float]:
    ordered = sorted(ms)
    return {"p50_ms": statistics.median(ms), "p99_ms": ordered[min(len(ordered) - 1, round(0.99 * (len(ordered) - 1)))]}


async def _vectors(store: Any, name: str, dim: int, seed: int) -> bool:
    """bench/memory_latency.synthetic_vectors, for a checkout that has the vector API; False when it has none."""
    if getattr(store, "vector_status", "none") is not None or not hasattr(store, "write_vectors"):
        return False
    import numpy as np

    rng = np.random.default_rng(seed)
    after = 0
    while batch := await store.unembedded(name, after_id=after, limit=1000):
        rows = rng.standard_normal((len(batch), dim)).astype(np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        await store.write_vectors(name, [(p.id, r.tolist()) for p, r in zip(batch, rows, strict=True)])
        after = batch[-1].id
    return True


def _with_embedder(pipeline: Any, embedder: Any) -> Any | None:
    """A copy of `pipeline` that embeds the question (None: this checkout's Pipeline takes no embedder)."""
    import inspect

    from bot.pipeline import Pipeline

    if "embedder" not in inspect.signature(Pipeline.__init__).parameters:
        return None
    settings = dataclasses.replace(pipeline.settings, embedder="local") if hasattr(pipeline.settings, "embedder") \
        else pipeline.settings
    return Pipeline(settings, pipeline.store, chain=None, embedder=embedder)


async def latency(job: dict[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    n, budget = job["queries"], job["budget"]
    embedder = None
    if job.get("embedder"):
        try:
            from bot.embedders.local import LocalEmbedder
        except ImportError:
            pass
        else:
            embedder = LocalEmbedder()
            await embedder.start()
    for size in job["sizes"]:
        now = datetime.fromisoformat(size["now"])
        for backend, url in size["databases"].items():
            store = await _open(url, size["messages"])
            try:
                pipeline = _pipelines(store, url, [budget])[budget]
                emb = None
                if embedder is not None and await _vectors(store, embedder.name, embedder.dim, job.get("seed", 0)):
                    emb = _with_embedder(pipeline, embedder)
                uid = await store.user_id(size["questions"][0]["user"])
                texts = [q["text"] for q in size["questions"]]
                for text in texts[:10]:
                    await _context(pipeline, uid, text, now)
                    if emb is not None:
                        await _context(emb, uid, text, now)
                ms: dict[str, list[float]] = {"plain": [], "emb": []}
                for start in range(0, n, BLOCK):  # as bench/memory_latency.py: the rows take turns by blocks
                    for row, p in (("plain", pipeline), ("emb", emb)):
                        if p is None:
                            continue
                        for k in range(start, min(n, start + BLOCK)):
                            t0 = time.perf_counter()
                            await _context(p, uid, texts[k % len(texts)], now)
                            ms[row].append((time.perf_counter() - t0) * 1000)
                cell: dict[str, Any] = {"messages": len(size["messages"]), **_stats(ms["plain"])}
                if emb is not None:
                    cell["emb"] = _stats(ms["emb"])
                out.setdefault(backend, {})[str(size["size"])] = cell
            finally:
                await store.close()
    if embedder is not None:
        await embedder.aclose()
    return out


async def run(job: dict[str, Any]) -> dict[str, Any]:
    import memory

    modules = str(Path(memory.__file__).resolve())
    if not modules.startswith(str(Path(job["src"]).resolve())):
        raise SystemExit(f"memory_today: memory/ is {modules}, not from {job['src']}: run with cwd and "
                         "PYTHONPATH set to that checkout")
    from kernel import log

    log.configure(level="warning")
    found, spent = await recall(job) if job.get("questions") else ({}, {})
    lat = await latency(job["latency"]) if job.get("latency") else {}
    return {"modules": modules, "recall": found, "spent": spent, "latency": lat}


def main() -> None:
    src, dst = sys.argv[1:3]
    job = json.loads(Path(src).read_text())
    Path(dst).write_text(json.dumps(asyncio.run(run(job))))


if __name__ == "__main__":
    main()
