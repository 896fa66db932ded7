"""Benchmark: `hilo import` throughput (lines per second), first import and an idempotent re-import.

Writes a JSONL file of N lines (several people, surfaces and web conversations), imports it into a fresh
SQLite database through the same code as the CLI (parse + validate + token count + batched insert), then
imports it again (every line skipped). Prints a table of medians over --repeat runs; writes
bench/results/import_bench.json. Not a test.

    python bench/import_bench.py [--lines 20000] [--repeat 3]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench.corpus import sentence
from memory.importer import import_file
from memory.open import open_store


def write_file(path: Path, lines: int, rng: random.Random) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with path.open("w") as fh:
        for i in range(lines):
            surface = ("telegram", "whatsapp", "web")[i % 3]
            row = {"user": f"person{i % 40}", "surface": surface, "role": ("user", "assistant")[i % 2],
                   "content": sentence(rng), "created_at": (start + timedelta(seconds=i * 30)).isoformat(),
                   "external_id": f"imp-{i}"}
            if surface == "web":
                row["conversation"] = f"c{i // 300}"
            fh.write(json.dumps(row) + "\n")


async def one_run(path: Path, tmp: str, k: int) -> tuple[float, float, int, int]:
    store = open_store(f"sqlite:///{tmp}/import{k}.db")
    await store.open()
    t0 = time.perf_counter()
    first = await import_file(store, path)
    t1 = time.perf_counter()
    again = await import_file(store, path)
    t2 = time.perf_counter()
    await store.close()
    return t1 - t0, t2 - t1, first.inserted, again.skipped


async def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=20_000)
    ap.add_argument("--repeat", type=int, default=3)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.jsonl"
        write_file(path, args.lines, random.Random(3))
        runs = [await one_run(path, tmp, k) for k in range(args.repeat)]
    first = statistics.median(r[0] for r in runs)
    again = statistics.median(r[1] for r in runs)
    assert all(r[2] == args.lines and r[3] == args.lines for r in runs)
    print(f"{args.lines:,} lines, median of {args.repeat} runs\n")
    print(f"{'':<22}{'seconds':>10}{'lines/s':>12}")
    print(f"{'first import':<22}{first:>10.2f}{args.lines / first:>12,.0f}")
    print(f"{'re-import (skipped)':<22}{again:>10.2f}{args.lines / again:>12,.0f}")
    out = Path(__file__).resolve().parent / "results" / "import_bench.json"
    out.write_text(json.dumps({"lines": args.lines, "first_s": first, "reimport_s": again,
                               "first_lines_per_s": args.lines / first, "reimport_lines_per_s": args.lines / again},
                              indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    asyncio.run(main())
