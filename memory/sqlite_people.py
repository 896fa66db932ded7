"""SqliteStore's methods about identities and what was sent to them: opt-out, identity linking, deliveries.

A mixin: every method is one transaction through SqliteStore._tx, on the store's worker thread.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any, Literal, TypeVar

from memory import sqlite_linking as linking
from memory import sqlite_queries as queries
from memory.sqlite_db import Db, to_ts
from memory.sqlite_inspect import deliveries_json
from memory.store import Delivery, LinkPolicy, Redemption, StoredMessage

T = TypeVar("T")
Mode = Literal["read", "write", "none"]

#: How far along a sent part is; provider statuses that end badly rank last (nothing comes after them).
_DELIVERY_RANK = {"queued": 0, "accepted": 0, "scheduled": 0, "sending": 1, "sent": 2, "delivered": 3, "read": 4,
                  "undelivered": 5, "failed": 5}


def delivery_rank(status: str) -> int:
    return _DELIVERY_RANK.get(status, 2)


class PeopleMethods:
    clock: Callable[[], datetime]  # set by SqliteStore

    async def _tx(self, mode: Mode, fn: Callable[[Db], T]) -> T:  # provided by SqliteStore
        raise NotImplementedError

    async def identity_user(self, surface: str, external_user_id: str) -> int | None:
        row = await self._tx("read", lambda db: db.one(
            "SELECT user_id FROM identities WHERE surface = ? AND external_user_id = ?", (surface, external_user_id),
        ))
        return None if row is None else int(row[0])

    async def identity_handle(self, surface: str, external_user_id: str) -> str | None:
        row = await self._tx("read", lambda db: db.one(
            "SELECT u.handle FROM identities i JOIN users u ON u.id = i.user_id "
            "WHERE i.surface = ? AND i.external_user_id = ?", (surface, external_user_id),
        ))
        return None if row is None else str(row[0])

    async def set_opt_out(self, surface: str, external_user_id: str, opted_out: bool) -> int:
        now = to_ts(self.clock())

        def write(db: Db) -> int:
            user_id = queries.identity_user(db, surface, external_user_id, now)
            db.run("UPDATE identities SET opted_out_at = ? WHERE surface = ? AND external_user_id = ?",
                   (now if opted_out else None, surface, external_user_id))
            return user_id

        return await self._tx("write", write)

    async def is_opted_out(self, surface: str, external_user_id: str) -> bool:
        row = await self._tx("read", lambda db: db.one(
            "SELECT opted_out_at IS NOT NULL FROM identities WHERE surface = ? AND external_user_id = ?",
            (surface, external_user_id),
        ))
        return bool(row and row[0])

    async def issue_link_code(
        self, surface: str, external_user_id: str, code_hash: str, expires_at: datetime, *,
        owner_name: str | None = None, language: str | None = None, conversation_ref: str | None = None,
    ) -> int:
        now = to_ts(self.clock())
        return await self._tx("write", lambda db: linking.issue_code(
            db, surface, external_user_id, code_hash, now, to_ts(expires_at), (owner_name, language, conversation_ref)))

    async def redeem_link_code(
        self, surface: str, external_user_id: str, code_hash: str, policy: LinkPolicy,
        also: tuple[str, str] | None = None, *, confirm: bool = False,
    ) -> Redemption:
        moment = self.clock()
        return await self._tx("write", lambda db: linking.redeem_code(
            db, surface, external_user_id, code_hash, moment, policy, also, confirm))

    async def post_notice(
        self, user_id: int, surface: str, conversation_ref: str | None, text: str, token_count: int,
    ) -> StoredMessage:
        now = to_ts(self.clock())
        return await self._tx("write", lambda db: linking.post_notice(
            db, user_id, surface, conversation_ref, text, token_count, now))

    async def link_identity(self, handle: str, surface: str, external_user_id: str, actor: str) -> int | None:
        now = to_ts(self.clock())
        return await self._tx(
            "write", lambda db: linking.link_identity(db, handle, surface, external_user_id, actor, now))

    async def unlink_identity(self, surface: str, external_user_id: str, actor: str) -> tuple[str, int | None]:
        now = to_ts(self.clock())
        return await self._tx("write", lambda db: linking.unlink_identity(db, surface, external_user_id, actor, now))

    async def record_delivery(self, delivery: Delivery) -> int:
        now = to_ts(self.clock())
        d = delivery
        row = await self._tx("write", lambda db: db.one(
            "INSERT INTO deliveries(user_id, message_id, surface, recipient, part, parts, status, provider_ref, "
            "error, attempts, created_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) RETURNING id",
            (d.user_id, d.message_id, d.surface, d.recipient, d.part, d.parts, d.status, d.provider_ref, d.error,
             d.attempts, now, now),
        ))
        return int(row[0])

    async def update_delivery(self, surface: str, provider_ref: str, status: str, error: str | None = None) -> bool:
        now = to_ts(self.clock())

        def write(db: Db) -> bool:
            row = db.one("SELECT status FROM deliveries WHERE surface = ? AND provider_ref = ?",
                         (surface, provider_ref))
            if row is None:
                return False
            # Callbacks can arrive out of order ("sent" after "delivered"): a status never moves backwards.
            if delivery_rank(status) >= delivery_rank(row[0]):
                db.run("UPDATE deliveries SET status = ?, error = COALESCE(?, error), updated_at = ? "
                       "WHERE surface = ? AND provider_ref = ?", (status, error, now, surface, provider_ref))
            return True

        return await self._tx("write", write)

    async def deliveries(self, user_id: int) -> list[dict[str, Any]]:
        return await self._tx("read", lambda db: deliveries_json(db, user_id))

