"""One Telegram poller across processes: a lease on a row of `jobs` (memory/jobs.py), like the background jobs'.

Telegram hands updates to one getUpdates caller at a time (a second one gets 409), and two pollers would race
for the same offset. So with N `hilo serve` processes on one database exactly one polls: the one holding the
lease on the jobs row `telegram.poller`, taken when it is free or expired, renewed every TTL/3 while it polls.
A process that dies leaves a lease that another takes over once it expired (at most TTL s without polling;
Telegram keeps the updates meanwhile). A poller whose renewal finds the lease taken over stops polling. While
the database is away the holder keeps polling (its updates go to the journal) and keeps trying to renew.
"""

from __future__ import annotations

import asyncio
import time

from kernel import log
from kernel.errors import StoreError
from memory.jobs import JobEnd
from memory.store import Store
from memory.turn_lease import new_owner

logger = log.get("hilo.telegram")

NAME = "telegram.poller"
#: Seconds the lease lasts unless renewed: how long polling pauses after its process died.
TTL = 15.0


class PollLease:
    def __init__(self, store: Store, ttl: float = TTL) -> None:
        self.store = store
        self.ttl = ttl
        self.owner = f"{new_owner()}:{NAME}"
        self._started = 0.0

    async def acquire(self) -> None:
        """Wait until this process holds the lease."""
        announced = False
        while True:
            try:
                await self.store.register_job(NAME, False)
                claim = await self.store.claim_job(NAME, self.owner, self.ttl, force=True)
            except Exception as exc:  # a bug or a driver's surprise costs this try too, never this process's polling
                _failed(exc)
                await asyncio.sleep(self.ttl / 3)
                continue
            if claim.claimed:
                self._started = time.monotonic()
                logger.info("telegram.poll_lease_taken", owner=self.owner)
                return
            if not announced:
                logger.info("telegram.poll_standby", owner=self.owner)
                announced = True
            await asyncio.sleep(self.ttl / 3)

    async def renew(self) -> bool:
        """Extend the lease; False when another process took it over (stop polling). A database that cannot
        answer keeps it (True): the lease lapses by itself if this goes on. Any other error (a bug, a driver's
        surprise) leaves it unknown: False, so polling stops until `acquire` holds it again (had the keeper ended
        instead, this process would poll on under a lease nobody renews, beside the next holder)."""
        try:
            held = await self.store.renew_job(NAME, self.owner, self.ttl)
        except Exception as exc:
            return _failed(exc)
        if not held:
            logger.warning("telegram.poll_lease_lost", owner=self.owner)
        return held

    async def release(self) -> None:
        try:
            await self.store.finish_job(NAME, self.owner, JobEnd(
                "ok", None, self.store.clock(), round((time.monotonic() - self._started) * 1000), None))
        except StoreError as exc:
            logger.warning("telegram.poll_lease_failed", error=type(exc).__name__)


def _failed(exc: Exception) -> bool:
    """Log a store call of the lease that failed: a StoreError (the database cannot answer now: True) or anything
    else (a bug, a driver's surprise: False)."""
    if isinstance(exc, StoreError):
        logger.warning("telegram.poll_lease_failed", error=type(exc).__name__)
        return True
    logger.error("telegram.poll_lease_crashed", error=type(exc).__name__, exc_info=exc)
    return False
