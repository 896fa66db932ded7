"""Embedding messages and questions: an embedder makes vectors (bot/embedders); the store keeps them
(memory/vectors.py).

- `embed_pending`: every message lacking a vector of the embedder's name (none yet, or another embedder's),
  in batches by id, each batch one embedding call and one write transaction; then every current memory lacking
  one (also reworded since), the same way, each batch's write merging the near-duplicates the vectors reveal
  (memory/sql_memory_vectors.py). What the embed job (bot/job_list.py, every HILO_EMBED_SECONDS) and `hilo embed`
  (the backfill) run. Stopped anywhere, it resumes where it left: what is written stays, and the next run asks
  the store for what is still missing.
- `embed_query`: a turn's question, the one embedding on a turn's request path, bounded by
  HILO_EMBED_QUERY_TIMEOUT; failing or late, the turn goes on with lexical recall only (logged with sizes).

Logs carry ids, counts and sizes, never text.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable
from dataclasses import dataclass

from bot.embedders.base import Embedder, EmbeddingError, Vector
from kernel import log
from memory.store import Pending, Store

logger = log.get("hilo.embedding")

#: Characters of a message that are embedded (the rest adds little to its meaning and costs the most).
EMBED_CHARS = 2000


@dataclass(frozen=True, slots=True)
class Embedded:
    """What a run of embed_pending did: messages embedded, the id of the last one looked at, memories embedded
    and memories merged into a near-duplicate by their vectors."""

    messages: int
    last_id: int
    memories: int = 0
    merged: int = 0


def active(embedder: Embedder | None, store: Store) -> bool:
    """Whether messages get vectors here: an embedder that gives them, and a database that keeps them."""
    return embedder is not None and embedder.name != "none" and store.vector_status is None


async def embed_pending(
    store: Store, embedder: Embedder, *, batch: int = 32, user_id: int | None = None, after_id: int = 0,
    on_batch: Callable[[int], None] | None = None, on_memory_batch: Callable[[int], None] | None = None,
) -> Embedded:
    """Embed every message (of `user_id`, or everyone's) above `after_id` that has no vector of `embedder`, then
    every current memory (of `user_id`, or everyone's) that has none. `on_batch(n)` / `on_memory_batch(n)` is
    told each batch's size once it is stored. Raises EmbeddingError when a batch fails for good (bot.retry's
    attempts are inside the embedder): what was stored before stays."""
    done, last = 0, after_id
    while todo := await store.unembedded(embedder.name, after_id=last, limit=batch, user_id=user_id):
        vectors = await _embed(embedder, todo, "messages")
        await store.write_vectors(embedder.name, [(p.id, v) for p, v in zip(todo, vectors, strict=True)])
        done, last = done + len(todo), todo[-1].id
        if on_batch is not None:
            on_batch(len(todo))
    memories, merged, seen = 0, 0, 0
    while todo := await store.unembedded_memories(embedder.name, after_id=seen, limit=batch, user_id=user_id):
        vectors = await _embed(embedder, todo, "memories")
        kept = await store.write_memory_vectors(embedder.name, list(zip(todo, vectors, strict=True)))
        memories, merged, seen = memories + kept.written, merged + kept.merged, todo[-1].id
        if on_memory_batch is not None:
            on_memory_batch(len(todo))
    return Embedded(done, last, memories, merged)


async def _embed(embedder: Embedder, todo: list[Pending], what: str) -> list[Vector]:
    """One batch's vectors (passages), logged at debug with its size and time."""
    started = time.perf_counter()
    vectors = await embedder.embed([p.content[:EMBED_CHARS] for p in todo], kind="passage")
    logger.debug("embedding.batch", embedder=embedder.name, what=what, rows=len(todo), last_id=todo[-1].id,
                 chars=sum(len(p.content) for p in todo), ms=round((time.perf_counter() - started) * 1000, 1))
    return vectors


async def embed_query(embedder: Embedder, text: str, timeout: float, *, user_id: int | None = None
                      ) -> tuple[float, ...] | None:
    """The question's vector, or None (failed or later than `timeout` s: the turn recalls lexically)."""
    started = time.perf_counter()
    try:
        vectors = await asyncio.wait_for(embedder.embed([text[:EMBED_CHARS]], kind="query"), timeout)
    except (TimeoutError, EmbeddingError) as exc:
        logger.warning("embedding.query_failed", embedder=embedder.name, user_id=user_id, chars=len(text),
                       error=type(exc).__name__, ms=round((time.perf_counter() - started) * 1000, 1))
        return None
    return tuple(vectors[0]) if vectors and vectors[0] else None
