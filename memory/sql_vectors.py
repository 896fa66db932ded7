"""Message vectors, written once over the dialects (memory/vectors.py says what is stored and how it is searched).

What differs lives in the dialects: `db.put_vectors` (SQLite: float16 blobs, executemany; Postgres: halfvec
through unnest, and the HNSW index of the embedder made on first write) and `db.nearest` (SQLite: numpy over the
person's cached matrix, no statement when the cache is current; Postgres: one statement, HNSW filtered by person with an
iterative scan). Every read is filtered by user_id, and only vectors of one embedder name are compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kernel.errors import StoreError
from memory.rows import Db
from memory.store import ContextQuery, Pending


@dataclass(frozen=True, slots=True)
class VectorQuery:
    """The nearest `limit` vectors of one person to `vector` among those of `embedder`, outside `excluded`. Only
    ids and cosines: load_context reads the rows once, for lexical and vector hits together (memory/sql_recall.py
    ROWS, which applies recall's rules: nothing after `at`, no queued turn)."""

    user_id: int
    vector: tuple[float, ...]
    embedder: str
    limit: int
    excluded: tuple[int, ...] = ()


#: Messages lacking a vector of embedder $3 (none, or another embedder's), by id from $1 up, of user $2 or all.
PENDING = (
    "SELECT m.id, m.user_id, m.content FROM messages m LEFT JOIN message_vectors v ON v.message_id = m.id "
    "WHERE m.id > $1 AND ($2::bigint IS NULL OR m.user_id = $2) AND (v.message_id IS NULL OR v.embedder <> $3) "
    "ORDER BY m.id LIMIT $4"
)
PROGRESS = (
    "SELECT count(*), count(v.message_id) FROM messages m "
    "LEFT JOIN message_vectors v ON v.message_id = m.id AND v.embedder = $1 "
    "WHERE ($2::bigint IS NULL OR m.user_id = $2)"
)


async def pending(db: Db, embedder: str, after_id: int, limit: int, user_id: int | None) -> list[Pending]:
    rows = await db.all(PENDING, after_id, user_id, embedder, limit)
    return [Pending(id=r[0], user_id=r[1], content=r[2]) for r in rows]


async def progress(db: Db, embedder: str, user_id: int | None) -> tuple[int, int]:
    """(messages with a vector of `embedder`, messages) of one person or of everyone."""
    total, done = await db.one(PROGRESS, embedder, user_id)
    return int(done), int(total)


async def write(db: Db, embedder: str, rows: Sequence[tuple[int, Sequence[float]]]) -> int:
    """Keep one vector per message (replacing another embedder's); messages gone meanwhile are skipped. Returns
    the number of rows given that had a message. Nothing is written when the database keeps no vectors."""
    rows = [(int(i), v) for i, v in rows if len(v)]
    if not rows or not db.vectors:
        return 0
    dims = {len(v) for _, v in rows}
    if len(dims) != 1:
        raise StoreError(f"vectors of {sorted(dims)} floats for one embedder: one size expected")
    return await db.put_vectors(embedder, dims.pop(), rows)


async def search(db: Db, vq: VectorQuery) -> dict[int, float]:
    """message_id -> cosine of the person's nearest messages, best first."""
    if not db.vectors or not vq.vector or vq.limit <= 0:
        return {}
    return {int(i): cosine for i, cosine in await db.nearest(vq)}


async def recall(db: Db, q: ContextQuery, excluded: list[int]) -> dict[int, float]:
    """load_context's vector hits: message_id -> cosine, best first (their rows are read with the lexical hits').
    As many as the recall limit: measured on bench/memory_bench.py (bench/recall_lab.py), 100 vector hits beside
    a limit of 64 gave 0.577 / 0.637 (EN / ES at 2,000 tokens), as many as the limit 0.582 / 0.646."""
    if not (q.query_vector and q.embedder):
        return {}
    return await search(db, VectorQuery(q.user_id, q.query_vector, q.embedder, q.search_limit, tuple(excluded)))


def search_vector(db: Db, q: ContextQuery) -> tuple[float, ...] | None:
    """`q`'s query vector when its recall has a vector part (the embedder that made it named, a database that keeps
    vectors), else None: the one test of it, for both dialects' reads."""
    return q.query_vector if q.query_vector and q.embedder and db.vectors else None


def row_cosine(db: Db, q: ContextQuery) -> tuple[str, str, Any] | None:
    """What recall's row read adds so that each row carries its cosine (the dialect's join, column and
    parameter), or None: no query vector, or the dialect computes them apart (`candidate_cosines`)."""
    vector = search_vector(db, q)
    return None if vector is None else db.cosine_sql(vector, q.embedder)


async def candidate_cosines(db: Db, q: ContextQuery, near: dict[int, float], ids: Sequence[int],
                            from_rows: dict[int, float] | None) -> dict[int, float]:
    """Every candidate's cosine with the question: the vector hits', then those the rows carried (`from_rows`:
    when `row_cosine` gave the read its column) or, when the dialect computes them apart, the rest's."""
    vector = search_vector(db, q)
    if vector is None:
        return near
    if from_rows is not None:
        return {**from_rows, **near}
    rest = [i for i in ids if i not in near]
    return {**await db.cosines(VectorQuery(q.user_id, vector, q.embedder, len(rest)), rest), **near}
