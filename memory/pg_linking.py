"""Postgres side of identity linking: memory/sqlite_linking.py, statement for statement.

Every function runs inside one transaction opened by PostgresStore and first takes one transaction-scoped
advisory lock shared by all linking work, so that codes, lockout counters and merges see each other's
effects in order, as SQLite's single writer guarantees (linking is rare: the lock costs nothing that matters).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from kernel.types import SINGLETON_SURFACES
from memory.pg_db import PgDb
from memory.pg_queries import INSERT_MESSAGE, UPSERT_SINGLETON, identity_user, new_user
from memory.sqlite_db import dump_metadata, to_ts
from memory.sqlite_linking import CODE_COLS, NOTICE, code_owner
from memory.store import LinkPolicy, Redemption, StoredMessage

#: The advisory lock key of linking work ('hilo' 'lnk' in ASCII).
LINK_LOCK_KEY = 0x68696C6F_6C6E6B

Key = tuple[str, str]


async def lock(db: PgDb) -> None:
    await db.run("SELECT pg_advisory_xact_lock($1)", LINK_LOCK_KEY)


async def audit(db: PgDb, user_id: int | None, action: str, surface: str, ext: str, actor: str, at: datetime,
                detail: str | None = None) -> None:
    await db.run(
        "INSERT INTO identity_audit(user_id, action, surface, external_user_id, actor, detail, created_at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7)", user_id, action, surface, ext, actor, detail, at,
    )


async def issue_code(db: PgDb, surface: str, ext: str, code_hash: str, at: datetime, expires_at: datetime,
                     owner: tuple[str | None, str | None, str | None] = (None, None, None)) -> int:
    """A new code for the identity's user (created on first contact); older unused codes of the identity die.
    `owner`: (display name, language, conversation ref) of the person asking."""
    await lock(db)
    user_id = await identity_user(db, surface, ext, at)
    await db.run("UPDATE link_codes SET used_at = $1 WHERE surface = $2 AND external_user_id = $3 "
                 "AND used_at IS NULL", at, surface, ext)
    await db.run(
        "INSERT INTO link_codes(code_hash, user_id, surface, external_user_id, created_at, expires_at, owner_name, "
        "language, conversation_ref) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        code_hash, user_id, surface, ext, at, expires_at, *owner,
    )
    await audit(db, user_id, "code_issued", surface, ext, "person", at)
    return user_id


async def _locked_until(db: PgDb, keys: list[Key], at: datetime) -> datetime | None:
    """The latest lockout end among `keys` still in force, or None."""
    ends = []
    for surface, ext in keys:
        row = await db.one("SELECT locked_until FROM link_failures WHERE surface = $1 AND external_user_id = $2",
                           surface, ext)
        if row and row[0] and row[0] > at:
            ends.append(row[0])
    return max(ends) if ends else None


async def under_pressure(db: PgDb, window_start: datetime, policy: LinkPolicy) -> bool:
    """Whether everyone's wrong codes of the window reached the global cap (address rows not counted again)."""
    total = await db.value("SELECT coalesce(sum(failures), 0) FROM link_failures WHERE window_start >= $1 "
                           "AND surface <> 'ip'", window_start)
    return bool(total >= policy.global_max_failures)


async def _fail(db: PgDb, keys: list[Key], at: datetime, policy: LinkPolicy) -> datetime | None:
    """Count a wrong code against every key; returns the lockout end when this failure locks one of them.
    Under pressure a key is locked sooner and longer."""
    window_start = at - timedelta(seconds=policy.failure_window_s)
    pressure = await under_pressure(db, window_start, policy)
    limit = policy.pressure_max_failures if pressure else policy.max_failures
    lock_until = at + timedelta(seconds=policy.pressure_lockout_s if pressure else policy.lockout_s)
    locked = None
    for surface, ext in keys:
        failures = await db.value(
            "INSERT INTO link_failures(surface, external_user_id, failures, window_start) VALUES ($1, $2, 1, $3) "
            "ON CONFLICT (surface, external_user_id) DO UPDATE SET "
            "failures = CASE WHEN link_failures.window_start < $4 THEN 1 ELSE link_failures.failures + 1 END, "
            "window_start = CASE WHEN link_failures.window_start < $4 THEN excluded.window_start "
            "ELSE link_failures.window_start END RETURNING failures",
            surface, ext, at, window_start,
        )
        if failures >= limit:
            await db.run("UPDATE link_failures SET locked_until = $1 WHERE surface = $2 AND external_user_id = $3",
                         lock_until, surface, ext)
            locked = lock_until
    return locked


