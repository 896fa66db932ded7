"""The jobs hilo runs: the app's JobRegistry, filled here (bot/jobs.py runs it). A new job is one `add` below.

- cleanup (every HILO_CLEANUP_SECONDS, an hour by default): deletes link codes that can never be redeemed
  again (used, replaced by a newer code, or expired); nothing else deletes them.
- memory_expiry (daily): ends the memories whose expiry date passed, and those less important than
  HILO_MEMORY_EXPIRY_IMPORTANCE that no context used for HILO_MEMORY_EXPIRY_DAYS (memory/sql_memories.py).
- extract (every bot.extract_job.EVERY_SECONDS, when a model can answer with structured output and
  HILO_EXTRACT_EVERY is not 0): memories from the new messages of the people due (bot/extract_job.py).
"""

from __future__ import annotations

from datetime import timedelta

from bot import extract_job
from bot.config import Settings
from bot.jobs import JobContext, JobRegistry
from bot.models.base import Chain
from kernel import log
from memory.store import Store

logger = log.get("hilo.jobs")
#: How often memory_expiry runs: daily (expiry counts in days).
MEMORY_EXPIRY_SECONDS = 24 * 3600


def registry(settings: Settings, store: Store, chain: Chain | None = None) -> JobRegistry:
    """The app's jobs; `chain` is the turns' model chain (the extractor uses its models, with breakers of its
    own). Without one (or with the echo model only) there is no extraction: said once, here, at start."""
    jobs = JobRegistry()

    async def cleanup(ctx: JobContext) -> None:
        purged = await store.purge_link_codes()
        logger.info("cleanup.done", run=ctx.run_id, link_codes=purged)

    jobs.add("cleanup", cleanup, every=settings.cleanup_seconds)

    async def memory_expiry(ctx: JobContext) -> None:
        ended = await store.expire_memories(settings.memory_expiry_importance,
                                            timedelta(days=settings.memory_expiry_days))
        logger.info("memory_expiry.done", run=ctx.run_id, ended=ended)

    jobs.add("memory_expiry", memory_expiry, every=MEMORY_EXPIRY_SECONDS)
    extractor = extract_job.build(settings, store, chain)
    if extractor is not None:
        jobs.add("extract", extractor.run, every=extract_job.EVERY_SECONDS)
    return jobs
