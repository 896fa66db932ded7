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
"""

from __future__ import annotations

import gc


def settle() -> int:
    """Collect start's garbage, then freeze what is left out of later collections; how many objects were frozen.
    Called once the process is up (the daemon: its components started; a benchmark: as the daemon, before its
    timed turns)."""
    gc.collect()
    gc.freeze()
    return gc.get_freeze_count()
