"""Context-assembly latency of bench/memory_bench.py: one person with 1k / 10k / 100k (/ 300k) messages, on SQLite
and (with --postgres) an embedded PostgreSQL 18, with and without the embedder.

Per size and backend, a fresh database holds one person's generated history (bench/memory_corpus.generate with
one person), imported through the store's public API, ANALYZE after, and a vector for every message
(`synthetic_vectors`: random unit vectors of the local model's name and dimension, written through the store's
vector API: embedding 100k messages with the real model would take longer than the whole run; the search costs
the same whatever the vectors say). Then `--queries` questions (the person's, cycled) at 2,000 tokens, the two
rows taking turns in blocks of 25 questions:

  hilo        Pipeline.assemble_context with HILO_EMBEDDER=none: the question's token count, the store's read,
              assembly
  hilo +emb   the same with the real local embedder (never the bench's cache): the question's embedding is inside
              the timed span, and its own time is reported beside (`embed_p50_ms`, `embed_share`: the median of
              embed / total per question)
  today       with --baseline-src: that checkout's hilo on the same history (bench/memory_today.py); with the
              embedder and a checkout that keeps vectors and embeds the question, "today +emb" too (the same
              synthetic vectors)

`--pg-max` (default 100,000) caps the sizes run on Postgres: 300k is for SQLite (DESIGN: 300k messages at most
2x 10k). Every run writes bench/results/memory_latency.json (`summary`): {backend: {size: {p50_ms, p99_ms} of
"hilo", with the question's embedding beside (embed_p50_ms, embed_p99_ms, and the +emb row's p50/p99)}}, which
bench/run reads. The latency part alone (no recall tables):

    python -m bench.memory_latency --sizes 1000,10000,100000,300000 [--postgres] [--pg-max 100000] [--queries 200]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.context_bench import pct
from bench.memory_corpus import generate
from bench.memory_rows import corpus_job, local_embedder, run_worker
from bench.memory_stores import _PG, Hilo, analyze, load, pg_database, stores
from bot.embedders.base import Embedder, Kind, Vector

BUDGET = 2000
#: questions timed in a row before the other row takes its turn
BLOCK = 25


class TimedEmbedder:
    """`inner`, remembering how long its last call took (ms)."""

    def __init__(self, inner: Embedder) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.last_ms = 0.0

    async def start(self) -> None:
        await self.inner.start()

    async def embed(self, texts: Sequence[str], *, kind: Kind) -> list[Vector]:
        t0 = time.perf_counter()
        try:
            return await self.inner.embed(texts, kind=kind)
        finally:
            self.last_ms = (time.perf_counter() - t0) * 1000

    async def aclose(self) -> None:
        await self.inner.aclose()


async def synthetic_vectors(store: Any, name: str, dim: int, seed: int) -> str:
    """One random unit vector (numpy, seeded) of `dim` floats under embedder `name` for every message of the store,
    written through its vector API (`unembedded` -> `write_vectors`) in batches. Returns what was written."""
    status = getattr(store, "vector_status", "this checkout's store has no vector API")
    if status is not None:
        return f"none ({status})"
    rng = np.random.default_rng(seed)
    after, written = 0, 0
    while batch := await store.unembedded(name, after_id=after, limit=1000):
        rows = rng.standard_normal((len(batch), dim)).astype(np.float32)
        rows /= np.linalg.norm(rows, axis=1, keepdims=True)
        written += await store.write_vectors(name, [(p.id, r.tolist()) for p, r in zip(batch, rows, strict=True)])
        after = batch[-1].id
    return f"{written:,} synthetic"


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--sizes", default="1000,10000", help="latency: messages of the one person, comma list "
                                                          "(the issue's: 1000,10000,100000; DESIGN's 300000 too)")
    ap.add_argument("--queries", type=int, default=200, help="latency: timed context assemblies per size and row")
    ap.add_argument("--pg-max", type=int, default=100_000, help="latency: largest size also run on Postgres")


def _stats(ms: list[float]) -> dict[str, float]:
    return {"p50_ms": statistics.median(ms), "p99_ms": pct(ms, 0.99)}


async def run_latency(args: argparse.Namespace, tmp: str,
                      baselines: Sequence[tuple[str, str]] = ()) -> dict[str, dict[str, dict[int, dict[str, Any]]]]:
    """{row: {backend: {size: {messages, p50_ms, p99_ms, ...}}}}."""
    out: dict[str, dict[str, dict[int, dict[str, Any]]]] = {}
    embedder = None if args.no_embedder else TimedEmbedder(local_embedder(None))
    if embedder is not None:
        await embedder.start()
    try:
        for size in args.sizes:
            corpus = generate(args.seed, 1, size, args.days)
            postgres = args.postgres and size <= args.pg_max
            async with stores(tmp, f"lat{size}", postgres) as opened:
                for backend, (store, url, dsn) in opened.items():
                    took = await load(store, corpus)
                    await analyze(dsn, backend)
                    vectors = "-"
                    if embedder is not None:
                        vectors = await synthetic_vectors(store, embedder.name, embedder.dim, args.seed)
                    rows = await _time_rows(store, url, corpus, args.queries, embedder)
                    for row, cell in rows.items():
                        out.setdefault(row, {}).setdefault(backend, {})[size] = {
                            **cell, "messages": len(corpus.messages), "import_s": took, "vectors": vectors}
                    print(f"latency {backend} {len(corpus.messages):,} messages: " + "; ".join(
                        f"{row} p50 {c['p50_ms']:.2f} ms p99 {c['p99_ms']:.2f} ms" for row, c in rows.items())
                        + f" (import {took:.1f} s, vectors: {vectors})", flush=True)
            for i, (src, label) in enumerate(baselines):
                databases = {"sqlite": f"sqlite:///{tmp}/base{i}-lat{size}.db"}
                if postgres:
                    databases["postgres"] = await pg_database(tmp, f"base{i}_lat{size}")
                job = corpus_job(corpus)
                result = await run_worker(src, {"latency": {
                    "queries": args.queries, "budget": BUDGET, "embedder": embedder is not None, "seed": args.seed,
                    "sizes": [{"size": size, "databases": databases, **job}]}})
                for backend, cells in result["latency"].items():
                    for cell in cells.values():
                        emb = cell.pop("emb", None)
                        out.setdefault(label, {}).setdefault(backend, {})[size] = cell
                        if emb is not None:  # the checkout embeds the question and keeps vectors
                            out.setdefault(f"{label} +emb", {}).setdefault(backend, {})[size] = {
                                **emb, "messages": cell["messages"]}
                        print(f"latency {label} {backend} {cell['messages']:,} messages: p50 {cell['p50_ms']:.2f} "
                              f"ms p99 {cell['p99_ms']:.2f} ms" + ("" if emb is None else
                              f"; +emb p50 {emb['p50_ms']:.2f} ms p99 {emb['p99_ms']:.2f} ms"), flush=True)
    finally:
        if embedder is not None:
            await embedder.aclose()
    return out


async def _time_rows(store: Any, url: str, corpus: Any, queries: int,
                     embedder: TimedEmbedder | None) -> dict[str, dict[str, Any]]:
    plain = Hilo(store, url, (BUDGET,), corpus.now, {"HILO_EMBEDDER": "none"})
    emb = None if embedder is None else Hilo(store, url, (BUDGET,), corpus.now, {"HILO_EMBEDDER": "local"},
                                             embedder)
    qs = corpus.questions

    uid = await store.user_id(qs[0].user)
    searchable = getattr(store, "vector_status", "") is None

    async def with_embedding(q: Any) -> float:
        assert emb is not None and embedder is not None
        t0 = time.perf_counter()
        if not emb.embeds_query:  # a stand-in while this checkout's pipeline takes no embedder: embed, search
            vector = (await embedder.embed([q.text], kind="query"))[0]
            if searchable:
                await store.search_vectors(uid, vector, embedder.name, limit=64)
        await emb.context(q, BUDGET)
        return (time.perf_counter() - t0) * 1000

    for q in qs[:10]:  # warm-up
        await plain.context(q, BUDGET)
        if emb is not None:
            await with_embedding(q)
    ms: dict[str, list[float]] = {"hilo": [], "hilo +emb": [], "embed": [], "share": []}
    # blocks of BLOCK questions, the rows taking turns: a row's load drift is shared, and the model's threads
    # (BLAS) do not spill into the lexical row's timings as they would question by question
    for start in range(0, queries, BLOCK):
        block = [qs[k % len(qs)] for k in range(start, min(queries, start + BLOCK))]
        for q in block:
            t0 = time.perf_counter()
            await plain.context(q, BUDGET)
            ms["hilo"].append((time.perf_counter() - t0) * 1000)
        if emb is not None and embedder is not None:
            for q in block:
                total = await with_embedding(q)
                ms["hilo +emb"].append(total)
                ms["embed"].append(embedder.last_ms)
                ms["share"].append(embedder.last_ms / total)
    rows: dict[str, dict[str, Any]] = {"hilo": {**_stats(ms["hilo"]), "queries": queries}}
    if emb is not None:
        rows["hilo +emb"] = {**_stats(ms["hilo +emb"]), "queries": queries,
                             "embed_p50_ms": statistics.median(ms["embed"]), "embed_p99_ms": pct(ms["embed"], 0.99),
                             "embed_share": statistics.median(ms["share"]), "embeds_in_pipeline": emb.embeds_query}
    return rows


#: Figures from before, printed beside (ms p50, SQLite): docs/memory-benchmark.md's first run (main at 40c27fb)
#: and the issue's (another machine), by size.
BEFORE = {"first run (40c27fb)": {1000: 0.73, 10000: 3.73, 100000: 15.80},
          "issue 11": {1000: 6.0, 10000: 9.0, 100000: 31.0, 300000: 73.0}}


def latency_table(latency: dict[str, dict[str, dict[int, dict[str, Any]]]]) -> str:
    """Markdown: one line per size and backend; a column pair (p50 / p99) per row; the embedding's share."""
    names = list(latency)
    if not names:
        return "\nno latency sizes asked (--sizes)"
    keys = sorted({(backend, size) for row in latency.values() for backend, cells in row.items() for size in cells},
                  key=lambda k: (k[0] != "sqlite", k[1]))
    out = ["\ncontext-assembly latency at 2,000 tokens, one person (ms, p50 / p99)\n",
           "| backend | messages | " + " | ".join(names) + " | embedding p50 (share) |",
           "|---|---:|" + "---|" * (len(names) + 1)]
    for backend, size in keys:
        cells = [latency[n].get(backend, {}).get(size) for n in names]
        first = next(c for c in cells if c is not None)
        emb = latency.get("hilo +emb", {}).get(backend, {}).get(size)
        share = "-" if emb is None else f"{emb['embed_p50_ms']:.2f} ({emb['embed_share']:.0%})"
        out.append(f"| {backend} | {first['messages']:,} | " + " | ".join(
            "-" if c is None else f"{c['p50_ms']:.2f} / {c['p99_ms']:.2f}" for c in cells) + f" | {share} |")
    for name in names:  # DESIGN: context assembly sublinear, 300k messages at most 2x 10k
        for backend, cells in latency[name].items():
            if 10000 in cells and any(size > 10000 for size in cells):
                out.append(f"\n{name} {backend}: p50 / p99 against 10k: " + ", ".join(
                    f"{size:,} {cells[size]['p50_ms'] / cells[10000]['p50_ms']:.1f}x / "
                    f"{cells[size]['p99_ms'] / cells[10000]['p99_ms']:.1f}x"
                    for size in sorted(cells) if size > 10000))
    for name, by_size in BEFORE.items():
        out.append(f"\nbefore, SQLite p50 ({name}): " + ", ".join(f"{n:,}: {ms} ms" for n, ms in by_size.items()))
    return "\n".join(out)


