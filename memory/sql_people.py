"""People, written once: opt-out, deliveries, conversations, and the read-outs of everything about a person
(`inspect`, model calls and the background jobs' record of theirs, deliveries: JSON-ready, timestamps as
fixed-width UTC text on both dialects)."""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import datetime
from typing import Any

from kernel.errors import NotFound
from kernel.types import ModelCallRecord
from memory import sql_summaries, tool_rows
from memory.inspection import Inspection
from memory.rows import MSG_COLS, Db, as_dt, to_message, to_ts
from memory.sql_turns import INSERT_CALL, identity_user
from memory.store import Delivery, Person, StoredMessage

CALL_KEYS = ("id", "message_id", "model", "provider", "tokens_in", "tokens_out", "latency_ms", "outcome",
             "fallback_from", "error", "created_at", "purpose", "cost_usd", "tokens_cached", "route")
DELIVERY_KEYS = ("id", "message_id", "surface", "recipient", "part", "parts", "status", "provider_ref", "error",
                 "attempts", "created_at", "updated_at")
AUDIT_KEYS = ("action", "surface", "external_user_id", "actor", "detail", "created_at")
IDENTITY_KEYS = ("surface", "external_user_id", "created_at")
CONVERSATION_KEYS = ("id", "surface", "title", "singleton", "external_ref", "created_at", "updated_at")
MEMORY_KEYS = ("id", "kind", "key", "content", "token_count", "importance", "confidence", "source",
               "source_message_ids", "source_external_ids", "created_at", "updated_at", "last_accessed_at",
               "access_count", "expires_at", "ended_at", "superseded_by")
#: How far along a sent part is; provider statuses that end badly rank last (nothing comes after them).
_DELIVERY_RANK = {"queued": 0, "accepted": 0, "scheduled": 0, "sending": 1, "sent": 2, "delivered": 3, "read": 4,
                  "undelivered": 5, "failed": 5}


def delivery_rank(status: str) -> int:
    return _DELIVERY_RANK.get(status, 2)


async def zone(db: Db, user_id: int, seen: str | None) -> str | None:
    """The person's time zone; `seen` (one their client named just now: the web widget's) is stored when it is new
    and answered (one statement either way)."""
    if seen is None:
        stored = await db.value("SELECT timezone FROM users WHERE id = $1", user_id)
        return None if stored is None else str(stored)
    await db.run("UPDATE users SET timezone = $1 WHERE id = $2 AND (timezone IS NULL OR timezone <> $1)",
                 seen, user_id)
    return seen


async def set_zone(db: Db, user_id: int, name: str | None) -> None:
    await db.run("UPDATE users SET timezone = $1 WHERE id = $2", name, user_id)


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


async def reply_of(db: Db, user_id: int, message_id: int) -> StoredMessage | None:
    """The assistant's reply to one of the user's messages, if one is stored (the last of the turn's assistant
    messages: its tool calls come before it, memory/tool_rows.py)."""
    rows = await db.all(f"SELECT {MSG_COLS} FROM messages m WHERE m.reply_to = $1 AND m.user_id = $2 "
                        "AND m.role = 'assistant' ORDER BY m.id DESC", message_id, user_id)
    return next((m for m in map(to_message, rows) if not tool_rows.calls_of(m)), None)


def jsonable(value: Any) -> Any:
    return to_ts(value) if isinstance(value, datetime) else value


async def records(db: Db, keys: tuple[str, ...], table: str, user_id: int) -> list[Any]:
    """The user's rows of `table`, oldest first, as {key: value} (timestamps as text)."""
    rows = await db.all(f"SELECT {', '.join(keys)} FROM {table} WHERE user_id = $1 ORDER BY id", user_id)
    return [{k: jsonable(v) for k, v in zip(keys, r, strict=True)} for r in rows]


async def calls_json(db: Db, user_id: int) -> list[dict[str, Any]]:
    return await records(db, CALL_KEYS, "model_calls", user_id)


