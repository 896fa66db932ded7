"""Inbound-delivery records (migration 0023): each (surface, external_id) that is not a turn, recorded once.

A turn's message is deduplicated by messages' UNIQUE (surface, external_id). Everything else a surface acts on
(a command, a refusal, STOP / START) is recorded here BEFORE the platform is acknowledged and before the
command runs: `record` is True the first time, False for a redelivery, also after a restart or in another
process (the primary key decides). `purge` deletes records older than the retention (the cleanup job): a
platform redelivers for a day at most (Telegram keeps updates 24 h; Twilio does not retry by default).

Written once over the dialect's `Db` (memory/rows.py), like the rest of the store.
"""

from __future__ import annotations

from datetime import timedelta

from memory.rows import Db

_RECORD = (
    "INSERT INTO inbound(surface, external_id, kind, created_at, sender) VALUES ($1, $2, $3, $4, $5) "
    "ON CONFLICT (surface, external_id) DO NOTHING RETURNING 1"
)
_PURGE = "DELETE FROM inbound WHERE created_at < $1"


async def record(db: Db, surface: str, external_id: str, kind: str, sender: str | None = None) -> bool:
    """Record one delivery; True the first time (surface, external_id) is seen, False for a redelivery.
    `sender`: the identity it came from (migration 0029), so that forgetting the person deletes it."""
    return await db.one(_RECORD, surface, external_id, kind, db.ts(db.clock()), sender) is not None


async def purge(db: Db, older_than: timedelta) -> int:
    """Delete the records older than `older_than`; their number."""
    return await db.run(_PURGE, db.ts(db.clock() - older_than))
