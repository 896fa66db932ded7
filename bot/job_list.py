"""The jobs hilo runs: the app's JobRegistry, filled here (bot/jobs.py runs it). A new job is one `add` below.

- cleanup (every HILO_CLEANUP_SECONDS, an hour by default): deletes link codes that can never be redeemed
  again (used, replaced by a newer code, or expired; nothing else deletes them), the rate limits' counters of
  windows over COUNTERS_KEPT_S ago, the inbound-delivery records (memory/sql_inbound.py) older than
  HILO_INBOUND_RETENTION_DAYS, and the spend caps' windows (memory/sql_spend.py) that began over SPEND_KEPT ago.
- retention (hourly, only with HILO_RETENTION_DAYS): deletes each surface's messages older than its days, with
  their vectors, search terms and emptied episodes, and logs and keeps the counts (bot/retention.py).
- media_retention (hourly): deletes the downloaded media files (voice notes, bot/media_store.py) kept longer than
  HILO_MEDIA_RETENTION_DAYS; their media rows stay, without a path (bot/retention.py `run_media`).
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
- recover (at start and every HILO_RECOVERY_SECONDS; with the daemon's pipeline): the people's stored messages
  older than HILO_RECOVERY_GRACE and younger than HILO_RECOVERY_WINDOW with no reply, no model call and no live
  turn (the conversation's turn lease free or lapsed: memory/turn_lease.py) get their turn, RECOVER_CONVERSATIONS
  conversations side by side and each one's messages in order, its reply queued in the outbox (bot/outbox.py)
  where the message names its route; then the outbox is woken.
- reminders (every HILO_REMINDER_SECONDS, 10 by default; with the daemon's pipeline and the `remind` tool on):
  delivers each reminder whose time came exactly once, on the person's last-active surface, through the outbox
  (bot/reminders.py).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from datetime import timedelta
from typing import TYPE_CHECKING

from bot import extract_job, reminders, retention, summary_job
from bot.config import Settings
from bot.embedders.base import Embedder
from bot.embedding import active, embed_pending
from bot.jobs import JobContext, JobRegistry
from bot.media_store import media_files
from bot.models.base import Chain
from kernel import log
from kernel.errors import StoreError
from memory.store import Ingested, Store

if TYPE_CHECKING:
    from bot.pipeline import Pipeline

logger = log.get("hilo.jobs")
#: How often memory_expiry runs: daily (expiry counts in days).
MEMORY_EXPIRY_SECONDS = 24 * 3600
#: Seconds a rate limit's counter is kept after its window began (the limits' windows are a minute).
COUNTERS_KEPT_S = 3600
#: Spend windows (bot/spend.py) kept this long after they began: the month before last is still there to read.
SPEND_KEPT = timedelta(days=62)

#: At most this many unanswered messages per run of the recover job (the next run takes the rest).
RECOVER_BATCH = 50
#: Conversations the recover job answers side by side (each one's messages in order): one slow turn (a slow
#: model, a conversation waiting for its lease) holds up no other, and a run does not outlast its batch's slowest.
RECOVER_CONVERSATIONS = 8
#: How many ids before the last run's end the embed job looks again.
REWIND = 1000


def registry(settings: Settings, store: Store, chain: Chain | None = None,
             embedder: Embedder | None = None, *, pipeline: Pipeline | None = None) -> JobRegistry:
    """The app's jobs; `chain` is the turns' model chain (the extractor uses its models, with breakers of its
    own). Without one (or with the echo model only) there is no extraction: said once, here, at start. `embedder`:
    the embed job runs only with one and a database that keeps vectors."""
    jobs = JobRegistry()

    async def cleanup(ctx: JobContext) -> None:
        purged = await store.purge_link_codes()
        counters = await store.purge_counters(COUNTERS_KEPT_S)  # rate limits' windows long past (issue 12)
        inbound = await store.purge_inbound(timedelta(days=settings.inbound_retention_days))
        spend = await store.purge_spend(SPEND_KEPT)  # the caps' windows long past (issue 13, costs)
        logger.info("cleanup.done", run=ctx.run_id, link_codes=purged, counters=counters, inbound=inbound,
                    spend=spend)

    jobs.add("cleanup", cleanup, every=settings.cleanup_seconds)

    async def memory_expiry(ctx: JobContext) -> None:
        ended = await store.expire_memories(settings.memory_expiry_importance,
                                            timedelta(days=settings.memory_expiry_days))
        logger.info("memory_expiry.done", run=ctx.run_id, ended=ended)

    jobs.add("memory_expiry", memory_expiry, every=MEMORY_EXPIRY_SECONDS)
    if settings.retention_days:  # issue 13: HILO_RETENTION_DAYS (unset: every message is kept)
        policy = settings.retention_days

        async def retention_job(ctx: JobContext) -> bool:
            return bool(await retention.run(store, policy, ctx.run_id))

        jobs.add("retention", retention_job, every=retention.EVERY_SECONDS)
    files = media_files(settings)

    async def media_retention(ctx: JobContext) -> bool:
        return bool(await retention.run_media(store, files, settings.media_retention_days, ctx.run_id))

    jobs.add("media_retention", media_retention, every=retention.EVERY_SECONDS)
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
    if pipeline is not None:
        jobs.add("recover", recovery(settings, store, pipeline), every=settings.recovery_seconds)
        if "remind" in settings.tools:
            outbox = pipeline.outbox

            async def deliver_reminders(ctx: JobContext) -> bool:
                return bool(await reminders.deliver_due(store, outbox, settings))

            jobs.add("reminders", deliver_reminders, every=settings.reminder_seconds)
    return jobs


def recovery(settings: Settings, store: Store, pipeline: Pipeline) -> Callable[[JobContext], Awaitable[bool]]:
    """The recover job: answer the stored messages nobody answered (a crash or a stop mid-turn, no redelivery)."""

    async def conversation(ctx: JobContext, turns: list[Ingested], gate: asyncio.Semaphore) -> int:
        answered = 0
        async with gate:
            for turn in turns:  # one conversation's messages in their order
                try:
                    out = await pipeline.answer_stored(turn)
                except StoreError as exc:
                    logger.error("recover.failed", run=ctx.run_id, message_id=turn.message.id,
                                 error=type(exc).__name__)
                    continue
                answered += out.status != "duplicate"
        return answered

    async def recover(ctx: JobContext) -> bool:
        turns = await store.unanswered(settings.recovery_grace, settings.recovery_window, RECOVER_BATCH)
        by_conversation: dict[int, list[Ingested]] = {}
        for turn in turns:
            by_conversation.setdefault(turn.conversation_id, []).append(turn)
        gate = asyncio.Semaphore(RECOVER_CONVERSATIONS)
        answered = sum(await asyncio.gather(*(conversation(ctx, t, gate) for t in by_conversation.values())))
        pipeline.outbox.wake()
        (logger.info if turns else logger.debug)("recover.done", run=ctx.run_id, found=len(turns), answered=answered)
        return bool(turns)

    return recover
