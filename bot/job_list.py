"""The jobs hilo runs: the app's JobRegistry, filled here (bot/jobs.py runs it). A new job is one `add` below.

- cleanup (every HILO_CLEANUP_SECONDS, an hour by default): deletes link codes that can never be redeemed
  again (used, replaced by a newer code, or expired); nothing else deletes them.
- embed (every HILO_EMBED_SECONDS, 30 s by default; only with an embedder and a database that keeps vectors):
  embeds the messages stored since, HILO_EMBED_BATCH at a time (bot/embedding.py), with the embedder's one retry
  policy (bot.retry, for a remote one). Each run starts a little before the last message it embedded (REWIND ids:
  a Postgres transaction may commit a lower id after a higher one); until this process has embedded one, from the
  start (what it finds embedded already costs a look-up in the anti-join, not an embedding).
"""

from __future__ import annotations

from bot.config import Settings
from bot.embedders.base import Embedder
from bot.embedding import active, embed_pending
from bot.jobs import JobContext, JobRegistry
from kernel import log
from memory.store import Store

logger = log.get("hilo.jobs")

#: How many ids before the last run's end the embed job looks again.
REWIND = 1000


def registry(settings: Settings, store: Store, embedder: Embedder | None = None) -> JobRegistry:
    jobs = JobRegistry()

    async def cleanup(ctx: JobContext) -> None:
        purged = await store.purge_link_codes()
        logger.info("cleanup.done", run=ctx.run_id, link_codes=purged)

    jobs.add("cleanup", cleanup, every=settings.cleanup_seconds)
    if embedder is not None and active(embedder, store):
        seen = {"last_id": 0}

        async def embed(ctx: JobContext) -> None:
            assert embedder is not None
            result = await embed_pending(store, embedder, batch=settings.embed_batch,
                                         after_id=max(0, seen["last_id"] - REWIND))
            seen["last_id"] = max(seen["last_id"], result.last_id)
            logger.info("embed.done", run=ctx.run_id, embedder=embedder.name, messages=result.messages,
                        last_id=seen["last_id"])

        jobs.add("embed", embed, every=settings.embed_seconds)
    return jobs
