"""The SQLite dialect: `SqliteStore` on one SQLite file (WAL), for one machine and one process (or a few).

stdlib sqlite3 blocks, so it never runs on the event loop: one worker thread owns the connection and every
transaction is ONE hop to it (memory/sqlite_worker.py). There the logic's coroutine is stepped synchronously:
`SqliteDb`'s methods are coroutines that never suspend, so `coro.send(None)` runs the whole transaction to
StopIteration in that one hop. This also serializes writers inside the process (SQLite has one writer anyway);
`busy_timeout` covers other processes (`hilo import` while `hilo serve` runs). Write transactions queued behind
one another while the thread was busy commit together (group commit, `_group_sync`): each a savepoint of one
transaction, told of its success only after the one COMMIT; at 8 web requests at a time they queue 2-8 deep.

What differs from Postgres lives here: the plumbing, the error mapping, the spellings (`translate`; list
parameters as JSON arrays), BM25 over FTS5's bounded candidates (memory/sqlite_terms.py), the bulk insert, and
vectors: float16 blobs searched with numpy over the person's matrix, cached in process (memory/vectors.py).
`db.lock` is a no-op: BEGIN IMMEDIATE already serializes every writer.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
import sqlite3
import time
from collections.abc import Callable, Coroutine, Iterable, Iterator, Sequence
from datetime import datetime
from typing import Any, TypeVar

from kernel import log
from kernel.errors import RateLimited
from kernel.types import InboundMessage
from memory import migrate as migrations
from memory import reindex, sql_limits, sqlite_fts, sqlite_terms, turn_lease
from memory import sql_turns as turns
from memory.rows import INSERT_COLS, Db, Mode, Rollback, columns_by_table, to_ts
from memory.sql_store import Logic, SqlStore, context_mode, unread
from memory.sql_vectors import VectorQuery
from memory.sqlite_checkpoint import SAFETY_PAGES, Checkpointer
from memory.sqlite_file import (
    DAMAGED,
    FILE_FIX,
    TRANSIENT,
    FileIdentity,
    file_identity,
    file_problem,
    not_a_database,
    private_file,
)
from memory.sqlite_worker import Outcome, Worker, outcome
from memory.store import ContextQuery, Ingested, IngestedContext, StoreError, StoreUnavailable
from memory.vectors import DEFAULT_CACHE_FLOATS, Matrix, MatrixCache, extend, matrix_cosines, matrix_of, pack, top
from memory.windows import MESSAGE_CHANGES, WindowCache, triggers

T = TypeVar("T")
logger = log.get("hilo.store")

#: The shared SQL is spelled as Postgres reads it; these are the SQLite spellings of what differs.
SPELLINGS = (
    ("greatest(", "max("), ("least(", "min("), ("string_agg(", "group_concat("),
    ("nextval(pg_get_serial_sequence('episodes', 'id'))", "NULL"),  # an AUTOINCREMENT key
    (" IS NOT DISTINCT FROM ", " IS "), (" IS DISTINCT FROM ", " IS NOT "),
    (" FOR UPDATE SKIP LOCKED", ""), (" FOR UPDATE", ""),  # BEGIN IMMEDIATE: writers are serialized already
    ("WHERE singleton DO", "WHERE singleton = 1 DO"),  # the partial index's own predicate
    # '+' keeps SQLite's planner on (conversation_id, id), newest first, whatever the statistics say (on Postgres
    # the same '+' would hide the column from its estimates and sort the whole conversation)
    ("m.conversation_id = $1 AND m.user_id = $2", "m.conversation_id = $1 AND +m.user_id = $2"),
    (sql_limits.UNNEST_KEYS, "(SELECT value AS k FROM json_each($1)) AS h"),  # a JSON array, as `ids` passes lists
)
_PLACEHOLDER, _CAST = re.compile(r"\$(\d+)"), re.compile(r"::\w+(?:\[\])?")
#: A list parameter (`Db.ids`: a JSON array on SQLite), `= ANY($n::bigint[])` / `<> ALL($n::bigint[])`.
_ANY, _ALL = re.compile(r"= ANY\((\$\d+)::(?:bigint|text)\[\]\)"), re.compile(r"<> ALL\((\$\d+)::bigint\[\]\)")


@functools.lru_cache(maxsize=1024)
def translate(sql: str) -> str:
    """A statement in SQLite's spelling: SPELLINGS applied, `= ANY($n::bigint[])` read from JSON, casts dropped,
    `$n` -> `?n` (cached per text)."""
    for postgres, sqlite in SPELLINGS:
        sql = sql.replace(postgres, sqlite)
    sql = _ALL.sub(r"NOT IN (SELECT value FROM json_each(\1))", _ANY.sub(r"IN (SELECT value FROM json_each(\1))", sql))
    return _PLACEHOLDER.sub(r"?\1", _CAST.sub("", sql))


#: Lexical hits asked beyond recall's LEXICAL_HITS: the statement returns only messages ROWS keeps (the context's
#: window left out, as on Postgres), and until it did it asked for the window's size more (200 or more in a long
#: conversation: ROWS then sought the neighbours of hits it dropped). 20 more keeps recall where it was
#: (bench/memory_bench.py at 2,000 tokens, en / es: 0.463 / 0.551 with 20, 0.459 / 0.547 without).
EXTRA_HITS = 20
BULK_INSERT = (
    f"INSERT INTO messages({INSERT_COLS}) VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10) "
    "ON CONFLICT(surface, external_id) DO NOTHING"
)
#: A bulk insert of at least this many messages indexes them in FTS5 in its own transaction (memory/sqlite_fts.py),
#: with one INSERT ... SELECT after the rows (row by row through the insert trigger that indexed messages until
#: migration 0046, an import batch's insert ran 12,000 rows/s; 40,000-48,000 so, in 2,500-row batches of everyday
#: sentences); a smaller one leaves them to the worker's idle runs, as a turn's messages.
BULK_FTS_ROWS = 100


#: One message's vector (its owner read from the message; a message gone meanwhile inserts nothing).
PUT_VECTOR = (
    "INSERT INTO message_vectors(message_id, user_id, embedder, dim, vector) "
    "SELECT id, user_id, ?2, ?3, ?4 FROM messages WHERE id = ?1 "
    "ON CONFLICT(message_id) DO UPDATE SET user_id = excluded.user_id, embedder = excluded.embedder, "
    "dim = excluded.dim, vector = excluded.vector"
)
#: Write transactions that never change message_vectors: they leave the vector cache as it was checked. Named, not
#: held: the modules of jobs, limits, spend and alerts load only in the commands that use them (`hilo context`
#: starts without them).
KEEPS_VECTORS = frozenset({
    "memory.sql_turns.ingest", "memory.sql_turns.ingest_leased", "memory.sql_turns.finish_turn",
    "memory.dialect_sqlite.ingest_turn",
    "memory.sql_import.import_rows",
    "memory.jobs.register", "memory.jobs.claim", "memory.jobs.renew", "memory.jobs.finish",
    "memory.sql_limits.hit", "memory.sql_limits.hit_all", "memory.sql_limits.hit_each", "memory.sql_limits.probe",
    "memory.sql_limits.purge",
    "memory.sql_spend.reserve", "memory.sql_spend.settle", "memory.sql_alerts.take",
})


def logic_name(logic: Callable[..., Any]) -> str:
    """The "module.function" name of a transaction's logic (a lambda or a partial gives a name no set holds)."""
    return f"{getattr(logic, '__module__', '')}.{getattr(logic, '__qualname__', '')}"


