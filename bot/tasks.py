"""Tracked background tasks: every task the daemon starts is kept in a set, and drained on shutdown.

Webhooks acknowledge at once and run the turn here; nothing is fire-and-forget, so a shutdown (SIGTERM from
PM2 or systemd) waits for turns in flight instead of dropping them.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Coroutine
from typing import Any

from kernel import log
from kernel.errors import Draining

logger = log.get("hilo.tasks")


class TaskSet:
    def __init__(self) -> None:
        self._tasks: dict[asyncio.Task[Any], float] = {}  # task -> when it was spawned (monotonic)
        self._closed = False

    def spawn(self, coro: Coroutine[Any, Any, Any], *, name: str) -> asyncio.Task[Any]:
        """Start `coro` as a tracked task. Its failure is logged (ids only), never lost silently. Draining (and
        `coro` closed, never run) once `drain()` has begun."""
        if self._closed:
            coro.close()
            raise Draining("the task set is draining: no new work is accepted")
        task = asyncio.create_task(coro, name=name)
        self._tasks[task] = time.monotonic()
        task.add_done_callback(self._done)
        return task

    def _done(self, task: asyncio.Task[Any]) -> None:
        self._tasks.pop(task, None)
        if not task.cancelled() and task.exception() is not None:
            exc = task.exception()
            logger.error("task.failed", task=task.get_name(), error=type(exc).__name__)

    def __len__(self) -> int:
        return len(self._tasks)

    async def drain(self, timeout: float = 30.0) -> None:
        """Stop accepting work, wait up to `timeout` s for tasks in flight, then cancel the rest (each one logged
        with its name and how long it ran)."""
        self._closed = True
        if not self._tasks:
            return
        spawned = dict(self._tasks)
        logger.info("tasks.draining", count=len(spawned), timeout_s=round(timeout, 3))
        _, still = await asyncio.wait(set(spawned), timeout=timeout)
        now = time.monotonic()
        for task in still:
            task.cancel()
            logger.warning("task.cancelled", task=task.get_name(), ran_ms=round((now - spawned[task]) * 1000))
        if still:
            await asyncio.gather(*still, return_exceptions=True)
            logger.warning("tasks.cancelled", count=len(still))
