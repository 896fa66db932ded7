"""Telegram polling that confirms an update only once it is durable: hilo's own getUpdates loop.

Telegram confirms (forgets) every update below the `offset` of the next getUpdates call (Bot API, getUpdates:
"An update is considered confirmed as soon as getUpdates is called with an offset higher than its update_id").
PTB's Updater advances the offset as soon as it fetched a batch, before hilo stored anything: a crash then loses
the batch. Here each update of a batch is taken in (`take`: stored, recorded or journaled, bot/intake.py) in
order, and the offset moves past an update only after that; when nothing could be kept (StoreError: the
journal is full) the loop waits and takes the same update again, without confirming it. Updates fetched but not
taken when the process dies are fetched again by the next start, and their records make them redeliveries.

Network errors and Bot API 5xx are retried with a backoff (1 s doubling to 30 s), logged with the error's type.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from telegram import Bot, Update
from telegram.error import TelegramError

from kernel import log
from kernel.errors import StoreError

logger = log.get("hilo.telegram")

#: Seconds between two tries of an update nothing could keep (the journal is full), and the backoff's cap.
RETRY_SECONDS = 1.0
MAX_BACKOFF = 30.0


class Poller:
    """`start()` the loop, `stop()` it. `take(update)` makes one update durable (StoreError: nothing kept)."""

    def __init__(self, bot: Bot, take: Callable[[Update], Awaitable[None]], *, interval: float = 0.0,
                 timeout: float = 10.0) -> None:
        self.bot = bot
        self.take = take
        self.interval = interval
        self.timeout = timeout
        self.offset: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._fetching = False
        self._stopping = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="telegram.polling")

    async def stop(self) -> None:
        """Stop polling: a long poll under way is cancelled, an update being taken in is finished; then the
        updates taken so far are confirmed (a getUpdates with timeout 0, at most a few seconds)."""
        task, self._task = self._task, None
        if task is None:
            return
        if self._fetching:
            task.cancel()
        else:
            self._stopping = True
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if self.offset is not None:
            try:
                await asyncio.wait_for(self.bot.get_updates(offset=self.offset, timeout=0, limit=1,
                                                            allowed_updates=[Update.MESSAGE]), 5)
            except (TelegramError, TimeoutError) as exc:
                logger.info("telegram.confirm_failed", error=type(exc).__name__)

    async def _loop(self) -> None:
        backoff = RETRY_SECONDS
        while not self._stopping:
            self._fetching = True
            try:
                updates = await self.bot.get_updates(offset=self.offset, timeout=int(self.timeout),
                                                     allowed_updates=[Update.MESSAGE])
            except TelegramError as exc:
                logger.warning("telegram.polling_failed", error=type(exc).__name__, retry_in_s=backoff)
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF, backoff * 2)
                continue
            finally:
                self._fetching = False
            backoff = RETRY_SECONDS
            for update in updates:
                await self._take(update)
                self.offset = update.update_id + 1
            if self.interval:
                await asyncio.sleep(self.interval)

    async def _take(self, update: Update) -> None:
        while True:
            try:
                await self.take(update)
                return
            except StoreError as exc:  # nothing kept: not confirmed; the same update again shortly
                logger.error("telegram.update_not_kept", update_id=update.update_id, error=type(exc).__name__)
                await asyncio.sleep(RETRY_SECONDS)
