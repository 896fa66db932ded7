"""The Postgres queries of a turn: ingest, load_context, finish_turn, and the bulk import.

The same rules as memory/sqlite_queries.py, statement for statement where it can be. Each function runs inside
ONE transaction opened by `PostgresStore` (READ COMMITTED for writes, REPEATABLE READ READ ONLY for reads).
SQLite serializes writers; Postgres does not, so the two places where that mattered take a transaction-scoped
advisory lock: the first contact of an identity (two deliveries of a new person's first message must not
make two users) and identity linking (memory/pg_linking.py).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kernel.errors import NotFound
from kernel.types import SINGLETON_SURFACES, InboundMessage, ModelCallRecord
from memory.pg_db import (
    FACT_COLS,
    MSG_COLS,
    PgDb,
    aware,
    rowcount,
    selective_terms,
    to_fact,
    to_message,
    tsquery_text,
)
from memory.sqlite_db import dump_metadata
from memory.sqlite_queries import RESUME_WINDOW, Rollback, _import_ref
from memory.store import ContextQuery, ContextRows, ImportResult, ImportRow, Ingested, StoredMessage

INSERT_USER = "INSERT INTO users(handle, created_at) VALUES ($1, $2) ON CONFLICT (handle) DO NOTHING RETURNING id"
UPSERT_SINGLETON = (
    "INSERT INTO conversations(user_id, surface, singleton, created_at, updated_at) VALUES ($1, $2, true, $3, $4) "
    "ON CONFLICT (user_id, surface) WHERE singleton "
    "DO UPDATE SET updated_at = greatest(conversations.updated_at, excluded.updated_at) RETURNING id"
)
UPSERT_BY_REF = (
    "INSERT INTO conversations(user_id, surface, singleton, title, external_ref, created_at, updated_at) "
    "VALUES ($1, $2, false, $3, $4, $5, $6) "
    "ON CONFLICT (user_id, surface, external_ref) WHERE external_ref IS NOT NULL "
    "DO UPDATE SET updated_at = greatest(conversations.updated_at, excluded.updated_at) RETURNING id"
)
INSERT_MESSAGE = (
    "INSERT INTO messages(conversation_id, user_id, surface, role, content, token_count, external_id, "
    "created_at, metadata, reply_to) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9::jsonb, $10) "
    "ON CONFLICT (surface, external_id) DO NOTHING RETURNING id"
)
INSERT_CALL = (
    "INSERT INTO model_calls(message_id, user_id, model, provider, tokens_in, tokens_out, latency_ms, outcome, "
    "fallback_from, error, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)"
)
#: Many messages in one statement (one round trip whatever the count); the status line counts the inserted.
IMPORT_MESSAGES = (
    "INSERT INTO messages(conversation_id, user_id, surface, role, content, token_count, external_id, created_at) "
    "SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], $4::text[], $5::text[], $6::int[], $7::text[], "
    "$8::timestamptz[]) ON CONFLICT (surface, external_id) DO NOTHING"
)
SELECT_IDENTITY = (
    "SELECT u.id, u.handle FROM identities i JOIN users u ON u.id = i.user_id "
    "WHERE i.surface = $1 AND i.external_user_id = $2"
)


async def user_by_handle(db: PgDb, handle: str, created_at: datetime, create: bool = True) -> tuple[int | None, bool]:
    """(user id, created now). The common case (a known person) is one statement."""
    row = await db.one("SELECT id FROM users WHERE handle = $1", handle)
    if row is not None or not create:
        return (row[0] if row else None), False
    row = await db.one(INSERT_USER, handle, created_at)
    if row is not None:
        return row[0], True
    # another transaction created it meanwhile: READ COMMITTED sees it in a new statement
    return (await db.one("SELECT id FROM users WHERE handle = $1", handle))[0], False


async def ingest(db: PgDb, msg: InboundMessage, token_count: int, now: datetime) -> Ingested:
    """Take one message in. A redelivery raises Rollback(None), or Rollback(turn to resume) when its turn never
    ran; a foreign conversation raises NotFound."""
    at = aware(msg.received_at)
    created = False
    if msg.handle:
        handle = msg.handle
        user_id, created = await user_by_handle(db, handle, at)
    else:
        row = await db.one(SELECT_IDENTITY, msg.surface, msg.sender)
        if row is None:
            row = await _lock_identity(db, msg.surface, msg.sender)
        if row is not None:
            user_id, handle = row
        else:
            user_id, handle = await _first_contact(db, msg.surface, msg.sender, at)
            created = True
    assert user_id is not None
    conversation_id = await _conversation(db, msg, user_id, at)
    metadata = dump_metadata(msg.metadata)
    row = await db.one(
        INSERT_MESSAGE, conversation_id, user_id, msg.surface, "user", msg.text, token_count, msg.external_id, at,
        metadata, None,
    )
    if row is None:  # (surface, external_id) already stored: undo the user/conversation work
        raise Rollback(await _unanswered(db, msg, user_id, now))
    stored = StoredMessage(
        id=row[0], conversation_id=conversation_id, user_id=user_id, surface=msg.surface, role="user",
        content=msg.text, token_count=token_count, external_id=msg.external_id, created_at=at,
        metadata=json.loads(metadata),
    )
    return Ingested(user_id=user_id, handle=handle, conversation_id=conversation_id, message=stored,
                    created_user=created)


async def _lock_identity(db: PgDb, surface: str, sender: str) -> Any:
    """Serialize first contacts of one identity (until commit), then look again: a concurrent transaction may
    have created it while this one waited."""
    await db.run("SELECT pg_advisory_xact_lock(hashtextextended($1, 0))", f"identity\x1f{surface}\x1f{sender}")
    return await db.one(SELECT_IDENTITY, surface, sender)


async def _unanswered(db: PgDb, msg: InboundMessage, user_id: int, now: datetime) -> Ingested | None:
    """A redelivered message: None (drop it) if its turn ran, or the stored turn to resume if it never did."""
    row = await db.one(
        f"SELECT {MSG_COLS}, u.handle FROM messages m JOIN users u ON u.id = m.user_id "
        # only the sender's own message: an id collision must never hand one person's turn to another
        "WHERE m.surface = $1 AND m.external_id = $2 AND m.user_id = $3 AND m.role = 'user' AND m.created_at >= $4 "
        "AND NOT EXISTS (SELECT 1 FROM model_calls c WHERE c.message_id = m.id) "
        "AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.reply_to = m.id)",
        msg.surface, msg.external_id, user_id, now - RESUME_WINDOW,
    )
    if row is None:
        return None
    stored = to_message(row)
    return Ingested(user_id=stored.user_id, handle=row[-1], conversation_id=stored.conversation_id,
                    message=stored, resumed=True)


async def _first_contact(db: PgDb, surface: str, sender: str, at: datetime) -> tuple[int, str]:
    """A NEW user named after the surface, and the identity that finds it next time (the caller holds the
    identity's advisory lock). A taken handle gets a suffix, never the existing user."""
    user_id, handle = await new_user(db, f"{surface}:{sender}", at)
    await db.run(
        "INSERT INTO identities(surface, external_user_id, user_id, created_at) VALUES ($1, $2, $3, $4)",
        surface, sender, user_id, at,
    )
    return user_id, handle


async def new_user(db: PgDb, base_handle: str, at: datetime) -> tuple[int, str]:
    """A new user named `base_handle`, or `base_handle~2`, `~3`... when taken. Returns (id, handle)."""
    handle, n = base_handle, 1
    while (row := await db.one(INSERT_USER, handle, at)) is None:
        n += 1
        handle = f"{base_handle}~{n}"
    return int(row[0]), handle


async def identity_user(db: PgDb, surface: str, sender: str, at: datetime) -> int:
    """The user of an identity, created on first contact."""
    row = await db.one(SELECT_IDENTITY, surface, sender)
    if row is None:
        row = await _lock_identity(db, surface, sender)
    return int(row[0]) if row is not None else (await _first_contact(db, surface, sender, at))[0]


async def _conversation(db: PgDb, msg: InboundMessage, user_id: int, at: datetime) -> int:
    if msg.surface in SINGLETON_SURFACES:
        if msg.conversation_ref is None:
            return int((await db.one(UPSERT_SINGLETON, user_id, msg.surface, at, at))[0])
        # A named place on a singleton surface (a Telegram group): the person's own conversation there.
        return int((await db.one(UPSERT_BY_REF, user_id, msg.surface, None, msg.conversation_ref, at, at))[0])
    if msg.conversation_ref is None:
        title = msg.text.strip().split("\n", 1)[0][:60] or None
        return int(await db.value(
            "INSERT INTO conversations(user_id, surface, singleton, title, created_at, updated_at) "
            "VALUES ($1, $2, false, $3, $4, $5) RETURNING id", user_id, msg.surface, title, at, at,
        ))
    try:
        ref = int(msg.conversation_ref)
    except ValueError:
        raise NotFound(f"conversation {msg.conversation_ref!r}") from None
    if not -(2**63) <= ref < 2**63:
        raise NotFound(f"conversation {msg.conversation_ref!r}")
    row = await db.one(
        "UPDATE conversations SET updated_at = greatest(updated_at, $1) "
        "WHERE id = $2 AND user_id = $3 AND surface = $4 RETURNING id", at, ref, user_id, msg.surface,
    )
    if row is None:  # not theirs, or gone: never say which
        raise NotFound(f"conversation {msg.conversation_ref!r}")
    return int(row[0])


async def load_context(db: PgDb, q: ContextQuery) -> ContextRows:
    """Facts, the current conversation, cross-surface turns and lexical recall (plus one term-frequency read
    when there is something to search), in one snapshot."""
    cur = q.current_message_id
    at, since = aware(q.at), aware(q.cross_since)
    facts = [to_fact(r) for r in reversed(await db.all(
        f"SELECT {FACT_COLS} FROM facts WHERE user_id = $1 ORDER BY id DESC LIMIT $2", q.user_id, q.facts_limit,
    ))]
    conversation: list[StoredMessage] = []
    if q.conversation_id is not None and q.recent_limit > 0:
        # Queued turns (user messages stored after the current one) are excluded; assistant messages stay.
        rows = await db.all(
            f"SELECT {MSG_COLS} FROM messages m WHERE m.conversation_id = $1 AND m.user_id = $2 "
            "AND m.created_at <= $3 AND ($4::bigint IS NULL OR (m.id <> $4 AND (m.role <> 'user' OR m.id < $4))) "
            "ORDER BY m.id DESC LIMIT $5",
            q.conversation_id, q.user_id, at, cur, q.recent_limit,
        )
        conversation = [to_message(r) for r in rows]
        # A reply sorts right after the message it answers, even when a queued turn was stored in between.
        conversation.sort(key=lambda m: (m.reply_to if m.reply_to is not None else m.id, m.id))
    cross: list[StoredMessage] = []
    if q.cross_limit > 0:
        rows = await db.all(
            f"SELECT {MSG_COLS} FROM messages m WHERE m.user_id = $1 AND m.created_at >= $2 "
            "AND m.created_at <= $3 AND m.surface <> $4 AND m.conversation_id IS DISTINCT FROM $5::bigint "
            "ORDER BY m.created_at DESC, m.id DESC LIMIT $6",
            q.user_id, since, at, q.surface, q.conversation_id, q.cross_limit,
        )
        cross = [to_message(r) for r in reversed(rows)]
    recalled: list[StoredMessage] = []
    match = tsquery_text(await selective_terms(db, q.search_text)) if q.search_limit > 0 else None
    if match is not None:
        excluded = [m.id for m in conversation] + [m.id for m in cross] + ([cur] if cur is not None else [])
        rows = await db.all(
            f"SELECT {MSG_COLS} FROM messages m, to_tsquery('simple', $1) AS query "
            # the owner's token ANDed in: the GIN index skips other people's rows (see 0003_messages_fts.sql)
            "WHERE m.search @@ (query && quote_literal('_u' || $2::bigint::text)::tsquery) "
            "AND m.user_id = $2 AND m.created_at <= $3 AND m.id <> ALL($4::bigint[]) "
            "AND ($5::bigint IS NULL OR NOT (m.conversation_id IS NOT DISTINCT FROM $6::bigint "
            "AND m.role = 'user' AND m.id > $5)) "
            "ORDER BY ts_rank(m.search, query) DESC, m.id DESC LIMIT $7",
            match, q.user_id, at, excluded, cur, q.conversation_id, q.search_limit,
        )
        recalled = [to_message(r) for r in rows]
    return ContextRows(facts=facts, conversation=conversation, cross_surface=cross, recalled=recalled)


async def finish_turn(
    db: PgDb, turn: Ingested, reply: str | None, reply_tokens: int, calls: Sequence[ModelCallRecord],
    metadata: dict[str, Any] | None, now: datetime,
) -> StoredMessage | None:
    """The reply, the usage rows and the conversation's updated_at, together (`now`: the store's clock)."""
    at = max(now, turn.message.created_at)  # a reply never sorts before what it answers
    msg = turn.message
    stored: StoredMessage | None = None
    if reply is not None:
        meta = dump_metadata(metadata)
        row = await db.one(
            INSERT_MESSAGE, turn.conversation_id, turn.user_id, msg.surface, "assistant", reply, reply_tokens, None,
            at, meta, msg.id,
        )
        stored = StoredMessage(
            id=row[0], conversation_id=turn.conversation_id, user_id=turn.user_id, surface=msg.surface,
            role="assistant", content=reply, token_count=reply_tokens, external_id=None, created_at=at,
            metadata=json.loads(meta), reply_to=msg.id,
        )
    if calls:
        await db.many(INSERT_CALL, [
            (msg.id, turn.user_id, c.model, c.provider, c.tokens_in, c.tokens_out, c.latency_ms, c.outcome,
             c.fallback_from, c.error, at) for c in calls
        ])
    await db.run("UPDATE conversations SET updated_at = greatest(updated_at, $1) WHERE id = $2 AND user_id = $3",
                 at, turn.conversation_id, turn.user_id)
    return stored


async def import_rows(db: PgDb, rows: Sequence[ImportRow]) -> ImportResult:
    """Many messages at once: a few statements per (user, conversation), one INSERT ... unnest for the rows."""
    if not rows:
        return ImportResult(inserted=0, skipped=0)
    users: dict[str, int] = {}
    span: dict[tuple[str, str, str | None], tuple[datetime, datetime]] = {}  # conversation key -> (first, last)
    stamps = [aware(r.created_at) for r in rows]
    for row, at in zip(rows, stamps, strict=True):
        if row.user not in users:
            uid, _ = await user_by_handle(db, row.user, at)
            assert uid is not None
            users[row.user] = uid
        key = (row.user, row.surface, _import_ref(row))
        first, last = span.get(key, (at, at))
        span[key] = (min(first, at), max(last, at))
    conversations: dict[tuple[str, str, str | None], int] = {}
    for key, (first, last) in span.items():
        handle, surface, ref = key
        if ref is None:
            found = await db.one(UPSERT_SINGLETON, users[handle], surface, first, last)
        else:
            found = await db.one(UPSERT_BY_REF, users[handle], surface, ref, ref, first, last)
        conversations[key] = int(found[0])
    keys = [(r.user, r.surface, _import_ref(r)) for r in rows]
    status = await db.conn.execute(
        IMPORT_MESSAGES, [conversations[k] for k in keys], [users[r.user] for r in rows],
        [r.surface for r in rows], [r.role for r in rows], [r.content for r in rows],
        [r.token_count for r in rows], [r.external_id for r in rows], stamps,
    )
    db.counters["statements"] += 1
    inserted = rowcount(status)
    return ImportResult(inserted=inserted, skipped=len(rows) - inserted)