#: One person's vectors of one embedder: an index range (message_vectors_user), so the count is an index-only scan.
_PERSON = "FROM message_vectors WHERE user_id = ?1 AND embedder = ?2"
#: The rows of the numpy hits, under lexical recall's rules (no message after `at`, no queued turn).


async def ingest_turn(db: SqliteDb, msg: InboundMessage, token_count: int, owner: str, ttl: float,
                      limits: list[tuple[str, int, int]], context: Callable[[Ingested], ContextQuery] | None,
                      windows: WindowCache | None,
                      ) -> tuple[tuple[Ingested, bool], IngestedContext | None] | float:
    """SqliteStore.ingest's one transaction: the hits of `limits` (the first wait, when one must wait: they
    commit, nothing is stored), the message and its lease (sql_turns.ingest_leased; a redelivery's Rollback undoes
    it all), then, the lease taken, `context`'s read through the conversations' `windows`. The read comes after
    every write, so nothing it keeps can be undone but by the COMMIT failing (the caller then drops the windows);
    a read that fails leaves the message to commit (`unread`: its turn reads the context itself)."""
    if limits:
        wait = await sql_limits.hit_all(db, limits)
        if wait:
            return wait
    stored = await turns.ingest_leased(db, msg, token_count, owner, ttl)
    if context is None or not stored[1]:
        return stored, None
    began = time.perf_counter()
    try:
        query = context(stored[0])
        db.windows = windows
        rows = await turns.load_context(db, query)
    except Exception as exc:
        if not db.conn.in_transaction:  # SQLite rolled it back itself (disk full, I/O): nothing is stored
            raise
        unread(stored[0], exc)
        return stored, None
    return stored, IngestedContext(query, rows, time.perf_counter() - began)


