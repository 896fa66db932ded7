"""Small per-key structures shared by the pipeline and the surfaces.

KeyedLocks  one asyncio.Lock per key (a conversation, a chat, a phone number) while someone holds or waits on
            it: work of one key runs one at a time, first come first served; keys never block each other.
(Redeliveries are caught by the database's inbound-delivery records, memory/sql_inbound.py: also across
restarts and processes.)
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)


class KeyedLocks(Generic[K]):
    def __init__(self) -> None:
        self._locks: dict[K, tuple[asyncio.Lock, int]] = {}

    @contextlib.asynccontextmanager
    async def hold(self, key: K) -> AsyncIterator[None]:
        """Hold the key's lock; the lock is dropped once nobody holds or waits on it."""
        lock, users = self._locks.get(key, (asyncio.Lock(), 0))
        self._locks[key] = (lock, users + 1)
        try:
            async with lock:
                yield
        finally:
            lock, users = self._locks[key]
            if users <= 1:
                del self._locks[key]
            else:
                self._locks[key] = (lock, users - 1)

    def __len__(self) -> int:
        return len(self._locks)
