"""Web API throughput (issue 14 item d): the real `hilo serve` against a bare Starlette endpoint doing one insert,
and against the seed pattern behind the same API (the field's one awaited query per step).

    python bench/web_load.py [--quick] [--requests 400] [--rounds 2] [--visitors 64] [--history 6]
                              [--baseline DIR] [--out FILE]

All three are subprocesses on 127.0.0.1 under the same uvicorn (bench/procs.py). The seed endpoint
(bench/web_load_gen.py `seed`) is what a peer project's turn does (docs/architecture.md, "Performance budget"): the
person's conversations, their last 24 h, get-or-create the conversation, insert the message, the zero-latency
model's answer, insert the reply, update the conversation, one awaited query each; it keeps no index, reads no
long-term memory and verifies no signed session, so it is the ceiling of that pattern, not of hilo's work. hilo runs
with the `echo` model: it is what a fresh install answers with (no model key), it has no network latency, and it is
the one model `hilo serve` can run without code of the bench's inside it; its own work (rendering what it received,
counting the reply's tokens) is part of what is measured. Each request comes from a web visitor with a session token
of its own (POST /api/session, the widget's way) and a conversation of its own that already holds `--history`
answered turns (new visitors for each row and round: the conversations do not grow from row to row); worker w of C
sends as visitors w, w + C, ... so no two requests in flight share a conversation. The load generator
(bench/web_load_gen.py: httpx, keep-alive, its own process; two processes splitting the workers from concurrency 8
up, as one tops out near 1,100 requests/s) sends a fixed count of requests per run at concurrency 1, 8 and 32,
interleaved (bare, seed, hilo per row and round), and reports its own CPU share (near 1.0 would mean it, not the
server, is the limit). The streaming rows post to /api/messages/stream (surfaces/web_stream.py) and read every event
to `done`; the bare one inserts and streams three events. With `--baseline DIR` (another checkout, e.g. `git
worktree add --detach /tmp/base main`) that code's `hilo serve` runs too, last in each row and round, so before and
after are measured side by side on a noisy machine. Resident memory of the hilo server is sampled during its runs
(startup_bench.py reads it as `rss_load_mb`).
Writes bench/results/web_load.json.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # run as a script (bench/run) or with -m

from bench.procs import ROOT, compile_tree, endpoint_serve, free_port, hilo_serve, rss_mb

ROWS = (("c1", "/api/messages", 1), ("c8", "/api/messages", 8), ("c32", "/api/messages", 32),
        ("stream_c1", "/api/messages/stream", 1), ("stream_c8", "/api/messages/stream", 8))


def _gen(*args: str) -> str:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run([sys.executable, "-m", "bench.web_load_gen", *args], env=env, check=True,
                          capture_output=True, text=True).stdout


#: Generator processes per run at concurrency >= 8: one httpx process tops out near 1,100 requests/s (its CPU
#: share reaches 1.0 against the bare endpoint), so the load is split between two, each with half the workers,
#: half the requests and its own half of the visitors.
GEN_PROCS = 2


def load(url: str, path: str, c: int, requests: int, visitors: Path, seed: int, stream: bool) -> dict[str, Any]:
    """One run: `requests` requests by `c` workers, from GEN_PROCS processes at once when c >= 8."""
    procs = GEN_PROCS if c >= 8 else 1
    everyone = json.loads(visitors.read_text())
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    running = []
    for k in range(procs):
        part = visitors.with_name(f"{visitors.stem}.{k}-of-{procs}.json")
        part.write_text(json.dumps(everyone[k::procs]))
        argv = [sys.executable, "-m", "bench.web_load_gen", "load", "--url", url, "--path", path, "--concurrency",
                str(c // procs), "--requests", str(requests // procs), "--visitors", str(part), "--seed",
                str(seed * 10 + k), *(["--stream"] if stream else [])]
        running.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, text=True))
    outs = []
    for proc in running:
        stdout, _ = proc.communicate()
        if proc.returncode:
            raise RuntimeError(f"the load generator failed ({proc.returncode})")
        outs.append(json.loads(stdout))
    n = sum(o["requests"] for o in outs)
    wall = max(o["seconds"] for o in outs)
    # percentiles of the parts weighed alike (each part is half the requests); the worst p99 of the parts
    return {"requests": n, "errors": sum(o["errors"] for o in outs), "seconds": wall, "rps": n / wall,
            "p50_ms": statistics.median(o["p50_ms"] for o in outs), "p99_ms": max(o["p99_ms"] for o in outs),
            "gen_cpu_frac": max(o["gen_cpu_frac"] for o in outs), "gen_procs": procs}


class RssSampler:
    """The largest VmRSS of `pid` while running (every 50 ms)."""

    def __init__(self, pid: int) -> None:
        self.pid, self.peak = pid, 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            self.peak = max(self.peak, rss_mb(self.pid))

    def __enter__(self) -> RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def run(requests: int, rounds: int, visitors: int, history: int, src: Path,
        baseline: Path | None = None) -> dict[str, Any]:
    compile_tree(src)
    if baseline is not None:
        compile_tree(baseline)
    with tempfile.TemporaryDirectory(prefix="hilo-web-load-") as tmp, contextlib.ExitStack() as stack:
        work = Path(tmp)
        hp, bp, sp, basep = free_port(), free_port(), free_port(), free_port()
        who_all = ("bare", "seed", "hilo", "baseline") if baseline is not None else ("bare", "seed", "hilo")
        results: dict[str, dict[str, list[dict[str, Any]]]] = {row: {w: [] for w in who_all} for row, _, _ in ROWS}
        hilo = stack.enter_context(hilo_serve(work / "hilo.db", hp, src=src))
        stack.enter_context(endpoint_serve("bare", work / "bare.db", bp))
        stack.enter_context(endpoint_serve("seed", work / "seed.db", sp))
        if baseline is not None:
            (work / "baseline").mkdir()
            stack.enter_context(hilo_serve(work / "baseline" / "hilo.db", basep, src=baseline))
        idle = rss_mb(hilo.pid)
        hurl, burl, surl = f"http://127.0.0.1:{hp}", f"http://127.0.0.1:{bp}", f"http://127.0.0.1:{sp}"
        basel = f"http://127.0.0.1:{basep}"

        def fresh(url: str, name: str) -> Path:
            """Visitors of their own for one row and round, each conversation holding `history` answered turns:
            reused, the conversations would grow with every row (by requests / visitors turns a run), and a
            turn's context with them, so the later rows would measure longer conversations than the first."""
            out = work / f"{name}.json"
            out.write_text(_gen("setup", "--url", url, "--visitors", str(visitors), "--history", str(history)))
            return out

        after_setup = 0.0
        peak = 0.0
        for r in range(rounds):
            for row, path, c in ROWS:
                stream = ["--stream"] if "stream" in row else []
                vis = fresh(hurl, f"hilo-{r}-{row}")
                after_setup = after_setup or rss_mb(hilo.pid)
                targets = [("bare", burl, "/stream" if stream else "/messages", vis),
                           ("seed", surl, path, fresh(surl, f"seed-{r}-{row}")), ("hilo", hurl, path, vis)]
                if baseline is not None:
                    targets.append(("baseline", basel, path, fresh(basel, f"baseline-{r}-{row}")))
                for who, url, p, vfile in targets:
                    if who == "hilo":
                        with RssSampler(hilo.pid) as sampler:
                            out = load(url, p, c, requests, vfile, r, bool(stream))
                        peak = max(peak, sampler.peak)
                    else:
                        out = load(url, p, c, requests, vfile, r, bool(stream))
                    results[row][who].append(out)
                    print(f"round {r + 1} {row:10} {who:8} {out['rps']:8.1f} req/s  p50 {out['p50_ms']:7.1f} ms"
                          f"  p99 {out['p99_ms']:7.1f} ms  errors {out['errors']}  gen cpu "
                          f"{out['gen_cpu_frac']:.2f}", flush=True)
    summary: dict[str, Any] = {}
    for row, _, c in ROWS:
        bare, seed, hilo_runs = results[row]["bare"], results[row]["seed"], results[row]["hilo"]
        b = statistics.median(x["rps"] for x in bare)
        sd = statistics.median(x["rps"] for x in seed)
        h = statistics.median(x["rps"] for x in hilo_runs)
        summary[row] = {
            "concurrency": c, "bare_rps": round(b, 1), "hilo_rps": round(h, 1), "ratio": round(h / b, 3),
            "seed_rps": round(sd, 1), "seed_ratio": round(sd / b, 3), "hilo_vs_seed": round(h / sd, 3),
            "seed_p50_ms": round(statistics.median(x["p50_ms"] for x in seed), 2),
            "bare_p50_ms": round(statistics.median(x["p50_ms"] for x in bare), 2),
            "bare_p99_ms": round(statistics.median(x["p99_ms"] for x in bare), 2),
            "hilo_p50_ms": round(statistics.median(x["p50_ms"] for x in hilo_runs), 2),
            "hilo_p99_ms": round(statistics.median(x["p99_ms"] for x in hilo_runs), 2),
            "hilo_errors": sum(x["errors"] for x in hilo_runs), "bare_errors": sum(x["errors"] for x in bare),
            "seed_errors": sum(x["errors"] for x in seed),
            "gen_cpu_frac_bare": round(max(x["gen_cpu_frac"] for x in bare), 2),
            "runs": results[row],
        }
        if baseline is not None:
            base = statistics.median(x["rps"] for x in results[row]["baseline"])
            summary[row].update(baseline_rps=round(base, 1), baseline_ratio=round(base / b, 3),
                                baseline_p50_ms=round(statistics.median(x["p50_ms"] for x in results[row]["baseline"]),
                                                      2))
    summary["model"] = "echo"
    summary["requests_per_run"], summary["rounds"] = requests, rounds
    summary["visitors"], summary["history_turns"] = visitors, history
    summary["rss_idle_mb"], summary["rss_after_setup_mb"] = round(idle, 1), round(after_setup, 1)
    summary["rss_load_mb"] = round(peak, 1)
    summary["loadavg"] = os.getloadavg()
    summary["machine"] = f"{os.cpu_count()} cpus, {os.uname().sysname} {os.uname().release}"
    return summary