class SqliteDb(Db):
    """The connection as the logic sees it (rows.Db): every statement is fully stepped (RETURNING rows are
    read before COMMIT) and counted; an executemany counts once (one prepared statement)."""

    vectors = True  # numpy is a dependency: blobs searched in process
    probes = True  # in process: a statement costs microseconds, not a round trip

    def __init__(self, conn: sqlite3.Connection, counters: dict[str, int], clock: Callable[[], datetime],
                 matrices: MatrixCache | None = None,
                 df_cache: dict[tuple[str, str], tuple[float, float]] | None = None) -> None:
        self.conn, self.counters, self.clock = conn, counters, clock
        #: (table, term) -> (idf, monotonic expiry), and the table's size and mean row length: sqlite_terms
        self.df_cache = df_cache if df_cache is not None else {}
        #: (user_id, embedder) -> the person's vectors as a float32 matrix (memory/vectors.py)
        self.matrices = matrices if matrices is not None else MatrixCache()

    async def all(self, sql: str, *args: Any) -> list[Any]:
        self.counters["statements"] += 1
        return self.conn.execute(translate(sql), args).fetchall()

    async def run(self, sql: str, *args: Any) -> int:
        self.counters["statements"] += 1
        return self.conn.execute(translate(sql), args).rowcount

    async def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.counters["statements"] += 1
        self.conn.executemany(translate(sql), rows)

    def ts(self, moment: datetime) -> str:
        return to_ts(moment)

    async def lock(self, key: str | int) -> bool:
        return False  # BEGIN IMMEDIATE: writers are serialized already

    async def insert_messages(self, rows: list[tuple[Any, ...]]) -> int:
        self.counters["statements"] += 1
        inserted = self.conn.executemany(BULK_INSERT, rows).rowcount  # ON CONFLICT DO NOTHING skips count 0
        if len(rows) >= BULK_FTS_ROWS:  # a batch's rows into the index in its own transaction: one segment
            sqlite_fts.index_tail(self.conn)
        return int(inserted)

    async def put_vectors(self, embedder: str, dim: int, rows: list[tuple[int, Sequence[float]]]) -> int:
        self.counters["statements"] += 1
        return self.conn.executemany(PUT_VECTOR, [(i, embedder, dim, pack(v)) for i, v in rows]).rowcount

    async def nearest(self, vq: VectorQuery) -> list[tuple[int, float]]:
        """numpy over the person's matrix (cached): no statement when the cache is current."""
        import numpy as np

        matrix = await self._matrix(vq.user_id, vq.embedder, len(vq.vector))
        if matrix is None:
            return []
        # einsum: numpy's own single-threaded loop. A BLAS matrix-vector product wakes its threads for each search,
        # which on a busy machine costs more than the product itself (bench/vector_bench.py).
        scores = np.einsum("ij,j->i", matrix.rows, np.asarray(vq.vector, dtype=np.float32))
        return top(matrix.ids, scores, vq.limit, vq.excluded)

    def cosine_sql(self, vector: Sequence[float], embedder: str) -> tuple[str, str, Any] | None:
        return None  # numpy over the cached matrix instead: cosines()

    async def cosines(self, vq: VectorQuery, ids: Sequence[int]) -> dict[int, float]:
        """The cosine of each of `ids` that has a vector of vq.embedder (the matrix nearest() used: no statement)."""
        matrix = await self._matrix(vq.user_id, vq.embedder, len(vq.vector)) if ids else None
        return {} if matrix is None else matrix_cosines(matrix, vq.vector, ids)

    async def warm(self, user_id: int, embedder: str) -> None:
        """The person's matrix of `embedder` made current in the cache (`_matrix`), ahead of a search."""
        cached = self.matrices.get((user_id, embedder))
        dim = cached.rows.shape[1] if cached is not None else await self.value(f"SELECT dim {_PERSON} LIMIT 1",
                                                                                  user_id, embedder)
        if dim:
            await self._matrix(user_id, embedder, int(dim))

    async def _matrix(self, user_id: int, embedder: str, dim: int) -> Matrix | None:
        """The person's vectors of `embedder`, from the cache: as they are when nothing was committed since they were
        last checked (no other connection's commit: PRAGMA data_version; no write of this store that may touch
        vectors: `generation`), else when the table still has exactly them (an index-only count and max), extended
        by the rows written since, or reloaded when rows went or moved."""
        key = (user_id, embedder)
        stamp = self.matrices.stamp()
        cached = self.matrices.get(key)
        if cached is not None and cached.stamp == stamp and cached.rows.shape[1] == dim:
            self.matrices.counters["hits"] += 1  # nothing committed anywhere since it was checked
            return cached
        count, max_id = await self.one(f"SELECT count(*), max(message_id) {_PERSON}", user_id, embedder)
        if not count:
            self.matrices.drop(key)
            return None
        if cached is not None and cached.rows.shape[1] != dim:  # a question of another size: nothing compares
            return None
        if cached is not None and len(cached.ids) == count and cached.max_id == max_id:
            self.matrices.counters["checks"] += 1
            cached.stamp = stamp
            return cached
        if cached is not None and len(cached.ids) < count and cached.max_id <= max_id:
            more = matrix_of(await self.all(f"SELECT message_id, vector {_PERSON} AND message_id > ?3 "
                                            "ORDER BY message_id", user_id, embedder, cached.max_id), dim)
            if len(cached.ids) + len(more.ids) == count:
                self.matrices.counters["extensions"] += 1
                self.matrices.put(key, grown := extend(cached, more))
                grown.stamp = stamp
                return grown
        self.matrices.counters["loads"] += 1
        loaded = matrix_of(await self.all(f"SELECT message_id, vector {_PERSON} ORDER BY message_id",
                                          user_id, embedder), dim)
        loaded.stamp = stamp
        self.matrices.put(key, loaded)
        return loaded

    async def tables(self) -> dict[str, list[str]]:
        # virtual tables (FTS5) are kept by triggers on their content tables, never written directly
        rows = await self.all("SELECT m.name, c.name FROM sqlite_master m JOIN pragma_table_info(m.name) c "
                              "WHERE m.type = 'table' AND m.sql NOT LIKE 'CREATE VIRTUAL%' "
                              "AND m.name NOT LIKE 'sqlite_%' ORDER BY m.name, c.cid")
        return columns_by_table(rows)

    def ids(self, ids: Sequence[Any]) -> str:
        return json.dumps(list(ids))

    async def hits(self, q: ContextQuery, terms: list[str], excluded: Any, limit: int,
                   episode_limit: int) -> tuple[list[Any], list[Any]]:
        """Recall's lexical and episode hits in one statement (memory/sqlite_terms.py): the best `limit` (+ EXTRA_HITS)
        messages of those ROWS keeps (load_context's exclusions and `at` applied, as on Postgres), the best
        `episode_limit` episodes. `excluded`: the window's ids as `ids` gives them (JSON)."""
        if not terms:
            return [], []
        terms, idfs = sqlite_terms.strongest(terms, await sqlite_terms.weights(self, q.user_id, terms))
        avgdl = await sqlite_terms.mean_length(self)
        rows = await self.all(sqlite_terms.hits_sql(len(terms)), *sqlite_terms.params(
            q.user_id, terms, idfs, avgdl, limit + EXTRA_HITS, episode_limit, self.ts(q.at), excluded,
            q.current_message_id, q.conversation_id))
        return [(r[1], r[2]) for r in rows if r[0] == 0], [(r[1], r[2]) for r in rows if r[0] == 1]


