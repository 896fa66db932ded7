"""Identity linking, written once: codes, lockouts, merging two users into one, unlinking, the audit, notices.

Every coroutine runs inside one write transaction. Policy (code length, limits, lifetimes) lives in bot/linking.py;
this module only keeps the books. On Postgres each first takes one transaction-scoped lock shared by all linking
work (`db.lock(LINK_LOCK)`), so that codes, lockout counters and merges see each other's effects in order, as
SQLite's single writer guarantees (linking is rare: the lock costs nothing that matters).
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from kernel.digests import kept_lockout
from kernel.types import SINGLETON_SURFACES, Outgoing
from memory import episodes, sql_outbox, sql_spend
from memory.rows import Db, as_dt, dump_metadata, to_ts
from memory.sql_turns import INSERT_MESSAGE, TOUCH, UPSERT_SINGLETON, identity_user, new_user
from memory.stems import index_terms
from memory.store import LinkCodeOwner, LinkPolicy, Redemption, StoredMessage

#: The metadata of a notice (a message hilo sends on its own, answering nothing).
NOTICE = {"notice": True}
#: The lock key of linking work ('hilo' 'lnk' in ASCII).
LINK_LOCK = 0x68696C6F_6C6E6B
#: What redeem_code reads of a code: [0] id, [4] expires_at, [5] used_at, [7:9] the prompted identity, then
#: code_owner's fields.
CODE_COLS = ("id, user_id, surface, external_user_id, expires_at, used_at, attempts, prompted_surface, "
             "prompted_external_user_id, owner_name, language, conversation_ref")
KILL_CODES = "UPDATE link_codes SET used_at = $1 WHERE surface = $2 AND external_user_id = $3 AND used_at IS NULL"
Key = tuple[str, str]


async def audit(db: Db, user_id: int | None, action: str, surface: str, ext: str, actor: str, at: Any,
                detail: str | None = None) -> None:
    await db.run(
        "INSERT INTO identity_audit(user_id, action, surface, external_user_id, actor, detail, created_at) "
        "VALUES ($1, $2, $3, $4, $5, $6, $7)", user_id, action, surface, ext, actor, detail, at,
    )


async def issue_code(db: Db, surface: str, ext: str, code_hash: str, expires_at: datetime,
                     owner: tuple[str | None, str | None, str | None] = (None, None, None)) -> int:
    """A new code for the identity's user (created on first contact); older unused codes of the identity die.
    `owner`: (display name, language, conversation ref) of the person asking."""
    await db.lock(LINK_LOCK)
    at = db.ts(db.clock())
    user_id = await identity_user(db, surface, ext, at)
    await db.run(KILL_CODES, at, surface, ext)
    await db.run(
        "INSERT INTO link_codes(code_hash, user_id, surface, external_user_id, created_at, expires_at, owner_name, "
        "language, conversation_ref) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9)",
        code_hash, user_id, surface, ext, at, db.ts(expires_at), *owner,
    )
    await audit(db, user_id, "code_issued", surface, ext, "person", at)
    return user_id


async def _locked_until(db: Db, keys: list[Key], at: Any) -> Any:
    """The latest lockout end among `keys` still in force, or None."""
    ends = []
    for surface, ext in keys:
        # a lockout of an identity that was forgotten since is kept under its digest until it ends
        end = await db.value("SELECT max(locked_until) FROM link_failures WHERE surface = $1 "
                             "AND external_user_id IN ($2, $3)", surface, ext, kept_lockout(ext))
        if end is not None and end > at:
            ends.append(end)
    return max(ends) if ends else None


async def under_pressure(db: Db, window_start: Any, policy: LinkPolicy) -> bool:
    """Whether everyone's wrong codes of the window reached the global cap (address rows are not counted
    again: every web attempt is also counted against its identity)."""
    total = await db.value("SELECT coalesce(sum(failures), 0) FROM link_failures WHERE window_start >= $1 "
                           "AND surface <> 'ip'", window_start)
    return bool(total >= policy.global_max_failures)


async def _fail(db: Db, keys: list[Key], moment: datetime, policy: LinkPolicy) -> Any:
    """Count a wrong code against every key; returns the lockout end when this failure locks one of them. The
    count is kept through a lockout, so the global cap sees every wrong code of the window. Under pressure a
    key is locked sooner and longer."""
    at, window_start = db.ts(moment), db.ts(moment - timedelta(seconds=policy.failure_window_s))
    pressure = await under_pressure(db, window_start, policy)
    limit = policy.pressure_max_failures if pressure else policy.max_failures
    lock_until = db.ts(moment + timedelta(seconds=policy.pressure_lockout_s if pressure else policy.lockout_s))
    locked = None
    for surface, ext in keys:
        failures = await db.value(
            "INSERT INTO link_failures(surface, external_user_id, failures, window_start) VALUES ($1, $2, 1, $3) "
            "ON CONFLICT (surface, external_user_id) DO UPDATE SET "
            "failures = CASE WHEN link_failures.window_start < $4 THEN 1 ELSE link_failures.failures + 1 END, "
            "window_start = CASE WHEN link_failures.window_start < $4 THEN excluded.window_start "
            "ELSE link_failures.window_start END RETURNING failures", surface, ext, at, window_start,
        )
        if failures >= limit:
            await db.run("UPDATE link_failures SET locked_until = $1 WHERE surface = $2 AND external_user_id = $3",
                         lock_until, surface, ext)
            locked = lock_until
    return locked


async def redeem_code(db: Db, surface: str, ext: str, code_hash: str, policy: LinkPolicy, also: Key | None = None,
                      confirm: bool = False) -> Redemption:
    """One step of redeeming a code (Store.redeem_link_code).

    `also` is a second key the attempt is counted against, e.g. ("ip", address) on the web, where identities
    cost nothing to make: a lockout of either key refuses the attempt."""
    await db.lock(LINK_LOCK)
    moment = db.clock()
    keys: list[Key] = [(surface, ext)] + ([also] if also else [])
    at, window_start = db.ts(moment), db.ts(moment - timedelta(seconds=policy.failure_window_s))
    # rows whose window and lockout are both over say nothing any more
    await db.run("DELETE FROM link_failures WHERE window_start < $1 AND (locked_until IS NULL OR locked_until <= $2)",
                 window_start, at)
    locked = await _locked_until(db, keys, at)
    row = await db.one(f"SELECT {CODE_COLS} FROM link_codes WHERE code_hash = $1", code_hash)
    if locked is not None:
        if row is not None:  # a right code from a locked identity still uses one of the code's attempts
            await _spend_attempt(db, row[0], at, policy)
        await audit(db, None, "link_refused_locked", surface, ext, "person", at)
        return Redemption("locked", locked_until=as_dt(locked))
    if row is None or row[5] is not None or row[4] <= at:
        newly_locked = await _fail(db, keys, moment, policy)
        if newly_locked:
            await audit(db, None, "lockout", surface, ext, "person", at, f"until {to_ts(as_dt(newly_locked))}")
            return Redemption("locked", locked_until=as_dt(newly_locked))
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
        # the first step (or a confirm from someone who was not shown the prompt): show whose account it is
        await db.run("UPDATE link_codes SET prompted_surface = $1, prompted_external_user_id = $2 WHERE id = $3",
                     surface, ext, code_id)
        await _spend_attempt(db, code_id, at, policy)
        await audit(db, owner.user_id, "link_prompted", surface, ext, "person", at)
        return Redemption("prompt", owner=owner)
    await db.run("UPDATE link_codes SET used_at = $1 WHERE id = $2", at, code_id)
    await merge_users(db, await identity_user(db, surface, ext, at), owner.user_id)
    await audit(db, owner.user_id, "linked", surface, ext, "person", at, f"code requested on {owner.surface}")
    return Redemption("linked", owner.user_id, owner=owner)


def code_owner(row: Sequence[Any]) -> LinkCodeOwner:
    return LinkCodeOwner(user_id=int(row[1]), surface=row[2], external_user_id=row[3], name=row[9],
                         language=row[10], conversation_ref=row[11])


async def _spend_attempt(db: Db, code_id: int, at: Any, policy: LinkPolicy) -> None:
    await db.run("UPDATE link_codes SET attempts = attempts + 1, "
                 "used_at = CASE WHEN attempts + 1 >= $1 THEN $2 ELSE used_at END WHERE id = $3",
                 policy.max_code_attempts, at, code_id)


async def merge_users(db: Db, src: int, dst: int) -> None:
    """Everything of user `src` becomes `dst`'s; `src` is deleted. Conversations that would collide (the
    same singleton surface, the same named place) are merged message by message."""
    for conv_id, surface, singleton, ref in await db.all(
        "SELECT id, surface, singleton, external_ref FROM conversations WHERE user_id = $1 ORDER BY id", src,
    ):
        target = None
        if singleton:
            target = await db.value("SELECT id FROM conversations WHERE user_id = $1 AND surface = $2 AND singleton",
                                    dst, surface)
        elif ref is not None:
            target = await db.value("SELECT id FROM conversations WHERE user_id = $1 AND surface = $2 "
                                    "AND external_ref = $3", dst, surface, ref)
        if target is not None:
            await db.run("UPDATE messages SET conversation_id = $1 WHERE conversation_id = $2", target, conv_id)
            await db.run("UPDATE episodes SET conversation_id = $1 WHERE conversation_id = $2", target, conv_id)
            await db.run("DELETE FROM conversations WHERE id = $1", conv_id)
        else:
            await db.run("UPDATE conversations SET user_id = $1 WHERE id = $2", dst, conv_id)
    # the memories that join lose their vectors: the embed job embeds them again and merges them with the near-
    # duplicates the person already had (memory/sql_memory_vectors.py compares only what it just embedded)
    await db.run("UPDATE memories SET vector = NULL, embedder = NULL WHERE user_id = $1", src)
    # SQLite: user_id changes re-index the FTS owner token through the messages_fts_update trigger
    for table in ("messages", "message_vectors", "episodes", "memories", "model_calls", "deliveries", "identities",
                  "identity_audit"):
        await db.run(f"UPDATE {table} SET user_id = $1 WHERE user_id = $2", dst, src)
    await sql_spend.merge(db, src, dst)
    await db.run("DELETE FROM users WHERE id = $1", src)


async def link_identity(db: Db, handle: str, surface: str, ext: str, actor: str) -> int | None:
    """Operator link: the identity (created if new) joins the user with `handle`. None if no such user."""
    await db.lock(LINK_LOCK)
    at = db.ts(db.clock())
    dst = await db.value("SELECT id FROM users WHERE handle = $1", handle)
    if dst is None:
        return None
    current = await identity_user(db, surface, ext, at)
    if current != dst:
        await merge_users(db, current, dst)
        await audit(db, dst, "linked", surface, ext, actor, at)
    return int(dst)


async def unlink_identity(db: Db, surface: str, ext: str, actor: str) -> tuple[str, int | None]:
    """(status, new user id). status: unlinked | unknown | only_identity. History stays with the old user;
    the identity's future messages go to a new user."""
    await db.lock(LINK_LOCK)
    at = db.ts(db.clock())
    old = await db.value("SELECT user_id FROM identities WHERE surface = $1 AND external_user_id = $2", surface, ext)
    if old is None:
        return "unknown", None
    if await db.value("SELECT count(*) FROM identities WHERE user_id = $1", old) <= 1:
        return "only_identity", None
    new, _ = await new_user(db, f"{surface}:{ext}", at)
    await db.run("UPDATE identities SET user_id = $1 WHERE surface = $2 AND external_user_id = $3", new, surface, ext)
    await db.run(KILL_CODES, at, surface, ext)  # a code it asked for would still join people to the user it left
    await audit(db, old, "unlinked", surface, ext, actor, at, f"now user {new}")
    await audit(db, new, "unlinked", surface, ext, actor, at, f"was user {old}")
    return "unlinked", new


