"""`PostgresStore`: the `Store` contract on Postgres (Supabase or any Postgres 13+), through an asyncpg pool.

Each Store method is one pool checkout and one transaction: READ COMMITTED for writes, REPEATABLE READ READ
ONLY for reads (so `load_context` sees one snapshot). `counters` counts transactions, statements (BEGIN and
COMMIT not included; an executemany counts once) and round_trips (store calls that reached the database, one
checkout each, as SqliteStore counts its thread hops), so the benchmark reports the same figures on both.

URL options (removed before connecting; anything else in the query string goes to asyncpg/libpq):
    statement_cache_size=N   asyncpg's prepared statement cache (default 100). Supabase's pooler in
                             transaction mode (port 6543) forbids prepared statements: use 0 there (it is the
                             default when the host ends in pooler.supabase.com and the port is 6543).
    pool_min_size=N, pool_max_size=N   the pool bounds (default 1 and 10).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, Literal, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from kernel.errors import ConfigError, NotFound
from kernel.types import InboundMessage, ModelCallRecord
from memory import jobs, turn_lease
from memory import migrate as migrations
from memory import pg_queries as queries
from memory.pg_db import FACT_COLS, MSG_COLS, PgDb, to_fact, to_message
from memory.pg_inspect import calls_json, inspect_json
from memory.pg_people import PgPeopleMethods
from memory.sqlite_db import utcnow
from memory.sqlite_queries import Rollback
from memory.store import (
    ContextQuery,
    ContextRows,
    ConversationInfo,
    Fact,
    ImportResult,
    ImportRow,
    Ingested,
    Inspection,
    StoredMessage,
    StoreError,
    StoreUnavailable,
)

T = TypeVar("T")
Mode = Literal["read", "write", "none"]  # none: each statement commits on its own (autocommit)
LEASE = turn_lease.lease_sql("postgres")

#: Errors that say "the database is not there, or too busy, right now": retry later.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError, asyncio.TimeoutError, asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError,
    asyncpg.ConnectionDoesNotExistError, asyncpg.ConnectionFailureError, asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError, asyncpg.LockNotAvailableError, asyncpg.QueryCanceledError,
    asyncpg.AdminShutdownError,
)


def parse_url(url: str) -> tuple[str, dict[str, int]]:
    """(the DSN for asyncpg, hilo's own options) of a postgres:// or postgresql:// URL."""
    parts = urlsplit(url)
    ours = {"statement_cache_size": 100, "pool_min_size": 1, "pool_max_size": 10}
    if (parts.hostname or "").endswith("pooler.supabase.com") and parts.port == 6543:
        ours["statement_cache_size"] = 0  # Supabase's transaction-mode pooler: no prepared statements
    rest = []
    for key, value in parse_qsl(parts.query, keep_blank_values=True):
        if key in ours:
            try:
                ours[key] = int(value)
            except ValueError:
                raise ConfigError(f"database URL option {key}={value!r} must be a whole number") from None
        else:
            rest.append((key, value))
    return urlunsplit(parts._replace(query=urlencode(rest))), ours


async def keep_session(conn: Any) -> None:
    """The pool's reset on release, which asyncpg makes one more round trip (advisory unlock all, CLOSE ALL,
    UNLISTEN *, RESET ALL): nothing to undo, since hilo leaves no state in a session. Its locks are transaction
    locks (pg_advisory_xact_lock) or rows (the turn lease), it runs no SET, LISTEN or held cursor, and behind a
    transaction pooler a session is not its own anyway. What asyncpg always does first stays: an open
    transaction is rolled back and the connection's listeners dropped."""


class PostgresStore(PgPeopleMethods):
    """The Store on a Postgres database."""

    dialect = "postgres"

    def __init__(self, url: str, *, statement_cache_size: int | None = None, command_timeout: float = 30.0,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.dsn, options = parse_url(url)
        #: every "now" of the store (link codes, lockouts, the resume window, reply times): tests move it
        self.clock = clock
        if statement_cache_size is not None:
            options["statement_cache_size"] = statement_cache_size
        self.options = options
        self.command_timeout = command_timeout
        #: transactions, statements (BEGIN/COMMIT not included) and store calls since open.
        self.counters: dict[str, int] = {"transactions": 0, "statements": 0, "round_trips": 0}
        self._df_cache: dict[str, tuple[float, float]] = {}
        #: migrations applied by the last open() or migrate().
        self.applied: list[str] = []
        self._pool: Any = None
        #: seconds a turn lease lasts unless renewed (memory/turn_lease.py)
        self.turn_lease_ttl = turn_lease.TTL

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and apply pending migrations."""
        await self.migrate()

    async def close(self) -> None:
        """Close the pool. Safe to call twice."""
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def migrate(self) -> list[str]:
        """Apply pending migrations (connecting first if needed); return the names applied."""
        await self._connect()
        self.counters["round_trips"] += 1
        try:
            async with self._pool.acquire() as conn:
                self.applied = await migrations.apply_postgres(conn)
        except UNAVAILABLE as exc:
            raise StoreUnavailable(f"the Postgres database is unavailable: {exc}; retry later") from exc
        self.counters["transactions"] += 1
        return self.applied

    async def _connect(self) -> None:
        if self._pool is not None:
            return
        try:
            self._pool = await asyncpg.create_pool(
                self.dsn, min_size=self.options["pool_min_size"], max_size=self.options["pool_max_size"],
                statement_cache_size=self.options["statement_cache_size"], command_timeout=self.command_timeout,
                reset=keep_session,
            )
        except (*UNAVAILABLE, asyncpg.InvalidCatalogNameError, asyncpg.InvalidAuthorizationSpecificationError,
                asyncpg.InvalidPasswordError) as exc:
            raise StoreUnavailable(
                f"cannot connect to the Postgres database ({exc}): check HILO_DATABASE_URL (or --db)"
            ) from exc

    # -- one active turn per conversation, across processes ----------------------------------------------

    def turn_lock(self, conversation_id: int, message_id: int) -> AbstractAsyncContextManager[bool]:
        """The conversation's turn lease (memory/turn_lease.py), held while the turn runs; yields True when
        the message was answered already. Each statement is its own short transaction on a pooled
        connection (nothing in the server session: it works through a transaction pooler)."""
        return turn_lease.hold(self._take_lease, self._renew_lease, self._release_lease, conversation_id,
                               message_id, ttl=self.turn_lease_ttl, counters=self.counters)

    async def _take_lease(self, conversation_id: int, message_id: int, owner: str, ttl: float) -> tuple[bool, bool]:
        async def take(db: PgDb) -> tuple[bool, bool]:
            if await db.run(LEASE.take, conversation_id, owner, ttl):
                return True, bool(await db.value(LEASE.answered, message_id))  # a statement of its own: see there
            return False, not await db.value(LEASE.exists, conversation_id)  # forgotten: nothing to wait for

        return await self._tx("none", take)

    async def _renew_lease(self, conversation_id: int, owner: str, ttl: float) -> bool:
        return bool(await self._tx("none", lambda db: db.run(LEASE.renew, conversation_id, owner, ttl)))

    async def _release_lease(self, conversation_id: int, owner: str) -> None:
        await self._tx("none", lambda db: db.run(LEASE.release, conversation_id, owner))

    # -- plumbing: one checkout, one transaction -----------------------------------------------------------

    async def _tx(self, mode: Mode, fn: Callable[[PgDb], Awaitable[T]]) -> T:
        if self._pool is None:
            raise StoreError("the store is not open: call open() first")
        self.counters["round_trips"] += 1
        try:
            async with self._pool.acquire() as conn:
                db = PgDb(conn, self.counters, self._df_cache)
                self.counters["transactions"] += 1
                try:
                    if mode == "none":
                        return await fn(db)
                    if mode == "write":
                        async with conn.transaction():
                            return await fn(db)
                    async with conn.transaction(isolation="repeatable_read", readonly=True):
                        return await fn(db)
                except Rollback as rollback:
                    return rollback.value  # type: ignore[no-any-return]
        except UNAVAILABLE as exc:
            raise StoreUnavailable(f"the Postgres database is busy or unreachable: {exc}; retry later") from exc
        except asyncpg.PostgresError as exc:
            raise StoreError(f"Postgres error: {exc}") from exc
        except asyncpg.InterfaceError as exc:
            raise StoreError(f"Postgres client error: {exc}") from exc

    # -- background job leases (memory/jobs.py): READ COMMITTED, FOR UPDATE SKIP LOCKED ---------------------

    async def register_job(self, name: str, scheduled: bool) -> None:
        now = self.clock()
        await self._tx("write", lambda db: jobs.register(db, name, scheduled, now))

    async def claim_job(self, name: str, owner: str, ttl: float, *, force: bool = False) -> jobs.JobClaim:
        now = self.clock()
        return await self._tx("write", lambda db: jobs.claim(db, "postgres", name, owner, ttl, now, force))

    async def renew_job(self, name: str, owner: str, ttl: float) -> bool:
        now = self.clock()
        return await self._tx("write", lambda db: jobs.renew(db, name, owner, ttl, now))

    async def finish_job(self, name: str, owner: str, end: jobs.JobEnd) -> bool:
        now = self.clock()
        return await self._tx("write", lambda db: jobs.finish(db, name, owner, end, now))

    async def job_states(self) -> list[jobs.JobState]:
        return await self._tx("read", jobs.states)

    async def purge_link_codes(self) -> int:
        now = self.clock()
        return await self._tx("write", lambda db: jobs.purge_link_codes(db, now))

    # -- the turn ----------------------------------------------------------------------------------------

    async def ingest(self, msg: InboundMessage, token_count: int) -> Ingested | None:
        now = self.clock()
        return await self._tx("write", lambda db: queries.ingest(db, msg, token_count, now))

    async def load_context(self, query: ContextQuery) -> ContextRows:
        return await self._tx("read", lambda db: queries.load_context(db, query))

    async def finish_turn(
        self, turn: Ingested, reply: str | None, reply_tokens: int, calls: Sequence[ModelCallRecord],
        metadata: dict[str, Any] | None = None,
    ) -> StoredMessage | None:
        now = self.clock()
        return await self._tx(
            "write", lambda db: queries.finish_turn(db, turn, reply, reply_tokens, calls, metadata, now)
        )

    async def import_rows(self, rows: Sequence[ImportRow]) -> ImportResult:
        return await self._tx("write", lambda db: queries.import_rows(db, rows))

    # -- people and conversations -----------------------------------------------------------------------

    async def user_id(self, handle: str, *, create: bool = False) -> int | None:
        async def run(db: PgDb) -> int | None:
            return (await queries.user_by_handle(db, handle, self.clock(), create))[0]

        return await self._tx("write" if create else "read", run)

    async def find_conversation(self, user_id: int, surface: str) -> int | None:
        return await self._tx("read", lambda db: db.value(
            "SELECT id FROM conversations WHERE user_id = $1 AND surface = $2 "
            "ORDER BY singleton DESC, updated_at DESC, id DESC LIMIT 1", user_id, surface,
        ))

    async def create_conversation(self, user_id: int, surface: str, title: str | None = None) -> int:
        now = self.clock()
        return int(await self._tx("write", lambda db: db.value(
            "INSERT INTO conversations(user_id, surface, singleton, title, created_at, updated_at) "
            "VALUES ($1, $2, false, $3, $4, $5) RETURNING id", user_id, surface, title, now, now,
        )))

    async def conversations(self, user_id: int) -> list[ConversationInfo]:
        rows = await self._tx("read", lambda db: db.all(
            "SELECT c.id, c.surface, c.title, c.created_at, c.updated_at, "
            "(SELECT count(*) FROM messages m WHERE m.conversation_id = c.id) "
            "FROM conversations c WHERE c.user_id = $1 ORDER BY c.updated_at DESC, c.id DESC", user_id,
        ))
        return [ConversationInfo(id=r[0], surface=r[1], title=r[2], created_at=r[3], updated_at=r[4],
                                 message_count=r[5]) for r in rows]

    async def messages(self, user_id: int, conversation_id: int, limit: int = 200) -> list[StoredMessage]:
        async def read(db: PgDb) -> list[StoredMessage]:
            if await db.one("SELECT 1 FROM conversations WHERE id = $1 AND user_id = $2",
                            conversation_id, user_id) is None:
                raise NotFound(f"conversation {conversation_id}")
            rows = await db.all(
                f"SELECT {MSG_COLS} FROM messages m WHERE m.conversation_id = $1 AND m.user_id = $2 "
                "ORDER BY m.id DESC LIMIT $3", conversation_id, user_id, limit,
            )
            return [to_message(r) for r in reversed(rows)]

        return await self._tx("read", read)

    async def remember(self, user_id: int, content: str, token_count: int) -> Fact:
        now = self.clock()
        row = await self._tx("write", lambda db: db.one(
            f"INSERT INTO facts(user_id, content, token_count, created_at) VALUES ($1, $2, $3, $4) "
            f"RETURNING {FACT_COLS}", user_id, content, token_count, now,
        ))
        return to_fact(row)

    async def model_calls(self, user_id: int) -> list[dict[str, Any]]:
        return await self._tx("read", lambda db: calls_json(db, user_id))

    async def inspect(self, handle: str) -> Inspection | None:
        return await self._tx("read", lambda db: inspect_json(db, handle))

    async def forget(self, handle: str) -> bool:
        # ON DELETE CASCADE takes identities, conversations, messages (and their search vectors, a column),
        # model_calls, facts, deliveries, link codes and audit rows with the user row. link_failures rows stay
        # (keyed by identity, not person; they expire with their window), as on SQLite.
        row = await self._tx("write", lambda db: db.one("DELETE FROM users WHERE handle = $1 RETURNING id", handle))
        return row is not None
