"""`SqliteStore`: the `Store` contract on one SQLite file (WAL), for one machine and one process.

stdlib sqlite3 blocks, so it never runs on the event loop: one worker thread owns the connection and every
database call hops to it (`loop.run_in_executor`). Each Store method is one hop and one transaction, which
also serializes writers inside the process (SQLite has one writer anyway); `busy_timeout` covers other
processes (`hilo import` while `hilo serve` runs). `counters` counts transactions, statements and hops so
the benchmark can report the database work of a turn.
"""

from __future__ import annotations

import asyncio
import functools
import os
import sqlite3
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from datetime import datetime
from typing import Any, TypeVar

from kernel.errors import NotFound
from kernel.types import InboundMessage, ModelCallRecord
from memory import jobs, turn_lease
from memory import migrate as migrations
from memory import sqlite_queries as queries
from memory.sqlite_db import (
    FACT_COLS,
    MSG_COLS,
    Db,
    from_ts,
    to_fact,
    to_message,
    to_ts,
    utcnow,
)
from memory.sqlite_inspect import CALL_COLS, call_json, inspect_json
from memory.sqlite_people import Mode, PeopleMethods
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
LEASE = turn_lease.lease_sql("sqlite")


class SqliteStore(PeopleMethods):
    """The Store on a SQLite file (or ":memory:", kept alive by the worker thread's connection)."""

    dialect = "sqlite"

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 5000,
                 clock: Callable[[], datetime] = utcnow) -> None:
        self.path = os.fspath(path)
        #: every "now" of the store (link codes, lockouts, the resume window, reply times): tests move it
        self.clock = clock
        self.busy_timeout_ms = busy_timeout_ms
        #: transactions, statements (BEGIN/COMMIT not included) and executor hops since open.
        self.counters: dict[str, int] = {"transactions": 0, "statements": 0, "round_trips": 0}
        #: seconds a turn lease lasts unless renewed (memory/turn_lease.py)
        self.turn_lease_ttl = turn_lease.TTL
        self._df_cache: dict[str, tuple[int, float]] = {}  # touched on the worker thread only
        #: migrations applied by the last open() or migrate().
        self.applied: list[str] = []
        self._executor: ThreadPoolExecutor | None = None
        self._conn: sqlite3.Connection | None = None

    # -- lifecycle ---------------------------------------------------------------------------------------

    async def open(self) -> None:
        """Connect and apply pending migrations."""
        await self._connect()
        self.applied = await self._call(self._migrate_sync)

    async def close(self) -> None:
        """Release the connection and the worker thread. Safe to call twice."""
        executor, self._executor = self._executor, None
        if executor is None:
            return
        try:
            await asyncio.get_running_loop().run_in_executor(executor, self._close_sync)
        finally:
            executor.shutdown(wait=True)  # the worker is idle now: this returns at once

    async def migrate(self) -> list[str]:
        """Apply pending migrations (connecting first if needed); return the names applied."""
        await self._connect()
        self.applied = await self._call(self._migrate_sync)
        return self.applied

    async def _connect(self) -> None:
        if self._executor is not None:
            return
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="hilo-sqlite")
        try:
            await self._call(self._connect_sync)
        except BaseException:
            executor, self._executor = self._executor, None
            executor.shutdown(wait=True)
            raise

    def _connect_sync(self) -> None:
        conn: sqlite3.Connection | None = None
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=self.busy_timeout_ms / 1000)
            conn.execute("PRAGMA journal_mode = WAL")  # the first write: a read-only file or directory fails here
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")  # durable across process crashes; WAL keeps it consistent
        except sqlite3.OperationalError as exc:
            if conn is not None:
                conn.close()
            raise StoreUnavailable(self._cannot_open(exc)) from exc
        self._conn = conn

    def _cannot_open(self, exc: sqlite3.Error) -> str:
        """What to tell the operator when the file cannot be opened or written."""
        path = os.path.abspath(self.path)
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            why = f"its directory {folder} does not exist: create it (mkdir -p {folder})"
        else:
            why = f"check that {folder} and the file are writable for this user"
        return f"cannot open the SQLite database {path} ({exc}): {why}, or set HILO_DATABASE_URL"

    def _close_sync(self) -> None:
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.execute("PRAGMA optimize")  # refresh planner statistics where they went stale
            except sqlite3.Error:
                pass  # best effort: another process may hold the lock
            finally:
                conn.close()

    def _migrate_sync(self) -> list[str]:
        assert self._conn is not None
        self.counters["transactions"] += 1
        try:
            return migrations.apply_sqlite(self._conn)
        except sqlite3.OperationalError as exc:  # read-only, disk full, locked past the timeout
            raise StoreUnavailable(self._cannot_open(exc)) from exc

    # -- plumbing: one hop, one transaction ----------------------------------------------------------------

    async def _call(self, fn: Callable[[], T]) -> T:
        if self._executor is None:
            raise StoreError("the store is not open: call open() first")
        self.counters["round_trips"] += 1
        return await asyncio.get_running_loop().run_in_executor(self._executor, fn)

    async def _tx(self, mode: Mode, fn: Callable[[Db], T]) -> T:
        """Run fn(db) on the worker thread inside one transaction (BEGIN IMMEDIATE for writes: take the
        write lock first, so a busy database waits busy_timeout instead of failing on upgrade)."""
        return await self._call(functools.partial(self._tx_sync, mode, fn))

    def _tx_sync(self, mode: Mode, fn: Callable[[Db], T]) -> T:
        conn = self._conn
        if conn is None:
            raise StoreError("the store is closed")
        db = Db(conn, self.counters, self._df_cache)
        try:
            if mode != "none":
                conn.execute("BEGIN IMMEDIATE" if mode == "write" else "BEGIN")
                self.counters["transactions"] += 1
            try:
                result = fn(db)
            except BaseException:
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if conn.in_transaction:
                conn.execute("COMMIT")
            return result
        except queries.Rollback as rollback:
            return rollback.value  # type: ignore[no-any-return]
        except sqlite3.OperationalError as exc:
            if "locked" in str(exc) or "busy" in str(exc):
                raise StoreUnavailable(f"the SQLite database {self.path!r} is busy: {exc}; retry later") from exc
            raise StoreError(f"SQLite error on {self.path!r}: {exc}") from exc
        except sqlite3.Error as exc:
            raise StoreError(f"SQLite error on {self.path!r}: {exc}") from exc

    def turn_lock(self, conversation_id: int, message_id: int) -> AbstractAsyncContextManager[bool]:
        """The conversation's turn lease (memory/turn_lease.py): two processes on one file serialize their
        turns too. Taking it and checking the message is one write transaction (one hop)."""
        return turn_lease.hold(self._take_lease, self._renew_lease, self._release_lease, conversation_id,
                               message_id, ttl=self.turn_lease_ttl, counters=self.counters)

    async def _take_lease(self, conversation_id: int, message_id: int, owner: str, ttl: float) -> tuple[bool, bool]:
        def take(db: Db) -> tuple[bool, bool]:
            if db.run(LEASE.take, (conversation_id, owner, ttl)):
                return True, bool(db.one(LEASE.answered, (message_id,))[0])
            return False, not db.one(LEASE.exists, (conversation_id,))[0]  # forgotten: nothing to wait for

        return await self._tx("write", take)

    async def _renew_lease(self, conversation_id: int, owner: str, ttl: float) -> bool:
        return bool(await self._tx("write", lambda db: db.run(LEASE.renew, (conversation_id, owner, ttl))))

    async def _release_lease(self, conversation_id: int, owner: str) -> None:
        await self._tx("write", lambda db: db.run(LEASE.release, (conversation_id, owner)))

    # -- background job leases (memory/jobs.py) ---------------------------------------------------------

    async def register_job(self, name: str, scheduled: bool) -> None:
        now = self.clock()
        await self._tx("write", jobs.on_sqlite(lambda sql: jobs.register(sql, name, scheduled, now)))

    async def claim_job(self, name: str, owner: str, ttl: float, *, force: bool = False) -> jobs.JobClaim:
        now = self.clock()
        return await self._tx("write", jobs.on_sqlite(lambda sql: jobs.claim(sql, "sqlite", name, owner, ttl, now,
                                                                              force)))

    async def renew_job(self, name: str, owner: str, ttl: float) -> bool:
        now = self.clock()
        return await self._tx("write", jobs.on_sqlite(lambda sql: jobs.renew(sql, name, owner, ttl, now)))

    async def finish_job(self, name: str, owner: str, end: jobs.JobEnd) -> bool:
        now = self.clock()
        return await self._tx("write", jobs.on_sqlite(lambda sql: jobs.finish(sql, name, owner, end, now)))

    async def job_states(self) -> list[jobs.JobState]:
        return await self._tx("read", jobs.on_sqlite(jobs.states))

    async def purge_link_codes(self) -> int:
        now = self.clock()
        return await self._tx("write", jobs.on_sqlite(lambda sql: jobs.purge_link_codes(sql, now)))

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
        mode: Mode = "write" if create else "read"
        return await self._tx(mode, lambda db: queries.user_by_handle(db, handle, to_ts(self.clock()), create)[0])

    async def find_conversation(self, user_id: int, surface: str) -> int | None:
        row = await self._tx("read", lambda db: db.one(
            "SELECT id FROM conversations WHERE user_id = ? AND surface = ? "
            "ORDER BY singleton DESC, updated_at DESC, id DESC LIMIT 1", (user_id, surface),
        ))
        return None if row is None else int(row[0])

    async def create_conversation(self, user_id: int, surface: str, title: str | None = None) -> int:
        now = to_ts(self.clock())
        row = await self._tx("write", lambda db: db.one(
            "INSERT INTO conversations(user_id, surface, singleton, title, created_at, updated_at) "
            "VALUES (?, ?, 0, ?, ?, ?) RETURNING id", (user_id, surface, title, now, now),
        ))
        return int(row[0])

    async def conversations(self, user_id: int) -> list[ConversationInfo]:
        rows = await self._tx("read", lambda db: db.all(
            "SELECT c.id, c.surface, c.title, c.created_at, c.updated_at, "
            "(SELECT count(*) FROM messages m WHERE m.conversation_id = c.id) "
            "FROM conversations c WHERE c.user_id = ? ORDER BY c.updated_at DESC, c.id DESC", (user_id,),
        ))
        return [ConversationInfo(id=r[0], surface=r[1], title=r[2], created_at=from_ts(r[3]),
                                 updated_at=from_ts(r[4]), message_count=r[5]) for r in rows]

    async def messages(self, user_id: int, conversation_id: int, limit: int = 200) -> list[StoredMessage]:
        def read(db: Db) -> list[StoredMessage]:
            if db.one("SELECT 1 FROM conversations WHERE id = ? AND user_id = ?", (conversation_id, user_id)) is None:
                raise NotFound(f"conversation {conversation_id}")
            rows = db.all(
                f"SELECT {MSG_COLS} FROM messages m WHERE m.conversation_id = ? AND +m.user_id = ? "
                "ORDER BY m.id DESC LIMIT ?", (conversation_id, user_id, limit),
            )
            return [to_message(r) for r in reversed(rows)]

        return await self._tx("read", read)

    async def remember(self, user_id: int, content: str, token_count: int) -> Fact:
        now = to_ts(self.clock())
        row = await self._tx("write", lambda db: db.one(
            f"INSERT INTO facts(user_id, content, token_count, created_at) VALUES (?, ?, ?, ?) RETURNING {FACT_COLS}",
            (user_id, content, token_count, now),
        ))
        return to_fact(row)

    async def model_calls(self, user_id: int) -> list[dict[str, Any]]:
        rows = await self._tx("read", lambda db: db.all(
            f"SELECT {CALL_COLS} FROM model_calls WHERE user_id = ? ORDER BY id", (user_id,),
        ))
        return [call_json(r) for r in rows]

    async def inspect(self, handle: str) -> Inspection | None:
        return await self._tx("read", lambda db: inspect_json(db, handle))

    async def forget(self, handle: str) -> bool:
        # ON DELETE CASCADE takes identities, conversations, messages (and their FTS rows, by trigger),
        # model_calls and facts with the user row.
        # link_failures rows stay: they are keyed by identity, not person, and expire with their window (at
        # most half an hour); deleting them would let /forget reset a guesser's lockout
        row = await self._tx("write", lambda db: db.one("DELETE FROM users WHERE handle = ? RETURNING id", (handle,)))
        return row is not None