async def record_calls(db: Db, user_id: int, purpose: str, calls: Sequence[ModelCallRecord]) -> None:
    """A background job's model calls for one person (no message: they answer no turn), as a turn's are kept."""
    if calls:
        at = db.ts(db.clock())
        await db.many(INSERT_CALL, [(None, user_id, c.model, c.provider, c.tokens_in, c.tokens_out, c.latency_ms,
                                     c.outcome, c.fallback_from, c.error, at, purpose, c.cost_usd, c.tokens_cached,
                                     c.route) for c in calls])


async def deliveries_json(db: Db, user_id: int) -> list[dict[str, Any]]:
    return await records(db, DELIVERY_KEYS, "deliveries", user_id)


async def inspect_json(db: Db, handle: str) -> Inspection | None:
    user = await db.one("SELECT id, handle, created_at FROM users WHERE handle = $1", handle)
    if user is None:
        return None
    uid = user[0]
    identities = await records(db, IDENTITY_KEYS, "identities", uid)
    conversations = await records(db, CONVERSATION_KEYS, "conversations", uid)
    by_conversation: dict[int, list[dict[str, Any]]] = {}
    for c in conversations:
        c["singleton"], c["messages"] = bool(c["singleton"]), by_conversation.setdefault(c["id"], [])
    rows = await db.all(f"SELECT {MSG_COLS} FROM messages m WHERE m.user_id = $1 ORDER BY m.id", uid)
    for m in map(to_message, rows):
        by_conversation.setdefault(m.conversation_id, []).append({
            "id": m.id, "role": m.role, "content": m.content, "surface": m.surface, "external_id": m.external_id,
            "token_count": m.token_count, "created_at": to_ts(m.created_at), "reply_to": m.reply_to,
            "metadata": m.metadata,
        })
    return {
        "user": {"id": uid, "handle": user[1], "created_at": jsonable(user[2])},
        "identities": identities,
        "conversations": conversations,
        "memories": [_memory_json(m) for m in await records(db, MEMORY_KEYS, "memories", uid)],
        "summaries": await sql_summaries.listed(db, uid),
        "model_calls": await calls_json(db, uid),
        "deliveries": await deliveries_json(db, uid),
        "identity_audit": await records(db, AUDIT_KEYS, "identity_audit", uid),
    }


def _memory_json(row: dict[str, Any]) -> Any:
    """A memories row as `hilo inspect --json` shows it: its short id, the JSON arrays as lists."""
    for key in ("source_message_ids", "source_external_ids"):
        value = row[key]
        row[key] = json.loads(value) if isinstance(value, str) else value
    return {"short_id": f"m{row['id']}", **row}


async def identities_of(db: Db, handle: str) -> list[tuple[str, str]] | None:
    user_id = await db.value("SELECT id FROM users WHERE handle = $1", handle)
    if user_id is None:
        return None
    rows = await db.all("SELECT surface, external_user_id FROM identities WHERE user_id = $1 ORDER BY id", user_id)
    return [(str(surface), str(ext)) for surface, ext in rows]


async def people_page(db: Db, after: int, limit: int) -> list[Person]:
    users = await db.all("SELECT id, handle, created_at FROM users WHERE id > $1 ORDER BY id LIMIT $2", after, limit)
    if not users:
        return []
    found: dict[int, list[tuple[str, str, datetime]]] = {int(u[0]): [] for u in users}
    for user_id, surface, ext, created in await db.all(
            "SELECT user_id, surface, external_user_id, created_at FROM identities WHERE user_id >= $1 "
            "AND user_id <= $2 ORDER BY id", users[0][0], users[-1][0]):
        found[int(user_id)].append((str(surface), str(ext), as_dt(created)))
    return [Person(int(uid), str(handle), as_dt(created), tuple(found[int(uid)])) for uid, handle, created in users]


async def erasures_through(db: Db, record: str) -> datetime | None:
    through = await db.value("SELECT through FROM erasure_marks WHERE record = $1", record)
    return None if through is None else as_dt(through)


async def mark_erasures(db: Db, record: str, through: datetime) -> None:
    await db.run("INSERT INTO erasure_marks (record, through) VALUES ($1, $2) "
                 "ON CONFLICT (record) DO UPDATE SET through = excluded.through", record, db.ts(through))
