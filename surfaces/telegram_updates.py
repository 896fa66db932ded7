"""How the Telegram surface schedules updates: concurrently across chats, in order within a chat.

`PerChatUpdates` is python-telegram-bot's extension point for concurrent updates (`concurrent_updates=`):
the Application starts one task per update, in arrival order, and each waits here for its chat's lock.
The reply sends happen inside the update's processing, so a chat's replies go out in its messages' order
too; the pipeline's per-conversation lock alone would order the turns but not the sends.
"""

from __future__ import annotations

from collections.abc import Awaitable
from typing import Any

from telegram import Update
from telegram.ext import BaseUpdateProcessor

from bot.keyed import KeyedLocks


class PerChatUpdates(BaseUpdateProcessor):
    """Updates of different chats run concurrently; those of one chat one at a time, in arrival order
    (asyncio.Lock wakes its waiters first come, first served). A chat's lock lives while someone holds it
    or waits on it."""

    def __init__(self, max_concurrent_updates: int = 256) -> None:
        super().__init__(max_concurrent_updates)
        self._chats: KeyedLocks[int] = KeyedLocks()

    async def do_process_update(self, update: object, coroutine: Awaitable[Any]) -> None:
        chat = update.effective_chat if isinstance(update, Update) else None
        if chat is None:
            await coroutine
            return
        started = False
        try:
            async with self._chats.hold(chat.id):
                started = True
                await coroutine
        finally:
            if not started:  # cancelled while queued: never started
                getattr(coroutine, "close", lambda: None)()

    async def initialize(self) -> None:
        return None

    async def shutdown(self) -> None:
        return None
