"""The SQLite queries of a turn: ingest, load_context, finish_turn, and the bulk import.

Each function runs on the store's worker thread inside ONE transaction opened by `SqliteStore` (BEGIN
IMMEDIATE for writes, BEGIN for reads) and uses as few statements as it can: the common turn is three
statements to take a message in, four to read its context, three to keep the reply.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from kernel.errors import HiloError, NotFound
from kernel.types import SINGLETON_SURFACES, InboundMessage, ModelCallRecord
from memory.sqlite_db import (
    FACT_COLS,
    MSG_COLS,
    Db,
    dump_metadata,
    from_ts,
    fts_query,
    selective_terms,
    to_fact,
    to_message,
    to_ts,
)
from memory.store import ContextQuery, ContextRows, ImportResult, ImportRow, Ingested, StoredMessage

#: A redelivered message whose turn never ran is answered if it arrived this recently; older ones (imported
#: history, a redelivery days later) are only dropped.
RESUME_WINDOW = timedelta(hours=1)


class Rollback(HiloError):
    """Raised inside a transaction to roll it back and hand `value` to the caller."""

    def __init__(self, value: Any = None) -> None:
        super().__init__("rollback")
        self.value = value


INSERT_USER = "INSERT INTO users(handle, created_at) VALUES (?, ?) ON CONFLICT(handle) DO NOTHING RETURNING id"
UPSERT_SINGLETON = (
    "INSERT INTO conversations(user_id, surface, singleton, created_at, updated_at) VALUES (?, ?, 1, ?, ?) "
    "ON CONFLICT(user_id, surface) WHERE singleton = 1 "
    "DO UPDATE SET updated_at = max(updated_at, excluded.updated_at) RETURNING id"
)
UPSERT_BY_REF = (
    "INSERT INTO conversations(user_id, surface, singleton, title, external_ref, created_at, updated_at) "
    "VALUES (?, ?, 0, ?, ?, ?, ?) "
    "ON CONFLICT(user_id, surface, external_ref) WHERE external_ref IS NOT NULL "
    "DO UPDATE SET updated_at = max(updated_at, excluded.updated_at) RETURNING id"
)
INSERT_MESSAGE = (
    "INSERT INTO messages(conversation_id, user_id, surface, role, content, token_count, external_id, "
    "created_at, metadata, reply_to) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?) "
    "ON CONFLICT(surface, external_id) DO NOTHING"
)
INSERT_CALL = (
    "INSERT INTO model_calls(message_id, user_id, model, provider, tokens_in, tokens_out, latency_ms, outcome, "
    "fallback_from, error, created_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)


def user_by_handle(db: Db, handle: str, created_at: str, create: bool = True) -> tuple[int | None, bool]:
    """(user id, created now). The common case (a known person) is one statement."""
    row = db.one("SELECT id FROM users WHERE handle = ?", (handle,))
    if row is not None or not create:
        return (row[0] if row else None), False
    row = db.one(INSERT_USER, (handle, created_at))
    if row is not None:
        return row[0], True
    return db.one("SELECT id FROM users WHERE handle = ?", (handle,))[0], False  # pragma: no cover (race)


def ingest(db: Db, msg: InboundMessage, token_count: int, now: datetime) -> Ingested:
    """Take one message in. A redelivery raises Rollback(None), or Rollback(turn to resume) when its turn never
    ran; a foreign conversation raises NotFound."""
    at = to_ts(msg.received_at)
    created = False
    if msg.handle:
        handle = msg.handle
        user_id, created = user_by_handle(db, handle, at)
    else:
        row = db.one(
            "SELECT u.id, u.handle FROM identities i JOIN users u ON u.id = i.user_id "
            "WHERE i.surface = ? AND i.external_user_id = ?", (msg.surface, msg.sender),
        )
        if row is not None:
            user_id, handle = row
        else:
            user_id, handle = _first_contact(db, msg.surface, msg.sender, at)
            created = True
    assert user_id is not None
    conversation_id = _conversation(db, msg, user_id, at)
    metadata = dump_metadata(msg.metadata)
    row = db.one(
        INSERT_MESSAGE + " RETURNING id",
        (conversation_id, user_id, msg.surface, "user", msg.text, token_count, msg.external_id, at, metadata,
         None),
    )
    if row is None:  # (surface, external_id) already stored: undo the user/conversation work
        raise Rollback(_unanswered(db, msg, user_id, now))
    stored = StoredMessage(
        id=row[0], conversation_id=conversation_id, user_id=user_id, surface=msg.surface, role="user",
        content=msg.text, token_count=token_count, external_id=msg.external_id,
        created_at=from_ts(at),
        metadata=json.loads(metadata),
    )
    return Ingested(user_id=user_id, handle=handle, conversation_id=conversation_id, message=stored,
                    created_user=created)


def _unanswered(db: Db, msg: InboundMessage, user_id: int, now: datetime) -> Ingested | None:
    """A redelivered message: None (drop it) if its turn ran, or the stored turn to resume if it never did
    (the process died between storing the message and calling the model: the person still deserves an answer)."""
    row = db.one(
        f"SELECT {MSG_COLS}, u.handle FROM messages m JOIN users u ON u.id = m.user_id "
        # only the sender's own message: an id collision must never hand one person's turn to another
        "WHERE m.surface = ? AND m.external_id = ? AND m.user_id = ? AND m.role = 'user' AND m.created_at >= ? "
        "AND NOT EXISTS (SELECT 1 FROM model_calls c WHERE c.message_id = m.id) "
        "AND NOT EXISTS (SELECT 1 FROM messages r WHERE r.reply_to = m.id)",
        (msg.surface, msg.external_id, user_id, to_ts(now - RESUME_WINDOW)),
    )
    if row is None:
        return None
    stored = to_message(row)
    return Ingested(user_id=stored.user_id, handle=row[-1], conversation_id=stored.conversation_id,
                    message=stored, resumed=True)


def _first_contact(db: Db, surface: str, sender: str, at: str) -> tuple[int, str]:
    """A NEW user named after the surface, and the identity that finds it next time. The handle may be taken
    (the identity was unlinked, or linked and forgotten): then it gets a suffix, never the existing user."""
    user_id, handle = new_user(db, f"{surface}:{sender}", at)
    db.run(
        "INSERT INTO identities(surface, external_user_id, user_id, created_at) VALUES (?, ?, ?, ?)",
        (surface, sender, user_id, at),
    )
    return user_id, handle


def new_user(db: Db, base_handle: str, at: str) -> tuple[int, str]:
    """A new user named `base_handle`, or `base_handle~2`, `~3`... when taken. Returns (id, handle)."""
    handle, n = base_handle, 1
    while (row := db.one(INSERT_USER, (handle, at))) is None:
        n += 1
        handle = f"{base_handle}~{n}"
    return int(row[0]), handle


def identity_user(db: Db, surface: str, sender: str, at: str) -> int:
    """The user of an identity, created on first contact."""
    row = db.one("SELECT user_id FROM identities WHERE surface = ? AND external_user_id = ?", (surface, sender))
    return int(row[0]) if row is not None else _first_contact(db, surface, sender, at)[0]


def _conversation(db: Db, msg: InboundMessage, user_id: int, at: str) -> int:
    if msg.surface in SINGLETON_SURFACES:
        if msg.conversation_ref is None:
            return int(db.one(UPSERT_SINGLETON, (user_id, msg.surface, at, at))[0])
        # A named place on a singleton surface (a Telegram group): the person's own conversation there.
        return int(db.one(UPSERT_BY_REF, (user_id, msg.surface, None, msg.conversation_ref, at, at))[0])
    if msg.conversation_ref is None:
        title = msg.text.strip().split("\n", 1)[0][:60] or None
        return int(db.one(
            "INSERT INTO conversations(user_id, surface, singleton, title, created_at, updated_at) "
            "VALUES (?, ?, 0, ?, ?, ?) RETURNING id", (user_id, msg.surface, title, at, at),
        )[0])
    try:
        ref = int(msg.conversation_ref)
    except ValueError:
        raise NotFound(f"conversation {msg.conversation_ref!r}") from None
    row = db.one(
        "UPDATE conversations SET updated_at = max(updated_at, ?) "
        "WHERE id = ? AND user_id = ? AND surface = ? RETURNING id", (at, ref, user_id, msg.surface),
    )
    if row is None:  # not theirs, or gone: never say which
        raise NotFound(f"conversation {msg.conversation_ref!r}")
    return int(row[0])


def load_context(db: Db, q: ContextQuery) -> ContextRows:
    """Facts, the current conversation, cross-surface turns and lexical recall: four SELECTs."""
    at = to_ts(q.at)
    cur = q.current_message_id
    facts = [to_fact(r) for r in reversed(db.all(
        f"SELECT {FACT_COLS} FROM facts WHERE user_id = ? ORDER BY id DESC LIMIT ?", (q.user_id, q.facts_limit),
    ))]
    conversation: list[StoredMessage] = []
    if q.conversation_id is not None and q.recent_limit > 0:
        # Queued turns (user messages stored after the current one) are excluded; assistant messages stay.
        rows = db.all(
            # '+' keeps the planner on (conversation_id, id), newest first, whatever the statistics say.
            f"SELECT {MSG_COLS} FROM messages m WHERE m.conversation_id = :conv AND +m.user_id = :uid "
            "AND +m.created_at <= :at AND (:cur IS NULL OR (m.id <> :cur AND (m.role <> 'user' OR m.id < :cur))) "
            "ORDER BY m.id DESC LIMIT :lim",
            {"conv": q.conversation_id, "uid": q.user_id, "at": at, "cur": cur, "lim": q.recent_limit},
        )
        conversation = [to_message(r) for r in rows]
        # A reply sorts right after the message it answers, even when a queued turn was stored in between.
        conversation.sort(key=lambda m: (m.reply_to if m.reply_to is not None else m.id, m.id))
    cross: list[StoredMessage] = []
    if q.cross_limit > 0:
        rows = db.all(
            f"SELECT {MSG_COLS} FROM messages m WHERE m.user_id = :uid AND m.created_at >= :since "
            "AND m.created_at <= :at AND m.surface <> :surface AND m.conversation_id IS NOT :conv "
            "ORDER BY m.created_at DESC, m.id DESC LIMIT :lim",
            {"uid": q.user_id, "since": to_ts(q.cross_since), "at": at, "surface": q.surface,
             "conv": q.conversation_id, "lim": q.cross_limit},
        )
        cross = [to_message(r) for r in reversed(rows)]
    recalled: list[StoredMessage] = []
    match = fts_query("", q.user_id, selective_terms(db, q.search_text)) if q.search_limit > 0 else None
    if match is not None:
        excluded = [m.id for m in conversation] + [m.id for m in cross] + ([cur] if cur is not None else [])
        # CROSS JOIN keeps FTS5 as the outer loop: rank the matches, then look each row up by id.
        rows = db.all(
            f"SELECT {MSG_COLS} FROM messages_fts f CROSS JOIN messages m ON m.id = f.rowid "
            "WHERE messages_fts MATCH :match AND m.user_id = :uid AND m.created_at <= :at "
            "AND m.id NOT IN (SELECT value FROM json_each(:excluded)) "
            "AND (:cur IS NULL OR NOT (m.conversation_id IS :conv AND m.role = 'user' AND m.id > :cur)) "
            "ORDER BY bm25(messages_fts, 1.0, 0.0), m.id DESC LIMIT :lim",
            {"match": match, "uid": q.user_id, "at": at, "excluded": json.dumps(excluded), "cur": cur,
             "conv": q.conversation_id, "lim": q.search_limit},
        )
        recalled = [to_message(r) for r in rows]
    return ContextRows(facts=facts, conversation=conversation, cross_surface=cross, recalled=recalled)


def finish_turn(
    db: Db, turn: Ingested, reply: str | None, reply_tokens: int, calls: Sequence[ModelCallRecord],
    metadata: dict[str, Any] | None, now: datetime,
) -> StoredMessage | None:
    """The reply, the usage rows and the conversation's updated_at, together (`now`: the store's clock)."""
    moment = max(now, turn.message.created_at)  # a reply never sorts before what it answers
    at = to_ts(moment)
    msg = turn.message
    stored: StoredMessage | None = None
    if reply is not None:
        meta = dump_metadata(metadata)
        row = db.one(
            INSERT_MESSAGE + " RETURNING id",
            (turn.conversation_id, turn.user_id, msg.surface, "assistant", reply, reply_tokens, None, at, meta,
             msg.id),
        )
        stored = StoredMessage(
            id=row[0], conversation_id=turn.conversation_id, user_id=turn.user_id, surface=msg.surface,
            role="assistant", content=reply, token_count=reply_tokens, external_id=None, created_at=moment,
            metadata=json.loads(meta), reply_to=msg.id,
        )
    if calls:
        db.many(INSERT_CALL, [
            (msg.id, turn.user_id, c.model, c.provider, c.tokens_in, c.tokens_out, c.latency_ms, c.outcome,
             c.fallback_from, c.error, at) for c in calls
        ])
    db.run("UPDATE conversations SET updated_at = max(updated_at, ?) WHERE id = ? AND user_id = ?",
           (at, turn.conversation_id, turn.user_id))
    return stored


def import_rows(db: Db, rows: Sequence[ImportRow]) -> ImportResult:
    """Many messages at once: a few statements per (user, conversation), one executemany for the rows."""
    if not rows:
        return ImportResult(inserted=0, skipped=0)
    stamps = [to_ts(r.created_at) for r in rows]
    users: dict[str, int] = {}
    span: dict[tuple[str, str, str | None], tuple[str, str]] = {}  # conversation key -> (first, last)
    for row, at in zip(rows, stamps, strict=True):
        if row.user not in users:
            uid, _ = user_by_handle(db, row.user, at)
            assert uid is not None
            users[row.user] = uid
        key = (row.user, row.surface, _import_ref(row))
        first, last = span.get(key, (at, at))
        span[key] = (min(first, at), max(last, at))
    conversations: dict[tuple[str, str, str | None], int] = {}
    for key, (first, last) in span.items():
        handle, surface, ref = key
        if ref is None:
            found = db.one(UPSERT_SINGLETON, (users[handle], surface, first, last))
        else:
            found = db.one(UPSERT_BY_REF, (users[handle], surface, ref, ref, first, last))
        conversations[key] = int(found[0])
    inserted = db.many(INSERT_MESSAGE, [
        (conversations[(r.user, r.surface, _import_ref(r))], users[r.user], r.surface, r.role, r.content,
         r.token_count, r.external_id, at, "{}", None) for r, at in zip(rows, stamps, strict=True)
    ])
    return ImportResult(inserted=inserted, skipped=len(rows) - inserted)


def _import_ref(row: ImportRow) -> str | None:
    """None for a singleton surface; else the conversation key of the line ("imported" when absent)."""
    return None if row.surface in SINGLETON_SURFACES else (row.conversation or "imported")
