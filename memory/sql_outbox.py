"""The outbox, written once: a reply's parts queued as `deliveries` rows (migration 0020), claimed per recipient
in order, and their fate; plus recovery's look-up of stored messages that were never answered.

A part is a `deliveries` row: 'pending' (queued, or waiting for its next attempt at `next_at`), 'sending' (claimed
by a sender until `lease_until`), then 'sent' (with the provider's id; the provider's later statuses follow, as
before) or 'failed'. The head of a recipient is its lowest undelivered id: only a head is ever claimed, so a
recipient's parts go out one at a time, in order, whichever process sends them. The claim is one write
transaction: SELECT ... FOR UPDATE SKIP LOCKED of the due heads (Postgres: a second claimer skips the rows the
first holds, and a later part is no head while an earlier one is undelivered), then the UPDATE that leases them;
SQLite spells the lock clause away (BEGIN IMMEDIATE serializes writers). A 'sending' part whose lease expired
(its process died mid-send) is claimed again: see docs/architecture.md, "The outbox", for why it is sent again.
"""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import Any

from kernel.types import OutboxItem, Outgoing
from memory.rows import MSG_COLS, Db, as_dt, to_message, unanswered_sql
from memory.store import Ingested

_INSERT = (
    "INSERT INTO deliveries(user_id, message_id, surface, recipient, part, parts, status, body, reply_to, "
    "attempts, next_at, created_at, updated_at, template) "
    "VALUES ($1, $2, $3, $4, $5, $6, 'pending', $7, $8, 0, $9, $9, $9, $10) RETURNING id"
)
#: The due heads of `surface` ($1 now, $2 surface, $3 limit): a recipient's lowest undelivered part, pending and
#: due, or sending with an expired lease.
_HEADS = (
    "SELECT d.id FROM deliveries d WHERE d.surface = $2 AND d.status IN ('pending', 'sending') "
    "AND ((d.status = 'pending' AND (d.next_at IS NULL OR d.next_at <= $1)) "
    "OR (d.status = 'sending' AND d.lease_until < $1)) "
    "AND NOT EXISTS (SELECT 1 FROM deliveries e WHERE e.surface = d.surface AND e.recipient = d.recipient "
    "AND e.status IN ('pending', 'sending') AND e.id < d.id) "
    "ORDER BY d.id LIMIT $3 FOR UPDATE SKIP LOCKED"
)
_LEASE = (
    "UPDATE deliveries SET status = 'sending', lease_owner = $2, lease_until = $3, attempts = attempts + 1, "
    "updated_at = $4 WHERE id = ANY($1::bigint[]) "
    "RETURNING id, user_id, message_id, surface, recipient, part, parts, body, reply_to, attempts, template"
)
_DONE = ("UPDATE deliveries SET status = $2, provider_ref = $3, error = $4, next_at = $5, lease_owner = NULL, "
         "lease_until = NULL, updated_at = $6 WHERE id = $1 AND status = 'sending' AND lease_owner = $7")
_RENEW = "UPDATE deliveries SET lease_until = $3 WHERE id = $1 AND status = 'sending' AND lease_owner = $2"
_NEXT_DUE = ("SELECT min(CASE WHEN status = 'pending' THEN coalesce(next_at, created_at) ELSE lease_until END) "
             "FROM deliveries WHERE surface = $1 AND status IN ('pending', 'sending')")


async def enqueue(db: Db, user_id: int, message_id: int | None, out: Outgoing) -> list[int]:
    """Queue `out`'s parts (one row each, in order); their ids."""
    at = db.ts(db.clock())
    n = len(out.parts)
    return [int(await db.value(_INSERT, user_id, message_id, out.surface, out.recipient, i, n, text,
                               out.reply_to if i == 1 else None, at, out.template))
            for i, text in enumerate(out.parts, 1)]


async def claim(db: Db, surface: str, owner: str, ttl: float, limit: int) -> list[OutboxItem]:
    """Lease up to `limit` due heads of `surface` (at most one per recipient) to `owner` for `ttl` s."""
    now = db.clock()
    ids = [int(r[0]) for r in await db.all(_HEADS, db.ts(now), surface, limit)]
    if not ids:
        return []
    rows = await db.all(_LEASE, db.ids(ids), owner, db.ts(now + timedelta(seconds=ttl)), db.ts(now))
    items = [OutboxItem(int(r[0]), int(r[1]), r[2], r[3], r[4], int(r[5]), int(r[6]), r[7] or "", r[8], int(r[9]),
                        r[10]) for r in rows]
    return sorted(items, key=lambda i: i.id)


