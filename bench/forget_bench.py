"""Benchmark: `forget` of a person with many deliveries on SQLite, without and with migration 0009's indexes.

Builds one SQLite database: the person under test ("ana": --turns turns on Telegram, i.e. a message and a
reply each, stored through the store's own import; --parts delivery rows per reply, bulk-inserted) plus
--others people with a tenth of her history as noise. Then, side by side and interleaved, on fresh copies of
that file:

  0008     the schema before 0009: the copy with 0009's three indexes dropped (its row in schema_migrations
           kept, so that opening the store does not put them back)
  0009     the schema as migrated today
  upgrade  opening the store on the 0008 copy with 0009 not recorded: the time the migration itself takes

and times `store.forget("ana")` (one write transaction: ON DELETE CASCADE from the user row). Without
deliveries(message_id), every message deleted scans the deliveries table for the cascade, all of it under
SQLite's single write lock. Her own deliveries are gone by then (through deliveries(user_id)), so the cost is
her messages times everyone else's deliveries: with nobody else in the database the index changes nothing.
Prints medians of --repeat runs; writes bench/results/forget_bench.json. Not a test: nothing here asserts a time.

    python bench/forget_bench.py [--turns 15000] [--parts 2] [--others 1] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import closing
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import import_all
from memory.migrate import discover
from memory.open import open_store
from memory.store import ImportRow

#: What migrations/sqlite/0009_parity_indexes.sql creates, and its name.
INDEXES_0009 = ("messages_reply_to", "deliveries_message", "link_codes_identity")
MIGRATION_0009 = next(m.name for m in discover("sqlite") if m.name.startswith("0009_"))
TS = "2026-01-01T00:00:00.000000Z"


def history(handle: str, turns: int) -> list[ImportRow]:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    return [ImportRow(user=handle, surface="telegram", role=("user", "assistant")[i % 2],
                      content=f"message {i} of {handle} about the lighthouse", token_count=8,
                      created_at=start + timedelta(seconds=30 * i), external_id=f"{handle}-{i}")
            for i in range(2 * turns)]


async def build(path: Path, turns: int, parts: int, others: int) -> dict[str, int]:
    """The database: people through the store's import, then their deliveries by bulk SQL."""
    store = open_store(f"sqlite:///{path}")
    await store.open()
    try:
        people = {"ana": turns, **{f"person{k}": max(1, turns // 10) for k in range(others)}}
        for handle, count in people.items():
            await import_all(store, history(handle, count))
    finally:
        await store.close()
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        conn.execute("BEGIN")
        for part in range(1, parts + 1):
            conn.execute(
                "INSERT INTO deliveries(user_id, message_id, surface, recipient, part, parts, status, "
                "created_at, updated_at) SELECT user_id, id, surface, 'chat-' || user_id, ?, ?, 'sent', ?, ? "
                "FROM messages WHERE role = 'assistant' ORDER BY id", (part, parts, TS, TS),
            )
        conn.execute("COMMIT")
        counts = {t: conn.execute(f"SELECT count(*) FROM {t}").fetchone()[0] for t in ("messages", "deliveries")}
        ana = conn.execute("SELECT id FROM users WHERE handle = 'ana'").fetchone()[0]
        counts["ana_messages"] = conn.execute("SELECT count(*) FROM messages WHERE user_id = ?", (ana,)).fetchone()[0]
        counts["ana_deliveries"] = conn.execute(
            "SELECT count(*) FROM deliveries WHERE user_id = ?", (ana,)).fetchone()[0]
    return counts


def as_0008(path: Path, *, keep_record: bool) -> None:
    with closing(sqlite3.connect(path, isolation_level=None)) as conn:
        for name in INDEXES_0009:
            conn.execute(f"DROP INDEX {name}")
        if not keep_record:
            conn.execute("DELETE FROM schema_migrations WHERE name = ?", (MIGRATION_0009,))


async def timed_forget(path: Path) -> float:
    store = open_store(f"sqlite:///{path}")
    await store.open()
    try:
        t0 = time.perf_counter()
        forgotten = await store.forget("ana")
        elapsed = time.perf_counter() - t0
        assert forgotten and await store.user_id("ana") is None
    finally:
        await store.close()
    return elapsed


async def timed_upgrade(path: Path) -> float:
    store = open_store(f"sqlite:///{path}")
    t0 = time.perf_counter()
    await store.open()
    elapsed = time.perf_counter() - t0
    applied = store.applied
    await store.close()
    assert applied == [MIGRATION_0009], applied
    return elapsed


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--turns", type=int, default=15_000)
    ap.add_argument("--parts", type=int, default=2)
    ap.add_argument("--others", type=int, default=1)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    runs: dict[str, list[float]] = {"0008": [], "0009": [], "upgrade": []}
    with tempfile.TemporaryDirectory() as tmp:
        template = Path(tmp) / "template.db"
        counts = await build(template, args.turns, args.parts, args.others)
        for k in range(args.repeat):
            for variant in runs:
                copy = Path(tmp) / f"{variant}-{k}.db"
                shutil.copyfile(template, copy)
                if variant != "0009":
                    as_0008(copy, keep_record=variant == "0008")
                runs[variant].append(await (timed_upgrade(copy) if variant == "upgrade" else timed_forget(copy)))
                copy.unlink()
    median = {variant: statistics.median(times) for variant, times in runs.items()}
    print(f"ana: {counts['ana_messages']:,} messages, {counts['ana_deliveries']:,} deliveries; all: "
          f"{counts['messages']:,} messages, {counts['deliveries']:,} deliveries; median of {args.repeat} runs\n")
    print(f"{'':<44}{'seconds':>10}")
    print(f"{'forget, schema 0008 (no 0009 indexes)':<44}{median['0008']:>10.3f}")
    print(f"{'forget, schema 0009':<44}{median['0009']:>10.3f}")
    print(f"{'ratio 0008 / 0009':<44}{median['0008'] / median['0009']:>9.0f}x")
    print(f"{'upgrade: open applies 0009 to this database':<44}{median['upgrade']:>10.3f}")
    out = Path(__file__).resolve().parent / "results" / "forget_bench.json"
    out.write_text(json.dumps({**vars(args), **counts, "runs_s": runs, "median_s": median}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main())
