"""How the Telegram surface schedules updates: concurrently across chats, in order within a chat, and a
redelivered update dropped before any work.

`PerChatUpdates` is python-telegram-bot's extension point for concurrent updates (`concurrent_updates=`):
the Application starts one task per update, in arrival order, and each waits here for its chat's lock.
The reply sends happen inside the update's processing, so a chat's replies go out in its messages' order
too; the pipeline's per-conversation lock alone would order the turns but not the sends.
"""

from __future__ import annotations

import asyncio
from collections import OrderedDict
from collections.abc import Awaitable
from typing import Any

from telegram import Update
from telegram.ext import BaseUpdateProcessor


class PerChatUpdates(BaseUpdateProcessor):
    """Updates of different chats run concurrently; those of one chat one at a time, in arrival order
    (asyncio.Lock wakes its waiters first come, first served). A chat's lock lives while someone holds it
    or waits on it."""

    def __init__(self, max_concurrent_updates: int = 256) -> None:
        super().__init__(max_concurrent_updates)
        self._locks: dict[int, tuple[asyncio.Lock, int]] = {}

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        chat = update.effective_chat if isinstance(update, Update) else None
        if chat is None:
            await coroutine
            return
        lock, refs = self._locks.get(chat.id, (asyncio.Lock(), 0))
        self._locks[chat.id] = (lock, refs + 1)
        try:
            try:
                await lock.acquire()
            except BaseException:
                getattr(coroutine, "close", lambda: None)()  # cancelled while queued: never started
                raise
            try:
                await coroutine
            finally:
                lock.release()
        finally:
            lock, refs = self._locks[chat.id]
            if refs <= 1:
                del self._locks[chat.id]
            else:
                self._locks[chat.id] = (lock, refs - 1)

    async def initialize(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None


class RecentIds:
    """The last `size` message keys this process has seen: a redelivered update is dropped at once."""

    def __init__(self, size: int = 4096) -> None:
        self._seen: OrderedDict[str, None] = OrderedDict()
        self._size = size

    def first_time(self, key: str) -> bool:
        if key in self._seen:
            return False
        self._seen[key] = None
        if len(self._seen) > self._size:
            self._seen.popitem(last=False)
        return True
