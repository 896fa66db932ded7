"""Benchmark: what streamed (chunked) request bodies far over the cap cost a running `hilo serve`.

Starts `hilo serve` on 127.0.0.1 (SQLite in a temporary directory, echo model), reads its resident memory
(/proc: VmRSS now, VmHWM the peak), then sends --concurrent chunked uploads of --mb MB each to a route and
reads the memory again. Each upload reads the answer while it sends (tests/fakes/chunked.py) and stops at
the answer, so "sent at answer" is how much the server took in before refusing. Prints a table; writes
bench/results/body_cap_bench.json. Not a test.

    python bench/body_cap_bench.py [--mb 200] [--concurrent 3] [--path /api/messages]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.fakes.chunked import Upload, chunked_upload
from tests.fakes.loopback import free_port


def memory_mb(pid: int) -> dict[str, float]:
    fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines() if ":" in line)
    return {k: int(fields[k].split()[0]) / 1024 for k in ("VmRSS", "VmHWM")}


def wait_ready(base: str, proc: subprocess.Popen[bytes]) -> None:
    for _ in range(300):
        if proc.poll() is not None:
            raise RuntimeError("hilo serve exited")
        try:
            if httpx.get(base + "/healthz").status_code == 200:
                return
        except httpx.TransportError:
            pass
        time.sleep(0.05)
    raise RuntimeError("hilo serve did not start")


async def uploads(port: int, args: argparse.Namespace) -> list[Upload]:
    return list(await asyncio.gather(*(
        chunked_upload("127.0.0.1", port, args.path, args.mb * 1024 * 1024) for _ in range(args.concurrent))))


def run(args: argparse.Namespace) -> dict[str, object]:
    port = free_port()
    with tempfile.TemporaryDirectory() as tmp:
        env = {**os.environ, "HILO_DATABASE_URL": f"sqlite:///{tmp}/hilo.db", "HILO_SECRET_KEY": "bench",
               "HILO_MODEL": "echo", "PYTHONPATH": str(ROOT)}
        proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "serve", "--host", "127.0.0.1", "--port",
                                 str(port)], env=env, cwd=tmp, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            wait_ready(f"http://127.0.0.1:{port}", proc)
            before = memory_mb(proc.pid)
            started = time.perf_counter()
            done = asyncio.run(uploads(port, args))
            elapsed = time.perf_counter() - started
            after = memory_mb(proc.pid)
        finally:
            proc.terminate()
            proc.wait(timeout=30)
    return {"path": args.path, "mb_each": args.mb, "concurrent": args.concurrent,
            "statuses": [u.status for u in done],
            "sent_at_answer_mb": [round(u.sent_at_answer / 2**20, 1) for u in done],
            "rss_before_mb": round(before["VmRSS"], 1), "rss_after_mb": round(after["VmRSS"], 1),
            "peak_rss_mb": round(after["VmHWM"], 1), "seconds": round(elapsed, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--mb", type=int, default=200)
    parser.add_argument("--concurrent", type=int, default=3)
    parser.add_argument("--path", default="/api/messages")
    result = run(parser.parse_args())
    width = max(len(k) for k in result)
    for key, value in result.items():
        print(f"{key:<{width}}  {value}")
    out = ROOT / "bench" / "results" / "body_cap_bench.json"
    out.write_text(json.dumps(result, indent=2) + "\n")


if __name__ == "__main__":
    main()
