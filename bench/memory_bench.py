"""Benchmark: long-term memory. Evidence recall inside the assembled context, hilo beside baselines, and context
assembly latency for one person with 1k / 10k / 100k (/ 300k) messages, with and without the embedder.

Recall. bench/memory_corpus.py generates months of history for several people (English and Spanish, telegram,
whatsapp and web) with planted facts and questions whose evidence is known. The history goes into a real store
through its public API (`open_store`, `import_rows`, as `hilo import` does); then, for each question, asked in
a new web conversation six hours after the last message, each method assembles a context at 500, 1,000, 2,000
and 4,000 tokens, and the share of the question's evidence messages inside it is its recall. Rows:

  hilo      this checkout's hilo with HILO_EMBEDDER=none: `Pipeline.assemble_context` (what a turn and
            `hilo context --json` run), the items' external ids (every block: memory, cross-surface, conversation)
  hilo +emb the same with the local embedder, the history embedded as the daemon does (bench/memory_rows.py)
  today     with --baseline-src DIR[=LABEL]: DIR's hilo (e.g. main before issue 11) on the same data, in a
            subprocess (bench/memory_today.py)
  last-N    the person's newest messages until the budget is full (bench/memory_recall.py)
  bm25      plain SQLite FTS5 BM25 over the question's search terms, greedy by score (bench/memory_recall.py)
  bm25 + emb  BM25 fused with the local embedder's cosine, 0.5 / 0.5 over z-scores (bench/memory_vectors.py)
  bm25 porter  the same with FTS5's porter stemmer (English stems only): what stemming alone adds

Printed: a table per language (rows = method, columns = budget) and one per kind at 2,000 tokens; with
--postgres also hilo on PostgreSQL ("hilo pg", "hilo pg +emb", "today pg"). Latency (bench/memory_latency.py):
p50/p99 of `Pipeline.assemble_context` at 2,000 tokens for one person alone in a fresh database with a vector per
message, per size, on SQLite and (with --postgres, up to --pg-max) an embedded PostgreSQL 18, the +emb row with
the question's real embedding inside the timed span. Writes bench/results/memory_bench.json. Not a test.

    python bench/memory_bench.py [--people 24] [--messages-per-person 1500] [--days 180] [--seed 11]
                                 [--sizes 1000,10000] [--queries 200] [--postgres] [--pg-max 100000]
                                 [--baseline-src DIR[=LABEL]] [--no-embedder] [--vector-cache PATH]
    python bench/memory_bench.py --sizes 1000,10000,100000 --postgres --baseline-src /tmp/hilo-today=today
    python bench/memory_bench.py --variant 'hilo 48h:HILO_CROSS_SURFACE_HOURS=48'  # one more hilo row
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.memory_corpus import KINDS, Corpus, generate
from bench.memory_latency import add_args as add_latency_args
from bench.memory_latency import latency_table, run_latency
from bench.memory_latency import write as write_latency
from bench.memory_recall import Baselines, Method, evaluate, mean
from bench.memory_rows import add_args as add_rows_args
from bench.memory_rows import issue11_rows
from bench.memory_stores import _PG, Hilo, analyze, load, stores
from bot.config import Settings
from kernel import log

BUDGETS = (500, 1000, 2000, 4000)
LANGS = ("en", "es")
#: The hilo row runs lexical-only; "hilo +emb" (bench/memory_rows.py) is the one with the embedder.
NO_EMBEDDER = {"HILO_EMBEDDER": "none"}


async def run_recall(args: argparse.Namespace, tmp: str) -> tuple[Corpus, dict[str, Any], dict[str, Any]]:
    corpus = generate(args.seed, args.people, args.messages_per_person, args.days)
    async with stores(tmp, "recall", args.postgres) as opened:
        seconds = {}
        for backend, (store, _, dsn) in opened.items():
            seconds[backend] = await load(store, corpus)
            await analyze(dsn, backend)
        store, url, _ = opened["sqlite"]
        methods: dict[str, Method] = {"hilo": Hilo(store, url, BUDGETS, corpus.now, NO_EMBEDDER)}
        if "postgres" in opened:
            pg_store, pg_url, _ = opened["postgres"]
            methods["hilo pg"] = Hilo(pg_store, pg_url, BUDGETS, corpus.now, NO_EMBEDDER)
        for name, env in args.variant:
            methods[name] = Hilo(store, url, BUDGETS, corpus.now, {**NO_EMBEDDER, **env})
        with (closing(Baselines(corpus, Settings().system_prompt)) as base,
              closing(Baselines(corpus, Settings().system_prompt,
                                tokenizer="porter unicode61 remove_diacritics 2")) as porter):
            async with issue11_rows(args, tmp, opened, corpus, base, BUDGETS) as (rows, info):
                methods |= rows["hilo"]
                methods |= ({"last-N": base.last_n, "bm25": base.bm25} | rows["baselines"]
                            | {"bm25 porter": porter.bm25})
                results = await evaluate(corpus.questions, methods, BUDGETS)
        spent = {name: {b: statistics.fmean(m.spent[b]) for b in BUDGETS} for name, m in methods.items()
                 if isinstance(m, Hilo)}
        for label, row in info.items():
            for backend, by_budget in row.get("tokens_spent", {}).items():
                spent[label if backend == "sqlite" else f"{label} pg"] = {int(b): v for b, v in by_budget.items()}
        return corpus, results, {"import_s": seconds, "tokens_spent": spent, "rows": info}


def _cell(value: float | None) -> str:
    return "-" if value is None else f"{value:.3f}"


def tables(corpus: Corpus, results: dict[str, dict[int, dict[str, float]]]) -> str:
    """Markdown: per language, recall by method x budget; then per kind at 2,000 tokens."""
    out = []
    for lang in LANGS:
        qs = [q for q in corpus.questions if q.lang == lang]
        out.append(f"\n{lang}: evidence recall, {len(qs)} questions\n")
        out.append("| method | " + " | ".join(f"{b:,}" for b in BUDGETS) + " |")
        out.append("|---|" + "---:|" * len(BUDGETS))
        for name, by_budget in results.items():
            out.append(f"| {name} | " + " | ".join(_cell(mean(by_budget[b], qs)) for b in BUDGETS) + " |")
    for lang in LANGS:
        qs = [q for q in corpus.questions if q.lang == lang]
        out.append(f"\n{lang}: recall at 2,000 tokens per kind (questions: "
                   + ", ".join(f"{k} {sum(q.kind == k for q in qs)}" for k in KINDS) + ")\n")
        out.append("| method | " + " | ".join(KINDS) + " |")
        out.append("|---|" + "---:|" * len(KINDS))
        for name, by_budget in results.items():
            cells = [mean(by_budget[2000], [q for q in qs if q.kind == k]) for k in KINDS]
            out.append(f"| {name} | " + " | ".join(_cell(c) for c in cells) + " |")
    return "\n".join(out)


def variant(text: str) -> tuple[str, dict[str, str]]:
    """'NAME:KEY=VALUE,KEY=VALUE' -> (NAME, {KEY: VALUE})."""
    name, _, pairs = text.partition(":")
    env = dict(pair.split("=", 1) for pair in pairs.split(",") if "=" in pair)
    if not name.strip() or not env:
        raise argparse.ArgumentTypeError(f"{text!r}: write NAME:HILO_SETTING=value[,HILO_OTHER=value]")
    return name.strip(), env


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--people", type=int, default=24)
    ap.add_argument("--messages-per-person", type=int, default=1500)
    ap.add_argument("--days", type=int, default=180)
    ap.add_argument("--seed", type=int, default=11)
    ap.add_argument("--postgres", action="store_true", help="also on an embedded PostgreSQL 18 (recall and latency)")
    ap.add_argument("--variant", action="append", default=[], type=variant, metavar="'NAME:HILO_X=1,HILO_Y=2'",
                    help="one more hilo row (SQLite) with these settings, as environment names (the budget is each "
                         "column's: HILO_CONTEXT_BUDGET is ignored); repeatable")
    add_rows_args(ap)
    add_latency_args(ap)
    args = ap.parse_args()
    args.sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    log.configure(level="warning")
    load_start = os.getloadavg()
    t0 = time.perf_counter()
    with tempfile.TemporaryDirectory() as tmp:
        try:
            corpus, results, extra = asyncio.run(run_recall(args, tmp))
            print(f"recall: {len(corpus.messages):,} messages, {len(corpus.people)} people, "
                  f"{len(corpus.questions)} questions; import " + ", ".join(f"{b} {s:.1f} s" for b, s in
                                                                            extra["import_s"].items()), flush=True)
            print(tables(corpus, results), flush=True)
            for name, by_budget in extra["tokens_spent"].items():
                print(f"\n{name}: tokens the context spent, mean: "
                      + ", ".join(f"{s:,.0f} of {b:,}" for b, s in by_budget.items()))
            for name, info in extra["rows"].items():
                print(f"{name}: {info}")
            latency = asyncio.run(run_latency(args, tmp, args.baseline_src))
            print(latency_table(latency), flush=True)
            if latency:
                print(f"wrote {write_latency(latency, args, load_start)}", flush=True)
        finally:
            if "server" in _PG:
                _PG.pop("server").cleanup()
    load_end = os.getloadavg()
    summary = {name: {lang: {str(b): mean(by_budget[b], [q for q in corpus.questions if q.lang == lang])
                             for b in BUDGETS} for lang in LANGS} for name, by_budget in results.items()}
    per_kind = {name: {lang: {k: mean(by_budget[2000], [q for q in corpus.questions if q.lang == lang and q.kind == k])
                              for k in KINDS} for lang in LANGS} for name, by_budget in results.items()}
    out = Path(__file__).resolve().parent / "results" / "memory_bench.json"
    out.write_text(json.dumps({
        "args": dict(vars(args)), "messages": len(corpus.messages),
        "questions": len(corpus.questions), "recall": summary, "recall_2000_per_kind": per_kind,
        "per_question": {name: {str(b): cell for b, cell in by.items()} for name, by in results.items()},
        "latency": {row: {backend: {str(n): cell for n, cell in cells.items()} for backend, cells in by.items()}
                    for row, by in latency.items()},
        "import_s": extra["import_s"], "hilo_tokens_spent": extra["tokens_spent"], "rows": extra["rows"],
        "loadavg_start": load_start, "loadavg_end": load_end, "seconds": time.perf_counter() - t0,
    }, indent=2, default=str))
    print(f"\nran in {time.perf_counter() - t0:.0f} s; load average (1 min) {load_start[0]:.2f} at the start, "
          f"{load_end[0]:.2f} at the end ({os.cpu_count()} cores); wrote {out}")


if __name__ == "__main__":
    main()
