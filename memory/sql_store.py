"""`SqlStore`: the `Store` contract written once, over a dialect's `_tx` (memory/dialect_sqlite.py, dialect_pg.py).

Each Store method is ONE call of `_tx(mode, logic, *args)`: one transaction running one coroutine of the logic
(memory/sql_turns.py, sql_import.py, sql_linking.py, sql_people.py) against the dialect's `Db`. SQLite steps
the coroutine synchronously on its worker thread (one executor hop per transaction); Postgres awaits it inside one pool
checkout and one transaction. `counters` counts transactions, statements (BEGIN/COMMIT not included; a batched
call counts once) and round_trips (store calls that reached the database: SQLite's hops, Postgres' checkouts).

The logic modules of a turn and of context assembly are imported with this one; the others (jobs, people, linking,
admin, export, forget, spend, stats, ...) by the methods that use them, so that a one-shot command loads only
what it runs (`hilo context` starts in under 0.25 s: docs/architecture.md, "Performance budget").
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Sequence
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any, TypeVar

from kernel import log
from kernel.errors import RateLimited, StoreError
from kernel.types import ChatMessage, InboundMessage, ModelCallRecord, OutboxItem, Outgoing, utcnow
from memory import sql_memories as memories
from memory import sql_memory_vectors as memory_vectors
from memory import sql_outbox as outbox
from memory import sql_turns as turns
from memory import sql_vectors as vectors
from memory import turn_lease
from memory.rows import Db, Mode, as_dt
from memory.store import (
    INGESTED_CONTEXT_FRESH,
    ContextQuery,
    ContextRows,
    ConversationInfo,
    Delivery,
    ImportResult,
    ImportRow,
    Ingested,
    IngestedContext,
    Inspection,
    LinkPolicy,
    Memory,
    MemoryAdded,
    MemoryDraft,
    MemoryVectors,
    Pending,
    Person,
    Redemption,
    StoredMessage,
    with_vector,
)

if TYPE_CHECKING:  # in the signatures only: at run time the methods import what they use (below)
    from memory import jobs
    from memory import sql_extract as extract
    from memory import sql_spend as spend
    from memory import sql_summaries as summaries
    from memory.sql_reminders import Reminder

T = TypeVar("T")
logger = log.get("hilo.store")
Logic = Callable[..., Coroutine[Any, Any, T]]


def unread(turn: Ingested, exc: Exception) -> None:
    """Store.ingest's context read failed: the message is stored all the same, and its turn reads the context
    itself (and says why not, if it cannot)."""
    logger.warning("store.ingested_context_failed", message_id=turn.message.id, error=type(exc).__name__)


def context_mode(query: ContextQuery) -> Mode:
    """load_context's transaction: every row it reads is bounded by the turn's moment, so no snapshot is needed
    ("reads"; Postgres reads it in one statement of its own: memory/pg_context.py); with a query vector, a read
    transaction as ever."""
    return "read" if query.query_vector else "reads"


class SqlStore:
    """What both dialects share: the Store's methods. A dialect provides `_tx` and the lifecycle."""

    #: Store.import_terms_ahead (SQLite: with the terms found on the reading thread a 1,000,000-line import ran
    #: 14,700-14,900 lines/s, found in the store's transaction 14,500-16,700: no gain, so they stay there)
    import_terms_ahead = False

    @property
    def import_lanes(self) -> int:
        """Store.import_lanes: one batch at a time (SQLite has one writer; a dialect with more says so)."""
        return 1

    def __init__(self, clock: Callable[[], datetime] | None) -> None:
        #: "now" for everything the store stamps or compares (aware UTC): injectable for tests
        self.clock: Callable[[], datetime] = clock or utcnow
        #: transactions, statements (BEGIN/COMMIT not included) and round trips since open.
        self.counters: dict[str, int] = {"transactions": 0, "statements": 0, "round_trips": 0}
        #: seconds a turn lease lasts unless renewed (memory/turn_lease.py)
        self.turn_lease_ttl = turn_lease.TTL
        #: migrations applied by the last open() or migrate().
        self.applied: list[str] = []
        #: None when the database keeps message vectors, else why not (a dialect sets it at open)
        self.vector_status: str | None = None
        #: message id -> (conversation id, owner, the store's clock then): the turn lease its ingest took
        self._leases: dict[int, tuple[int, str, datetime]] = {}
        #: message id -> the lease its turn holds now (turn_lock): finish_turn releases it as it stores the reply
        self._held: dict[int, turn_lease.Held] = {}
        #: message id -> (what ingest read for its turn, time.monotonic() then)
        self._ingested: dict[int, tuple[IngestedContext, float]] = {}

    async def _tx(self, mode: Mode, logic: Logic[T], *args: Any) -> T:
        raise NotImplementedError

    async def migrate(self) -> list[str]:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError

    async def open(self) -> None:
        """Connect and apply pending migrations; when that fails, nothing is left open (connection, threads)."""
        try:
            await self.migrate()
        except BaseException:
            await self.close()
            raise

    # -- background job leases (memory/jobs.py; bot/jobs.py schedules) ----------------------------------------

    async def register_job(self, name: str, scheduled: bool) -> None:
        from memory import jobs

        await self._tx("write", jobs.register, name, scheduled)

    async def claim_job(self, name: str, owner: str, ttl: float, *, force: bool = False) -> jobs.JobClaim:
        from memory import jobs

        return await self._tx("write", jobs.claim, name, owner, ttl, force)

    async def renew_job(self, name: str, owner: str, ttl: float) -> bool:
        from memory import jobs

        return await self._tx("write", jobs.renew, name, owner, ttl)

    async def finish_job(self, name: str, owner: str, end: jobs.JobEnd) -> bool:
        from memory import jobs

        return await self._tx("write", jobs.finish, name, owner, end)

    async def job_states(self) -> list[jobs.JobState]:
        from memory import jobs

        return await self._tx("read", jobs.states)

    async def purge_link_codes(self) -> int:
        from memory import jobs

        return await self._tx("write", jobs.purge_link_codes)

    # -- inbound-delivery records (memory/sql_inbound.py) ---------------------------------------------------

    async def record_inbound(self, surface: str, external_id: str, kind: str, sender: str | None = None) -> bool:
        from memory import sql_inbound as inbound

        return await self._tx("write", inbound.record, surface, external_id, kind, sender)

    async def purge_inbound(self, older_than: timedelta) -> int:
        from memory import sql_inbound as inbound

        return await self._tx("write", inbound.purge, older_than)

    # -- the turn ----------------------------------------------------------------------------------------

    async def ingest(self, msg: InboundMessage, token_count: int, *,
                     context: Callable[[Ingested], ContextQuery] | None = None,
                     limits: Sequence[tuple[str, int, int]] = ()) -> Ingested | None:
        # no lease is taken with the message here: its turn's context is read once it holds one
        await self._limit(limits)
        return await self._tx("write", turns.ingest, msg, token_count)

    async def _limit(self, limits: Sequence[tuple[str, int, int]]) -> None:
        """Store.ingest's `limits`, hit in their own transaction: RateLimited when one must wait."""
        if limits:
            RateLimited.unless_zero(await self.hit_rates(limits))

    def ingested_context(self, message_id: int) -> IngestedContext | None:
        kept = self._ingested.pop(message_id, None)
        if kept is None or time.monotonic() - kept[1] > INGESTED_CONTEXT_FRESH:
            return None
        return kept[0]

    def _keep_context(self, message_id: int, read: IngestedContext) -> None:
        """Keep what ingest read for `message_id`'s turn (entries of turns that never ran go once stale)."""
        now = time.monotonic()
        if len(self._ingested) >= 64:
            self._ingested = {k: v for k, v in self._ingested.items() if now - v[1] <= INGESTED_CONTEXT_FRESH}
        self._ingested[message_id] = (read, now)

    async def _read_ingested(self, turn: Ingested, context: Callable[[Ingested], ContextQuery] | None) -> None:
        """Store.ingest's `context`, read after the ingest's commit (its own round trip on Postgres)."""
        if context is None:
            return
        began = time.perf_counter()
        try:
            query = context(turn)
            rows = await self.load_context(query)
        except Exception as exc:
            unread(turn, exc)
            return
        self._keep_context(turn.message.id, IngestedContext(query, rows, time.perf_counter() - began))

    def turn_lock(self, conversation_id: int, message_id: int, *, adopt: turn_lease.Adopt | None = None,
                  grace: float = 0.0) -> AbstractAsyncContextManager[bool]:
        """The conversation's turn lease (memory/turn_lease.py): taking it and checking the message is one short
        transaction (SQLite: one hop; Postgres: each statement on its own, nothing in the server session)."""
        kept = self._leases.pop(message_id, None)
        taken = None if kept is None else (kept[1], (self.clock() - kept[2]).total_seconds())
        return self._holding(conversation_id, message_id, adopt, grace, taken)

    @asynccontextmanager
    async def _holding(self, conversation_id: int, message_id: int, adopt: turn_lease.Adopt | None, grace: float,
                       taken: turn_lease.Taken | None) -> AsyncIterator[bool]:
        held = self._held[message_id] = turn_lease.Held()
        try:
            async with turn_lease.hold(self._tx, conversation_id, message_id, self.turn_lease_ttl, self.counters,
                                       adopt, grace, taken, held) as answered:
                yield answered
        finally:
            self._held.pop(message_id, None)

    def _leased(self, stored: tuple[Ingested, bool], owner: str) -> Ingested:
        """The turn an ingest stored, keeping the lease it took for `owner` (when taken) for turn_lock (entries of
        turns that never ran, left by a drain, go once their lease lapsed, or are released by close)."""
        turn, taken = stored
        if taken:
            now = self.clock()
            if len(self._leases) >= 64:
                self._leases = {k: v for k, v in self._leases.items()
                                if (now - v[2]).total_seconds() < self.turn_lease_ttl}
            self._leases[turn.message.id] = (turn.conversation_id, owner, now)
        return turn

    async def _release_kept_leases(self) -> None:
        """Release the leases ingest took for turns that never ran (the daemon stopped first), so that another
        process answers those messages without waiting for the leases to lapse."""
        kept, self._leases = self._leases, {}
        for conversation_id, owner, _ in kept.values():
            try:
                await self._tx("lease", turn_lease.release, conversation_id, owner)
            except StoreError:  # it lapses after its ttl
                continue

    async def load_context(self, query: ContextQuery, *,
                           vector: Awaitable[tuple[float, ...] | None] | None = None) -> ContextRows:
        """With a `vector` still being computed (the question being embedded), what needs none of it is read
        meanwhile (`_read_ahead`: the memories, the window, recall's hits and rows), then the rest with what the
        embedding gave (`_finish_context`: the vector search and the scoring): the embedding no longer waits for the
        store's read, nor the read for the embedding. At 1,000 people x 1,000 messages the read took 4 of the 6.5
        ms of a SQLite turn's context with vectors; on Postgres the read ahead is one statement, the vector's part
        another (memory/pg_context.py)."""
        if vector is None:
            return await self._read_context(query)
        read = asyncio.ensure_future(self._read_ahead(query))
        try:
            embedded = await vector
        except BaseException:
            # SQLite: its transaction runs to its end on the worker, nothing of it kept; Postgres: its statement is
            # cancelled and its connection back in the pool before this returns (no task left behind)
            read.cancel()
            await asyncio.gather(read, return_exceptions=True)  # a read that failed first is no news beside this
            raise
        try:
            partial = await read
        except StoreError:
            partial = None  # read it all with the vector
        full = with_vector(query, embedded)
        if partial is None:
            return await self._read_context(full)
        return await self._finish_context(full, partial)

    async def _read_context(self, query: ContextQuery) -> ContextRows:
        """load_context's read, the query's vector (if any) in it: one read transaction."""
        return await self._tx(context_mode(query), turns.load_context, query)

    async def _read_ahead(self, query: ContextQuery) -> Any:
        """load_context's read of what needs no vector (`query` names its embedder, its vector is to come)."""
        return await self._tx(context_mode(query), turns.read_context, query)

    async def _finish_context(self, query: ContextQuery, partial: Any) -> ContextRows:
        """The context from `_read_ahead`'s `partial` and `query`'s vector (None: the embedding gave nothing)."""
        return await self._tx(context_mode(query), turns.finish_context, query, partial)

    async def finish_turn(
        self, turn: Ingested, reply: str | None, reply_tokens: int, calls: Sequence[ModelCallRecord],
        metadata: dict[str, Any] | None = None, *, memory_ids: Sequence[int] = (), outgoing: Outgoing | None = None,
        tool_messages: Sequence[ChatMessage] = (),
    ) -> StoredMessage | None:
        return await self._finishing("write", turn, turns.finish_turn, reply, reply_tokens, calls, metadata, memory_ids,
                                     outgoing, tool_messages)

    async def _finishing(self, mode: Mode, turn: Ingested, logic: Logic[StoredMessage | None],
                         *args: Any) -> StoredMessage | None:
        """The turn's last write, `logic(db, turn, *args, owner)`: inside turn_lock it releases the lease it holds
        in the same transaction (owner None outside: nothing to release)."""
        held = self._held.get(turn.message.id)
        owner = held.owner if held is not None else None
        if held is None or owner is None:
            return await self._tx(mode, logic, turn, *args, None)
        held.ending = True
        try:
            stored = await self._tx(mode, logic, turn, *args, owner)
        finally:
            held.ending = False
        held.released = True  # or the conversation is gone, and its lease with it
        return stored

    # -- the outbox (memory/sql_outbox.py) -------------------------------------------------------------------

    async def enqueue(self, user_id: int, message_id: int | None, outgoing: Outgoing) -> list[int]:
        return await self._tx("write", outbox.enqueue, user_id, message_id, outgoing)

    async def claim_outbox(self, surface: str, owner: str, ttl: float, limit: int = 32) -> list[OutboxItem]:
        return await self._tx("write", outbox.claim, surface, owner, ttl, limit)

    async def settle_outbox(self, item_id: int, owner: str, status: str, *, provider_ref: str | None = None,
                            error: str | None = None, retry_at: datetime | None = None) -> bool:
        return await self._tx("write", outbox.settle, item_id, owner, status, provider_ref, error, retry_at)

    async def renew_outbox(self, item_id: int, owner: str, ttl: float) -> bool:
        return await self._tx("write", outbox.renew, item_id, owner, ttl)

    async def outbox_next_due(self, surface: str) -> datetime | None:
        return await self._tx("read", outbox.next_due, surface)

    async def outbox_undelivered(self, surface: str, recipient: str) -> int:
        return await self._tx("read", outbox.undelivered, surface, recipient)

    async def outbox_pending(self, user_id: int) -> list[dict[str, Any]]:
        return await self._tx("read", outbox.pending, user_id)

    async def stored_turn(self, message_id: int) -> Ingested | None:
        return await self._tx("read", outbox.stored_turn, message_id)

    async def outbox_backlog(self) -> tuple[int, datetime | None]:
        return await self._tx("read", outbox.backlog)

    async def unanswered(self, grace: float, window: float, limit: int = 50) -> list[Ingested]:
        return await self._tx("read", outbox.unanswered, grace, window, limit)

    async def import_rows(self, rows: Sequence[ImportRow]) -> ImportResult:
        from memory import sql_import

        return await self._tx("write", sql_import.import_rows, rows)

    # -- message vectors (memory/sql_vectors.py) ---------------------------------------------------------------

    async def unembedded(self, embedder: str, *, after_id: int = 0, limit: int = 64,
                         user_id: int | None = None) -> list[Pending]:
        return await self._tx("read", vectors.pending, embedder, after_id, limit, user_id)

    async def write_vectors(self, embedder: str, rows: Sequence[tuple[int, Sequence[float]]]) -> int:
        return await self._tx("write", vectors.write, embedder, list(rows))

    async def search_vectors(self, user_id: int, vector: Sequence[float], embedder: str, limit: int = 20,
                             excluded: Sequence[int] = ()) -> dict[int, float]:
        query = vectors.VectorQuery(user_id, tuple(vector), embedder, limit, tuple(excluded))
        return await self._tx("read", vectors.search, query)

    async def embedding_progress(self, embedder: str, user_id: int | None = None) -> tuple[int, int]:
        return await self._tx("read", vectors.progress, embedder, user_id)

    # -- memories' vectors (memory/sql_memory_vectors.py) --------------------------------------------------------

    async def unembedded_memories(self, embedder: str, *, after_id: int = 0, limit: int = 64,
                                  user_id: int | None = None) -> list[Pending]:
        return await self._tx("read", memory_vectors.pending, embedder, after_id, limit, user_id)

    async def write_memory_vectors(self, embedder: str,
                                   rows: Sequence[tuple[Pending, Sequence[float]]]) -> MemoryVectors:
        return await self._tx("write", memory_vectors.write, embedder, list(rows))

    async def memory_embedding_progress(self, embedder: str, user_id: int | None = None) -> tuple[int, int]:
        return await self._tx("read", memory_vectors.progress, embedder, user_id)

    # -- people and conversations -----------------------------------------------------------------------

    async def user_id(self, handle: str, *, create: bool = False) -> int | None:
        async def find(db: Db) -> int | None:
            return (await turns.user_by_handle(db, handle, db.ts(db.clock()), create))[0]

        return await self._tx("write" if create else "read", find)

    async def person_zone(self, user_id: int, seen: str | None = None) -> str | None:
        from memory import sql_people as people

        return await self._tx("read" if seen is None else "write", people.zone, user_id, seen)

    async def set_person_zone(self, user_id: int, name: str | None) -> None:
        from memory import sql_people as people

        await self._tx("write", people.set_zone, user_id, name)

    async def find_conversation(self, user_id: int, surface: str) -> int | None:
        return await self._tx("read", lambda db: db.value(
            "SELECT id FROM conversations WHERE user_id = $1 AND surface = $2 "
            "ORDER BY singleton DESC, updated_at DESC, id DESC LIMIT 1", user_id, surface,
        ))

    async def create_conversation(self, user_id: int, surface: str, title: str | None = None) -> int:
        return int(await self._tx("write", lambda db: db.value(
            "INSERT INTO conversations(user_id, surface, singleton, title, created_at, updated_at) "
            "VALUES ($1, $2, false, $3, $4, $4) RETURNING id", user_id, surface, title, db.ts(db.clock()),
        )))

    async def conversations(self, user_id: int) -> list[ConversationInfo]:
        rows = await self._tx("read", lambda db: db.all(
            "SELECT c.id, c.surface, c.title, c.created_at, c.updated_at, "
            "(SELECT count(*) FROM messages m WHERE m.conversation_id = c.id) "
            "FROM conversations c WHERE c.user_id = $1 ORDER BY c.updated_at DESC, c.id DESC", user_id,
        ))
        return [ConversationInfo(id=r[0], surface=r[1], title=r[2], created_at=as_dt(r[3]),
                                 updated_at=as_dt(r[4]), message_count=r[5]) for r in rows]

    async def messages(self, user_id: int, conversation_id: int, limit: int = 200) -> list[StoredMessage]:
        from memory import sql_people as people

        return await self._tx("read", people.messages, user_id, conversation_id, limit)

    async def reply_of(self, user_id: int, message_id: int) -> StoredMessage | None:
        from memory import sql_people as people

        return await self._tx("read", people.reply_of, user_id, message_id)

    async def remember(self, user_id: int, content: str, token_count: int) -> Memory:
        return (await self.add_memory(user_id, MemoryDraft(content, token_count=token_count))).memory

    # -- memories (memory/sql_memories.py) ------------------------------------------------------------------

    async def add_memory(self, user_id: int, draft: MemoryDraft, *, vector: Sequence[float] | None = None,
                         embedder: str = "") -> MemoryAdded:
        memories.check(draft)  # before the transaction: a bad draft costs no round trip
        return await self._tx("write", memories.add, user_id, draft, vector, embedder)

    async def memories(self, user_id: int, *, include_ended: bool = False, limit: int | None = None) -> list[Memory]:
        return await self._tx("read", memories.listed, user_id, include_ended, limit)

    async def memory(self, user_id: int, memory_id: int) -> Memory | None:
        return await self._tx("read", memories.get, user_id, memory_id)

    async def find_memories(self, user_id: int, words: str) -> list[Memory]:
        return await self._tx("read", memories.find, user_id, words)

    async def forget_memory(self, user_id: int, memory_id: int) -> bool:
        return await self._tx("write", memories.forget_one, user_id, memory_id)

    async def touch_memories(self, user_id: int, memory_ids: Sequence[int]) -> None:
        await self._tx("write", memories.touch, user_id, memory_ids, self.clock())

    async def expire_memories(self, threshold: float, idle: timedelta) -> int:
        return await self._tx("write", memories.expire, threshold, self.clock() - idle)

    # -- automatic memory extraction (memory/sql_extract.py; bot/extract_job.py runs it) ------------------------

    async def extraction_due(self, every: int, limit: int) -> list[extract.ExtractionDue]:
        from memory import sql_extract as extract

        return await self._tx("write", extract.due, every, limit)

    async def extraction_batch(self, user_id: int, after_id: int, limit: int,
                               remembered: int) -> tuple[list[StoredMessage], list[Memory]]:
        from memory import sql_extract as extract

        return await self._tx("read", extract.batch, user_id, after_id, limit, remembered)

    async def keep_extraction(self, user_id: int, done_id: int, taken: int | None,
                              drafts: Sequence[MemoryDraft]) -> list[MemoryAdded]:
        from memory import sql_extract as extract

        for draft in drafts:
            memories.check(draft)
        return await self._tx("write", extract.keep_memories, user_id, done_id, taken, drafts)

    async def fail_extraction(self, user_id: int, retry_at: datetime) -> None:
        from memory import sql_extract as extract

        await self._tx("write", extract.fail, user_id, retry_at)

    async def extraction_marks(self) -> list[extract.ExtractionMark]:
        from memory import sql_extract as extract

        return await self._tx("read", extract.marks)

    # -- episode summaries (memory/sql_summaries.py; bot/summary_job.py writes them) ---------------------------

    async def summaries_due(self, min_messages: int, limit: int) -> list[summaries.EpisodeDue]:
        from memory import sql_summaries as summaries

        return await self._tx("read", summaries.due, min_messages, limit)

    async def episode_messages(self, episode_id: int, limit: int) -> list[StoredMessage]:
        from memory import sql_summaries as summaries

        return await self._tx("read", summaries.messages, episode_id, limit)

    async def keep_summary(self, episode_id: int, summary: str | None, model: str) -> bool:
        from memory import sql_summaries as summaries

        return await self._tx("write", summaries.keep, episode_id, summary, model)

    async def summaries(self, user_id: int) -> list[dict[str, Any]]:
        from memory import sql_summaries as summaries

        return await self._tx("read", summaries.listed, user_id)

    async def drop_summaries(self, user_id: int) -> int:
        from memory import sql_summaries as summaries

        return await self._tx("write", summaries.drop, user_id)

    async def model_calls(self, user_id: int) -> list[dict[str, Any]]:
        from memory import sql_people as people

        return await self._tx("read", people.calls_json, user_id)

    async def record_model_calls(self, user_id: int, purpose: str, calls: Sequence[ModelCallRecord]) -> None:
        from memory import sql_people as people

        if calls:
            await self._tx("write", people.record_calls, user_id, purpose, list(calls))

    async def inspect(self, handle: str) -> Inspection | None:
        from memory import sql_people as people

        return await self._tx("read", people.inspect_json, handle)

    async def forget(self, handle: str) -> bool:
        return await self.erase(handle) is not None

    async def purge_messages(self, surface: str, days: int, batch: int) -> tuple[int, int, int]:
        from memory import sql_retention as retention

        return await self._tx("write", retention.purge, surface, days, batch)

    async def keep_media(self, user_id: int, message_id: int, row: dict[str, Any]) -> int | None:
        from memory import sql_media

        return await self._tx("write", sql_media.keep, user_id, message_id, row)

    async def keep_transcript(self, user_id: int, message_id: int, text: str, token_count: int,
                              row: dict[str, Any]) -> int | None:
        from memory import sql_media

        return await self._tx("write", sql_media.transcribed, user_id, message_id, text, token_count, row)

    async def rewrite_message(self, user_id: int, message_id: int, text: str, token_count: int) -> bool:
        from memory import sql_media

        return bool(await self._tx("write", sql_media.rewrite, user_id, message_id, text, token_count))

    async def expired_media(self, before: datetime, limit: int) -> list[tuple[int, str]]:
        from memory import sql_media

        return await self._tx("read", sql_media.expired, before, limit)

    async def drop_media_files(self, media_ids: list[int]) -> int:
        from memory import sql_media

        return await self._tx("write", sql_media.dropped, media_ids)

    async def media_paths(self, handle: str) -> list[str]:
        from memory import sql_media

        return await self._tx("read", sql_media.paths_of, handle)

    async def retention_runs(self, limit: int = 100) -> list[dict[str, Any]]:
        from memory import sql_retention as retention

        return await self._tx("read", retention.runs, limit)

    async def stats(self, start: date, days: int, surfaces: Sequence[str], surface: str | None = None,
                    ) -> dict[str, Any]:
        from memory import sql_stats as stats

        return await self._tx("read", stats.report, start, days, list(surfaces), surface)

    async def export(self, handle: str) -> dict[str, Any] | None:
        from memory import sql_export as exporting

        return await self._tx("read", exporting.export_json, handle)

    async def erase(self, handle: str) -> dict[str, int] | None:
        # every table with a user_id column, from the catalogue, and the tables keyed by identity (sql_forget)
        from memory import sql_forget as forgetting

        return await self._tx("write", forgetting.erase, handle)

    async def identities_of(self, handle: str) -> list[tuple[str, str]] | None:
        from memory import sql_people as people

        return await self._tx("read", people.identities_of, handle)

    async def people_page(self, after: int, limit: int) -> list[Person]:
        from memory import sql_people as people

        return await self._tx("read", people.people_page, after, limit)

    async def erasures_through(self, record: str) -> datetime | None:
        from memory import sql_people as people

        return await self._tx("read", people.erasures_through, record)

    async def mark_erasures(self, record: str, through: datetime) -> None:
        from memory import sql_people as people

        await self._tx("write", people.mark_erasures, record, through)

    # -- identities, linking, deliveries ------------------------------------------------------------------

    async def identity_user(self, surface: str, external_user_id: str, *, create: bool = False) -> int | None:
        if create:
            return await self._tx("write", lambda db: turns.identity_user(db, surface, external_user_id,
                                                                          db.ts(db.clock())))
        return await self._tx("read", lambda db: db.value(
            "SELECT user_id FROM identities WHERE surface = $1 AND external_user_id = $2", surface, external_user_id,
        ))

    async def identity_handle(self, surface: str, external_user_id: str) -> str | None:
        return await self._tx("read", lambda db: db.value(
            "SELECT u.handle FROM identities i JOIN users u ON u.id = i.user_id "
            "WHERE i.surface = $1 AND i.external_user_id = $2", surface, external_user_id,
        ))

    async def set_opt_out(self, surface: str, external_user_id: str, opted_out: bool) -> int:
        from memory import sql_people as people

        return await self._tx("write", people.set_opt_out, surface, external_user_id, opted_out)

    async def is_opted_out(self, surface: str, external_user_id: str) -> bool:
        return bool(await self._tx("read", lambda db: db.value(
            "SELECT opted_out_at IS NOT NULL FROM identities WHERE surface = $1 AND external_user_id = $2",
            surface, external_user_id,
        )))

    async def issue_link_code(
        self, surface: str, external_user_id: str, code_hash: str, expires_at: datetime, *,
        owner_name: str | None = None, language: str | None = None, conversation_ref: str | None = None,
    ) -> int:
        from memory import sql_linking as linking

        return await self._tx("write", linking.issue_code, surface, external_user_id, code_hash, expires_at,
                              (owner_name, language, conversation_ref))

    async def redeem_link_code(
        self, surface: str, external_user_id: str, code_hash: str, policy: LinkPolicy,
        also: tuple[str, str] | None = None, *, confirm: bool = False,
    ) -> Redemption:
        from memory import sql_linking as linking

        return await self._tx("write", linking.redeem_code, surface, external_user_id, code_hash, policy, also,
                              confirm)

    async def post_notice(
        self, user_id: int, surface: str, conversation_ref: str | None, text: str, token_count: int,
        outgoing: Outgoing | None = None,
    ) -> StoredMessage:
        from memory import sql_linking as linking

        return await self._tx("write", linking.post_notice, user_id, surface, conversation_ref, text, token_count,
                              outgoing)

    async def add_reminder(self, user_id: int, message_id: int | None, text: str, due_at: datetime,
                           limit: int) -> Reminder | None:
        from memory import sql_reminders

        return await self._tx("write", sql_reminders.add, user_id, message_id, text, due_at, limit)

    async def reminders(self, user_id: int) -> list[Reminder]:
        from memory import sql_reminders

        return await self._tx("read", sql_reminders.pending, user_id)

    async def cancel_reminder(self, user_id: int, reminder_id: int) -> Reminder | None:
        from memory import sql_reminders

        return await self._tx("write", sql_reminders.cancel, user_id, reminder_id)

    async def due_reminders(self, limit: int = 50) -> list[Reminder]:
        from memory import sql_reminders

        return await self._tx("read", sql_reminders.due, limit)

    async def last_messages(self, user_id: int, surfaces: Sequence[str]) -> list[StoredMessage]:
        from memory import sql_reminders

        return await self._tx("read", sql_reminders.last_messages, user_id, surfaces)

    async def deliver_reminder(self, reminder: Reminder, surface: str, conversation_ref: str | None, text: str,
                               token_count: int, outgoing: Outgoing | None) -> StoredMessage | None:
        from memory import sql_reminders

        return await self._tx("write", sql_reminders.deliver, reminder, surface, conversation_ref, text,
                              token_count, outgoing)

    async def fail_reminder(self, reminder: Reminder, error: str) -> bool:
        from memory import sql_reminders

        return await self._tx("write", sql_reminders.fail, reminder, error)

    async def link_identity(self, handle: str, surface: str, external_user_id: str, actor: str) -> int | None:
        from memory import sql_linking as linking

        return await self._tx("write", linking.link_identity, handle, surface, external_user_id, actor)

    async def unlink_identity(self, surface: str, external_user_id: str, actor: str) -> tuple[str, int | None]:
        from memory import sql_linking as linking

        return await self._tx("write", linking.unlink_identity, surface, external_user_id, actor)

    async def record_delivery(self, delivery: Delivery) -> int:
        from memory import sql_people as people

        return await self._tx("write", people.record_delivery, delivery)

    async def update_delivery(self, surface: str, provider_ref: str, status: str, error: str | None = None) -> bool:
        from memory import sql_people as people

        return await self._tx("write", people.update_delivery, surface, provider_ref, status, error)

    async def deliveries(self, user_id: int) -> list[dict[str, Any]]:
        from memory import sql_people as people

        return await self._tx("read", people.deliveries_json, user_id)

    # -- issue 12, faults: shared counters and the readiness probe (memory/sql_limits.py) ----------------------

    async def hit_rate(self, key: str, limit: int, window_s: int) -> float:
        from memory import sql_limits as limits

        return await self._tx("write", limits.hit, key, limit, window_s)

    async def hit_rates(self, hits: Sequence[tuple[str, int, int]]) -> float:
        from memory import sql_limits as limits

        return await self._tx("write", limits.hit_all, list(hits))

    async def purge_counters(self, older_than_s: int) -> int:
        from memory import sql_limits as limits

        return await self._tx("write", limits.purge, older_than_s)

    async def probe(self) -> None:
        from memory import sql_limits as limits

        await self._tx("write", limits.probe)

    # -- issue 13, costs: the caps' reservations and the alerts' marks (memory/sql_spend.py, sql_alerts.py) -----

    async def reserve_spend(self, windows: Sequence[spend.Window], amount: float) -> spend.Refused | None:
        from memory import sql_spend as spend

        return await self._tx("write", spend.reserve, list(windows), amount)

    async def settle_spend(self, windows: Sequence[spend.Window], delta: float) -> None:
        from memory import sql_spend as spend

        await self._tx("write", spend.settle, list(windows), delta)

    async def spent(self, window: spend.Window) -> float:
        from memory import sql_spend as spend

        return await self._tx("read", spend.spent, window)

    async def take_alert(self, kind: str, interval: timedelta) -> bool:
        from memory import sql_alerts as alerts

        return await self._tx("write", alerts.take, kind, interval)

    async def purge_spend(self, older_than: timedelta) -> int:
        from memory import sql_spend as spend

        return await self._tx("write", spend.purge, (self.clock() - older_than).strftime("%Y-%m-%d"))

    # -- issue 13, admin: the admin page's read-outs (memory/sql_admin.py) ---------------------------------------

    async def admin_people(self, offset: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
        from memory import sql_admin as admin

        return await self._tx("read", admin.people, offset, limit)

    async def admin_person(self, user_id: int) -> dict[str, Any] | None:
        from memory import sql_admin as admin

        return await self._tx("read", admin.person, user_id)

    async def admin_messages(self, user_id: int, conversation_id: int, before: int | None,
                             limit: int) -> list[StoredMessage]:
        from memory import sql_admin as admin

        return await self._tx("read", admin.messages_page, user_id, conversation_id, before, limit)

    async def admin_costs(self, user_id: int | None, day: datetime, month: datetime) -> dict[str, Any]:
        from memory import sql_admin as admin

        return await self._tx("read", admin.costs, user_id, day, month)

    async def admin_top_spenders(self, offset: int, limit: int) -> list[dict[str, Any]]:
        from memory import sql_admin as admin

        return await self._tx("read", admin.top_spenders, offset, limit)
