"""The Postgres dialect: `PostgresStore` on Postgres (Supabase or any Postgres 13+), through an asyncpg pool.

Each Store method is one pool checkout and one transaction: READ COMMITTED for writes, REPEATABLE READ READ ONLY
for reads; the turn lease's statements and the turn's context reads (bounded by the turn's moment) commit on their
own, and a known person's ingest and finish_turn are one statement each (memory/pg_turn.py), and so is the
context read, with a query vector or without (memory/pg_context.py): a turn in 4 round trips on the wire; an import
batch writes its people, conversations and episodes one statement per kind (memory/pg_import.py). The shared
logic's SQL is Postgres' own spelling, so it runs as written. What differs from SQLite lives here: the pool and
its plumbing, the error mapping, transaction-scoped advisory locks (`db.lock`), recall over the tsvector with
term statistics from the planner (`pg_stats.most_common_elems`), the bulk insert (INSERT ... unnest), and vectors:
pgvector halfvec with one HNSW index per (embedder, dim), searched per person with an iterative scan by
hilo_nearest, whose SET clauses carry the scan's settings (migrations/postgres/0043; or, without pgvector, none:
`vector_status` says why).

URL options (removed before connecting; anything else in the query string goes to asyncpg/libpq):
    statement_cache_size=N   asyncpg's prepared statement cache (default 100). Supabase's pooler in
                             transaction mode (port 6543) forbids prepared statements: use 0 there (it is the
                             default when the host ends in pooler.supabase.com and the port is 6543).
    pool_min_size=N, pool_max_size=N   the pool bounds (default 1 and 10).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
from collections.abc import Callable, Coroutine, Iterable, Sequence
from datetime import datetime
from typing import Any, TypeVar
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import asyncpg

from kernel import log
from kernel.errors import ConfigError
from kernel.types import ChatMessage, InboundMessage, ModelCallRecord, Outgoing, StoredMessage, utcnow
from memory import migrate as migrations
from memory import pg_context, pg_import, pg_terms, pg_turn, reindex, sql_import, turn_lease
from memory.pg_context import pg_literal
from memory.rows import INSERT_COLS, Db, Mode, Rollback, aware, columns_by_table
from memory.sql_import import ImportWrites
from memory.sql_store import Logic, SqlStore
from memory.sql_vectors import VectorQuery
from memory.store import ContextQuery, ContextRows, ImportResult, ImportRow, Ingested, StoreError, StoreUnavailable

T = TypeVar("T")
logger = log.get("hilo.store")

NO_PGVECTOR = ("this Postgres keeps no vectors (the pgvector extension was not available to hilo's migration, or "
               "hilo.vectors = off): a superuser runs CREATE EXTENSION vector, see migrations/postgres/0015")

#: Errors that say "the database is not there, or too busy, right now": retry later.
UNAVAILABLE: tuple[type[BaseException], ...] = (
    OSError, asyncio.TimeoutError, asyncpg.CannotConnectNowError, asyncpg.TooManyConnectionsError,
    asyncpg.ConnectionDoesNotExistError, asyncpg.ConnectionFailureError, asyncpg.DeadlockDetectedError,
    asyncpg.SerializationError, asyncpg.LockNotAvailableError, asyncpg.QueryCanceledError,
    asyncpg.AdminShutdownError,
)

#: Transaction-scoped advisory locks on an integer key, or on a text key hashed.
LOCK_INT, LOCK_TEXT = "SELECT pg_advisory_xact_lock($1)", "SELECT pg_advisory_xact_lock(hashtextextended($1, 0))"

#: One batch of vectors in one statement: the owner read from the message (a message gone meanwhile is skipped).
PUT_VECTORS = (
    "INSERT INTO message_vectors(message_id, user_id, embedder, dim, vector) "
    "SELECT m.id, m.user_id, $1, $2, v.vec::halfvec FROM unnest($3::bigint[], $4::text[]) AS v(id, vec) "
    "JOIN messages m ON m.id = v.id ON CONFLICT (message_id) DO UPDATE SET user_id = excluded.user_id, "
    "embedder = excluded.embedder, dim = excluded.dim, vector = excluded.vector"
)
#: Reads see one snapshot. The HNSW scan's settings (its iterative scan, ef_search) are no SET LOCAL of theirs: they
#: are the SET clauses of hilo_nearest (migrations/postgres/0043), which every vector search calls.
BEGIN_READ = "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
#: What the vector column is (halfvec: pgvector; bytea: none), and whether hilo_nearest has its HNSW settings
#: (migrations/postgres/0043: not when it was made by a role that is no superuser before pgvector was there).
VECTOR_TYPE = (
    "SELECT format_type(a.atttypid, NULL), EXISTS (SELECT 1 FROM pg_proc WHERE proname = 'hilo_nearest' "
    "AND proconfig IS NOT NULL) FROM pg_attribute a WHERE a.attrelid = to_regclass('message_vectors') "
    "AND a.attname = 'vector'"
)
#: `hilo import`'s batches in flight at once (PostgresStore.import_lanes; memory/importer.py)
IMPORT_LANES = 2
#: Many messages in one statement (one round trip whatever the count); the status line counts the inserted.
BULK_INSERT = (
    f"INSERT INTO messages({INSERT_COLS}) SELECT * FROM unnest($1::bigint[], $2::bigint[], $3::text[], "
    "$4::text[], $5::text[], $6::int[], $7::text[], $8::timestamptz[], $9::text[], $10::bigint[]) "
    "ON CONFLICT (surface, external_id) DO NOTHING"
)


class PgDb(Db):
    """An asyncpg connection (inside the store's transaction) as the logic sees it (rows.Db)."""

    probes = False  # every statement is a round trip: recall searches at once

    def __init__(self, conn: Any, counters: dict[str, int], df_cache: dict[Any, tuple[float, float]],
                 clock: Callable[[], datetime] = utcnow, indexed: set[tuple[str, int]] | None = None,
                 term_stats: dict[str, tuple[pg_terms.TermStats | None, float]] | None = None) -> None:
        self.conn, self.counters, self.clock = conn, counters, clock
        #: (table, "") -> (the mean row length, monotonic expiry): see pg_context.cached_avgdl
        self.df_cache = df_cache
        #: table -> (its term statistics, monotonic expiry): pg_terms.cached
        self.term_stats = term_stats if term_stats is not None else {}
        #: (embedder, dim) whose HNSW index this process made sure of; None: the database keeps no vectors
        self.indexed = indexed
        self.vectors = indexed is not None

    async def all(self, sql: str, *args: Any) -> list[Any]:
        self.counters["statements"] += 1
        return list(await self.conn.fetch(sql, *args))

    async def run(self, sql: str, *args: Any) -> int:
        self.counters["statements"] += 1
        return rowcount(await self.conn.execute(sql, *args))

    async def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.counters["statements"] += 1
        await self.conn.executemany(sql, rows)

    def ts(self, moment: datetime) -> datetime:
        return aware(moment)

    async def lock(self, key: str | int) -> bool:
        await self.run(LOCK_INT if isinstance(key, int) else LOCK_TEXT, key)
        return True

    async def insert_messages(self, rows: list[tuple[Any, ...]]) -> int:
        self.counters["statements"] += 1
        return rowcount(await self.conn.execute(BULK_INSERT, *pg_import.columns(rows)))

    async def put_vectors(self, embedder: str, dim: int, rows: list[tuple[int, Sequence[float]]]) -> int:
        await self._index(embedder, dim)
        self.counters["statements"] += 1
        return rowcount(await self.conn.execute(PUT_VECTORS, embedder, dim, [i for i, _ in rows],
                                                [pg_literal(v) for _, v in rows]))

    async def _index(self, embedder: str, dim: int) -> None:
        """The HNSW index of (embedder, dim), made once (concurrent writers wait on one advisory lock)."""
        assert self.indexed is not None
        if (embedder, dim) in self.indexed:
            return
        name = index_name(embedder, dim)
        await self.lock(f"vector-index\x1f{name}")
        await self.run(f"CREATE INDEX IF NOT EXISTS {name} ON message_vectors USING hnsw "
                       f"((vector::halfvec({int(dim)})) halfvec_cosine_ops) WHERE embedder = {quote(embedder)}")
        self.indexed.add((embedder, dim))

    async def nearest(self, vq: VectorQuery) -> list[tuple[int, float]]:
        rows = await self.all(NEAREST, vq.embedder, len(vq.vector), pg_literal(vq.vector), vq.user_id,
                              list(vq.excluded), vq.limit)
        return [(int(row[0]), float(row[1])) for row in rows]

    def cosine_sql(self, vector: Sequence[float], embedder: str) -> tuple[str, str, Any] | None:
        """Recall's row read joins each candidate's vector of `embedder` and computes its cosine with $10, parsed
        once in a sub-select (an InitPlan): as a bare `$10::text::halfvec` the generic plan parsed the question's
        512-float text again for every candidate row (19.5 ms of a turn's 37 at 1,000 vectors a person, against
        6.9 ms parsed once; docs/architecture.md, "Performance budget"), as hilo_nearest parses it (migration 0043)."""
        dim = len(vector)
        return (f"LEFT JOIN message_vectors v ON v.message_id = m.id AND v.embedder = {quote(embedder)} "
                f"AND v.dim = {dim}", f"1 - (v.vector::halfvec({dim}) <=> (SELECT $10::text::halfvec({dim})))",
                pg_literal(vector))

    async def cosines(self, vq: VectorQuery, ids: Sequence[int]) -> dict[int, float]:
        dim = len(vq.vector)
        rows = await self.all(f"SELECT v.message_id, 1 - (v.vector::halfvec({dim}) <=> $1::text::halfvec({dim})) "
                              f"FROM message_vectors v WHERE v.message_id = ANY($2::bigint[]) AND v.user_id = $3 "
                              f"AND v.embedder = {quote(vq.embedder)} AND v.dim = {dim}",
                              pg_literal(vq.vector), list(ids), vq.user_id)
        return {int(r[0]): float(r[1]) for r in rows}

    async def tables(self) -> dict[str, list[str]]:
        rows = await self.all("SELECT c.table_name, c.column_name FROM information_schema.columns c "
                              "JOIN information_schema.tables t ON t.table_schema = c.table_schema "
                              "AND t.table_name = c.table_name WHERE c.table_schema = current_schema() "
                              "AND t.table_type = 'BASE TABLE' ORDER BY c.table_name, c.ordinal_position")
        return columns_by_table(rows)

    def ids(self, ids: Sequence[Any]) -> list[Any]:
        return list(ids)

    async def hits(self, q: ContextQuery, terms: list[str], excluded: Any, limit: int,
                   episode_limit: int) -> tuple[list[Any], list[Any]]:
        """Recall's lexical and episode hits in one statement: migration 0032's hilo_recall_hits, as the
        one-statement read calls it (memory/pg_context.py; sql_recall.recall's statements, which the store's
        load_context no longer runs on Postgres: bench/recall_lab.py and the tests that compare the two)."""
        found: tuple[list[Any], list[Any]] = ([], [])
        for kind, hit_id, score in await self.all(pg_context.HITS, terms, q.user_id, aware(q.at), excluded,
                                                  q.current_message_id, q.conversation_id, limit, episode_limit,
                                                  *pg_context.cached_avgdl(self),
                                                  *await pg_context.weights(self, terms)):
            if kind < 2:
                found[kind].append((hit_id, score))
            else:
                pg_context.keep_avgdl(self, kind - 2, float(score))
        return found


#: The person's nearest vectors of one embedder: ids and cosines, best first, by hilo_nearest (migrations/postgres/0043:
#: the HNSW index of (embedder, dim) with pgvector's iterative scan and ef_search, set by the function's own SET
#: clauses, so that no statement of the transaction sets them and a transaction pooler keeps nothing).
NEAREST = "SELECT message_id, cosine FROM hilo_nearest($1, $2, $3, $4, $5::bigint[], $6)"


def quote(text: str) -> str:
    """A SQL string literal (standard_conforming_strings, on since Postgres 9.1: only quotes are doubled)."""
    return "'" + text.replace("'", "''") + "'"


def index_name(embedder: str, dim: int) -> str:
    return "message_vectors_hnsw_" + hashlib.sha1(f"{embedder}\x1f{dim}".encode()).hexdigest()[:12]


def rowcount(status: str) -> int:
    """The row count of a command status ("INSERT 0 3", "UPDATE 2", "DELETE 0"); 0 when there is none."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


async def _read(conn: Any, begin: str, work: Coroutine[Any, Any, T]) -> T:
    """A read transaction: `begin` (BEGIN_READ: one round trip), the work, COMMIT;
    ROLLBACK when it fails (the pool rolls back what a cancelled one left open)."""
    try:
        await conn.execute(begin)
    except BaseException:
        work.close()
        raise
    try:
        result = await work
    except BaseException:
        if not _gone(conn) and conn.is_in_transaction():
            with contextlib.suppress(Exception):
                await conn.execute("ROLLBACK")
        raise
    await conn.execute("COMMIT")
    return result


def _gone(conn: Any) -> bool:
    """Whether `conn` lost its server: closed, or already handed back to the pool by asyncpg when it closed
    (its proxy then refuses every call)."""
    try:
        return bool(conn.is_closed())
    except asyncpg.InterfaceError:
        return True


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


class PostgresStore(SqlStore):
    """The Store on a Postgres database."""

    #: how import_rows writes a batch's people, conversations and episodes (set-based; the same rows as
    #: sql_import.ONE_BY_ONE, which tests/test_import_pg.py compares)
    import_writes: ImportWrites = pg_import.WRITES
    #: Store.import_terms_ahead: on the event loop they were 20% of a batch's time, the server idle meanwhile
    import_terms_ahead = True

    @property
    def import_lanes(self) -> int:
        """Store.import_lanes: two batches of other people's lines at once, on two connections of the pool (the
        server inserts one on each backend: a 1,000,000-line import ran ~45% faster on two cores); one when the
        pool holds one connection."""
        return max(1, min(IMPORT_LANES, self.options["pool_max_size"]))

    def __init__(self, url: str, *, statement_cache_size: int | None = None, command_timeout: float = 30.0,
                 clock: Callable[[], datetime] | None = None) -> None:
        super().__init__(clock)
        self.dsn, options = parse_url(url)
        if statement_cache_size is not None:
            options["statement_cache_size"] = statement_cache_size
        self.options = options
        self.command_timeout = command_timeout
        self._df_cache: dict[Any, tuple[float, float]] = {}
        self._term_stats: dict[str, tuple[pg_terms.TermStats | None, float]] = {}
        #: (embedder, dim) whose HNSW index exists; None until open() found a halfvec column (memory/vectors.py)
        self._indexed: set[tuple[str, int]] | None = None
        self._pool: Any = None
        #: messages imported since the statistics were last refreshed, and whether a lane is refreshing them (see
        #: import_rows)
        self._imported = 0
        self._analyzing = False

    async def close(self) -> None:
        """Close the pool (the turn leases of turns that never ran released first). Safe to call twice."""
        if self._pool is not None and self._leases:
            await self._release_kept_leases()
        pool, self._pool = self._pool, None
        if pool is not None:
            await pool.close()

    async def migrate(self) -> list[str]:
        """Apply pending migrations (connecting first if needed); return the names applied."""
        await self._connect()
        self.applied = await self._tx("lease", lambda db: migrations.apply_postgres(db.conn))
        kind, configured = await self._tx("lease", lambda db: db.one(VECTOR_TYPE)) or (None, None)
        if kind is not None and str(kind).endswith("halfvec"):
            self.vector_status, self._indexed = None, self._indexed or set()
            if not configured:  # pgvector came after the migration: the search's settings now can be set
                await self._tx("lease", lambda db: db.value("SELECT hilo_define_nearest()"))
        else:
            self.vector_status, self._indexed = NO_PGVECTOR, None
        await reindex.run(self._tx)
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

    async def _tx(self, mode: Mode, logic: Logic[T], *args: Any) -> T:
        """One checkout: logic(db, *args) inside one transaction (a lease's statements: each on its own)."""
        if self._pool is None:
            raise StoreError("the store is not open: call open() first")
        self.counters["round_trips"] += 1
        try:
            async with self._pool.acquire() as conn:
                db = PgDb(conn, self.counters, self._df_cache, self.clock, self._indexed, self._term_stats)
                self.counters["transactions"] += 1
                try:
                    if mode in ("lease", "reads"):
                        return await logic(db, *args)
                    if mode == "read":
                        return await _read(conn, BEGIN_READ, logic(db, *args))
                    async with conn.transaction():  # READ COMMITTED
                        return await logic(db, *args)
                except Rollback as rollback:
                    return rollback.value  # type: ignore[no-any-return]
                # The server ended this connection under a statement (a restart, a failover,
                # pg_terminate_backend), though asyncpg may not say so:
                except asyncpg.InternalClientError as exc:
                    # its goodbye landed while asyncpg thought the connection idle, and the next statement found
                    # the protocol stuck ("cannot switch to state 15; another operation (2) is in progress").
                    # Closed here, so the pool never hands it out again (asyncpg would, to fail the same way).
                    with contextlib.suppress(asyncpg.InterfaceError):
                        conn.terminate()
                    raise StoreUnavailable(f"the Postgres connection was lost: {exc}; retry later") from exc
                except asyncpg.InterfaceError as exc:
                    # a transaction whose connection closed fails on exit ("cannot call Transaction.__aexit__():
                    # the underlying connection is closed"); what it had not committed was rolled back
                    if isinstance(exc, UNAVAILABLE) or not _gone(conn):
                        raise
                    raise StoreUnavailable(f"the Postgres connection was lost: {exc}; retry later") from exc
        except UNAVAILABLE as exc:
            raise StoreUnavailable(f"the Postgres database is busy or unreachable: {exc}; retry later") from exc
        except asyncpg.InternalClientError as exc:  # asyncpg's own state, at checkout or release: never the caller's
            raise StoreUnavailable(f"the Postgres client lost its connection: {exc}; retry later") from exc
        except asyncpg.PostgresError as exc:
            raise StoreError(f"Postgres error: {exc}") from exc
        except asyncpg.InterfaceError as exc:
            raise StoreError(f"Postgres client error: {exc}") from exc

    async def ingest(self, msg: InboundMessage, token_count: int, *,
                     context: Callable[[Ingested], ContextQuery] | None = None,
                     limits: Sequence[tuple[str, int, int]] = ()) -> Ingested | None:
        """One statement for a known person's new message, which also takes its turn's lease (memory/pg_turn.py);
        a first contact or a redelivery runs SqlStore.ingest's transaction. `limits` and `context` are a
        statement each, before and after it, as hit_rates and load_context would be (a round trip either way)."""
        await self._limit(limits)
        owner = turn_lease.new_owner()
        fast = await self._tx("lease", pg_turn.ingest, msg, token_count, owner, self.turn_lease_ttl)
        if fast is None:
            return await super().ingest(msg, token_count)
        turn = self._leased(fast, owner)
        if fast[1]:
            await self._read_ingested(turn, context)
        return turn

    async def hit_rate(self, key: str, limit: int, window_s: int) -> float:
        """One statement outside a transaction (an upsert is atomic): one round trip, not BEGIN, it and COMMIT."""
        from memory import sql_limits

        return await self._tx("lease", sql_limits.hit, key, limit, window_s)

    async def hit_rates(self, hits: Sequence[tuple[str, int, int]]) -> float:
        """The hits of a message in one statement (sql_limits.hit_all), outside a transaction: one round trip, not
        a transaction of one statement per hit (the web's three: five round trips, eight through pgbouncer)."""
        from memory import sql_limits

        return await self._tx("lease", sql_limits.hit_all, list(hits))

    async def _read_context(self, query: ContextQuery) -> ContextRows:
        """One statement, with a query vector or without (memory/pg_context.py)."""
        return await self._tx("reads", pg_context.load_context, query)

    async def _read_ahead(self, query: ContextQuery) -> pg_context.Read:
        """The one statement without the vector being computed (SqlStore.load_context)."""
        return await self._tx("reads", pg_context.read_ahead, query)

    async def _finish_context(self, query: ContextQuery, partial: Any) -> ContextRows:
        """The vector's part: one statement more when the database keeps vectors (pg_context.finish)."""
        return await self._tx("reads", pg_context.finish, query, partial)

    async def finish_turn(
        self, turn: Ingested, reply: str | None, reply_tokens: int, calls: Sequence[ModelCallRecord],
        metadata: dict[str, Any] | None = None, *, memory_ids: Sequence[int] = (), outgoing: Outgoing | None = None,
        tool_messages: Sequence[ChatMessage] = (),
    ) -> StoredMessage | None:
        """SqlStore.finish_turn in one statement (memory/pg_turn.py); a turn that used tools has more rows to
        write: SqlStore.finish_turn's transaction."""
        if tool_messages:
            return await super().finish_turn(turn, reply, reply_tokens, calls, metadata, memory_ids=memory_ids,
                                             outgoing=outgoing, tool_messages=tool_messages)
        return await self._finishing("lease", turn, pg_turn.finish_turn, reply, reply_tokens, calls, metadata,
                                     memory_ids, outgoing)

    async def import_rows(self, rows: Sequence[ImportRow]) -> ImportResult:
        """SqlStore.import_rows with set-based writes (memory/pg_import.py: a batch is about ten statements, not
        one per conversation and episode), then ANALYZE of the tables it filled when pg_terms.stale says so:
        recall's term statistics come from pg_stats, and autovacuum may not have run yet on a fresh database."""
        result = await self._tx("write", sql_import.import_rows, rows, self.import_writes)
        self._imported += result.inserted
        if result.inserted and not self._analyzing:  # one ANALYZE at a time: the other lane's batch may be stale too
            self._analyzing = True
            try:
                if await self._tx("lease", pg_terms.stale, self._imported):
                    self._imported = 0
                    try:
                        await self._tx("lease", lambda db: db.run("ANALYZE messages, episodes, conversations, users"))
                    except StoreError as exc:  # e.g. a role that may not ANALYZE: autovacuum still will
                        logger.warning("import.analyze_failed", error=type(exc.__cause__).__name__)
            finally:
                self._analyzing = False
        return result