async def settle(db: Db, item_id: int, owner: str, status: str, provider_ref: str | None, error: str | None,
                 retry_at: datetime | None) -> bool:
    """A claimed part's fate: 'sent' (provider_ref), 'failed' (error), or 'pending' again until `retry_at`.
    False when `owner` no longer holds it (its lease expired and another sender took it over)."""
    changed = await db.run(_DONE, item_id, status, provider_ref, error,
                           db.ts(retry_at) if retry_at is not None else None, db.ts(db.clock()), owner)
    return changed > 0


async def renew(db: Db, item_id: int, owner: str, ttl: float) -> bool:
    """Extend `owner`'s lease on a part it is sending to `ttl` s from now; False when it no longer holds it."""
    return await db.run(_RENEW, item_id, owner, db.ts(db.clock() + timedelta(seconds=ttl))) > 0


async def next_due(db: Db, surface: str) -> datetime | None:
    """When the next undelivered part of `surface` is due (a lease's end for one being sent), or None."""
    value = await db.value(_NEXT_DUE, surface)
    return as_dt(value) if value is not None else None


async def undelivered(db: Db, surface: str, recipient: str) -> int:
    """How many parts of `recipient` on `surface` are not delivered yet (pending or being sent)."""
    return int(await db.value("SELECT count(*) FROM deliveries WHERE surface = $1 AND recipient = $2 "
                              "AND status IN ('pending', 'sending')", surface, recipient))


async def backlog(db: Db) -> tuple[int, datetime | None]:
    """How many parts are undelivered (pending or being sent), and the oldest one's queueing time (the partial
    index deliveries_queue holds exactly these rows)."""
    rows = await db.all("SELECT count(*), min(created_at) FROM deliveries WHERE status IN ('pending', 'sending')")
    count, oldest = rows[0]
    return int(count), as_dt(oldest) if oldest is not None else None


async def pending(db: Db, user_id: int) -> list[dict[str, Any]]:
    """The user's undelivered parts (for tests and read-outs)."""
    rows = await db.all("SELECT id, surface, recipient, part, parts, status, attempts, body FROM deliveries "
                        "WHERE user_id = $1 AND status IN ('pending', 'sending') ORDER BY id", user_id)
    keys = ("id", "surface", "recipient", "part", "parts", "status", "attempts", "text")
    return [dict(zip(keys, r, strict=True)) for r in rows]


#: Stored messages of people that were never answered ($1 oldest, $2 newest, $3 now, $4 limit): no reply, no
#: model call, and no live turn on their conversation (its turn lease free or expired: memory/turn_lease.py).
#: Only messages that name where their reply goes (bot/outbox.py ROUTE, kept by every live surface), so not
#: imported history; the web's reply is stored for the conversation's next read (the web sends nothing).
_UNANSWERED = (
    f"SELECT {MSG_COLS}, u.handle FROM messages m JOIN users u ON u.id = m.user_id "
    "JOIN conversations c ON c.id = m.conversation_id "
    "WHERE m.role = 'user' AND m.created_at >= $1 AND m.created_at <= $2 "
    "AND m.metadata::text LIKE '%\"reply_route\"%' "
    "AND (c.turn_owner IS NULL OR c.turn_expires_at < $3) "
    f"AND {unanswered_sql('m')} "
    "ORDER BY m.id LIMIT $4"
)


_ONE = (
    f"SELECT {MSG_COLS}, u.handle FROM messages m JOIN users u ON u.id = m.user_id WHERE m.id = $1 "
    f"AND m.role = 'user' AND {unanswered_sql('m')}"
)


def _turn(row: Any) -> Ingested:
    m = to_message(row[:-1])
    return Ingested(user_id=m.user_id, handle=row[-1], conversation_id=m.conversation_id, message=m, resumed=True)


async def stored_turn(db: Db, message_id: int) -> Ingested | None:
    """One stored message with no reply and no model call, as a turn to resume; None otherwise."""
    row = await db.one(_ONE, message_id)
    return None if row is None else _turn(row)


async def unanswered(db: Db, grace: float, window: float, limit: int) -> list[Ingested]:
    """Messages stored between `window` and `grace` seconds ago whose turn never ran (or died), oldest first,
    as turns to resume."""
    now = db.clock()
    rows = await db.all(_UNANSWERED, db.ts(now - timedelta(seconds=window)), db.ts(now - timedelta(seconds=grace)),
                        db.ts(now), limit)
    return [_turn(r) for r in rows]
