"""bench/run's harness at its --quick sizes: the turn benchmark and the tokens benchmark run to their end (the turn
benchmark once hung: its baselines wrote unanswered messages into the conversation hilo's turns read, and each
turn waited for the turn lease's order cap) and the page names what they measured. No timings are asserted."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_bench_run_quick_measures_the_turn_and_the_tokens_beside_their_baselines(tmp_path: Path) -> None:
    out = tmp_path / "benchmarks.md"
    done = subprocess.run(
        [sys.executable, str(ROOT / "bench" / "report.py"), "--quick", "--only", "a,e", "--out", str(out)],
        cwd=ROOT, capture_output=True, text=True, timeout=600,
    )
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    page = out.read_text()
    assert "A `--quick` run" in page
    # every row of the turn table measured on both backends, beside the seed pattern, with the wire count
    for backend in ("sqlite", "postgres"):
        for row in ("hilo", "hilo +vec", "fts", "seed"):
            assert re.search(rf"^\| {backend} \| {re.escape(row)} \| \d+\.\d\d \|", page, re.M), (backend, row)
    first = r"\d+\.\d\d / \d+\.\d\d"  # a person's first turn since start (the warm-up): p50 / worst
    wire = re.search(rf"^\| postgres \| hilo \|(?:[^|]*\|){{8}} (\d+\.\d) \| - \| {first} \|$", page, re.M)
    # SQLite's turns say how many found their conversation's window kept (memory/windows.py); Postgres keeps none
    assert re.search(rf"^\| sqlite \| hilo \|(?:[^|]*\|){{9}} \d+% \| {first} \|$", page, re.M)
    assert wire is not None and float(wire.group(1)) > 0
    # the seed pattern: six queries, six round trips
    assert re.search(rf"^\| postgres \| seed \|(?:[^|]*\|){{8}} 6\.0 \| - \| {first} \|$", page, re.M)
    # the goals it can judge from these sections are judged, the others say so
    assert re.search(r"^\| pre-model p99, 1,000 x 1,000, sqlite \| \d+\.\d\d ms .*\| (yes|\*\*no\*\*) \|$", page, re.M)
    # the web turn's too (its rate limits counted with its message): the goal holds for both
    goal = re.search(r"^\| round trips per turn on the wire, Postgres \| (\d+\.\d) \(a web turn, its rate limits "
                     r"counted with it: (\d+\.\d)\) \| <= 8 \| (yes|\*\*no\*\*) \|$", page, re.M)
    assert goal is not None and float(goal.group(2)) > float(goal.group(1)) > 0
    assert goal.group(3) == ("yes" if max(float(goal.group(1)), float(goal.group(2))) <= 8 else "**no**")
    assert "## (d) Web API throughput\n\nNot run in this run." in page
    # tokens at turns 10, 30 and 50, hilo's within its budget, the full history above the 24-hour window
    rows = re.findall(r"^\| (10|30|50) \| ([\d,]+) \| ([\d,]+) \| ([\d,]+) \| (\d\.\d{3}) \|", page, re.M)
    assert [r[0] for r in rows] == ["10", "30", "50"]
    for _, hilo, full, window, _ in rows:
        assert 0 < int(hilo.replace(",", "")) <= 8000
        assert int(full.replace(",", "")) > int(window.replace(",", "")) > 0
