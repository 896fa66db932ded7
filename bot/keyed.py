"""Small per-key structures shared by the pipeline and the surfaces.

KeyedLocks  one asyncio.Lock per key (a conversation, a chat, a phone number) while someone holds or waits on
            it: work of one key runs one at a time, first come first served; keys never block each other.
RecentIds   the last N ids this process has seen: a redelivery caught before any work (for what the database
            does not deduplicate, such as commands and keywords).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
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


class RecentIds:
    """The last `size` keys seen, oldest forgotten first."""

    def __init__(self, size: int = 4096) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def __contains__(self, key: object) -> bool:
        return key in self._seen

    def first_time(self, key: str) -> bool:
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > self._size:
            self._seen.popitem(last=False)
        return True
