"""A web request's turn inside the stop budget (issue 12 item 6): never a 500 or a cut stream at SIGTERM.

After SIGTERM uvicorn waits for requests in flight for what the stop budget gives it (bot/shutdown.py), then
cancels them: a request whose turn waits for a slow model would end in a 500 (a stream: cut off). So the turn of
POST /api/messages runs as a tracked task (`runtime.tasks`, like the stream's), and the request waits for it or
for the budget's `requests_bound()`, whichever comes first; at the bound the answer is 503 with Retry-After and
the catalogue's "restarting_kept" (the message is stored: the turn goes on until the turns' drain, and what
cannot finish is answered by the recovery at the next start) or "restarting" (nothing was stored yet).
A client that goes away no longer cancels its turn either: the reply is stored and shows in the history.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from typing import Any

from bot.pipeline import Pipeline
from bot.runtime import Runtime
from kernel.errors import Draining, HiloError
from kernel.types import InboundMessage, Ingested, OutboundMessage


class TurnOverrun(HiloError):
    """The stop's bound came before the turn's answer; `key` is the catalogue text to answer 503 with."""

    def __init__(self, key: str) -> None:
        super().__init__(key)
        self.key = key


def bound_of(runtime: Runtime) -> asyncio.Future[None]:
    """When requests in flight must be answered (pending while no stop began)."""
    assert runtime.stop is not None  # Runtime.__post_init__ sets it
    return runtime.stop.requests_bound()


async def answer_within_stop(runtime: Runtime, pipeline: Pipeline, msg: InboundMessage,
                             limits: Sequence[tuple[str, int, int]] = ()) -> OutboundMessage:
    """`pipeline.handle(msg, limits=limits)`'s answer; TurnOverrun when the stop's bound comes first (or the daemon
    drains)."""
    stored: list[Ingested] = []

    async def on_ingested(turn: Ingested) -> None:
        stored.append(turn)

    async def run() -> OutboundMessage | HiloError:
        try:
            return await pipeline.handle(msg, on_ingested=on_ingested, limits=limits)
        except HiloError as exc:  # the request answers it (4xx, 503): the task set logs no failure for it
            return exc

    try:
        task = runtime.tasks.spawn(run(), name="web.turn")
    except Draining:
        raise TurnOverrun("restarting") from None
    bound: asyncio.Future[Any] = bound_of(runtime)
    done, _ = await asyncio.wait({task, bound}, return_when=asyncio.FIRST_COMPLETED)
    if task not in done:
        raise TurnOverrun("restarting_kept" if stored else "restarting")
    result: OutboundMessage | HiloError = task.result()
    if isinstance(result, HiloError):
        raise result
    return result
