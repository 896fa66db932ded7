"""SQLite side of identity linking: codes, lockouts, merging two users into one, unlinking, the audit.

Every function runs inside one transaction opened by SqliteStore. Policy (code length, limits, lifetimes)
lives in bot/linking.py; this module only keeps the books.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import Any

from kernel.types import SINGLETON_SURFACES
from memory.sqlite_db import Db, dump_metadata, from_ts, to_ts
from memory.sqlite_queries import INSERT_MESSAGE, UPSERT_SINGLETON, identity_user, new_user
from memory.store import LinkCodeOwner, LinkPolicy, Redemption, StoredMessage

#: The metadata of a notice (a message hilo sends on its own, answering nothing).
NOTICE = {"notice": True}


def audit(db: Db, user_id: int | None, action: str, surface: str, ext: str, actor: str, at: str,
          detail: str | None = None) -> None:
    db.run(
        "INSERT INTO identity_audit(user_id, action, surface, external_user_id, actor, detail, created_at) "
        "VALUES (?, ?, ?, ?, ?, ?, ?)", (user_id, action, surface, ext, actor, detail, at),
    )


def issue_code(db: Db, surface: str, ext: str, code_hash: str, at: str, expires_at: str,
               owner: tuple[str | None, str | None, str | None] = (None, None, None)) -> int:
    """A new code for the identity's user (created on first contact); older unused codes of the identity die.
    `owner`: (display name, language, conversation ref) of the person asking."""
    user_id = identity_user(db, surface, ext, at)
    db.run("UPDATE link_codes SET used_at = ? WHERE surface = ? AND external_user_id = ? AND used_at IS NULL",
           (at, surface, ext))
    db.run(
        "INSERT INTO link_codes(code_hash, user_id, surface, external_user_id, created_at, expires_at, owner_name, "
        "language, conversation_ref) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
        (code_hash, user_id, surface, ext, at, expires_at, *owner),
    )
    audit(db, user_id, "code_issued", surface, ext, "person", at)
    return user_id


Key = tuple[str, str]


def _locked_until(db: Db, keys: list[Key], at: str) -> str | None:
    """The latest lockout end among `keys` still in force, or None."""
    ends = [row[0] for key in keys
            if (row := db.one("SELECT locked_until FROM link_failures WHERE surface = ? AND external_user_id = ?",
                              key)) and row[0] and row[0] > at]
    return max(ends) if ends else None


def under_pressure(db: Db, window_start: str, policy: LinkPolicy) -> bool:
    """Whether everyone's wrong codes of the window reached the global cap (address rows are not counted
    again: every web attempt is also counted against its identity)."""
    total = db.one("SELECT coalesce(sum(failures), 0) FROM link_failures WHERE window_start >= ? "
                   "AND surface <> 'ip'", (window_start,))[0]
    return bool(total >= policy.global_max_failures)


def _fail(db: Db, keys: list[Key], moment: datetime, policy: LinkPolicy) -> str | None:
    """Count a wrong code against every key; returns the lockout end when this failure locks one of them. The
    count is kept through a lockout, so the global cap sees every wrong code of the window. Under pressure a
    key is locked sooner and longer."""
    at, window_start = to_ts(moment), to_ts(moment - timedelta(seconds=policy.failure_window_s))
    pressure = under_pressure(db, window_start, policy)
    limit = policy.pressure_max_failures if pressure else policy.max_failures
    lock_until = to_ts(moment + timedelta(seconds=policy.pressure_lockout_s if pressure else policy.lockout_s))
    locked = None
    for surface, ext in keys:
        row = db.one(
            "INSERT INTO link_failures(surface, external_user_id, failures, window_start) VALUES (?, ?, 1, ?) "
            "ON CONFLICT(surface, external_user_id) DO UPDATE SET "
            "failures = CASE WHEN link_failures.window_start < ? THEN 1 ELSE link_failures.failures + 1 END, "
            "window_start = CASE WHEN link_failures.window_start < ? THEN excluded.window_start "
            "ELSE link_failures.window_start END RETURNING failures",
            (surface, ext, at, window_start, window_start),
        )
        if row[0] >= limit:
            db.run("UPDATE link_failures SET locked_until = ? WHERE surface = ? AND external_user_id = ?",
                   (lock_until, surface, ext))
            locked = lock_until
    return locked


def redeem_code(
    db: Db, surface: str, ext: str, code_hash: str, moment: datetime, policy: LinkPolicy, also: Key | None = None,
    confirm: bool = False,
) -> Redemption:
    """One step of redeeming a code (Store.redeem_link_code).

    `also` is a second key the attempt is counted against, e.g. ("ip", address) on the web, where identities
    cost nothing to make: a lockout of either key refuses the attempt."""
    keys: list[Key] = [(surface, ext)] + ([also] if also else [])
    at, window_start = to_ts(moment), to_ts(moment - timedelta(seconds=policy.failure_window_s))
    # rows whose window and lockout are both over say nothing any more
    db.run("DELETE FROM link_failures WHERE window_start < ? AND (locked_until IS NULL OR locked_until <= ?)",
           (window_start, at))
    locked = _locked_until(db, keys, at)
    row = db.one(f"SELECT {CODE_COLS} FROM link_codes WHERE code_hash = ?", (code_hash,))
    if locked is not None:
        if row is not None:  # a right code from a locked identity still uses one of the code's attempts
            _spend_attempt(db, row[0], at, policy)
        audit(db, None, "link_refused_locked", surface, ext, "person", at)
        return Redemption("locked", locked_until=from_ts(locked))
    if row is None or row[5] is not None or row[4] <= at:
        newly_locked = _fail(db, keys, moment, policy)
        if newly_locked:
            audit(db, None, "lockout", surface, ext, "person", at, f"until {newly_locked}")
            return Redemption("locked", locked_until=from_ts(newly_locked))
        return Redemption("invalid")
    code_id, owner = row[0], code_owner(row)
    if (owner.surface, owner.external_user_id) == (surface, ext):
        _spend_attempt(db, code_id, at, policy)
        return Redemption("own_code")
    current = db.one("SELECT user_id FROM identities WHERE surface = ? AND external_user_id = ?", (surface, ext))
    if current is not None and current[0] == owner.user_id:
        db.run("UPDATE link_codes SET used_at = ? WHERE id = ?", (at, code_id))
        return Redemption("already_linked", owner.user_id, owner=owner)
    if not (confirm and (row[7], row[8]) == (surface, ext)):
        # the first step (or a confirm from someone who was not shown the prompt): show whose account it is
        db.run("UPDATE link_codes SET prompted_surface = ?, prompted_external_user_id = ? WHERE id = ?",
               (surface, ext, code_id))
        _spend_attempt(db, code_id, at, policy)
        audit(db, owner.user_id, "link_prompted", surface, ext, "person", at)
        return Redemption("prompt", owner=owner)
    db.run("UPDATE link_codes SET used_at = ? WHERE id = ?", (at, code_id))
    merge_users(db, identity_user(db, surface, ext, at), owner.user_id)
    audit(db, owner.user_id, "linked", surface, ext, "person", at, f"code requested on {owner.surface}")
    return Redemption("linked", owner.user_id, owner=owner)


#: What redeem_code reads of a code: [0] id, [4] expires_at, [5] used_at, [7:9] the prompted identity, then
#: code_owner's fields.
CODE_COLS = ("id, user_id, surface, external_user_id, expires_at, used_at, attempts, prompted_surface, "
             "prompted_external_user_id, owner_name, language, conversation_ref")


def code_owner(row: Sequence[Any]) -> LinkCodeOwner:
    return LinkCodeOwner(user_id=int(row[1]), surface=row[2], external_user_id=row[3], name=row[9],
                         language=row[10], conversation_ref=row[11])


def _spend_attempt(db: Db, code_id: int, at: str, policy: LinkPolicy) -> None:
    db.run("UPDATE link_codes SET attempts = attempts + 1, "
           "used_at = CASE WHEN attempts + 1 >= ? THEN ? ELSE used_at END WHERE id = ?",
           (policy.max_code_attempts, at, code_id))


def merge_users(db: Db, src: int, dst: int) -> None:
    """Everything of user `src` becomes `dst`'s; `src` is deleted. Conversations that would collide (the
    same singleton surface, the same named place) are merged message by message."""
    for conv_id, surface, singleton, ref in db.all(
        "SELECT id, surface, singleton, external_ref FROM conversations WHERE user_id = ?", (src,),
    ):
        target = None
        if singleton:
            target = db.one("SELECT id FROM conversations WHERE user_id = ? AND surface = ? AND singleton = 1",
                            (dst, surface))
        elif ref is not None:
            target = db.one("SELECT id FROM conversations WHERE user_id = ? AND surface = ? AND external_ref = ?",
                            (dst, surface, ref))
        if target is not None:
            db.run("UPDATE messages SET conversation_id = ? WHERE conversation_id = ?", (target[0], conv_id))
            db.run("DELETE FROM conversations WHERE id = ?", (conv_id,))
        else:
            db.run("UPDATE conversations SET user_id = ? WHERE id = ?", (dst, conv_id))
    # user_id changes re-index the FTS owner token through the messages_fts_update trigger
    for table in ("messages", "facts", "model_calls", "deliveries", "identities", "link_codes", "identity_audit"):
        db.run(f"UPDATE {table} SET user_id = ? WHERE user_id = ?", (dst, src))
    db.run("DELETE FROM users WHERE id = ?", (src,))


def link_identity(db: Db, handle: str, surface: str, ext: str, actor: str, at: str) -> int | None:
    """Operator link: the identity (created if new) joins the user with `handle`. None if no such user."""
    row = db.one("SELECT id FROM users WHERE handle = ?", (handle,))
    if row is None:
        return None
    dst = int(row[0])
    current = identity_user(db, surface, ext, at)
    if current != dst:
        merge_users(db, current, dst)
        audit(db, dst, "linked", surface, ext, actor, at)
    return dst


def unlink_identity(db: Db, surface: str, ext: str, actor: str, at: str) -> tuple[str, int | None]:
    """(status, new user id). status: unlinked | unknown | only_identity. History stays with the old user;
    the identity's future messages go to a new user."""
    row = db.one("SELECT user_id FROM identities WHERE surface = ? AND external_user_id = ?", (surface, ext))
    if row is None:
        return "unknown", None
    old = int(row[0])
    if db.one("SELECT count(*) FROM identities WHERE user_id = ?", (old,))[0] <= 1:
        return "only_identity", None
    new, _ = new_user(db, f"{surface}:{ext}", at)
    db.run("UPDATE identities SET user_id = ? WHERE surface = ? AND external_user_id = ?", (new, surface, ext))
    # a code this identity asked for would still join people to the user it just left
    db.run("UPDATE link_codes SET used_at = ? WHERE surface = ? AND external_user_id = ? AND used_at IS NULL",
           (at, surface, ext))
    audit(db, old, "unlinked", surface, ext, actor, at, f"now user {new}")
    audit(db, new, "unlinked", surface, ext, actor, at, f"was user {old}")
    return "unlinked", new


