"""The jobs hilo runs: the app's JobRegistry, filled here (bot/jobs.py runs it). A new job is one `add` below.

- cleanup (every HILO_CLEANUP_SECONDS, an hour by default): deletes link codes that can never be redeemed
  again (used, replaced by a newer code, or expired); nothing else deletes them.
- extract (every bot.extract_job.EVERY_SECONDS, when a model can answer with structured output and
  HILO_EXTRACT_EVERY is not 0): memories from the new messages of the people due (bot/extract_job.py).
"""

from __future__ import annotations

from bot import extract_job
from bot.config import Settings
from bot.jobs import JobContext, JobRegistry
from bot.models.base import Chain
from kernel import log
from memory.store import Store

logger = log.get("hilo.jobs")


def registry(settings: Settings, store: Store, chain: Chain | None = None) -> JobRegistry:
    """The app's jobs; `chain` is the turns' model chain (the extractor uses its models, with breakers of its
    own). Without one (or with the echo model only) there is no extraction: said once, here, at start."""
    jobs = JobRegistry()

    async def cleanup(ctx: JobContext) -> None:
        purged = await store.purge_link_codes()
        logger.info("cleanup.done", run=ctx.run_id, link_codes=purged)

    jobs.add("cleanup", cleanup, every=settings.cleanup_seconds)
    extractor = extract_job.build(settings, store, chain)
    if extractor is not None:
        jobs.add("extract", extractor.run, every=extract_job.EVERY_SECONDS)
    return jobs
