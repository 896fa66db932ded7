"""Telegram polling that confirms an update only once it is durable: hilo's own getUpdates loop.

Telegram confirms (forgets) every update below the `offset` of the next getUpdates call (Bot API, getUpdates:
"An update is considered confirmed as soon as getUpdates is called with an offset higher than its update_id").
PTB's Updater advances the offset as soon as it fetched a batch, before hilo stored anything: a crash then loses
the batch. Here each update of a batch is taken in (`take`: stored, recorded or journaled, bot/intake.py) in
order, and the offset moves past an update only after that; when nothing could be kept (StoreError: the
journal is full) the loop waits and takes the same update again, without confirming it. Updates fetched but not
taken when the process dies are fetched again by the next start, and their records make them redeliveries.

Network errors and Bot API 5xx are retried with a backoff (1 s doubling to 30 s), logged with the error's type.
With several processes on one database exactly one polls: the holder of the lease of bot/poll_lease.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from telegram import Bot, Update
from telegram.error import TelegramError

from bot.poll_lease import PollLease
from kernel import log
from kernel.errors import StoreError

logger = log.get("hilo.telegram")

#: Seconds between two tries of an update nothing could keep (the journal is full), and the backoff's cap.
RETRY_SECONDS = 1.0
MAX_BACKOFF = 30.0


class Poller:
    """`start()` the loop, `stop()` it. `take(update)` makes one update durable (StoreError: nothing kept).
    With a `lease` (bot/poll_lease.py) it polls only while this process holds it."""

    def __init__(self, bot: Bot, take: Callable[[Update], Awaitable[None]], *, lease: PollLease | None = None,
                 interval: float = 0.0, timeout: float = 10.0) -> None:
        self.bot = bot
        self.take = take
        self.lease = lease
        self.interval = interval
        self.timeout = timeout
        self.offset: int | None = None
        self._task: asyncio.Task[None] | None = None
        self._taking = False
        self._stopping = False
        self._held = False

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop(), name="telegram.polling")

    def state(self) -> dict[str, object]:
        """For /readyz: the loop runs ("polling" while this process holds the lease, "standby" while another
        does), or it ended (not ok)."""
        if self._task is None or self._task.done():
            return {"ok": False, "mode": "polling", "error": "the polling loop is not running"}
        return {"ok": True, "mode": "polling", "polling": "polling" if self._held else "standby"}

    async def stop(self) -> None:
        """Stop polling: a long poll (or the wait for the lease) is cancelled, an update being taken in is
        finished; then the updates taken so far are confirmed (a getUpdates with timeout 0, at most a few
        seconds) and the lease is released."""
        task, self._task = self._task, None
        if task is None:
            return
        self._stopping = True
        if not self._taking:
            task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task
        if self.offset is not None and self._held:
            try:
                await asyncio.wait_for(self.bot.get_updates(offset=self.offset, timeout=0, limit=1,
                                                            allowed_updates=[Update.MESSAGE]), 5)
            except (TelegramError, TimeoutError) as exc:
                logger.info("telegram.confirm_failed", error=type(exc).__name__)
        if self.lease is not None and self._held:
            await self.lease.release()

    async def _loop(self) -> None:
        while not self._stopping:
            keeper = None
            if self.lease is not None:
                await self.lease.acquire()
                keeper = asyncio.create_task(self._keep(self.lease), name="telegram.poll_lease")
            self._held = True
            try:
                await self._poll()
            finally:
                if keeper is not None:
                    keeper.cancel()

    async def _keep(self, lease: PollLease) -> None:
        while True:
            await asyncio.sleep(lease.ttl / 3)
            if not await lease.renew():
                self._held = False
                return

    async def _poll(self) -> None:
        backoff = RETRY_SECONDS
        while not self._stopping and self._held:
            try:
                updates = await self.bot.get_updates(offset=self.offset, timeout=int(self.timeout),
                                                     allowed_updates=[Update.MESSAGE])
            except TelegramError as exc:
                logger.warning("telegram.polling_failed", error=type(exc).__name__, retry_in_s=backoff, exc_info=exc)
                await asyncio.sleep(backoff)
                backoff = min(MAX_BACKOFF, backoff * 2)
                continue
            backoff = RETRY_SECONDS
            self._taking = True
            try:
                for update in updates:
                    await self._take(update)
                    self.offset = update.update_id + 1
            finally:
                self._taking = False
            if self.interval:
                await asyncio.sleep(self.interval)

    async def _take(self, update: Update) -> None:
        while True:
            try:
                await self.take(update)
                return
            except StoreError as exc:  # nothing kept: not confirmed; the same update again shortly
                logger.error("telegram.update_not_kept", update_id=update.update_id, error=type(exc).__name__)
                if self._stopping:
                    return
                await asyncio.sleep(RETRY_SECONDS)