def post_notice(db: Db, user_id: int, surface: str, ref: str | None, text: str, token_count: int,
                at: str) -> StoredMessage:
    """Store.post_notice: an assistant message in the user's conversation on `surface`."""
    if surface in SINGLETON_SURFACES:
        conv = int(db.one(UPSERT_SINGLETON, (user_id, surface, at, at))[0])
    else:
        row = None
        if ref is not None and ref.isdigit() and len(ref) < 19:  # not the user's (or not a number): their latest
            row = db.one("SELECT id FROM conversations WHERE id = ? AND user_id = ? AND surface = ?",
                         (int(ref), user_id, surface))
        row = row or db.one("SELECT id FROM conversations WHERE user_id = ? AND surface = ? "
                            "ORDER BY updated_at DESC, id DESC LIMIT 1", (user_id, surface))
        row = row or db.one("INSERT INTO conversations(user_id, surface, singleton, created_at, updated_at) "
                            "VALUES (?, ?, 0, ?, ?) RETURNING id", (user_id, surface, at, at))
        conv = int(row[0])
        db.run("UPDATE conversations SET updated_at = max(updated_at, ?) WHERE id = ?", (at, conv))
    row = db.one(INSERT_MESSAGE + " RETURNING id",
                 (conv, user_id, surface, "assistant", text, token_count, None, at, dump_metadata(NOTICE), None))
    return StoredMessage(id=int(row[0]), conversation_id=conv, user_id=user_id, surface=surface, role="assistant",
                         content=text, token_count=token_count, external_id=None, created_at=from_ts(at),
                         metadata=dict(NOTICE))
