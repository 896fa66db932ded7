"""The jobs hilo runs: the app's JobRegistry, filled here (bot/jobs.py runs it). A new job is one `add` below.

- cleanup (every HILO_CLEANUP_SECONDS, an hour by default): deletes link codes that can never be redeemed
  again (used, replaced by a newer code, or expired); nothing else deletes them; and the inbound-delivery
  records (memory/sql_inbound.py) older than HILO_INBOUND_RETENTION_DAYS.
- journal_replay (every JOURNAL_REPLAY_SECONDS): replays the messages the inbound journal kept while the database
  could not take them (bot/intake.py), in order; each is then answered. A run that found nothing logs at debug.
- memory_expiry (daily): ends the memories whose expiry date passed, and those less important than
  HILO_MEMORY_EXPIRY_IMPORTANCE that no context used for HILO_MEMORY_EXPIRY_DAYS (memory/sql_memories.py).
- extract (every bot.extract_job.EVERY_SECONDS, when a model can answer with structured output and
  HILO_EXTRACT_EVERY is not 0): memories from the new messages of the people due (bot/extract_job.py).
- embed (every HILO_EMBED_SECONDS, 30 s by default; only with an embedder and a database that keeps vectors):
  embeds the messages stored since, then the memories lacking a vector (merging the near-duplicates their vectors
  reveal), HILO_EMBED_BATCH at a time (bot/embedding.py), with the embedder's one retry policy (bot.retry, for a
  remote one). A run that embedded nothing logs at debug (its job.finished line too), one that did at info, with
  its counts. Each run starts a little before the last message it embedded (REWIND ids:
  a Postgres transaction may commit a lower id after a higher one); until this process has embedded one, from the
  start (what it finds embedded already costs a look-up in the anti-join, not an embedding).
- summarize (every bot.summary_job.EVERY_SECONDS, under the same condition and HILO_SUMMARY_MIN_MESSAGES not 0):
  a summary of each ended episode (bot/summary_job.py).
"""

from __future__ import annotations

from datetime import timedelta

from bot import extract_job, summary_job
from bot.config import Settings
from bot.embedders.base import Embedder
from bot.embedding import active, embed_pending
from bot.intake import Intake
from bot.jobs import JobContext, JobRegistry
from bot.models.base import Chain
from kernel import log
from memory.store import Store

logger = log.get("hilo.jobs")
#: How often memory_expiry runs: daily (expiry counts in days).
MEMORY_EXPIRY_SECONDS = 24 * 3600

#: How many ids before the last run's end the embed job looks again.
REWIND = 1000
#: How often the journal is replayed (a cheap look at a file's size when it is empty).
JOURNAL_REPLAY_SECONDS = 2.0


def registry(settings: Settings, store: Store, chain: Chain | None = None,
             embedder: Embedder | None = None, *, intake: Intake | None = None) -> JobRegistry:
    """The app's jobs; `chain` is the turns' model chain (the extractor uses its models, with breakers of its
    own). Without one (or with the echo model only) there is no extraction: said once, here, at start. `embedder`:
    the embed job runs only with one and a database that keeps vectors."""
    jobs = JobRegistry()

    async def cleanup(ctx: JobContext) -> None:
        purged = await store.purge_link_codes()
        inbound = await store.purge_inbound(timedelta(days=settings.inbound_retention_days))
        logger.info("cleanup.done", run=ctx.run_id, link_codes=purged, inbound=inbound)

    jobs.add("cleanup", cleanup, every=settings.cleanup_seconds)
    if intake is not None:
        kept = intake

        async def journal_replay(ctx: JobContext) -> bool:
            if not kept.journal.size():
                return False
            return await kept.replay() > 0

        jobs.add("journal_replay", journal_replay, every=JOURNAL_REPLAY_SECONDS)

    async def memory_expiry(ctx: JobContext) -> None:
        ended = await store.expire_memories(settings.memory_expiry_importance,
                                            timedelta(days=settings.memory_expiry_days))
        logger.info("memory_expiry.done", run=ctx.run_id, ended=ended)

    jobs.add("memory_expiry", memory_expiry, every=MEMORY_EXPIRY_SECONDS)
    extractor = extract_job.build(settings, store, chain)
    if extractor is not None:
        jobs.add("extract", extractor.run, every=extract_job.EVERY_SECONDS)
    summarizer = summary_job.build(settings, store, chain)
    if summarizer is not None:
        jobs.add("summarize", summarizer.run, every=summary_job.EVERY_SECONDS)
    if embedder is not None and active(embedder, store):
        seen = {"last_id": 0}

        async def embed(ctx: JobContext) -> bool:
            assert embedder is not None
            result = await embed_pending(store, embedder, batch=settings.embed_batch,
                                         after_id=max(0, seen["last_id"] - REWIND))
            seen["last_id"] = max(seen["last_id"], result.last_id)
            did = bool(result.messages or result.memories or result.merged)
            (logger.info if did else logger.debug)(
                "embed.done", run=ctx.run_id, embedder=embedder.name, messages=result.messages,
                memories=result.memories, merged=result.merged, last_id=seen["last_id"])
            return did

        jobs.add("embed", embed, every=settings.embed_seconds)
    return jobs
