"""bench/turn_instructions.py's driver: the in-process web turns it counts instructions of are real, answered turns."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def test_the_driver_answers_every_turn_through_the_real_app() -> None:
    # the set-up (16 visitors x 6 turns) and then 40 turns, each a 200 from /api/messages with its conversation
    done = subprocess.run([sys.executable, "-m", "bench.turn_instructions", "--drive", "--turns", "40"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "40 turns answered"
