"""Memories' vectors, written once: what the embed job embeds (bot/embedding.py), and the write that keeps them and
then merges the near-duplicates they reveal.

A memory's vector lives in its row (`memories.vector`, float32 bytes, and `memories.embedder`, its name: migration
0016), on every backend, pgvector or not: a person has tens of memories, compared in Python, never searched by an
index. Only current memories (not ended) are embedded; one lacking a vector of the embedder (none yet, another
embedder's, or a newer wording than its vector's: memory/sql_memories.py clears it) is pending.

`write` (one write transaction per batch): each vector is kept if the memory still says what was embedded, then
each memory just embedded is compared with the person's other current memories of the same embedder: the same
kind, no two different keys (sql_memories.mergeable) and a cosine of at least memory_match.MERGE_COSINE make them
one memory: the older absorbs the newer (sql_memories.absorb: the merge of `add`, highest confidence, newest
source, union of sources). Another person's memories are never read here.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory import memory_match as match
from memory import sql_memories
from memory.rows import MEMORY_COLS, Db, to_memory
from memory.store import MemoryVectors, Pending

#: Current memories lacking a vector of embedder $3, by id from $1 up, of user $2 or all.
PENDING = (
    "SELECT id, user_id, content FROM memories WHERE ended_at IS NULL AND id > $1 "
    "AND ($2::bigint IS NULL OR user_id = $2) AND (vector IS NULL OR embedder IS NULL OR embedder <> $3) "
    "ORDER BY id LIMIT $4"
)
PROGRESS = (
    "SELECT count(*), count(CASE WHEN vector IS NOT NULL AND embedder = $1 THEN 1 END) FROM memories "
    "WHERE ended_at IS NULL AND ($2::bigint IS NULL OR user_id = $2)"
)
#: Kept only if the memory still says what was embedded (a merge may have reworded it meanwhile).
_SET = "UPDATE memories SET vector = $1, embedder = $2 WHERE id = $3 AND content = $4 AND ended_at IS NULL"
_EMBEDDED = (f"SELECT {MEMORY_COLS}, vector FROM memories WHERE user_id = ANY($1::bigint[]) AND ended_at IS NULL "
             "AND embedder = $2 AND vector IS NOT NULL ORDER BY id")


async def pending(db: Db, embedder: str, after_id: int, limit: int, user_id: int | None) -> list[Pending]:
    rows = await db.all(PENDING, after_id, user_id, embedder, limit)
    return [Pending(id=int(r[0]), user_id=int(r[1]), content=r[2]) for r in rows]


async def progress(db: Db, embedder: str, user_id: int | None) -> tuple[int, int]:
    """(current memories with a vector of `embedder`, current memories) of one person or of everyone."""
    total, done = await db.one(PROGRESS, embedder, user_id)
    return int(done), int(total)


async def write(db: Db, embedder: str, rows: Sequence[tuple[Pending, Sequence[float]]]) -> MemoryVectors:
    rows = [(p, v) for p, v in rows if len(v)]
    if not rows:
        return MemoryVectors(0, 0)
    await db.many(_SET, [(match.pack(v), embedder, p.id, p.content) for p, v in rows])
    stored = await db.all(_EMBEDDED, db.ids(sorted({p.user_id for p, _ in rows})), embedder)
    fresh = {p.id for p, _ in rows}
    written = sum(1 for r in stored if int(r[0]) in fresh)
    merged = await _merge_near(db, embedder, fresh, stored)
    return MemoryVectors(written, merged)


async def _merge_near(db: Db, embedder: str, fresh: set[int], stored: Sequence[Any]) -> int:
    """Merge each fresh memory with its nearest mergeable one of the same person (see the module docstring)."""
    live = {int(r[0]): to_memory(r[:-1]) for r in stored}
    blobs: dict[int, bytes] = {int(r[0]): r[-1] for r in stored}
    merged = 0
    for mid in sorted(fresh & live.keys()):
        if mid not in live:
            continue  # absorbed by an earlier one of this batch
        m, vector = live[mid], match.unpack(blobs[mid])
        if not vector:
            continue
        near = match.cosines(vector, [(o.id, blobs[o.id]) for o in live.values()
                                      if o.id != mid and o.user_id == m.user_id
                                      and sql_memories.mergeable(m.kind, m.key, o.kind, o.key)])
        best = max(near.items(), key=lambda kv: (kv[1], kv[0]), default=None)
        if best is None or best[1] < match.MERGE_COSINE:
            continue
        old, new = sorted((m, live[best[0]]), key=lambda x: x.id)
        survivor = await sql_memories.absorb(db, old, new, list(match.unpack(blobs[new.id]) or ()), embedder)
        merged += 1
        del live[new.id]
        live[old.id] = survivor
        if survivor.content == new.content:
            blobs[old.id] = blobs[new.id]
    return merged
