"""Start-up and resident memory (issue 14 item f): `hilo context` and `hilo chat` start-to-answer, `hilo serve` RSS.

    python bench/startup_bench.py [--quick] [--runs 9] [--history 2000] [--src DIR] [--baseline DIR] [--out FILE]

A SQLite database is seeded (through `hilo import`) with one person, `ana`, with `--history` messages over
Telegram, WhatsApp and the web in everyday English and Spanish. Then, each in a fresh subprocess (`python -m
bot.cli ...`), timed from the spawn to its exit with the answer printed: `hilo context --user ana --surface
telegram MESSAGE` and `hilo chat --user ana --surface cli MESSAGE` (the echo model: no model key). Medians and
p99 of `--runs`, wall time and the process's CPU time (user + system: what a busy machine inflates less);
with `--baseline DIR` (another checkout, e.g. `git worktree add /tmp/base main`) the same
commands of that code run interleaved with ours (ours, theirs, ours, ...). Bytecode is compiled first, as an
installed package has it (this machine sets PYTHONDONTWRITEBYTECODE).

Resident memory (VmRSS) of `hilo serve` (the echo model): idle 3 s after /healthz answers, after the first web
turn, under load (the peak while 8 visitors send 200 messages: bench/web_load_gen.py), and idle with
HILO_EMBEDDER=local once the model loaded (at start) and the embed job embedded the seeded messages (what the
local embedder adds).
Writes bench/results/startup.json.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script (bench/run) or with -m

from bench.memory_filler import assistant_line, user_line
from bench.procs import ROOT, compile_tree, free_port, hilo_env, hilo_serve, rss_mb
from bench.web_load import RssSampler

QUESTION = "what did I tell you about my sister's trip?"


def seed(db: Path, history: int, src: Path) -> None:
    rng = random.Random(14)
    now = datetime.now(UTC)
    lines = []
    for i in range(history):
        lang = "es" if (i // 40) % 3 == 2 else "en"
        role = "user" if i % 2 == 0 else "assistant"
        lines.append(json.dumps({
            "user": "ana", "surface": ("telegram", "whatsapp", "web")[(i // 20) % 3], "role": role,
            "content": user_line(lang, rng) if role == "user" else assistant_line(lang, rng),
            "created_at": (now - timedelta(minutes=10 * (history - i))).isoformat(), "external_id": f"seed-{i}",
        }))
    jsonl = db.with_suffix(".jsonl")
    jsonl.write_text("\n".join(lines) + "\n")
    subprocess.run([sys.executable, "-m", "bot.cli", "import", str(jsonl)], env=hilo_env(db, src=src),
                   cwd=db.parent, check=True, capture_output=True)


def timed(argv: list[str], env: dict[str, str], cwd: Path) -> tuple[float, float]:
    """(wall s from spawn to exit, CPU s of the process: user + system, which a busy machine inflates less)."""
    with tempfile.TemporaryFile() as out, tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-m", "bot.cli", *argv], env=env, cwd=cwd, stdout=out, stderr=err)
        _, status, usage = os.wait4(proc.pid, 0)
        took = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        err.seek(0)
        if proc.returncode != 0 or not out.read().strip():
            raise RuntimeError(f"{argv[0]} failed ({proc.returncode}): {err.read()[-500:]!r}")
    return took, usage.ru_utime + usage.ru_stime


def _stats(xs: list[float]) -> dict[str, float]:
    xs = sorted(xs)
    return {"p50": round(statistics.median(xs), 4), "p99": round(xs[min(len(xs) - 1, int(len(xs) * 0.99))], 4),
            "min": round(xs[0], 4), "runs": len(xs)}


def commands(runs: int, history: int, trees: dict[str, Path], work: Path) -> dict[str, Any]:
    times: dict[str, dict[str, list[float]]] = {name: {"context": [], "chat": [], "context_cpu": [], "chat_cpu": []}
                                                for name in trees}
    dbs = {}
    for name, src in trees.items():
        compile_tree(src)
        db = work / f"{name}.db"
        seed(db, history, src)
        dbs[name] = db
    for i in range(runs):
        for name, src in trees.items():
            env = hilo_env(dbs[name], src=src)
            for cmd, argv in (("context", ["context", "--user", "ana", "--surface", "telegram", QUESTION]),
                              ("chat", ["chat", "--user", "ana", "--surface", "cli", f"{QUESTION} ({i})"])):
                wall, cpu = timed(argv, env, work)
                times[name][cmd].append(wall)
                times[name][f"{cmd}_cpu"].append(cpu)
    return {name: {f"{k}_s": _stats(v) for k, v in t.items()} for name, t in times.items()}


def first_turn(url: str) -> None:
    with httpx.Client(base_url=url, timeout=60) as client:
        token = client.post("/api/session").json()["session"]
        r = client.post("/api/messages", json={"text": QUESTION}, headers={"authorization": f"Bearer {token}"})
        r.raise_for_status()


def _gen(*args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "bench.web_load_gen", *args], env=env, check=True,
                          capture_output=True, text=True).stdout


def memory(src: Path, work: Path, history: int) -> dict[str, Any]:
    out: dict[str, Any] = {}
    db = work / "serve.db"
    seed(db, history, src)
    port = free_port()
    with hilo_serve(db, port, src=src) as proc:
        time.sleep(3)
        out["rss_idle_mb"] = round(rss_mb(proc.pid), 1)
        url = f"http://127.0.0.1:{port}"
        first_turn(url)
        time.sleep(1)
        out["rss_first_turn_mb"] = round(rss_mb(proc.pid), 1)
        vis = work / "visitors.json"
        vis.write_text(_gen("setup", "--url", url, "--visitors", "16", "--history", "4"))
        with RssSampler(proc.pid) as sampler:
            _gen("load", "--url", url, "--path", "/api/messages", "--concurrency", "8", "--requests", "200",
                 "--visitors", str(vis))
        out["rss_load_mb"] = round(sampler.peak, 1)
    local = work / "local.db"
    seed(local, 200, src)
    port = free_port()
    with hilo_serve(local, port, embedder="local", src=src) as proc:
        # the model loads at start on its thread (bot/app.py), and the embed job (due at start) embeds the 200
        # messages: wait for the resident size to settle
        last, stable, deadline = 0.0, 0, time.monotonic() + 90
        while stable < 6 and time.monotonic() < deadline:
            time.sleep(0.5)
            now = rss_mb(proc.pid)
            stable = stable + 1 if abs(now - last) < 0.5 else 0
            last = now
        out["rss_idle_embedder_mb"] = round(last, 1)
        first_turn(f"http://127.0.0.1:{port}")
        time.sleep(1)
        out["rss_first_turn_embedder_mb"] = round(rss_mb(proc.pid), 1)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--runs", type=int, default=9)
    p.add_argument("--history", type=int, default=2000, help="messages of the seeded person")
    p.add_argument("--src", type=Path, default=ROOT)
    p.add_argument("--baseline", type=Path, help="another checkout of hilo to time beside this one")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "startup.json")
    p.add_argument("--quick", action="store_true", help="a harness check: 3 runs, 300 messages")
    args = p.parse_args(argv)
    if args.quick:
        args.runs, args.history = 3, 300
    trees = {"hilo": args.src.resolve()}
    if args.baseline:
        trees["baseline"] = args.baseline.resolve()
    with tempfile.TemporaryDirectory(prefix="hilo-startup-") as tmp:
        work = Path(tmp)
        cmds = commands(args.runs, args.history, trees, work)
        result: dict[str, Any] = {**cmds["hilo"], **memory(trees["hilo"], work, args.history)}
        if args.baseline:
            (work / "baseline").mkdir()
            result["baseline"] = {**cmds["baseline"], **memory(trees["baseline"], work / "baseline", args.history)}
    result["history"], result["loadavg"] = args.history, os.getloadavg()
    result["machine"] = f"{os.cpu_count()} cpus, {os.uname().sysname} {os.uname().release}"
    rows = [("hilo context s", "context_s"), ("hilo chat s", "chat_s"), ("hilo context CPU s", "context_cpu_s"),
            ("hilo chat CPU s", "chat_cpu_s")]
    print("| figure | p50 | p99 |" + (" baseline p50 | baseline p99 |" if args.baseline else ""))
    print("|---|---:|---:|" + ("---:|---:|" if args.baseline else ""))
    for label, key in rows:
        line = f"| {label} | {result[key]['p50']} | {result[key]['p99']} |"
        if args.baseline:
            line += f" {result['baseline'][key]['p50']} | {result['baseline'][key]['p99']} |"
        print(line)
    for key in ("rss_idle_mb", "rss_first_turn_mb", "rss_load_mb", "rss_idle_embedder_mb",
                "rss_first_turn_embedder_mb"):
        print(f"| {key} | {result[key]} | |" + (f" {result['baseline'][key]} | |" if args.baseline else ""))
    print(f"load average {tuple(round(x, 2) for x in result['loadavg'])}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