def step(coro: Coroutine[Any, Any, T]) -> T:
    """Run a coroutine that never suspends to its end, here and now."""
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value  # type: ignore[no-any-return]
    coro.close()
    raise StoreError("a SQLite transaction suspended: the store's logic may await only its Db")


class SqliteStore(SqlStore):
    """The Store on a SQLite file (or ":memory:", kept alive by the worker thread's connection)."""

    def __init__(self, path: str | os.PathLike[str], *, busy_timeout_ms: int = 5000,
                 clock: Callable[[], datetime] | None = None, cache_floats: int = DEFAULT_CACHE_FLOATS) -> None:
        super().__init__(clock)
        self.path = os.fspath(path)
        self.busy_timeout_ms = busy_timeout_ms
        #: write transactions since the FTS5 index last caught up with the messages (memory/sqlite_fts.py,
        #: migration 0046), touched on the worker thread only
        self._unindexed = 0
        #: the last write was a turn's first hop (ingest_turn): its second is near, so the batch waits for it
        self._turn_open = False
        #: the people's vector matrices (memory/vectors.py), touched on the worker thread only
        self.matrices = MatrixCache(max_floats=cache_floats)
        #: lexical recall's term statistics (memory/sqlite_terms.py), touched on the worker thread only
        self._df_cache: dict[tuple[str, str], tuple[float, float]] = {}
        #: the conversations' windows kept between turns (memory/windows.py), touched on the worker thread only;
        #: used once the connection's triggers that keep them honest exist (after the migrations)
        self.windows = WindowCache()
        self._windows_on = False
        #: PRAGMA data_version when the windows' count of changed messages was last read (None: never)
        self._seen_version: int | None = None
        self._executor: Worker | None = None
        #: inside a group's transaction: each transaction is a savepoint of it (`_group_sync`); worker thread only
        self._grouped = False
        #: inside `_not_waiting`: busy_timeout is 0 on the connection; worker thread only
        self._waiting_off = False
        self._conn: sqlite3.Connection | None = None
        #: WAL checkpoints on a thread of their own (memory/sqlite_checkpoint.py); None in memory
        self.checkpointer: Checkpointer | None = None
        #: (st_dev, st_ino) of the file the connection opened and of its -wal (None: in memory, or not yet seen):
        #: memory/sqlite_file.py
        self._identity: FileIdentity | None = None
        self._wal_identity: FileIdentity | None = None
        #: what the last check of the file found wrong (logged once per change), None while it is the same file
        self._file_problem: str | None = None

    async def close(self) -> None:
        """Release the leases of turns that never ran, the connection and the worker thread. Safe to call twice."""
        if self._executor is not None and self._leases:
            await self._release_kept_leases()
        executor, self._executor = self._executor, None
        if executor is None:
            return
        try:
            await executor.call(self._close_sync)
        finally:
            executor.close()  # the worker is idle now: this returns at once

    async def ingest(self, msg: InboundMessage, token_count: int, *,
                     context: Callable[[Ingested], ContextQuery] | None = None,
                     limits: Sequence[tuple[str, int, int]] = ()) -> Ingested | None:
        """SqlStore.ingest in one hop and one write transaction (`ingest_turn`): `limits`' hits, the message with
        the turn's lease (turn_lock then needs no transaction of its own while the lease is fresh) and, the lease
        taken, `context`'s read. A hop to the worker thread and back cost about as much as the read itself at 100
        messages, and each transaction its BEGIN, COMMIT and the WAL's write (a web turn made 4 hops and 4
        transactions; now 2 of each)."""
        owner = turn_lease.new_owner()
        stored, read = await self._call(functools.partial(self._ingest_sync, msg, token_count, owner, context,
                                                          limits), grouped=True)
        if stored is None or isinstance(stored, Ingested):  # a redelivery (ingest's Rollback): as SqlStore.ingest
            return stored
        turn = self._leased(stored, owner)
        if read is not None:
            self._keep_context(turn.message.id, read)
        return turn

    def _ingest_sync(self, msg: InboundMessage, token_count: int, owner: str,
                     context: Callable[[Ingested], ContextQuery] | None,
                     limits: Sequence[tuple[str, int, int]]
                     ) -> tuple[tuple[Ingested, bool] | Ingested | None, IngestedContext | None]:
        windows = self.windows if self._windows_on and context is not None else None
        try:
            done = self._tx_sync("write", ingest_turn, (msg, token_count, owner, self.turn_lease_ttl, list(limits),
                                                       context, windows))
        except BaseException as exc:
            if windows is not None and isinstance(exc, StoreError):  # a window read may hold its uncommitted message
                windows.clear()
            if limits:  # not stored (its conversation is not the sender's, an error): it counts all the same
                # after busy_timeout waited in vain for another process's lock, not waiting again (its 503 would too)
                conn = self._conn
                with self._not_waiting(conn) if conn is not None and _busy(exc.__cause__) else contextlib.nullcontext():
                    self._count_apart(limits)
            raise
        if isinstance(done, float):  # over a limit: the hits committed, nothing stored
            raise RateLimited(done)
        if not isinstance(done, tuple) and limits:  # a redelivery (rolled back): it counts as a sent message
            RateLimited.unless_zero(self._count_apart(limits))
        return done if isinstance(done, tuple) else (done, None)

    def _count_apart(self, limits: Sequence[tuple[str, int, int]]) -> float:
        """The hits of a message ingest_turn did not store, in a transaction of their own (0.0 when the database
        cannot count them: the message's own error is the one to report)."""
        try:
            return self._tx_sync("write", sql_limits.hit_all, (list(limits),))
        except StoreError:
            return 0.0

    async def _read_ahead(self, query: ContextQuery) -> turns.ReadContext:
        return await self._tx(context_mode(query), self._read_and_warm, query)

    async def _read_and_warm(self, db: SqliteDb, query: ContextQuery) -> turns.ReadContext:
        """read_context of `query` (its embedder named, its vector to come), and the person's matrix of that
        embedder read into the cache if it is not there (their first turn since start: at 1,000 messages, 1,000
        rows and their float16 made float32, some 4.5 ms) while the question is embedded."""
        read = await turns.read_context(db, query)
        if query.embedder:
            await db.warm(query.user_id, query.embedder)
        return read

    async def migrate(self) -> list[str]:
        """Apply pending migrations (connecting first if needed); return the names applied."""
        if self._executor is None:
            self._executor = Worker("hilo-sqlite", self._index_idle, sqlite_fts.IDLE_S, group=self._group_sync)
            try:
                await self._call(self._connect_sync)
            except BaseException:
                await self.close()  # no connection to close: this stops the worker thread
                raise
        self.applied = await self._call(self._migrate_sync)
        await reindex.run(self._tx)
        return self.applied

    def _connect_sync(self) -> None:
        conn: sqlite3.Connection | None = None
        shared = private_file(self.path)  # created 0600 when new; else its mode when others may read it
        try:
            conn = sqlite3.connect(self.path, isolation_level=None, timeout=self.busy_timeout_ms / 1000)
            conn.execute("PRAGMA journal_mode = WAL")  # the first write: a read-only file or directory fails here
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")
            conn.execute("PRAGMA foreign_keys = ON")
            conn.execute("PRAGMA synchronous = NORMAL")  # durable across process crashes; WAL keeps it consistent
            identity = file_identity(self.path)
            if identity is not None:  # a file: its checkpoints leave the turns' commits (sqlite_checkpoint.py)
                conn.execute(f"PRAGMA wal_autocheckpoint = {SAFETY_PAGES}")
                self.checkpointer = Checkpointer(self.path)
        except sqlite3.DatabaseError as exc:
            if conn is not None:
                conn.close()
            if isinstance(exc, sqlite3.OperationalError):  # locked, read-only, no directory: it may pass
                raise StoreUnavailable(self._cannot_open(exc)) from exc
            # another file, encrypted, or damaged: retrying will not help, and nothing of it is touched
            what = not_a_database(exc)
            fix = ("restore it from a copy" if what == DAMAGED
                   else "point HILO_DATABASE_URL (or --db) at hilo's database file")
            raise StoreError(f"{os.path.abspath(self.path)} {what} ({exc}); it was left as it is: {fix}, or point "
                             "HILO_DATABASE_URL (or --db) at a new path where hilo creates one") from exc
        if shared is not None:  # said once it is known to be a database
            path = os.path.abspath(self.path)
            logger.warning("store.file_readable", path=path, mode=f"{shared:04o}",
                           fix=f"chmod 600 {path}* (it holds every person's messages)")
        self._conn = conn
        self._identity = identity
        self.windows.clear()  # what another connection read says nothing of this one's file
        self._seen_version = None  # data_version counts per connection: the next transaction reads the count anew
        self._windows_on = False

    def _cannot_open(self, exc: sqlite3.Error) -> str:
        """What to tell the operator when the file cannot be opened or written."""
        path = os.path.abspath(self.path)
        folder = os.path.dirname(path)
        if not os.path.isdir(folder):
            why = f"its directory {folder} does not exist: create it (mkdir -p {folder})"
        else:
            why = f"check that {folder} and the file are writable for this user"
        return f"cannot open the SQLite database {path} ({exc}): {why}, or set HILO_DATABASE_URL"

    def _check_file(self) -> None:
        """StoreUnavailable when the path no longer names the file the connection opened (deleted, or replaced
        by another file): writing on would store into a file nobody will ever open again. One stat per
        transaction; said once (`store.file_missing` / `store.file_replaced`, with the path) until it is back."""
        if self._identity is None:
            return
        problem = file_problem(self.path, self._identity)
        if problem is None and self._wal_identity is not None:
            problem = file_problem(self.path + "-wal", self._wal_identity)
        if problem != self._file_problem:
            self._file_problem = problem
            if problem is None:
                logger.warning("store.file_back", path=os.path.abspath(self.path))
            else:
                event = "store.file_missing" if problem == "missing" else "store.file_replaced"
                logger.error(event, path=os.path.abspath(self.path), fix=FILE_FIX)
        if problem is not None:
            what = "deleted" if problem == "missing" else "replaced"
            raise StoreUnavailable(f"the SQLite database {os.path.abspath(self.path)} was {what} while hilo ran: "
                                   f"nothing is stored until it is back. {FILE_FIX}")

    def _close_sync(self) -> None:
        checkpointer, self.checkpointer = self.checkpointer, None
        if checkpointer is not None:  # stopped first: the store's connection, closed last, checkpoints the rest
            checkpointer.close()
        conn, self._conn = self._conn, None
        if conn is not None:
            try:
                conn.execute("PRAGMA busy_timeout = 0")  # what follows is skipped while another process writes
                if self._unindexed:  # this store's tail into the FTS5 index (else: the next write's run, whoever
                    self._catch_up(conn)  # makes it)
                # refresh planner statistics where they went stale, from a sample (SQLite's advice for optimize):
                # unbounded, it re-analyzed all of messages at every close (~500 ms at 1,000,000 messages: a
                # partial index that is empty gets no statistics, so the table always looked stale); 0.7 ms so
                conn.execute("PRAGMA analysis_limit = 1000")
                conn.execute("PRAGMA optimize")
            except sqlite3.Error:
                pass  # best effort: another process may hold the lock
            finally:
                conn.close()

    def _migrate_sync(self) -> list[str]:
        assert self._conn is not None
        self.counters["transactions"] += 1
        try:
            applied = migrations.apply_sqlite(self._conn)
        except sqlite3.OperationalError as exc:  # read-only, disk full, locked past the timeout
            raise StoreUnavailable(self._cannot_open(exc)) from exc
        if self._identity is not None:  # the -wal exists once the connection has read in WAL mode
            self._wal_identity = file_identity(self.path + "-wal")
        if not self._windows_on:  # messages exists now: this connection's changes of it reach the windows
            self._conn.create_function("hilo_window_changed", 0, self.windows.changed)
            for sql in triggers("hilo_window_changed"):
                self._conn.execute(sql)
            self._windows_on = True
        return applied

    def _index_idle(self, force: bool) -> bool:
        """The worker's idle work (memory/sqlite_worker.py): the messages after the FTS5 index's `upto` into it
        (memory/sqlite_fts.py), at once when BATCH writes came since it last caught up (HOLD times that when the
        last one was a turn's first hop: not between a turn's two hops), else when `force`d (the worker idle
        IDLE_S). True when it left work for later. Another process holding the write lock, or any error, defers it
        to the next write's idle moment (recall reads the tail meanwhile); the lock is not waited for: a turn
        coming meanwhile would wait with it. A run indexes every message after `upto`, those another process or a
        crash left too."""
        conn = self._conn
        if conn is None or not self._unindexed:  # (writes are counted once the migrations made the schema)
            return False
        if not force and self._unindexed < sqlite_fts.BATCH * (sqlite_fts.HOLD if self._turn_open else 1):
            return True
        try:
            with self._not_waiting(conn):
                indexed = self._catch_up(conn, sqlite_fts.SLICE)
        except sqlite3.Error as exc:
            logger.info("store.fts_deferred", error=type(exc).__name__, waiting=self._unindexed)
            return False
        return indexed >= sqlite_fts.SLICE

    @contextlib.contextmanager
    def _not_waiting(self, conn: sqlite3.Connection) -> Iterator[None]:
        """Inside: another process's write lock fails a statement at once instead of after busy_timeout. Nested (a
        lone write's count inside a group's retries), the outermost one restores the wait."""
        if self._waiting_off:
            yield
            return
        conn.execute("PRAGMA busy_timeout = 0")
        self._waiting_off = True
        try:
            yield
        finally:
            self._waiting_off = False
            conn.execute(f"PRAGMA busy_timeout = {int(self.busy_timeout_ms)}")

    def _catch_up(self, conn: sqlite3.Connection, limit: int | None = None) -> int:
        """sqlite_fts.catch_up, and this store's count of writes since reset when nothing is left."""
        indexed = sqlite_fts.catch_up(conn, limit)
        if limit is None or indexed < limit:
            self._unindexed = 0
        if indexed and self.checkpointer is not None:
            self.checkpointer.nudge()
        return indexed

    async def index_behind(self) -> int:
        """The FTS5 index caught up with the messages now, not at the worker's next idle moment (what reads the
        index itself: tests, benchmarks); how many messages it indexed."""
        return await self._call(lambda: self._catch_up(self._open_conn()))

    def _open_conn(self) -> sqlite3.Connection:
        if self._conn is None:
            raise StoreError("the store is closed")
        return self._conn

    async def _call(self, fn: Callable[[], T], *, grouped: bool = False) -> T:
        if self._executor is None:
            raise StoreError("the store is not open: call open() first")
        self.counters["round_trips"] += 1
        return await self._executor.call(fn, grouped=grouped)

    async def _tx(self, mode: Mode, logic: Logic[T], *args: Any) -> T:
        """One hop: logic(db, *args) inside one transaction on the worker thread (BEGIN IMMEDIATE for writes and
        leases: take the write lock first, so a busy database waits busy_timeout instead of failing on upgrade)."""
        return await self._call(functools.partial(self._tx_sync, mode, logic, args),
                                grouped=mode in ("write", "lease"))

    def _tx_sync(self, mode: Mode, logic: Logic[T], args: tuple[Any, ...]) -> T:
        conn = self._open_conn()
        grouped = self._grouped  # inside a group's transaction (`_group_sync`): a savepoint of it
        if not grouped:
            self._check_file()
        try:
            if mode == "write" and logic_name(logic) not in KEEPS_VECTORS:  # ("lease": the turn lease's, never vectors)
                self.matrices.generation += 1  # it may change vectors: the next search checks the table again
            reads = mode in ("read", "reads")
            conn.execute("SAVEPOINT tx" if grouped else "BEGIN" if reads else "BEGIN IMMEDIATE")
            self.counters["transactions"] += 1
            db = SqliteDb(conn, self.counters, self.clock, self.matrices, self._df_cache)
            if reads and self._windows_on:  # nothing read in a write transaction is kept: it may roll back
                db.windows = self.windows
            try:
                # first in the transaction: it begins the snapshot (a deferred BEGIN) and gives that snapshot's
                # version (read before BEGIN, outside a transaction, it took and dropped a read lock of its own)
                version = self.matrices.version = conn.execute("PRAGMA data_version").fetchone()[0]
                if self._windows_on and version != self._seen_version:
                    # another connection committed: the windows are stale only if it changed or deleted a message
                    # (migration 0045's count, read in this transaction's snapshot: memory/windows.py)
                    self.windows.version = conn.execute(MESSAGE_CHANGES).fetchone()[0]
                    self._seen_version = version
                result = step(logic(db, *args))
            except BaseException:
                if grouped:
                    self._undo_savepoint(conn)
                elif conn.in_transaction:
                    conn.execute("ROLLBACK")
                raise
            if grouped or conn.in_transaction:
                conn.execute("RELEASE tx" if grouped else "COMMIT")
                if mode == "write":
                    self._unindexed += 1  # it may have stored messages: the worker indexes them when idle
                    self._turn_open = logic is ingest_turn  # its model call and its second hop come next
                if not grouped and mode in ("write", "lease") and self.checkpointer is not None:
                    self.checkpointer.nudge()
            return result
        except Rollback as rollback:
            return rollback.value  # type: ignore[no-any-return]
        except sqlite3.Error as exc:
            raise self._failure(exc) from exc

    def _failure(self, exc: sqlite3.Error) -> StoreError:
        """What the store raises for an error of SQLite's."""
        if isinstance(exc, sqlite3.OperationalError):
            if _busy(exc):
                return StoreUnavailable(f"the SQLite database {self.path!r} is busy: {exc}; retry later")
            if any(kind in str(exc) for kind in TRANSIENT):  # full, read-only, I/O: it may pass; retry later
                return StoreUnavailable(f"the SQLite database {self.path!r} cannot be written: {exc}")
        return StoreError(f"SQLite error on {self.path!r}: {exc}")

    def _undo_savepoint(self, conn: sqlite3.Connection) -> None:
        """A grouped transaction failed: undo its savepoint alone. Some errors (disk full, I/O) end the whole
        transaction instead; a savepoint that cannot be undone ends it too: the group sees it ended (`_group_sync`)."""
        if conn.in_transaction:
            try:
                conn.execute("ROLLBACK TO tx")
                conn.execute("RELEASE tx")
            except sqlite3.Error:
                conn.execute("ROLLBACK")

    def _group_sync(self, fns: list[Callable[[], Any]]) -> list[Outcome]:
        """The worker's group (memory/sqlite_worker.py): write transactions queued one behind the other, each a
        savepoint of ONE transaction, committed once. Each one's error undoes its savepoint alone and goes to its
        caller; no caller hears of its success before the COMMIT. A COMMIT that fails fails them all (nothing of
        theirs is stored); an error that ended the whole transaction (disk full, I/O) fails those before it (their
        writes went with it), and the ones after it run each in a transaction of its own."""
        try:
            conn = self._open_conn()
            self._check_file()
            conn.execute("BEGIN IMMEDIATE")
        except StoreError:  # closed, or the file is gone: each on its own then gets its own error
            return [outcome(fn) for fn in fns]
        except sqlite3.Error:
            # each on its own then: each gets its own error, or succeeds. Without waiting: the BEGIN waited
            # busy_timeout for them all, and another wait each would hold the last one (a webhook's journaling
            # and acknowledgement) for one busy_timeout per write queued before it
            with self._not_waiting(conn):
                return [outcome(fn) for fn in fns]
        outcomes: list[Outcome] = []
        self._grouped = True
        try:
            for k, fn in enumerate(fns):
                outcomes.append(outcome(fn))
                if not conn.in_transaction:  # ended: the savepoints released before went with it
                    self._grouped = False
                    self.windows.clear()
                    gone = _failed(outcomes[:-1], lambda: StoreUnavailable(
                        "the transaction this write shared was rolled back; retry"))
                    return [*gone, outcomes[-1], *(outcome(later) for later in fns[k + 1:])]
        finally:
            self._grouped = False
        try:
            conn.execute("COMMIT")
        except sqlite3.Error as exc:
            with contextlib.suppress(sqlite3.Error):
                if conn.in_transaction:
                    conn.execute("ROLLBACK")
            self.windows.clear()  # a window may hold a message that is not stored
            cause = exc
            return _failed(outcomes, lambda: _caused(self._failure(cause), cause))
        if self.checkpointer is not None:
            self.checkpointer.nudge()
        return outcomes


def _failed(outcomes: list[Outcome], error: Callable[[], BaseException]) -> list[Outcome]:
    """`outcomes` with each success replaced by an error of its own (`error()`); the errors stay."""
    return [(None, error()) if failure is None else (None, failure) for _, failure in outcomes]


def _caused(error: StoreError, cause: BaseException) -> StoreError:
    error.__cause__ = cause
    return error


def _busy(exc: BaseException | None) -> bool:
    """Whether `exc` is SQLite's "database is locked" (or busy): another connection held the lock past the wait."""
    return isinstance(exc, sqlite3.OperationalError) and ("locked" in str(exc) or "busy" in str(exc))