RESULTS = Path(__file__).resolve().parent / "results" / "memory_latency.json"


def summary(latency: dict[str, dict[str, dict[int, dict[str, Any]]]]) -> dict[str, dict[str, dict[str, Any]]]:
    """{backend: {size: {p50_ms, p99_ms, messages, [embed_p50_ms, embed_p99_ms, emb_p50_ms, emb_p99_ms]}}}: the
    "hilo" row (no embedder), the question's embedding and the +emb row beside."""
    out: dict[str, dict[str, dict[str, Any]]] = {}
    for backend, cells in latency.get("hilo", {}).items():
        for size, cell in sorted(cells.items()):
            row = {"p50_ms": cell["p50_ms"], "p99_ms": cell["p99_ms"], "messages": cell["messages"]}
            emb = latency.get("hilo +emb", {}).get(backend, {}).get(size)
            if emb is not None:
                row |= {"embed_p50_ms": emb["embed_p50_ms"], "embed_p99_ms": emb["embed_p99_ms"],
                        "emb_p50_ms": emb["p50_ms"], "emb_p99_ms": emb["p99_ms"]}
            out.setdefault(backend, {})[str(size)] = row
    for by_size in out.values():  # DESIGN: 300k messages at most 2x its 10k
        if "10000" in by_size:
            for row in by_size.values():
                row["p99_vs_10k"] = row["p99_ms"] / by_size["10000"]["p99_ms"]
    return out


