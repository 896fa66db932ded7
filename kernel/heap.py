"""The process heap after start: what the cyclic garbage collector need not walk again.

CPython's full (oldest-generation) collection walks every tracked container the process holds: the modules, the
classes and the configuration a daemon built at start, which live as long as it does. A turn allocates enough to
set one off every few dozen turns, and it lands inside whatever turn is running: at 1,000 people x 1,000 messages
on Postgres, the three slowest of 200 turns each spent 11-15 ms in the collector (gc.callbacks around a turn loop
as bench/context_bench.py runs it), against a turn's p50 of about 12 ms. `settle` moves what start built into
the permanent generation (gc.freeze) after one collection of start's own garbage: the collections that follow
walk only what the turns since made (1.1 ms at that p99 instead of 11.7-23.3).

Nothing is leaked: a frozen object that becomes garbage is still freed by its reference count; only a cycle among
frozen objects would stay (start's objects live for the whole process anyway).

What the turns keep (the conversation windows, the caches) grows the heap the full collections walk again, and
CPython's young generation is collected every 700 allocations: a turn set off about one young collection, and one
in ~150 turns a full one of 6-8 ms, at 200 people x 1,000 messages with the conversation windows kept (SQLite, the
local embedder: 10 full collections in 1,260 turns, each in the bench's slowest 2%). `settle` also lets the young
generation hold YOUNG allocations before a collection, as servers do: most of a turn's temporaries are freed by
their reference counts before one runs, fewer survive to be walked again, and the collector's time per turn went
0.22-0.47 -> 0.02-0.06 ms, with one full collection in those 1,260 turns instead of 10 (two runs of each, back to
back). A cycle of garbage waits a little longer to be freed: at most YOUNG allocations. A turn itself leaves
no cycles for the collector (tests/test_reference_cycles.py): what only the collector frees, it frees in one pause
(2-6 ms for a few thousand objects) inside whatever turn runs then (docs/architecture.md, stop 47).
"""

from __future__ import annotations

import gc

#: Allocations (minus deallocations) of tracked objects before a young collection; CPython's default is 700. The
#: older generations keep their thresholds (10, 10): a full collection still follows the same count of young ones.
YOUNG = 10_000


def settle() -> int:
    """Collect start's garbage, then freeze what is left out of later collections, and collect the young generation
    every YOUNG allocations instead of 700; how many objects were frozen.
    Called once the process is up (the daemon: its components started; a benchmark: as the daemon, before its
    timed turns)."""
    gc.collect()
    gc.freeze()
    _, middle, old = gc.get_threshold()
    gc.set_threshold(YOUNG, middle, old)
    return gc.get_freeze_count()
