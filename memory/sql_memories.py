"""Memories, written once: add (with merge and supersede), list, get, find by words, forget one, touch, expire.

Lifecycle (`add`), in one write transaction over the person's current memories (not ended; the newest
`SCAN_LIMIT`):
- near-duplicate (memory_match: the same kind, lexical similarity, or vector similarity when both carry a vector
  of one embedder), and no different key: MERGED into the existing row, which keeps the highest confidence and
  importance, takes the newest source, the union of source messages, and the newer wording unless the older is
  more confident. outcome "merged".
- otherwise a new row; it SUPERSEDES the current memories of the same kind and key (or the one named by
  `draft.supersedes`): they stay, with ended_at and superseded_by, and never reach the context again. outcome
  "superseded" (with the newest one it ended as `previous`), else "added".
Source messages are kept only when they are the person's own (their external ids are copied alongside: what
`hilo context --json` shows without a join on every turn).

Expiry (`expire`, the `memory_expiry` job): a current memory whose `expires_at` passed, or whose importance is below
the threshold and which has not been used in a context (created, if never) for the idle time, ENDS: ended_at is
set, nothing is deleted, so the person still sees it in `hilo memory --all` and can forget it; only forgetting
(one memory, or the person) deletes.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kernel import tokens
from kernel.errors import InputError
from kernel.types import MEMORY_KINDS, SOURCE_CONFIDENCE, Memory, MemoryAdded, MemoryDraft
from memory import memory_match as match
from memory.rows import MEMORY_COLS, Db, to_memory

#: At most this many current memories (the newest) are compared with a new one.
SCAN_LIMIT = 2000
INSERT = (
    "INSERT INTO memories(user_id, kind, key, content, token_count, terms, importance, confidence, source, "
    "source_message_ids, source_external_ids, embedder, vector, created_at, updated_at, expires_at) "
    f"VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14, $15) RETURNING {MEMORY_COLS}"
)


def check(draft: MemoryDraft) -> None:
    """Refuse a draft the schema would refuse, with a clear error (InputError, key `memory_invalid`)."""
    if not draft.content.strip():
        raise InputError("memory_invalid", "a memory needs content")
    if draft.kind not in MEMORY_KINDS:
        raise InputError("memory_invalid", f"kind must be one of {', '.join(MEMORY_KINDS)}, got {draft.kind!r}")
    if draft.source not in SOURCE_CONFIDENCE:
        raise InputError("memory_invalid", f"source must be one of {', '.join(SOURCE_CONFIDENCE)}")
    for name, value in (("importance", draft.importance), ("confidence", draft.confidence)):
        if value is not None and not 0 <= value <= 1:
            raise InputError("memory_invalid", f"{name} must be in [0, 1], got {value}")


def _slot(key: str | None) -> str | None:
    return " ".join(key.casefold().split()) or None if key else None


def mergeable(kind: str, key: str | None, other_kind: str, other_key: str | None) -> bool:
    """Whether a memory of `kind` and `key` may merge with one of `other_kind` and `other_key`: the same kind,
    and no two different keys (a memory with no key may merge with one that has)."""
    slot = _slot(key)
    return kind == other_kind and (slot is None or _slot(other_key) in (None, slot))


async def _sources(db: Db, user_id: int, ids: Sequence[int]) -> tuple[list[int], list[str]]:
    """The person's own messages among `ids` (others' are dropped), and their external ids."""
    if not ids:
        return [], []
    rows = await db.all("SELECT id, external_id FROM messages WHERE user_id = $1 AND id = ANY($2::bigint[]) "
                        "ORDER BY id", user_id, db.ids(sorted(set(ids))))
    return [r[0] for r in rows], [r[1] for r in rows if r[1] is not None]


def _similar(draft_words: frozenset[str], vector: Sequence[float] | None, embedder: str, row: Any) -> float:
    """How alike a draft and a stored memory are: the best of lexical and (same embedder) vector similarity."""
    score = match.jaccard(draft_words, match.words(row[4]))
    stored = match.unpack(row[-2]) if vector is not None and row[-1] == embedder else None
    if stored is not None:
        cos = match.cosine(vector or (), stored)
        score = max(score, 1.0 if cos >= match.MERGE_COSINE else 0.0)
    return score


async def add(db: Db, user_id: int, draft: MemoryDraft, vector: Sequence[float] | None, embedder: str) -> MemoryAdded:
    check(draft)
    at = db.ts(db.clock())
    terms = match.memory_terms(draft.content)
    confidence = draft.confidence if draft.confidence is not None else SOURCE_CONFIDENCE[draft.source]
    token_count = draft.token_count if draft.token_count is not None else tokens.count(draft.content)
    ids, external = await _sources(db, user_id, draft.source_message_ids)
    rows = await db.all(f"SELECT {MEMORY_COLS}, vector, embedder FROM memories WHERE user_id = $1 "
                        "AND ended_at IS NULL ORDER BY id DESC LIMIT $2", user_id, SCAN_LIMIT)
    slot = _slot(draft.key)
    ended = [r for r in rows if r[0] == draft.supersedes
             or (slot is not None and r[2] == draft.kind and _slot(r[3]) == slot)]
    best, best_score, draft_words = None, match.MERGE_LEXICAL, match.words(draft.content)
    for r in rows:
        if mergeable(draft.kind, draft.key, r[2], r[3]) and r[0] != draft.supersedes:
            score = _similar(draft_words, vector, embedder, r)
            if score >= best_score:
                best, best_score = r, score
    if best is not None:
        merged = await _merge(db, to_memory(best), draft, confidence, terms, token_count, (ids, external),
                              (vector, embedder), at)
        await _end(db, user_id, [r[0] for r in ended if r[0] != merged.id], merged.id, at)
        return MemoryAdded(merged, "merged")
    blob = match.pack(vector) if vector is not None else None
    row = await db.one(INSERT, user_id, draft.kind, draft.key, draft.content, token_count, " ".join(terms),
                       draft.importance, confidence, draft.source, json.dumps(ids), json.dumps(external),
                       embedder if blob else None, blob, at, db.ts(draft.expires_at) if draft.expires_at else None)
    memory = to_memory(row)
    if not ended:
        return MemoryAdded(memory, "added")
    await _end(db, user_id, [r[0] for r in ended], memory.id, at)
    previous = to_memory(await db.one(f"SELECT {MEMORY_COLS} FROM memories WHERE id = $1", ended[0][0]))
    return MemoryAdded(memory, "superseded", previous)


async def _merge(db: Db, old: Memory, draft: MemoryDraft, confidence: float, terms: Sequence[str], token_count: int,
                 sources: tuple[list[int], list[str]], vector: tuple[Sequence[float] | None, str], at: Any) -> Memory:
    """The near-duplicate `old` absorbs the draft (see the module docstring)."""
    newer_wording = confidence >= old.confidence
    content, n_tokens, words = ((draft.content, token_count, terms) if newer_wording
                                else (old.content, old.token_count, old.terms))
    ids = sorted({*old.source_message_ids, *sources[0]})
    external = list(dict.fromkeys([*old.source_external_ids, *sources[1]]))
    expires = None if old.expires_at is None or draft.expires_at is None else max(old.expires_at, draft.expires_at)
    blob = match.pack(vector[0]) if vector[0] is not None and newer_wording else None
    # a new wording without its vector: the old vector no longer says what the row says (the embed job embeds it)
    stale = blob is None and content != old.content
    row = await db.one(
        "UPDATE memories SET content = $1, token_count = $2, terms = $3, confidence = $4, source = $5, "
        "importance = $6, key = coalesce(key, $7), source_message_ids = $8, source_external_ids = $9, "
        "expires_at = $10, updated_at = $11, vector = CASE WHEN $15::boolean THEN NULL ELSE coalesce($12, vector) "
        "END, embedder = CASE WHEN $15::boolean THEN NULL ELSE coalesce($13, embedder) END "
        f"WHERE id = $14 RETURNING {MEMORY_COLS}",
        content, n_tokens, " ".join(words), max(confidence, old.confidence), draft.source,
        max(draft.importance, old.importance), draft.key, json.dumps(ids), json.dumps(external),
        db.ts(expires) if expires else None, at, blob, vector[1] if blob else None, old.id, stale,
    )
    return to_memory(row)


async def absorb(db: Db, old: Memory, new: Memory, vector: Sequence[float] | None, embedder: str) -> Memory:
    """Two stored near-duplicates become one (the embed job's vector merge, memory/sql_memory_vectors.py): the
    older `old` absorbs `new` as `add` merges a draft (`_merge`: highest confidence and importance, the newest
    source, the union of source messages; `vector`: new's), then `new` is deleted and what it superseded points
    at `old`."""
    draft = MemoryDraft(new.content, new.kind, new.key, new.importance, new.source, new.confidence,
                        new.source_message_ids, new.token_count, new.expires_at)
    merged = await _merge(db, old, draft, new.confidence, new.terms, new.token_count,
                          (list(new.source_message_ids), list(new.source_external_ids)), (vector, embedder),
                          db.ts(db.clock()))
    await db.run("UPDATE memories SET superseded_by = $1 WHERE superseded_by = $2", old.id, new.id)
    await db.run("DELETE FROM memories WHERE id = $1 AND user_id = $2", new.id, new.user_id)
    return merged


async def _end(db: Db, user_id: int, ids: list[int], by: int, at: Any) -> None:
    if ids:
        await db.run("UPDATE memories SET ended_at = $1, updated_at = $1, superseded_by = $2 "
                     "WHERE user_id = $3 AND id = ANY($4::bigint[])", at, by, user_id, db.ids(ids))


async def listed(db: Db, user_id: int, include_ended: bool, limit: int | None) -> list[Memory]:
    """The person's memories, newest first (current ones only, unless `include_ended`)."""
    where = "" if include_ended else " AND ended_at IS NULL"
    rows = await db.all(f"SELECT {MEMORY_COLS} FROM memories WHERE user_id = $1{where} ORDER BY id DESC LIMIT $2",
                        user_id, limit if limit is not None else 2**62)
    return [to_memory(r) for r in rows]


async def get(db: Db, user_id: int, memory_id: int) -> Memory | None:
    row = await db.one(f"SELECT {MEMORY_COLS} FROM memories WHERE id = $1 AND user_id = $2", memory_id, user_id)
    return to_memory(row) if row is not None else None


async def find(db: Db, user_id: int, words: str) -> list[Memory]:
    """The current memories `words` name best (memory_match.best_matches): one, several close ones, or none."""
    current = await listed(db, user_id, False, SCAN_LIMIT)
    by_id = {m.id: m for m in current}
    return [by_id[i] for i in match.best_matches(words, [(m.id, m.terms) for m in current])]


async def forget_one(db: Db, user_id: int, memory_id: int) -> bool:
    """Delete one of the person's memories (its vector lives in its row; what it superseded stays ended)."""
    return await db.run("DELETE FROM memories WHERE id = $1 AND user_id = $2", memory_id, user_id) > 0


async def touch(db: Db, user_id: int, ids: Sequence[int], at: datetime) -> None:
    """The memories a context used: one more access each, last accessed `at`. One statement."""
    if ids:
        await db.run("UPDATE memories SET access_count = access_count + 1, last_accessed_at = $1 "
                     "WHERE user_id = $2 AND id = ANY($3::bigint[])", db.ts(at), user_id, db.ids(list(ids)))


async def expire(db: Db, threshold: float, idle_since: datetime) -> int:
    """End what expired (see the module docstring); the number ended."""
    now = db.ts(db.clock())
    return await db.run(
        "UPDATE memories SET ended_at = $1, updated_at = $1 WHERE ended_at IS NULL AND ("
        "(expires_at IS NOT NULL AND expires_at <= $1) OR "
        "(importance < $2 AND coalesce(last_accessed_at, created_at) < $3))", now, threshold, db.ts(idle_since),
    )
