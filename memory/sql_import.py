"""The bulk import's transaction (`Store.import_rows`, one batch of `hilo import`), written once for both dialects.

A batch: the rows already stored skipped (one indexed look-up per surface), then its people, its conversations
(one per (person, surface) on a singleton surface, else per (person, surface, conversation key)), the episodes of
its messages (memory/episodes.py) and the messages in one bulk insert. How the people, conversations and episodes
are written is an `ImportWrites`: ONE_BY_ONE is a statement each (SQLite, where a statement costs no round trip);
Postgres writes each kind with one set-based statement (memory/pg_import.py), the same rows.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from typing import Any

from kernel.types import SINGLETON_SURFACES
from memory import episodes
from memory.rows import Db
from memory.sql_turns import UPSERT_BY_REF, UPSERT_SINGLETON, user_by_handle
from memory.stems import index_terms
from memory.store import ImportResult, ImportRow

#: A batch's conversation: (person's handle, surface, conversation key: None on a singleton surface).
ConversationKey = tuple[str, str, str | None]
#: A conversation to upsert: its key -> (its person's id, the batch's first and last moment in it).
Spans = dict[ConversationKey, tuple[int, Any, Any]]


@dataclass(frozen=True, slots=True)
class ImportWrites:
    """How a batch's people (handle -> the batch's first moment of theirs: handle -> id, created when new),
    conversations (Spans: key -> id, upserted, updated_at at least the last moment) and episodes are written."""

    users: Callable[[Db, dict[str, Any]], Awaitable[dict[str, int]]]
    conversations: Callable[[Db, Spans], Awaitable[dict[ConversationKey, int]]]
    episodes: episodes.RunWriter


async def users_each(db: Db, first: dict[str, Any]) -> dict[str, int]:
    ids: dict[str, int] = {}
    for handle, at in first.items():
        uid, _ = await user_by_handle(db, handle, at)
        assert uid is not None
        ids[handle] = uid
    return ids


async def conversations_each(db: Db, spans: Spans) -> dict[ConversationKey, int]:
    found: dict[ConversationKey, int] = {}
    for key, (user_id, first, last) in spans.items():
        _, surface, ref = key
        if ref is None:
            found[key] = int(await db.value(UPSERT_SINGLETON, user_id, surface, first, last))
        else:
            found[key] = int(await db.value(UPSERT_BY_REF, user_id, surface, ref, ref, first, last))
    return found


ONE_BY_ONE = ImportWrites(users_each, conversations_each, episodes.write_each)


async def import_rows(db: Db, rows: Sequence[ImportRow], writes: ImportWrites = ONE_BY_ONE) -> ImportResult:
    """Many messages at once: their people, conversations and episodes by `writes`, one bulk insert for the rows."""
    if not rows:
        return ImportResult(inserted=0, skipped=0)
    given = len(rows)
    rows = await _not_stored(db, rows)
    if not rows:
        return ImportResult(inserted=0, skipped=given)
    stamps = [db.ts(r.created_at) for r in rows]
    keys = [(r.user, r.surface, _import_ref(r)) for r in rows]
    first_seen: dict[str, Any] = {}
    span: dict[ConversationKey, tuple[Any, Any]] = {}  # conversation key -> (first, last)
    for row, key, at in zip(rows, keys, stamps, strict=True):
        first_seen.setdefault(row.user, at)
        first, last = span.get(key, (at, at))
        span[key] = (min(first, at), max(last, at))
    users = await writes.users(db, first_seen)
    conversations = await writes.conversations(db, {k: (users[k[0]], *s) for k, s in span.items()})
    terms = [r.terms if r.terms is not None else index_terms(r.content) for r in rows]
    placed, touched = await episodes.assign(db, [
        episodes.Placed(conversations[k], users[r.user], r.surface, r.created_at, r.token_count, t)
        for r, k, t in zip(rows, keys, terms, strict=True)
    ], writes.episodes)
    inserted = await db.insert_messages([
        (conversations[k], users[r.user], r.surface, r.role, r.content, r.token_count, r.external_id, at, t,
         episode)
        for r, k, at, t, episode in zip(rows, keys, stamps, terms, placed, strict=True)
    ])
    if inserted < len(rows):  # some were stored already: count each message once
        await episodes.refresh(db, touched)
    return ImportResult(inserted=inserted, skipped=given - inserted)


_STORED = "SELECT external_id FROM messages WHERE surface = $1 AND external_id = ANY($2::text[])"


async def _not_stored(db: Db, rows: Sequence[ImportRow]) -> Sequence[ImportRow]:
    """The rows whose (surface, external_id) is not stored yet, one indexed look-up per surface: a re-run or a
    resumed import skips what is stored before any other work (episodes, index terms, the insert)."""
    keyed: dict[str, list[str]] = {}
    for r in rows:
        if r.external_id is not None:
            keyed.setdefault(r.surface, []).append(r.external_id)
    stored: set[tuple[str, str]] = set()
    for surface, ids in keyed.items():
        stored.update((surface, row[0]) for row in await db.all(_STORED, surface, db.ids(ids)))
    if not stored:
        return rows
    return [r for r in rows if (r.surface, r.external_id) not in stored]


def _import_ref(row: ImportRow) -> str | None:
    """None for a singleton surface; else the conversation key of the line ("imported" when absent)."""
    return None if row.surface in SINGLETON_SURFACES else (row.conversation or "imported")