async def redeem_code(
    db: PgDb, surface: str, ext: str, code_hash: str, at: datetime, policy: LinkPolicy, also: Key | None = None,
    confirm: bool = False,
) -> Redemption:
    """One step of redeeming a code (Store.redeem_link_code); see memory/sqlite_linking.py."""
    await lock(db)
    keys: list[Key] = [(surface, ext)] + ([also] if also else [])
    window_start = at - timedelta(seconds=policy.failure_window_s)
    await db.run("DELETE FROM link_failures WHERE window_start < $1 AND (locked_until IS NULL OR locked_until <= $2)",
                 window_start, at)
    locked = await _locked_until(db, keys, at)
    row = await db.one(f"SELECT {CODE_COLS} FROM link_codes WHERE code_hash = $1", code_hash)
    if locked is not None:
        if row is not None:  # a right code from a locked identity still uses one of the code's attempts
            await _spend_attempt(db, row[0], at, policy)
        await audit(db, None, "link_refused_locked", surface, ext, "person", at)
        return Redemption("locked", locked_until=locked)
    if row is None or row[5] is not None or row[4] <= at:
        newly_locked = await _fail(db, keys, at, policy)
        if newly_locked:
            await audit(db, None, "lockout", surface, ext, "person", at, f"until {to_ts(newly_locked)}")
            return Redemption("locked", locked_until=newly_locked)
        return Redemption("invalid")
    code_id, owner = row[0], code_owner(row)
    if (owner.surface, owner.external_user_id) == (surface, ext):
        await _spend_attempt(db, code_id, at, policy)
        return Redemption("own_code")
    current = await db.value("SELECT user_id FROM identities WHERE surface = $1 AND external_user_id = $2",
                             surface, ext)
    if current == owner.user_id:
        await db.run("UPDATE link_codes SET used_at = $1 WHERE id = $2", at, code_id)
        return Redemption("already_linked", owner.user_id, owner=owner)
    if not (confirm and (row[7], row[8]) == (surface, ext)):
        await db.run("UPDATE link_codes SET prompted_surface = $1, prompted_external_user_id = $2 WHERE id = $3",
                     surface, ext, code_id)
        await _spend_attempt(db, code_id, at, policy)
        await audit(db, owner.user_id, "link_prompted", surface, ext, "person", at)
        return Redemption("prompt", owner=owner)
    await db.run("UPDATE link_codes SET used_at = $1 WHERE id = $2", at, code_id)
    await merge_users(db, await identity_user(db, surface, ext, at), owner.user_id)
    await audit(db, owner.user_id, "linked", surface, ext, "person", at, f"code requested on {owner.surface}")
    return Redemption("linked", owner.user_id, owner=owner)


async def _spend_attempt(db: PgDb, code_id: int, at: datetime, policy: LinkPolicy) -> None:
    await db.run("UPDATE link_codes SET attempts = attempts + 1, "
                 "used_at = CASE WHEN attempts + 1 >= $1 THEN $2 ELSE used_at END WHERE id = $3",
                 policy.max_code_attempts, at, code_id)


