"""numpy's BLAS on the calling thread: what a daemon whose parallelism is its turns wants from it.

numpy ships OpenBLAS, which starts a worker thread per core and splits even one small product among them: the
person's vector search (a 1,000 x 512 float32 matrix times the question's vector, memory/vectors.py) and the
local embedder's forward pass of one question (bot/embedders/local.py). After each call every worker busy-waits
for the next one, about 125 ms of a core each time (process CPU over 200 ms of idleness after one such product:
128 ms, 0.1 with one thread). On a 2-core machine every turn with vectors left a core spinning while the turn's
own work, the next turns and the database on the same machine waited for CPU: bench/context_bench.py at 100 x
1,000 on Postgres, two runs each, "hilo +vec" context p99 22.98 and 22.83 ms with the workers, 17.21 and 19.69
without. One thread embeds one question in 1.46 ms instead of 1.21 and a batch of 256 messages at 1,766/s
instead of 2,324 (`hilo embed`, the backfill: work in the background, which now leaves the other cores to the
turns).

OpenBLAS reads OPENBLAS_NUM_THREADS once, when numpy loads it: `calm` must run before anything imports numpy
(the command line's first step; numpy loads with the first vector). An operator's own setting is kept.
"""

from __future__ import annotations

import os

#: What OpenBLAS reads at load. (The e5 model's C engine runs on OpenMP: bot/embedders/local.py sets its threads.)
THREADS = "OPENBLAS_NUM_THREADS"


def calm() -> None:
    """One BLAS thread for this process, unless its environment already says how many (call before numpy loads)."""
    os.environ.setdefault(THREADS, "1")
