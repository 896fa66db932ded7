"""A person's export, written once: everything stored about them as JSON (GDPR articles 15 and 20: `hilo export`,
`/export`, `GET /api/export`).

It is `hilo inspect --json`'s record (memory/sql_people.py inspect_json: the same sections, row for row), plus,
under `tables`, the columns of those rows that the record does not show (a delivery's queued text, an
identity's opt-out, a column a later migration adds), by id, and every other row of every table with a `user_id`
column, read from the database's catalogue (`Db.tables`: a table a
later migration adds is exported the day it exists), plus the rows keyed by one of their identities (the
inbound-delivery records, failed link attempts). Vectors are never exported as numbers: a `vector` column shows as
true (the row keeps one) or false, beside its row's embedder and dimension, which the export names; full-text
columns (`search`) are left out: both are derived from the messages and memories that are exported whole.
"""

from __future__ import annotations

import base64
from datetime import datetime
from decimal import Decimal
from typing import Any

from memory.rows import Db, to_ts
from memory.sql_people import (
    AUDIT_KEYS,
    CALL_KEYS,
    CONVERSATION_KEYS,
    DELIVERY_KEYS,
    IDENTITY_KEYS,
    MEMORY_KEYS,
    inspect_json,
)

FORMAT = "hilo-export"
VERSION = 1
#: Tables whose rows are sections of the inspection record already, and the columns it shows of them.
INSPECTED = {
    "users": ("id", "handle", "created_at"), "identities": IDENTITY_KEYS, "conversations": CONVERSATION_KEYS,
    "messages": ("id", "conversation_id", "surface", "role", "content", "token_count", "external_id", "created_at",
                 "metadata", "reply_to"),
    "memories": MEMORY_KEYS, "model_calls": CALL_KEYS, "deliveries": DELIVERY_KEYS, "identity_audit": AUDIT_KEYS,
}
#: Columns derived from others and never exported: full-text vectors and stems.
LEFT_OUT = frozenset({"search", "terms"})
VECTORS = ("vectors are not exported as numbers: each `vector` is true where the row keeps one (of the row's "
           "`embedder` and `dim`), false where not; they are derived from the texts exported here")


async def export_json(db: Db, handle: str) -> dict[str, Any] | None:
    """Everything about `handle`, JSON-ready; None when nobody has that handle."""
    inspected = await inspect_json(db, handle)
    if inspected is None:
        return None
    user_id = inspected["user"]["id"]
    catalogue = await db.tables()
    tables: dict[str, list[dict[str, Any]]] = {}
    for table, columns in catalogue.items():
        where = "id = $1" if table == "users" else "user_id = $1"
        if table in INSPECTED:  # what the record leaves out of its rows: by id (or the identity's key)
            extra = [c for c in columns if c not in INSPECTED[table] and c not in LEFT_OUT and c != "user_id"]
            keys = ["id"] if "id" in columns else list(INSPECTED[table][:2])
            if extra:
                tables[table] = await _rows(db, table, keys + extra, where, user_id)
        elif "user_id" in columns:
            tables[table] = await _rows(db, table, columns, where, user_id)
    by_identity: dict[str, list[dict[str, Any]]] = {"inbound": [], "link_failures": []}
    for i in inspected["identities"]:
        ident = (i["surface"], i["external_user_id"])
        by_identity["inbound"] += await _rows(db, "inbound", catalogue["inbound"], "surface = $1 AND sender = $2",
                                              *ident)
        by_identity["link_failures"] += await _rows(db, "link_failures", catalogue["link_failures"],
                                                    "surface = $1 AND external_user_id = $2", *ident)
    return {"format": FORMAT, "version": VERSION, "exported_at": to_ts(db.clock()), "vectors": VECTORS,
            **inspected, "tables": tables, **by_identity}


async def _rows(db: Db, table: str, columns: list[str], where: str, *args: Any) -> list[dict[str, Any]]:
    keys = [c for c in columns if c not in LEFT_OUT]
    chosen = ", ".join("(vector IS NOT NULL)" if c == "vector" else c for c in keys)
    order = "id" if "id" in keys else "1"
    rows = await db.all(f"SELECT {chosen} FROM {table} WHERE {where} ORDER BY {order}", *args)
    return [{k: bool(v) if k == "vector" else plain(v) for k, v in zip(keys, r, strict=True)} for r in rows]


def plain(value: Any) -> Any:
    """A column's value as JSON takes it: timestamps as the fixed-width UTC text of the inspection record,
    numerics as numbers, bytes (none expected: vectors are not read) as base64."""
    if isinstance(value, datetime):
        return to_ts(value)
    if isinstance(value, Decimal):
        return float(value)
    if isinstance(value, bytes | memoryview):
        return base64.b64encode(bytes(value)).decode()
    return value
