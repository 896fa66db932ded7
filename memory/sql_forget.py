"""Forgetting a person, written once: every row of theirs, in every table, counted (`hilo forget` prints the
counts, `/forget yes` deletes the same).

The tables are not a hand list: every table of the schema with a `user_id` column, read from the database's own
catalogue (`Db.user_tables`), is counted and then cleared of the person's rows, so a table a later migration adds
is covered the day it exists (ON DELETE CASCADE from users takes most of them; the explicit DELETE catches a table
without that foreign key). The tables that key a row by the person's identity instead of their id are cleared by
identity: the inbound-delivery records (`sender`, migration 0029), the link audit rows written before an identity
had a person, the rate limits' counters (keyed by a digest of the visitor id: kernel/digests.py), and the failed
link attempts. A link lockout still in force stays, under a digest that no longer names the identity, until it
ends (`/forget` must not reset a code guesser's lockout); one that ended goes.
"""

from __future__ import annotations

from typing import Any

from kernel.digests import kept_lockout, rate_subject
from memory.rows import Db

#: The tables keyed by identity, in the order they are cleared (counted under these names).
BY_IDENTITY = ("inbound", "identity_audit", "link_failures", "rate_counters")


async def erase(db: Db, handle: str) -> dict[str, int] | None:
    """Delete everything about the person `handle`: {table: rows deleted} (tables with none left out), or None
    when nobody has that handle."""
    user_id = await db.value("SELECT id FROM users WHERE handle = $1", handle)
    if user_id is None:
        return None
    identities = await db.all("SELECT surface, external_user_id FROM identities WHERE user_id = $1", user_id)
    tables = [t for t, columns in (await db.tables()).items() if "user_id" in columns and t != "users"]
    counts: dict[str, int] = {"users": 1}
    for table in tables:
        counts[table] = int(await db.value(f"SELECT count(*) FROM {table} WHERE user_id = $1", user_id))
    for table in BY_IDENTITY:
        counts[table] = counts.get(table, 0)
    now = db.ts(db.clock())
    for surface, ext in identities:
        counts["inbound"] += await db.run("DELETE FROM inbound WHERE surface = $1 AND sender = $2", surface, ext)
        counts["identity_audit"] += await db.run(
            "DELETE FROM identity_audit WHERE user_id IS NULL AND surface = $1 AND external_user_id = $2",
            surface, ext)
        counts["link_failures"] += await _failures(db, surface, ext, now)
        counts["rate_counters"] += await db.run("DELETE FROM rate_counters WHERE key LIKE $1",
                                                f"%:{rate_subject(ext)}")
    await db.run("DELETE FROM users WHERE id = $1", user_id)
    for table in tables:  # what no cascade took (a table whose user_id has no foreign key)
        await db.run(f"DELETE FROM {table} WHERE user_id = $1", user_id)
    return {table: n for table, n in sorted(counts.items()) if n}


async def _failures(db: Db, surface: str, ext: str, now: Any) -> int:
    """The identity's failed link attempts: gone, except a lockout in force, kept under a digest until it ends."""
    await db.run("DELETE FROM link_failures WHERE surface = $1 AND external_user_id = $2", surface, kept_lockout(ext))
    kept = await db.run("UPDATE link_failures SET external_user_id = $1 WHERE surface = $2 AND external_user_id = $3 "
                        "AND locked_until > $4", kept_lockout(ext), surface, ext, now)
    return kept + await db.run("DELETE FROM link_failures WHERE surface = $1 AND external_user_id = $2", surface, ext)
