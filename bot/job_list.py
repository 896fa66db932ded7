"""The jobs hilo runs: the app's JobRegistry, filled here (bot/jobs.py runs it). A new job is one `add` below.

- cleanup (every HILO_CLEANUP_SECONDS, an hour by default): deletes link codes that can never be redeemed
  again (used, replaced by a newer code, or expired); nothing else deletes them.
"""

from __future__ import annotations

from bot.config import Settings
from bot.jobs import JobContext, JobRegistry
from kernel import log
from memory.store import Store

logger = log.get("hilo.jobs")


def registry(settings: Settings, store: Store) -> JobRegistry:
    jobs = JobRegistry()

    async def cleanup(ctx: JobContext) -> None:
        purged = await store.purge_link_codes()
        logger.info("cleanup.done", run=ctx.run_id, link_codes=purged)

    jobs.add("cleanup", cleanup, every=settings.cleanup_seconds)
    return jobs
