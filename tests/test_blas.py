"""numpy's BLAS runs on the calling thread in hilo's processes (kernel/blas.py): OpenBLAS's idle workers busy-waited
~125 ms of a core after every vector search and every question embedded. Each case is a fresh interpreter started
the way `hilo` starts (bot.cli.main), because OpenBLAS reads its thread count once, when numpy loads it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

PROBE = """
import json, sys
from bot import cli
assert cli.main(["migrate", "--db", sys.argv[1]]) == 0
import numpy as np
matrix = np.ones((1000, 512), dtype=np.float32)
matrix @ np.ones(512, dtype=np.float32)  # the person's vector search: memory/vectors.py
from threadpoolctl import threadpool_info
print(json.dumps([lib["num_threads"] for lib in threadpool_info() if lib["internal_api"] == "openblas"]))
"""


def blas_threads(tmp_path: Path, **env: str) -> list[int]:
    clean = {k: v for k, v in os.environ.items() if k not in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS")}
    done = subprocess.run([sys.executable, "-c", PROBE, f"sqlite:///{tmp_path / 'hilo.db'}"], cwd=ROOT,
                          env={**clean, **env}, capture_output=True, text=True, timeout=120, check=True)
    threads: list[int] = json.loads(done.stdout.strip().splitlines()[-1])
    return threads


def test_the_command_line_runs_blas_on_the_calling_thread(tmp_path: Path) -> None:
    # (OpenBLAS's own choice is a thread per core: 2 on the machines this runs on)
    assert blas_threads(tmp_path) == [1]


def test_an_operators_own_blas_setting_is_kept(tmp_path: Path) -> None:
    assert blas_threads(tmp_path, OPENBLAS_NUM_THREADS="2") == [2]
