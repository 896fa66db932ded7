"""A turn leaves no reference cycles behind.

An object in a cycle is freed only by the cyclic collector, and the collector frees a few thousand of them in one
pause (2-6 ms) inside whatever turn runs then: tenacity's loop around every streamed answer left 47 objects a
turn, a collection every ~200 streamed turns of `hilo serve`; bench/context_bench.py's in-process HTTP client left
~25 a request, and their collections were the slowest of hilo's pre-model turns (docs/architecture.md, stop 47).
The turns run in a process of their own (this module as a script): gc.DEBUG_SAVEALL keeps in gc.garbage whatever the
collector would have freed, of every thread, and in the test process the fake servers' threads close other tests'
connections meanwhile (asyncio's transport and socket refer to each other).
"""

from __future__ import annotations

import asyncio
import gc
import json
import subprocess
import sys
from pathlib import Path
from typing import Any

from tests.backends import Backend

ROOT = Path(__file__).resolve().parent.parent


async def _turns(url: str) -> dict[str, Any]:
    """Two warm-up turns, then three answered at once and three streamed under gc.DEBUG_SAVEALL: the types of what
    the collector would have freed, and the text the streamed turns showed."""
    from bot.config import Settings
    from bot.models.factory import build_chain
    from bot.pipeline import Pipeline
    from kernel.types import InboundMessage
    from memory.open import open_store

    def message(n: int) -> InboundMessage:
        return InboundMessage(surface="telegram", sender="42", external_id=f"m{n}", text=f"my dog Rufo walked {n} km")

    shown: list[str] = []

    async def sink(delta: str, final: bool) -> None:
        shown.append(delta)

    store = open_store(url)
    await store.open()
    try:
        settings = Settings()
        pipeline = Pipeline(settings, store, build_chain(settings))
        await pipeline.handle(message(0))  # caches filled, modules imported
        await pipeline.handle(message(1), on_delta=sink)
        statuses = []
        gc.collect()
        gc.set_debug(gc.DEBUG_SAVEALL)
        for n in range(2, 5):
            statuses.append((await pipeline.handle(message(n))).status)
            statuses.append((await pipeline.handle(message(n + 10), on_delta=sink)).status)
        gc.collect()
        gc.set_debug(0)
        left = sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage})
    finally:
        await store.close()
    return {"left": left, "statuses": statuses, "shown": "".join(shown)}


def test_a_turn_answered_at_once_or_streamed_leaves_no_reference_cycles(backend: Backend) -> None:
    done = subprocess.run([sys.executable, "-m", "tests.test_reference_cycles", backend.url], cwd=ROOT,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-2000:]
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert found["statuses"] == ["ok"] * 6
    assert found["left"] == []
    assert "Rufo walked 12 km" in found["shown"]  # the streamed turns did stream


if __name__ == "__main__":
    print(json.dumps(asyncio.run(_turns(sys.argv[1]))))
