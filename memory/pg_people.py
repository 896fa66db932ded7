"""PostgresStore's methods about identities and what was sent to them: opt-out, identity linking, deliveries.

A mixin (memory/sqlite_people.py on Postgres): every method is one transaction through PostgresStore._tx.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import datetime
from typing import Any, Literal, TypeVar

from memory import pg_linking as linking
from memory import pg_queries as queries
from memory.pg_db import PgDb, aware
from memory.pg_inspect import deliveries_json
from memory.sqlite_people import delivery_rank
from memory.store import Delivery, LinkPolicy, Redemption, StoredMessage

T = TypeVar("T")
Mode = Literal["read", "write"]


class PgPeopleMethods:
    clock: Callable[[], datetime]  # set by PostgresStore

    async def _tx(self, mode: Mode, fn: Callable[[PgDb], Awaitable[T]]) -> T:  # provided by PostgresStore
        raise NotImplementedError

    async def identity_user(self, surface: str, external_user_id: str) -> int | None:
        return await self._tx("read", lambda db: db.value(
            "SELECT user_id FROM identities WHERE surface = $1 AND external_user_id = $2", surface, external_user_id,
        ))

    async def identity_handle(self, surface: str, external_user_id: str) -> str | None:
        return await self._tx("read", lambda db: db.value(
            "SELECT u.handle FROM identities i JOIN users u ON u.id = i.user_id "
            "WHERE i.surface = $1 AND i.external_user_id = $2", surface, external_user_id,
        ))

    async def set_opt_out(self, surface: str, external_user_id: str, opted_out: bool) -> int:
        now = self.clock()

        async def write(db: PgDb) -> int:
            user_id = await queries.identity_user(db, surface, external_user_id, now)
            await db.run("UPDATE identities SET opted_out_at = $1 WHERE surface = $2 AND external_user_id = $3",
                         now if opted_out else None, surface, external_user_id)
            return user_id

        return await self._tx("write", write)

    async def is_opted_out(self, surface: str, external_user_id: str) -> bool:
        return bool(await self._tx("read", lambda db: db.value(
            "SELECT opted_out_at IS NOT NULL FROM identities WHERE surface = $1 AND external_user_id = $2",
            surface, external_user_id,
        )))

    async def issue_link_code(
        self, surface: str, external_user_id: str, code_hash: str, expires_at: datetime, *,
        owner_name: str | None = None, language: str | None = None, conversation_ref: str | None = None,
    ) -> int:
        now = self.clock()
        return await self._tx("write", lambda db: linking.issue_code(
            db, surface, external_user_id, code_hash, now, aware(expires_at), (owner_name, language, conversation_ref)))

    async def redeem_link_code(
        self, surface: str, external_user_id: str, code_hash: str, policy: LinkPolicy,
        also: tuple[str, str] | None = None, *, confirm: bool = False,
    ) -> Redemption:
        now = self.clock()
        return await self._tx("write", lambda db: linking.redeem_code(
            db, surface, external_user_id, code_hash, now, policy, also, confirm))

    async def post_notice(
        self, user_id: int, surface: str, conversation_ref: str | None, text: str, token_count: int,
    ) -> StoredMessage:
        now = self.clock()
        return await self._tx("write", lambda db: linking.post_notice(
            db, user_id, surface, conversation_ref, text, token_count, now))

    async def link_identity(self, handle: str, surface: str, external_user_id: str, actor: str) -> int | None:
        now = self.clock()
        return await self._tx(
            "write", lambda db: linking.link_identity(db, handle, surface, external_user_id, actor, now))

    async def unlink_identity(self, surface: str, external_user_id: str, actor: str) -> tuple[str, int | None]:
        now = self.clock()
        return await self._tx("write", lambda db: linking.unlink_identity(db, surface, external_user_id, actor, now))

    async def record_delivery(self, delivery: Delivery) -> int:
        now = self.clock()
        d = delivery
        return int(await self._tx("write", lambda db: db.value(
            "INSERT INTO deliveries(user_id, message_id, surface, recipient, part, parts, status, provider_ref, "
            "error, attempts, created_at, updated_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) "
            "RETURNING id", d.user_id, d.message_id, d.surface, d.recipient, d.part, d.parts, d.status,
            d.provider_ref, d.error, d.attempts, now, now,
        )))

    async def update_delivery(self, surface: str, provider_ref: str, status: str, error: str | None = None) -> bool:
        now = self.clock()

        async def write(db: PgDb) -> bool:
            # FOR UPDATE: concurrent callbacks of one part take turns, so the rank check below holds
            rows = await db.all("SELECT status FROM deliveries WHERE surface = $1 AND provider_ref = $2 "
                                "ORDER BY id FOR UPDATE", surface, provider_ref)
            if not rows:
                return False
            # Callbacks can arrive out of order ("sent" after "delivered"): a status never moves backwards.
            if delivery_rank(status) >= delivery_rank(rows[0][0]):
                await db.run("UPDATE deliveries SET status = $1, error = coalesce($2, error), updated_at = $3 "
                             "WHERE surface = $4 AND provider_ref = $5", status, error, now, surface, provider_ref)
            return True

        return await self._tx("write", write)

    async def deliveries(self, user_id: int) -> list[dict[str, Any]]:
        return await self._tx("read", lambda db: deliveries_json(db, user_id))
