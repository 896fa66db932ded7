"""People, written once: opt-out, deliveries, conversations, and the read-outs of everything about a person
(`inspect`, model calls, deliveries: JSON-ready, timestamps as fixed-width UTC text on both dialects)."""

from __future__ import annotations

from typing import Any

from kernel.errors import NotFound
from memory.inspection import Inspection
from memory.rows import (
    AUDIT_KEYS,
    CALL_KEYS,
    DELIVERY_KEYS,
    FACT_COLS,
    MSG_COLS,
    Db,
    jsonable,
    message_json,
    record_json,
    to_message,
)
from memory.sql_turns import identity_user
from memory.store import Delivery, StoredMessage

#: How far along a sent part is; provider statuses that end badly rank last (nothing comes after them).
_DELIVERY_RANK = {"queued": 0, "accepted": 0, "scheduled": 0, "sending": 1, "sent": 2, "delivered": 3, "read": 4,
                  "undelivered": 5, "failed": 5}


def delivery_rank(status: str) -> int:
    return _DELIVERY_RANK.get(status, 2)


async def set_opt_out(db: Db, surface: str, ext: str, opted_out: bool) -> int:
    now = db.ts(db.clock())
    user_id = await identity_user(db, surface, ext, now)
    await db.run("UPDATE identities SET opted_out_at = $1 WHERE surface = $2 AND external_user_id = $3",
                 now if opted_out else None, surface, ext)
    return user_id


async def record_delivery(db: Db, d: Delivery) -> int:
    now = db.ts(db.clock())
    return int(await db.value(
        "INSERT INTO deliveries(user_id, message_id, surface, recipient, part, parts, status, provider_ref, "
        "error, attempts, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) "
        "RETURNING id", d.user_id, d.message_id, d.surface, d.recipient, d.part, d.parts, d.status, d.provider_ref,
        d.error, d.attempts, now, now,
    ))


async def update_delivery(db: Db, surface: str, provider_ref: str, status: str, error: str | None) -> bool:
    # FOR UPDATE (Postgres): concurrent callbacks of one part take turns, so the rank check below holds
    rows = await db.all("SELECT status FROM deliveries WHERE surface = $1 AND provider_ref = $2 ORDER BY id FOR UPDATE",
                        surface, provider_ref)
    if not rows:
        return False
    # Callbacks can arrive out of order ("sent" after "delivered"): a status never moves backwards.
    if delivery_rank(status) >= delivery_rank(rows[0][0]):
        await db.run("UPDATE deliveries SET status = $1, error = coalesce($2, error), updated_at = $3 "
                     "WHERE surface = $4 AND provider_ref = $5", status, error, db.ts(db.clock()), surface,
                     provider_ref)
    return True


async def messages(db: Db, user_id: int, conversation_id: int, limit: int) -> list[StoredMessage]:
    if await db.one("SELECT 1 FROM conversations WHERE id = $1 AND user_id = $2", conversation_id, user_id) is None:
        raise NotFound(f"conversation {conversation_id}")
    rows = await db.all(f"SELECT {MSG_COLS} FROM messages m WHERE m.conversation_id = $1 AND m.user_id = $2 "
                        "ORDER BY m.id DESC LIMIT $3", conversation_id, user_id, limit)
    return [to_message(r) for r in reversed(rows)]


async def calls_json(db: Db, user_id: int) -> list[dict[str, Any]]:
    rows = await db.all(f"SELECT {', '.join(CALL_KEYS)} FROM model_calls WHERE user_id = $1 ORDER BY id", user_id)
    return [record_json(CALL_KEYS, r) for r in rows]


async def deliveries_json(db: Db, user_id: int) -> list[dict[str, Any]]:
    rows = await db.all(f"SELECT {', '.join(DELIVERY_KEYS)} FROM deliveries WHERE user_id = $1 ORDER BY id", user_id)
    return [record_json(DELIVERY_KEYS, r) for r in rows]


async def inspect_json(db: Db, handle: str) -> Inspection | None:
    user = await db.one("SELECT id, handle, created_at FROM users WHERE handle = $1", handle)
    if user is None:
        return None
    uid = user[0]
    identities = await db.all(
        "SELECT surface, external_user_id, created_at FROM identities WHERE user_id = $1 ORDER BY id", uid,
    )
    conversations = await db.all(
        "SELECT id, surface, title, singleton, external_ref, created_at, updated_at FROM conversations "
        "WHERE user_id = $1 ORDER BY id", uid,
    )
    by_conversation: dict[int, list[dict[str, Any]]] = {c[0]: [] for c in conversations}
    for row in await db.all(f"SELECT {MSG_COLS} FROM messages m WHERE m.user_id = $1 ORDER BY m.id", uid):
        by_conversation.setdefault(row[1], []).append(message_json(to_message(row)))
    facts = await db.all(f"SELECT {FACT_COLS} FROM facts WHERE user_id = $1 ORDER BY id", uid)
    audit = await db.all(f"SELECT {', '.join(AUDIT_KEYS)} FROM identity_audit WHERE user_id = $1 ORDER BY id", uid)
    return {
        "user": {"id": uid, "handle": user[1], "created_at": jsonable(user[2])},
        "identities": [{"surface": s, "external_user_id": e, "created_at": jsonable(t)} for s, e, t in identities],
        "conversations": [
            {"id": c[0], "surface": c[1], "title": c[2], "singleton": bool(c[3]), "external_ref": c[4],
             "created_at": jsonable(c[5]), "updated_at": jsonable(c[6]), "messages": by_conversation[c[0]]}
            for c in conversations
        ],
        "facts": [{"id": f[0], "content": f[2], "token_count": f[3], "created_at": jsonable(f[4])} for f in facts],
        "model_calls": await calls_json(db, uid),
        "deliveries": await deliveries_json(db, uid),
        "identity_audit": [record_json(AUDIT_KEYS, r) for r in audit],
    }