def write(latency: dict[str, dict[str, dict[int, dict[str, Any]]]], args: argparse.Namespace,
          load: tuple[float, ...]) -> Path:
    """bench/results/memory_latency.json: `summary` plus every row's cells, the settings and the load."""
    RESULTS.parent.mkdir(exist_ok=True)
    RESULTS.write_text(json.dumps({
        **summary(latency), "rows": {row: {b: {str(n): c for n, c in cells.items()} for b, cells in by.items()}
                                     for row, by in latency.items()},
        "args": {k: v for k, v in vars(args).items() if k in ("sizes", "queries", "pg_max", "postgres", "seed",
                                                              "days", "no_embedder")},
        "loadavg_start": load, "loadavg_end": os.getloadavg(), "cpus": os.cpu_count(),
    }, indent=2, default=str))
    return RESULTS


def main() -> None:
    from kernel import log

    ap = argparse.ArgumentParser(description="context-assembly latency for one person (bench/memory_bench.py's "
                                             "latency part alone)")
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--days", type=int, default=180)
    ap.add_argument("--postgres", action="store_true", help="also on an embedded PostgreSQL 18")
    ap.add_argument("--no-embedder", action="store_true", help="skip the +emb row")
    add_args(ap)
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    log.configure(level="warning")
    load = os.getloadavg()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            latency = asyncio.run(run_latency(args, tmp))
        finally:
            if "server" in _PG:
                _PG.pop("server").cleanup()
    print(latency_table(latency), flush=True)
    print(f"\nwrote {write(latency, args, load)}; load average (1 min) {load[0]:.2f} at the start, "
          f"{os.getloadavg()[0]:.2f} at the end ({os.cpu_count()} cores)")


if __name__ == "__main__":
    main()
