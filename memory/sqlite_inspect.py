"""SQLite read-outs of everything about a person: `inspect`, deliveries, model calls (JSON-ready)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory.inspection import Inspection
from memory.sqlite_db import FACT_COLS, MSG_COLS, Db, message_json, to_message

CALL_COLS = (
    "id, message_id, model, provider, tokens_in, tokens_out, latency_ms, outcome, fallback_from, error, created_at"
)

DELIVERY_COLS = ("id", "message_id", "surface", "recipient", "part", "parts", "status", "provider_ref", "error",
                 "attempts", "created_at", "updated_at")


def deliveries_json(db: Db, user_id: int) -> list[dict[str, Any]]:
    rows = db.all(f"SELECT {', '.join(DELIVERY_COLS)} FROM deliveries WHERE user_id = ? ORDER BY id", (user_id,))
    return [dict(zip(DELIVERY_COLS, r, strict=True)) for r in rows]


def call_json(row: Sequence[Any]) -> dict[str, Any]:
    keys = [k.strip() for k in CALL_COLS.split(",")]
    return dict(zip(keys, row, strict=True))


def inspect_json(db: Db, handle: str) -> Inspection | None:
    user = db.one("SELECT id, handle, created_at FROM users WHERE handle = ?", (handle,))
    if user is None:
        return None
    uid = user[0]
    identities = db.all(
        "SELECT surface, external_user_id, created_at FROM identities WHERE user_id = ? ORDER BY id", (uid,)
    )
    conversations = db.all(
        "SELECT id, surface, title, singleton, external_ref, created_at, updated_at FROM conversations "
        "WHERE user_id = ? ORDER BY id", (uid,),
    )
    by_conversation: dict[int, list[dict[str, Any]]] = {c[0]: [] for c in conversations}
    for row in db.all(f"SELECT {MSG_COLS} FROM messages m WHERE m.user_id = ? ORDER BY m.id", (uid,)):
        by_conversation.setdefault(row[1], []).append(message_json(to_message(row)))
    facts = db.all(f"SELECT {FACT_COLS} FROM facts WHERE user_id = ? ORDER BY id", (uid,))
    calls = db.all(f"SELECT {CALL_COLS} FROM model_calls WHERE user_id = ? ORDER BY id", (uid,))
    return {
        "user": {"id": uid, "handle": user[1], "created_at": user[2]},
        "identities": [{"surface": s, "external_user_id": e, "created_at": t} for s, e, t in identities],
        "conversations": [
            {"id": c[0], "surface": c[1], "title": c[2], "singleton": bool(c[3]), "external_ref": c[4],
             "created_at": c[5], "updated_at": c[6], "messages": by_conversation[c[0]]}
            for c in conversations
        ],
        "facts": [{"id": f[0], "content": f[2], "token_count": f[3], "created_at": f[4]} for f in facts],
        "model_calls": [call_json(r) for r in calls],
        "deliveries": deliveries_json(db, uid),
        "identity_audit": [
            dict(zip(("action", "surface", "external_user_id", "actor", "detail", "created_at"), r, strict=True))
            for r in db.all("SELECT action, surface, external_user_id, actor, detail, created_at FROM identity_audit "
                            "WHERE user_id = ? ORDER BY id", (uid,))
        ],
    }