async def post_notice(db: Db, user_id: int, surface: str, ref: str | None, text: str, token_count: int,
                      outgoing: Outgoing | None = None, metadata: dict[str, Any] | None = None) -> StoredMessage:
    """Store.post_notice: an assistant message in the user's conversation on `surface`, and its parts queued in
    the outbox (`outgoing`, memory/sql_outbox.py) in the same transaction. `metadata`: the message's (default
    {"notice": true})."""
    meta = dict(NOTICE if metadata is None else metadata)
    moment = db.clock()
    at = db.ts(moment)
    if surface in SINGLETON_SURFACES:
        conv = await db.value(UPSERT_SINGLETON, user_id, surface, at, at)
    else:
        conv = None
        if ref is not None and ref.isdigit() and len(ref) < 19:  # not the user's (or not a number): their latest
            conv = await db.value("SELECT id FROM conversations WHERE id = $1 AND user_id = $2 AND surface = $3",
                                  int(ref), user_id, surface)
        conv = conv or await db.value("SELECT id FROM conversations WHERE user_id = $1 AND surface = $2 "
                                      "ORDER BY updated_at DESC, id DESC LIMIT 1", user_id, surface)
        conv = conv or await db.value("INSERT INTO conversations(user_id, surface, singleton, created_at, updated_at) "
                                      "VALUES ($1, $2, false, $3, $4) RETURNING id", user_id, surface, at, at)
        await db.run(TOUCH, at, conv)
    terms = index_terms(text)
    episode = await episodes.join(db, user_id, int(conv), surface, moment, token_count, terms)
    message_id = await db.value(INSERT_MESSAGE, conv, user_id, surface, "assistant", text, token_count, None, at,
                                dump_metadata(meta), None, terms, episode)
    if outgoing is not None and outgoing.parts:
        await sql_outbox.enqueue(db, user_id, int(message_id), outgoing)
    return StoredMessage(id=int(message_id), conversation_id=int(conv), user_id=user_id, surface=surface,
                         role="assistant", content=text, token_count=token_count, external_id=None,
                         created_at=as_dt(at), metadata=meta)
