"""A turn leaves no reference cycles behind.

An object in a cycle is freed only by the cyclic collector, and the collector frees a few thousand of them in one
pause (2-6 ms) inside whatever turn runs then: tenacity's loop around every streamed answer left 47 objects a
turn, a collection every ~200 streamed turns of `hilo serve`; bench/context_bench.py's in-process HTTP client left
~25 a request, and their collections were the slowest of hilo's pre-model turns (docs/architecture.md, stop 47).
Each test runs its turns after a warm-up with gc.DEBUG_SAVEALL, which keeps in gc.garbage whatever the collector
would have freed, and expects nothing there.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from bot.config import Settings
from bot.models.factory import build_chain
from bot.pipeline import Pipeline
from kernel.types import InboundMessage


@contextmanager
def cycles() -> Iterator[list[str]]:
    """The types of what the collector would free of the objects made inside the block (filled at its end)."""
    gc.collect()
    found: list[str] = []
    gc.set_debug(gc.DEBUG_SAVEALL)
    try:
        yield found
        gc.collect()
        found.extend(sorted({f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage}))
    finally:
        gc.set_debug(0)
        gc.garbage.clear()


def message(n: int) -> InboundMessage:
    return InboundMessage(surface="telegram", sender="42", external_id=f"m{n}", text=f"my dog Rufo walked {n} km")


async def test_a_turn_answered_at_once_or_streamed_leaves_no_reference_cycles(store: Any) -> None:
    settings = Settings()
    pipeline = Pipeline(settings, store, build_chain(settings))
    shown: list[str] = []

    async def sink(delta: str, final: bool) -> None:
        shown.append(delta)

    await pipeline.handle(message(0))  # caches filled, modules imported
    await pipeline.handle(message(1), on_delta=sink)
    with cycles() as found:
        for n in range(2, 5):
            assert (await pipeline.handle(message(n))).status == "ok"
            assert (await pipeline.handle(message(n + 10), on_delta=sink)).status == "ok"
    assert found == []
    assert "Rufo walked 12 km" in "".join(shown)  # the streamed turns did stream