async def merge_users(db: PgDb, src: int, dst: int) -> None:
    """Everything of user `src` becomes `dst`'s; `src` is deleted. Conversations that would collide (the
    same singleton surface, the same named place) are merged message by message."""
    for conv_id, surface, singleton, ref in await db.all(
        "SELECT id, surface, singleton, external_ref FROM conversations WHERE user_id = $1 ORDER BY id", src,
    ):
        target = None
        if singleton:
            target = await db.one("SELECT id FROM conversations WHERE user_id = $1 AND surface = $2 AND singleton",
                                  dst, surface)
        elif ref is not None:
            target = await db.one("SELECT id FROM conversations WHERE user_id = $1 AND surface = $2 "
                                  "AND external_ref = $3", dst, surface, ref)
        if target is not None:
            await db.run("UPDATE messages SET conversation_id = $1 WHERE conversation_id = $2", target[0], conv_id)
            await db.run("DELETE FROM conversations WHERE id = $1", conv_id)
        else:
            await db.run("UPDATE conversations SET user_id = $1 WHERE id = $2", dst, conv_id)
    # the search index needs nothing: recall filters on messages.user_id itself
    for table in ("messages", "facts", "model_calls", "deliveries", "identities", "link_codes", "identity_audit"):
        await db.run(f"UPDATE {table} SET user_id = $1 WHERE user_id = $2", dst, src)
    await db.run("DELETE FROM users WHERE id = $1", src)


async def link_identity(db: PgDb, handle: str, surface: str, ext: str, actor: str, at: datetime) -> int | None:
    """Operator link: the identity (created if new) joins the user with `handle`. None if no such user."""
    await lock(db)
    row = await db.one("SELECT id FROM users WHERE handle = $1", handle)
    if row is None:
        return None
    dst = int(row[0])
    current = await identity_user(db, surface, ext, at)
    if current != dst:
        await merge_users(db, current, dst)
        await audit(db, dst, "linked", surface, ext, actor, at)
    return dst


async def unlink_identity(db: PgDb, surface: str, ext: str, actor: str, at: datetime) -> tuple[str, int | None]:
    """(status, new user id). status: unlinked | unknown | only_identity."""
    await lock(db)
    row = await db.one("SELECT user_id FROM identities WHERE surface = $1 AND external_user_id = $2", surface, ext)
    if row is None:
        return "unknown", None
    old = int(row[0])
    if await db.value("SELECT count(*) FROM identities WHERE user_id = $1", old) <= 1:
        return "only_identity", None
    new, _ = await new_user(db, f"{surface}:{ext}", at)
    await db.run("UPDATE identities SET user_id = $1 WHERE surface = $2 AND external_user_id = $3", new, surface, ext)
    await db.run("UPDATE link_codes SET used_at = $1 WHERE surface = $2 AND external_user_id = $3 "
                 "AND used_at IS NULL", at, surface, ext)
    await audit(db, old, "unlinked", surface, ext, actor, at, f"now user {new}")
    await audit(db, new, "unlinked", surface, ext, actor, at, f"was user {old}")
    return "unlinked", new


async def post_notice(db: PgDb, user_id: int, surface: str, ref: str | None, text: str, token_count: int,
                      at: datetime) -> StoredMessage:
    """Store.post_notice: an assistant message in the user's conversation on `surface`."""
    if surface in SINGLETON_SURFACES:
        conv = int((await db.one(UPSERT_SINGLETON, user_id, surface, at, at))[0])
    else:
        found = None
        if ref is not None and ref.isdigit() and len(ref) < 19:  # not the user's (or not a number): their latest
            found = await db.value("SELECT id FROM conversations WHERE id = $1 AND user_id = $2 AND surface = $3",
                                   int(ref), user_id, surface)
        found = found or await db.value("SELECT id FROM conversations WHERE user_id = $1 AND surface = $2 "
                                        "ORDER BY updated_at DESC, id DESC LIMIT 1", user_id, surface)
        found = found or await db.value("INSERT INTO conversations(user_id, surface, singleton, created_at, "
                                        "updated_at) VALUES ($1, $2, false, $3, $4) RETURNING id",
                                        user_id, surface, at, at)
        conv = int(found)
        await db.run("UPDATE conversations SET updated_at = greatest(updated_at, $1) WHERE id = $2", at, conv)
    message_id = await db.value(INSERT_MESSAGE, conv, user_id, surface, "assistant", text, token_count, None, at,
                                dump_metadata(NOTICE), None)
    return StoredMessage(id=int(message_id), conversation_id=conv, user_id=user_id, surface=surface,
                         role="assistant", content=text, token_count=token_count, external_id=None, created_at=at,
                         metadata=dict(NOTICE))