def table(s: dict[str, Any]) -> str:
    base = "baseline_rps" in s["c1"]
    lines = ["| row | bare req/s | seed req/s | hilo req/s | hilo / bare | seed / bare | hilo / seed | hilo p50 ms | "
             "hilo p99 ms | bare p50 ms | gen CPU |" + (" baseline req/s | baseline / bare |" if base else ""),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if base else "")]
    for row, _, _ in ROWS:
        r = s[row]
        lines.append(f"| {row} | {r['bare_rps']} | {r['seed_rps']} | {r['hilo_rps']} | {r['ratio']}x | "
                     f"{r['seed_ratio']}x | {r['hilo_vs_seed']}x | {r['hilo_p50_ms']} | "
                     f"{r['hilo_p99_ms']} | {r['bare_p50_ms']} | {r['gen_cpu_frac_bare']} |"
                     + (f" {r['baseline_rps']} | {r['baseline_ratio']}x |" if base else ""))
    lines.append(f"\nhilo RSS: idle {s['rss_idle_mb']} MB, after setup {s['rss_after_setup_mb']} MB, peak under "
                 f"load {s['rss_load_mb']} MB; load average {tuple(round(x, 2) for x in s['loadavg'])}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("--requests", type=int, default=400, help="requests per run")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--visitors", type=int, default=64)
    p.add_argument("--history", type=int, default=6, help="answered turns in each visitor's conversation")
    p.add_argument("--src", type=Path, default=ROOT, help="the hilo checkout to run (a baseline's, to compare)")
    p.add_argument("--baseline", type=Path, help="another checkout (e.g. main's): its hilo serve runs beside ours, "
                   "interleaved (bare, hilo, baseline per row and round)")
    p.add_argument("--out", type=Path, default=ROOT / "bench" / "results" / "web_load.json")
    p.add_argument("--quick", action="store_true", help="a harness check: 60 requests per run, 1 round, 16 visitors")
    args = p.parse_args(argv)
    if args.quick:
        args.requests, args.rounds, args.visitors, args.history = 60, 1, 16, 3
    summary = run(args.requests, args.rounds, args.visitors, args.history, args.src.resolve(),
                  args.baseline.resolve() if args.baseline else None)
    print(table(summary))
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(summary, indent=2) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
