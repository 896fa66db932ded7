"""Recall lab: bench/memory_bench.py's recall rows for hilo (SQLite), fast to re-run under variants, and an analysis
of the missed evidence. Not a test, not the benchmark of record (that is bench/memory_bench.py).

Loads one corpus into a SQLite store once, embeds it through the disk cache, then for each variant (module
constants set by name, e.g. `memory.context_pool.RECALL_MAX=128`) prints hilo and hilo +emb recall at each budget,
per language, per kind at 2,000 and the tokens spent; `--misses` prints, for each evidence message missed at
2,000 tokens by hilo +emb, its rank among the store's candidates, its score components and why it was cut
(not a candidate / ranked below the recall limit / not taken by the pool).

    python bench/recall_lab.py [--seed 11] [--variant 'NAME:memory.retrieval.EPISODE=0.5,...'] [--misses]
"""

from __future__ import annotations

import argparse
import asyncio
import dataclasses
import importlib
import statistics
import sys
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.memory_bench import BUDGETS, KINDS, LANGS
from bench.memory_corpus import Corpus, generate
from bench.memory_recall import Baselines, recall
from bench.memory_rows import embed_history, local_embedder
from bench.memory_stores import Hilo, load, stores
from bench.memory_vectors import DEFAULT_CACHE, Bm25Emb, CachedEmbedder
from bot.config import Settings
from kernel import log


def setting(text: str) -> tuple[str, str, Any]:
    target, _, value = text.partition("=")
    module, _, name = target.rpartition(".")
    return module, name, float(value) if "." in value else int(value)


def variant(text: str) -> tuple[str, list[tuple[str, str, Any]]]:
    name, _, pairs = text.partition(":")
    return name, [setting(p) for p in pairs.split(",") if p.strip()]


@dataclasses.dataclass
class Applied:
    saved: list[tuple[Any, str, Any]]

    def undo(self) -> None:
        for module, name, value in reversed(self.saved):
            setattr(module, name, value)


def apply(settings: list[tuple[str, str, Any]]) -> Applied:
    saved = []
    for module_name, name, value in settings:
        module = importlib.import_module(module_name)
        saved.append((module, name, getattr(module, name)))
        setattr(module, name, value)
    return Applied(saved)


async def rows(corpus: Corpus, methods: dict[str, Any]) -> dict[str, dict[int, dict[str, float]]]:
    out: dict[str, dict[int, dict[str, float]]] = {}
    for name, method in methods.items():
        for b in BUDGETS:
            out.setdefault(name, {})[b] = {q.id: recall(q.evidence, await method(q, b)) for q in corpus.questions}
    return out


def show(corpus: Corpus, results: dict[str, dict[int, dict[str, float]]], spent: dict[str, dict[int, float]]) -> None:
    for lang in LANGS:
        qs = [q for q in corpus.questions if q.lang == lang]
        print(f"  {lang}: " + " | ".join(
            f"{name} " + " ".join(f"{statistics.fmean(r[b][q.id] for q in qs):.3f}" for b in BUDGETS)
            for name, r in results.items()))
        print(f"  {lang} kinds@2000 ({' '.join(KINDS)}): " + " | ".join(
            f"{name} " + " ".join(f"{statistics.fmean(r[2000][q.id] for q in qs if q.kind == k):.3f}" for k in KINDS)
            for name, r in results.items()))
    for name, by in spent.items():
        print(f"  spent {name}: " + ", ".join(f"{v:,.0f}/{b}" for b, v in by.items()))


async def misses(corpus: Corpus, hilo: Hilo, store: Any, budget: int = 2000, show_n: int = 60) -> None:
    from memory import sql_recall
    from memory.store import ContextQuery

    reasons: Counter[str] = Counter()
    shown = 0
    byid = {m.external_id: m for m in corpus.messages}
    for q in corpus.questions:
        ctx = await hilo.context(q, budget)
        got = {i.external_id for i in ctx.items}
        missed = [e for e in q.evidence if e not in got]
        if not missed:
            continue
        uid = hilo.uids[q.user]
        vector = None
        pipe = hilo.pipelines[budget]
        if pipe.embedder is not None:
            vector = tuple((await pipe.embedder.embed([q.text], kind="query"))[0])
        cq = ContextQuery(user_id=uid, surface="web", conversation_id=None, current_message_id=None, at=hilo.now,
                          cross_since=hilo.now, cross_limit=0, search_text=q.text, search_limit=100000,
                          facts_limit=0, query_vector=vector, embedder=pipe.embedder.name if vector else "")
        msgs, scores = await store._tx("read", sql_recall.recall, cq)
        rank = {m.external_id: r for r, m in enumerate(msgs)}
        ids = {m.external_id: m.id for m in msgs}
        limit = pipe.settings.context_budget
        from memory.context_pool import recall_limit
        lim = recall_limit(limit)
        for e in missed:
            if e not in rank:
                why = "not a candidate"
            elif rank[e] >= lim:
                why = "below the limit"
            else:
                why = "pool"
            reasons[f"{q.kind}: {why}"] += 1
            if shown < show_n:
                shown += 1
                s = scores.get(ids.get(e, -1), {})
                print(f"{q.kind:10} {q.lang} rank {rank.get(e, '-')!s:>5}/{len(msgs)} {why:16} "
                      + " ".join(f"{k}={v:.2f}" for k, v in s.items())
                      + f"\n    Q: {q.text}\n    E: {byid[e].content} ({byid[e].created_at:%Y-%m-%d})")
    for k, n in sorted(reasons.items()):
        print(f"{n:4}  {k}")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--people", type=int, default=24)
    ap.add_argument("--variant", action="append", default=[], type=variant)
    ap.add_argument("--misses", action="store_true")
    ap.add_argument("--no-base", action="store_true")
    args = ap.parse_args()
    log.configure(level="warning")
    corpus = generate(args.seed, args.people, 1500, 180)
    with tempfile.TemporaryDirectory() as tmp:
        async with stores(tmp, "lab", False) as opened:
            store, url, _ = opened["sqlite"]
            await load(store, corpus)
            embedder = CachedEmbedder(local_embedder(None), DEFAULT_CACHE)
            await embedder.start()
            await embed_history(store, embedder)
            base = Baselines(corpus, Settings().system_prompt)
            if not args.no_base:
                fused = Bm25Emb(base, corpus, embedder)
                await fused.prepare()
                show(corpus, await rows(corpus, {"bm25": base.bm25, "bm25+emb": fused}), {})
            for name, settings in [("main", []), *args.variant]:
                applied = apply(settings)
                try:
                    methods = {"hilo": Hilo(store, url, BUDGETS, corpus.now, {"HILO_EMBEDDER": "none"}),
                               "+emb": Hilo(store, url, BUDGETS, corpus.now, {"HILO_EMBEDDER": "local"}, embedder)}
                    results = await rows(corpus, methods)
                    print(f"{name}: {settings}")
                    show(corpus, results, {n: {b: statistics.fmean(m.spent[b]) for b in BUDGETS}
                                           for n, m in methods.items()})
                    if args.misses:
                        await misses(corpus, methods["+emb"], store)
                finally:
                    applied.undo()
            await embedder.aclose()
            base.close()


if __name__ == "__main__":
    asyncio.run(main())
