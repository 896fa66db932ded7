"""The reindex of rows stored before migration 0013: their index terms (memory/stems.py) and their episodes
(memory/episodes.py), which SQL alone cannot compute; and the stems of memories stored before migration 0018
(memory/memory_match.py memory_terms). Resumable: each batch is one write transaction that leaves
its rows done, so a stopped reindex goes on from where it was; until a row has its terms, its content is indexed
as it is (the FTS5 view and the tsvector fall back to it). Run by the store after its migrations (`hilo
migrate`, and every open: on an up-to-date database, three indexed reads that find nothing).
"""

from __future__ import annotations

from typing import Any

from kernel import log
from memory import episodes
from memory.memory_match import memory_terms
from memory.rows import Db, as_dt
from memory.stems import index_terms

logger = log.get("hilo.store")
BATCH = 2000

_NO_TERMS = "SELECT id, content FROM messages WHERE terms IS NULL AND id > $1 ORDER BY id LIMIT $2"
_SET_TERMS = "UPDATE messages SET terms = $1 WHERE id = $2"
_MEMORY_NO_TERMS = "SELECT id, content FROM memories WHERE terms = '' AND id > $1 ORDER BY id LIMIT $2"
_SET_MEMORY_TERMS = "UPDATE memories SET terms = $1 WHERE id = $2"
_NO_EPISODE = ("SELECT id, conversation_id, user_id, surface, created_at, token_count, coalesce(terms, '') "
               "FROM messages WHERE episode_id IS NULL ORDER BY conversation_id, created_at, id LIMIT $1")
_SET_EPISODE = "UPDATE messages SET episode_id = $1 WHERE id = $2"


async def terms_batch(db: Db, after: int, limit: int) -> int:
    """Index terms for up to `limit` rows with none, of id > `after`; the last id done (0: nothing left)."""
    rows = await db.all(_NO_TERMS, after, limit)
    if rows:
        await db.many(_SET_TERMS, [(index_terms(content), mid) for mid, content in rows])
    return int(rows[-1][0]) if rows else 0


async def memory_terms_batch(db: Db, after: int, limit: int) -> int:
    """Stems for up to `limit` memories with no terms, of id > `after`; the last id looked at (0: nothing left).
    A memory with no word worth a term keeps none: the next reindex looks at it again, and finds it the same."""
    rows = await db.all(_MEMORY_NO_TERMS, after, limit)
    done = [(" ".join(memory_terms(content)), mid) for mid, content in rows]
    if any(terms for terms, _ in done):
        await db.many(_SET_MEMORY_TERMS, [(terms, mid) for terms, mid in done if terms])
    return int(rows[-1][0]) if rows else 0


async def episodes_batch(db: Db, limit: int) -> int:
    """Episodes for up to `limit` rows with none (by conversation and time); the number placed."""
    rows = await db.all(_NO_EPISODE, limit)
    if not rows:
        return 0
    placed, _ = await episodes.assign(db, [episodes.Placed(int(r[1]), int(r[2]), r[3], as_dt(r[4]), int(r[5]), r[6])
                                           for r in rows])
    await db.many(_SET_EPISODE, list(zip(placed, (int(r[0]) for r in rows), strict=True)))
    return len(rows)


async def run(tx: Any, batch: int = BATCH) -> int:
    """Reindex everything left, batch by batch (`tx`: the store's `_tx`); the rows reindexed."""
    done, after = 0, 0
    while (last := await tx("write", terms_batch, after, batch)) != 0:
        done += 1
        after = last
    memories, after = 0, 0
    while (last := await tx("write", memory_terms_batch, after, batch)) != 0:
        memories += 1
        after = last
    placed = 0
    while (n := await tx("write", episodes_batch, batch)) != 0:
        placed += n
        logger.info("reindex.episodes", messages=placed)
    if done or placed or memories:
        logger.info("reindex.done", term_batches=done, memory_term_batches=memories, episode_messages=placed)
    return placed
