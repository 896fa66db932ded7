"""Message vectors, written once over the dialects (memory/vectors.py says what is stored and how it is searched).

What differs lives in the dialects: `db.put_vectors` (SQLite: float16 blobs, executemany; Postgres: halfvec
through unnest, and the HNSW index of the embedder made on first write) and `db.nearest` (SQLite: numpy over the
person's cached matrix, then one SELECT of the rows; Postgres: one statement, HNSW filtered by person with an
iterative scan). Every read is filtered by user_id, and only vectors of one embedder name are compared.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from kernel.errors import StoreError
from memory.rows import Db, to_message
from memory.store import ContextQuery, Pending, StoredMessage


@dataclass(frozen=True, slots=True)
class VectorQuery:
    """Nearest messages of one person to `vector` among the vectors of `embedder`, outside `excluded`; with `at`,
    only messages created at or before it; with `current_message_id`, user messages of `conversation_id` stored
    after it (queued turns) are left out, as lexical recall leaves them out."""

    user_id: int
    vector: tuple[float, ...]
    embedder: str
    limit: int
    excluded: tuple[int, ...] = ()
    at: Any = None
    current_message_id: int | None = None
    conversation_id: int | None = None


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
    return {int(row[0]): cosine for row, cosine in await db.nearest(vq)}


async def recall(db: Db, q: ContextQuery, excluded: list[int]) -> list[tuple[Any, float]]:
    """load_context's vector hits: (MSG_COLS row, cosine), best first, under the same rules as lexical recall."""
    if not (db.vectors and q.query_vector and q.embedder and q.search_limit > 0):
        return []
    return await db.nearest(VectorQuery(
        user_id=q.user_id, vector=q.query_vector, embedder=q.embedder, limit=q.search_limit,
        excluded=tuple(excluded), at=db.ts(q.at), current_message_id=q.current_message_id,
        conversation_id=q.conversation_id,
    ))


def merge_recalled(lexical: list[StoredMessage], hits: list[tuple[Any, float]],
                   limit: int) -> tuple[list[StoredMessage], dict[int, float]]:
    """(recalled, message_id -> cosine). INTERIM RULE, for the lead to replace at merge by lex's fusion
    (memory/retrieval.py: 0.5*z(BM25) + 0.5*z(cosine) over the candidates, fed `vector_scores`): the lexical and
    the vector lists taken in turns, best first, without repeats, up to `limit`."""
    scores = {to_message(row).id: cosine for row, cosine in hits}
    by_vector = [to_message(row) for row, _ in hits]
    merged: list[StoredMessage] = []
    seen: set[int] = set()
    for pair in zip(lexical + [None] * len(by_vector), by_vector + [None] * len(lexical), strict=True):
        for m in pair:
            if m is not None and m.id not in seen and len(merged) < limit:
                seen.add(m.id)
                merged.append(m)
    return merged, scores
