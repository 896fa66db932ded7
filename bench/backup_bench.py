"""`hilo backup` of a large database while `hilo serve` answers (not in bench/run: an operator's figure, not a goal
of issue 14).

    python bench/backup_bench.py [--people 1000] [--messages-per-person 1000] [--rounds 3] [--requests 400]

Seeds a SQLite database with `--people` x `--messages-per-person` messages (bench/corpus.py, as context_bench.py
does), starts the real `hilo serve` on it (echo model), and then, in rounds: the web API at concurrency 1 alone
(bench/web_load_gen.py, new visitors each time), and the same while `hilo backup` runs again and again beside it
(the command, a subprocess, as cron or the systemd timer runs it). Prints the backup's size and seconds (median
and slowest) and the web turns' requests/s, p50 and p99 without and with a backup running: what a backup costs
the people talking to hilo meanwhile (in WAL mode its read blocks no writer; it competes for the CPU and the
disk). Writes bench/results/backup.json.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script or with -m

from bench.corpus import import_all, language_of, seed_rows
from bench.procs import ROOT, compile_tree, free_port, hilo_env, hilo_serve
from bench.web_load import _gen, load
from memory.dialect_sqlite import SqliteStore


async def seed(db: Path, people: int, per_person: int) -> None:
    store = SqliteStore(db)
    await store.open()
    try:
        now = datetime.now(UTC)
        for k in range(people):
            await import_all(store, seed_rows(f"p{k}", per_person, now, random.Random(k), language_of(k)))
    finally:
        await store.close()


class Backups:
    """`hilo backup` run again and again in a thread until stopped; each run's seconds."""

    def __init__(self, db: Path, work: Path) -> None:
        self.db, self.work = db, work
        self.seconds: list[float] = []
        self.size_mb = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        env = hilo_env(self.db)
        while not self._stop.is_set():
            started = time.perf_counter()
            subprocess.run([sys.executable, "-m", "bot.cli", "backup", str(self.work / "backup.db")], env=env,
                           check=True, capture_output=True, cwd=self.work)
            self.seconds.append(time.perf_counter() - started)
            self.size_mb = (self.work / "backup.db").stat().st_size / 1e6

    def __enter__(self) -> Backups:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run(people: int, per_person: int, rounds: int, requests: int) -> dict[str, Any]:
    compile_tree(ROOT)
    with tempfile.TemporaryDirectory(prefix="hilo-backup-bench-") as tmp:
        work = Path(tmp)
        db = work / "hilo.db"
        t = time.perf_counter()
        asyncio.run(seed(db, people, per_person))
        seeded_s = time.perf_counter() - t
        port = free_port()
        alone: list[dict[str, Any]] = []
        beside: list[dict[str, Any]] = []
        runs: list[float] = []
        size = 0.0
        with hilo_serve(db, port):
            url = f"http://127.0.0.1:{port}"
            for r in range(rounds):
                for kind in ("alone", "beside"):
                    visitors = work / f"v-{r}-{kind}.json"
                    visitors.write_text(_gen("setup", "--url", url, "--visitors", "64", "--history", "6"))
                    if kind == "alone":
                        out = load(url, "/api/messages", 1, requests, visitors, r, False)
                        alone.append(out)
                    else:
                        with Backups(db, work) as backups:
                            while not backups.seconds:  # the first backup under way when the load starts
                                time.sleep(0.05)
                            out = load(url, "/api/messages", 1, requests, visitors, r, False)
                        beside.append(out)
                        runs.extend(backups.seconds)
                        size = backups.size_mb
                    print(f"round {r + 1} {kind:6} {out['rps']:7.1f} req/s  p50 {out['p50_ms']:6.2f} ms  p99 "
                          f"{out['p99_ms']:6.2f} ms  errors {out['errors']}", flush=True)
    return {
        "people": people, "messages_per_person": per_person, "seeded_s": round(seeded_s, 1),
        "backup_mb": round(size, 1), "backups": len(runs),
        "backup_s_p50": round(statistics.median(runs), 3), "backup_s_max": round(max(runs), 3),
        "alone": {k: round(statistics.median(x[k] for x in alone), 2) for k in ("rps", "p50_ms", "p99_ms")},
        "beside": {k: round(statistics.median(x[k] for x in beside), 2) for k in ("rps", "p50_ms", "p99_ms")},
        "errors": sum(x["errors"] for x in alone + beside),
        "loadavg": os.getloadavg(), "machine": f"{os.cpu_count()} cpus, {os.uname().sysname} {os.uname().release}",
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--people", type=int, default=1000)
    p.add_argument("--messages-per-person", type=int, default=1000)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--requests", type=int, default=400, help="web requests per run")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "backup.json")
    args = p.parse_args(argv)
    result = run(args.people, args.messages_per_person, args.rounds, args.requests)
    print(f"\nbackup of {result['people']:,} people x {result['messages_per_person']:,} messages: "
          f"{result['backup_mb']} MB, {result['backup_s_p50']} s median, {result['backup_s_max']} s slowest "
          f"({result['backups']} runs)")
    print("| web c=1 | req/s | p50 ms | p99 ms |\n|---|---:|---:|---:|")
    for kind in ("alone", "beside"):
        r = result[kind]
        print(f"| {'no backup' if kind == 'alone' else 'backups running'} | {r['rps']} | {r['p50_ms']} | "
              f"{r['p99_ms']} |")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
