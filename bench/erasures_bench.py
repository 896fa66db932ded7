"""What the record of erasures (bot/erasures.py) adds to a start of `hilo serve`, on SQLite, at several numbers of
people: the walk over everyone that looks for the people the record lists, and the start that skips it.

    python bench/erasures_bench.py [--people 1000,100000] [--entries 100] [--memories 100] [--rounds 5]

Each size is a fresh database: `--people` people, each with one Telegram identity (written straight into the
migrated schema, as an import would), and a record of `--entries` erasures of people who are not there and
`--memories` of single memories that are not there (each looked up by its ids: no walk). Timed, in
`--rounds` interleaved rounds, each as a start runs it (Erasures.reapply):
- walk: the database's mark of the record cleared first, as after a restore (or after new erasures): every person
  read and digested, nobody found;
- marked: the mark already at the record's newest erasure (every start after that one): one row read;
- no record: no file (a deployment that never forgot anyone).
Prints a line per size (medians, and the slowest walk); writes bench/results/erasures.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sqlite3
import statistics
import sys
import tempfile
import time
from contextlib import closing
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script (bench/run) or with -m

from bench.procs import ROOT
from bot.erasures import Erasures
from memory.open import open_store


def _seed(db: Path, people: int) -> None:
    with closing(sqlite3.connect(db)) as conn:
        now = "2026-01-01T00:00:00.000000Z"
        conn.executemany("INSERT INTO users(id, handle, created_at) VALUES (?, ?, ?)",
                         ((n, f"telegram:{n}", now) for n in range(1, people + 1)))
        conn.executemany("INSERT INTO identities(surface, external_user_id, user_id, created_at) VALUES (?, ?, ?, ?)",
                         (("telegram", str(n), n, now) for n in range(1, people + 1)))
        conn.commit()


async def _measure(work: Path, people: int, entries: int, memories: int, rounds: int) -> dict[str, Any]:
    db = work / f"p{people}.db"
    store = open_store(f"sqlite:///{db}")
    await store.open()
    await store.close()
    _seed(db, people)
    record = Erasures(work / f"p{people}.erasures.jsonl")
    for n in range(entries):
        await record.note(f"gone:{n}", [("telegram", f"gone{n}")])
    for n in range(memories):
        await record.note_memory(people + n, n + 1)
    absent = Erasures(work / "none.jsonl")
    store = open_store(f"sqlite:///{db}")
    await store.open()
    try:
        async def nobody(handle: str) -> None:
            raise AssertionError(f"{handle} is not listed")

        walks, marked, skips = [], [], []
        for _ in range(rounds):
            with closing(sqlite3.connect(db)) as conn, conn:
                conn.execute("DELETE FROM erasure_marks")  # as a restored backup from before the record holds it
            for times, which in ((walks, record), (marked, record), (skips, absent)):
                began = time.perf_counter()
                assert await which.reapply(store, nobody) == 0
                times.append(time.perf_counter() - began)
    finally:
        await store.close()
    return {"people": people, "entries": entries, "memories": memories,
            "walk_p50_ms": round(statistics.median(walks) * 1000, 1),
            "walk_max_ms": round(max(walks) * 1000, 1), "marked_ms": round(statistics.median(marked) * 1000, 3),
            "no_record_ms": round(statistics.median(skips) * 1000, 3)}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--people", default="1000,100000", help="comma list of database sizes")
    p.add_argument("--entries", type=int, default=100, help="people the record lists")
    p.add_argument("--memories", type=int, default=100, help="single memories the record lists")
    p.add_argument("--rounds", type=int, default=5)
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "erasures.json")
    args = p.parse_args(argv)
    rows = []
    with tempfile.TemporaryDirectory(prefix="hilo-erasures-") as tmp:
        for people in (int(x) for x in args.people.split(",")):
            rows.append(asyncio.run(_measure(Path(tmp), people, args.entries, args.memories, args.rounds)))
            r = rows[-1]
            print(f"{r['people']:>9,} people, {r['entries']} + {r['memories']} entries: walk p50 "
                  f"{r['walk_p50_ms']} ms (slowest {r['walk_max_ms']}), marked {r['marked_ms']} ms, "
                  f"no record {r['no_record_ms']} ms", flush=True)
    out = {"rows": rows, "machine": f"{os.cpu_count()} cpus, {os.uname().sysname} {os.uname().release}"}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(out, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
