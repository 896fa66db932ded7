"""Waiting for what another task, store or process does: a row, a counter, a request a fake received.

Those are not events of this loop, so they are polled (every 10 ms, for up to 20 s); nothing is slept on to
order events. `no_sleep` is a retry policy's sleep that waits for nothing."""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Callable
from typing import Any


async def wait_until(condition: Callable[[], Any], what: str, *, seconds: float = 20.0) -> None:
    """Return once `condition()` is true; AssertionError naming `what` when it never is (within `seconds`).
    `condition` may return an awaitable (a store read)."""
    for _ in range(round(seconds * 100)):
        found = condition()
        if inspect.isawaitable(found):
            found = await found
        if found:
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"never happened: {what}")


async def no_sleep(_: float) -> None:
    """RetryPolicy(sleep=no_sleep): retries at once, the test waits for no backoff."""
    return None
