"""Postgres read-outs of everything about a person: `inspect`, deliveries, model calls (JSON-ready).

The same shapes as memory/sqlite_inspect.py, timestamps rendered as the same fixed-width UTC text.
"""

from __future__ import annotations

from typing import Any

from memory.inspection import Inspection
from memory.pg_db import FACT_COLS, MSG_COLS, PgDb, jsonable, record_json, to_message
from memory.sqlite_db import message_json
from memory.sqlite_inspect import CALL_COLS, DELIVERY_COLS

CALL_KEYS = [k.strip() for k in CALL_COLS.split(",")]
AUDIT_KEYS = ("action", "surface", "external_user_id", "actor", "detail", "created_at")


async def calls_json(db: PgDb, user_id: int) -> list[dict[str, Any]]:
    rows = await db.all(f"SELECT {CALL_COLS} FROM model_calls WHERE user_id = $1 ORDER BY id", user_id)
    return [record_json(CALL_KEYS, r) for r in rows]


async def deliveries_json(db: PgDb, user_id: int) -> list[dict[str, Any]]:
    rows = await db.all(f"SELECT {', '.join(DELIVERY_COLS)} FROM deliveries WHERE user_id = $1 ORDER BY id", user_id)
    return [record_json(DELIVERY_COLS, r) for r in rows]


async def inspect_json(db: PgDb, handle: str) -> Inspection | None:
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
    audit = await db.all(
        f"SELECT {', '.join(AUDIT_KEYS)} FROM identity_audit WHERE user_id = $1 ORDER BY id", uid,
    )
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
