"""The store contract: every backend (SQLite now, Postgres later) implements `Store`.

The contract is shaped by the turn, not by tables: a turn costs one write transaction to take the message
in (`ingest`), one read transaction to gather its context (`load_context`) and one write transaction to
keep the reply and its usage (`finish_turn`). Every read of history is filtered by user_id.

Errors:
StoreError
 ├── NotFound (kernel.errors)   a conversation that is not the caller's, an unknown handle
 └── StoreUnavailable        the database cannot be reached or is locked past the timeout
StoreError and StoreUnavailable live in kernel.errors, and the records a surface names (StoredMessage, Ingested,
Delivery) in kernel.types, so that surfaces need no memory module; they are re-exported here.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field, replace
from datetime import date, datetime, timedelta
from typing import TYPE_CHECKING, Any, Protocol

from kernel.errors import StoreError as StoreError  # re-exported: part of the contract
from kernel.errors import StoreUnavailable as StoreUnavailable  # re-exported: part of the contract
from kernel.types import ChatMessage, InboundMessage, ModelCallRecord, OutboxItem, Outgoing
from kernel.types import Delivery as Delivery  # re-exported: part of the contract
from kernel.types import Ingested as Ingested  # re-exported: part of the contract
from kernel.types import Memory as Memory  # re-exported: part of the contract
from kernel.types import MemoryAdded as MemoryAdded  # re-exported: part of the contract
from kernel.types import MemoryDraft as MemoryDraft  # re-exported: part of the contract
from kernel.types import StoredMessage as StoredMessage  # re-exported: part of the contract
from memory.inspection import Inspection as Inspection  # re-exported: part of the contract
from memory.link_policy import LinkPolicy as LinkPolicy  # re-exported: part of the contract

if TYPE_CHECKING:
    from memory.jobs import JobClaim, JobEnd, JobState
    from memory.sql_extract import ExtractionDue, ExtractionMark
    from memory.sql_reminders import Reminder
    from memory.sql_spend import Refused, Window
    from memory.sql_summaries import EpisodeDue


@dataclass(frozen=True, slots=True)
class ContextQuery:
    """What `load_context` gathers, all of one user.

    conversation_id: the current conversation (None: no history yet, e.g. a dry run for a new person).
    current_message_id: the message being answered; it is excluded, and so are user messages stored after
        it (queued turns); assistant messages are all kept (they answer earlier turns).
    at: only messages created at or before this moment count (`hilo context --at`).
    cross_since: the start of the cross-surface window; cross-surface = messages of this user in OTHER
        conversations whose surface differs from `surface`, created in [cross_since, at], newest
        `cross_limit` of them.
    recent_limit: at most this many messages of the current conversation, newest.
    search_text: lexical search (BM25) over the user's messages outside the two sets above; `search_limit` hits.
    facts_limit: at most this many of the user's current memories (not ended, not expired at `at`), newest.
    query_vector: the embedding of the new message (bot/embedders, kind "query"), searched among the user's
        message vectors of the embedder named `embedder` only (memory/vectors.py), outside the same two sets, and
        compared with their memories' vectors of that embedder; None: lexical only.
    """

    user_id: int
    surface: str
    conversation_id: int | None
    current_message_id: int | None
    at: datetime
    cross_since: datetime
    cross_limit: int = 20
    recent_limit: int = 200
    search_text: str = ""
    search_limit: int = 20
    facts_limit: int = 50
    query_vector: tuple[float, ...] | None = None
    embedder: str = ""


def with_vector(query: ContextQuery, vector: tuple[float, ...] | None) -> ContextQuery:
    """`query` with the question's embedding (Store.load_context's `vector`), or lexical only without one."""
    return replace(query, query_vector=vector) if vector else replace(query, query_vector=None, embedder="")


@dataclass(frozen=True, slots=True)
class ContextRows:
    """Raw material of context assembly. Lists are oldest first, except `recalled` (best match first).
    `facts`: the person's current memories (memory/context_pool.py ranks them by memory/memory_score.py);
    `recall_scores`: each recalled message's score components and fused score (memory/retrieval.py), by id;
    `memory_cosines`: with a query vector, each memory's cosine with it (memory_id -> cosine; only memories with a
    vector of the query's embedder)."""

    facts: list[Memory]
    conversation: list[StoredMessage]
    cross_surface: list[StoredMessage]
    recalled: list[StoredMessage]
    recall_scores: dict[int, dict[str, float]] = field(default_factory=dict)
    memory_cosines: dict[int, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class IngestedContext:
    """A context `ingest` read with its message: the query, its rows and the seconds the read took."""

    query: ContextQuery
    rows: ContextRows
    seconds: float


#: Seconds a context read with its message (`Store.ingest(context=...)`) stays good for the turn: a turn that starts
#: later reads its own, so that what was stored meanwhile (another surface's message, a memory) is in it.
INGESTED_CONTEXT_FRESH = 2.0


@dataclass(frozen=True, slots=True)
class Pending:
    """A message without a vector of the embedder asked about: what the embed job and the backfill embed."""

    id: int
    user_id: int
    content: str


@dataclass(frozen=True, slots=True)
class MemoryVectors:
    """What `Store.write_memory_vectors` did: vectors kept, and memories merged into an older near-duplicate."""

    written: int
    merged: int


@dataclass(frozen=True, slots=True)
class ImportRow:
    """One line of `hilo import`."""

    user: str
    surface: str
    role: str
    content: str
    created_at: datetime
    token_count: int
    external_id: str | None = None
    conversation: str | None = None
    #: its index terms (memory/stems.py), when the reader computed them (`hilo import` does, on its reading
    #: thread, beside the store's work); None: the store computes them
    terms: str | None = None


@dataclass(frozen=True, slots=True)
class ImportResult:
    inserted: int
    skipped: int


@dataclass(frozen=True, slots=True)
class ConversationInfo:
    id: int
    surface: str
    title: str | None
    created_at: datetime
    updated_at: datetime
    message_count: int


@dataclass(frozen=True, slots=True)
class LinkCodeOwner:
    """Who asked for a link code, and where: shown to the person redeeming it before they confirm, and told
    once someone joined. `conversation_ref`: where they asked (the web conversation id), for the notice."""

    user_id: int
    surface: str
    external_user_id: str
    name: str | None = None
    language: str | None = None
    conversation_ref: str | None = None


@dataclass(frozen=True, slots=True)
class Redemption:
    """One step of redeeming a link code. status:
    prompt          the code is right: show whose account it joins (`owner`); only a confirm from this very
                    identity joins it
    linked          confirmed: the identity joined `user_id` (the code's owner, `owner`)
    already_linked  the identity already belongs to the code's owner
    locked          too many wrong codes from this identity or address, until `locked_until`
    invalid         no such live code (wrong, used, expired, or out of attempts)
    own_code        the identity that asked for the code tried to redeem it"""

    status: str
    user_id: int | None = None
    locked_until: datetime | None = None
    owner: LinkCodeOwner | None = None


@dataclass(frozen=True, slots=True)
class Person:
    """A person as the record of erasures matches them (bot/erasures.py): their handle and identities
    ((surface, external user id, created_at)), each with when it was created."""

    id: int
    handle: str
    created_at: datetime
    identities: tuple[tuple[str, str, datetime], ...]


class Store(Protocol):
    """A database of people, their conversations and messages. Every method is async and never blocks the loop."""

    #: The store's "now" (an aware UTC datetime): link codes, lockouts, the resume window and reply times read
    #: it. A constructor keyword (`clock=`, default the real time); tests pass a clock they can move.
    clock: Callable[[], datetime]

    async def open(self) -> None:
        """Connect and apply pending migrations."""

    async def close(self) -> None:
        """Release connections. Safe to call twice."""

    async def migrate(self) -> list[str]:
        """Apply pending migrations; return the names applied."""

    async def ingest(self, msg: InboundMessage, token_count: int, *,
                     context: Callable[[Ingested], ContextQuery] | None = None,
                     limits: Sequence[tuple[str, int, int]] = ()) -> Ingested | None:
        """One write transaction: drop a redelivery (None), resolve the user (by msg.handle, else by identity
        (surface, sender), creating it on first contact), resolve the conversation (singleton surfaces: the
        one of (user, surface); web: msg.conversation_ref, which must be the user's (NotFound otherwise), or a
        new one) and store the message. A redelivered message whose turn never ran (no model call, no reply,
        stored within the last hour) comes back with `resumed=True`, to be answered now.

        context: the query of the new message's context. When given and the turn can run at once (its
        conversation's lease was free and taken with the message), the context is read right after the commit,
        in its own read transaction (SQLite: in the same hop to the worker thread), and kept for
        `ingested_context`. A read that fails leaves nothing kept: the message is stored all the same.

        limits: rate limits to hit first ((key, limit, window_s) as RateLimits.hit_rates takes them), in their own
        transaction (SQLite: in the same hop): RateLimited, with nothing stored, when one must wait."""

    def ingested_context(self, message_id: int) -> IngestedContext | None:
        """The context `ingest` read for `message_id`, handed over once (None: none was read, it was handed
        over already, or it is older than INGESTED_CONTEXT_FRESH seconds)."""

    def turn_lock(self, conversation_id: int, message_id: int, *,
                  adopt: Callable[[int], Awaitable[None]] | None = None,
                  grace: float = 0.0) -> AbstractAsyncContextManager[bool]:
        """Held while the turn answering `message_id` runs: one turn per conversation at a time across every
        process on this database, also behind a transaction pooler (a lease on the conversation row, renewed
        while held and taken over once a dead process let it expire: memory/turn_lease.py). Waiting never
        blocks the loop. Yields True when, once held, the message turns out to be answered already (a
        redelivery that another process answered meanwhile): the caller then calls no model. While it waits
        for an earlier message of the conversation that nobody answers (older than `grace`, its lease lapsed:
        its process died), `adopt(that message's id)` is awaited to answer it first."""

    async def stored_turn(self, message_id: int) -> Ingested | None:
        """A stored person's message with no reply and no model call, as a turn to answer (else None)."""

    async def load_context(self, query: ContextQuery, *,
                           vector: Awaitable[tuple[float, ...] | None] | None = None) -> ContextRows:
        """One read transaction gathering everything context assembly needs (see ContextQuery). `vector`: the
        question's embedding, still being computed (query.embedder names the embedder, query.query_vector is
        None): the context is read with what it gives (None: lexical only). SQLite reads what needs no vector
        meanwhile, in a read transaction of its own, and the rest in a second one (`with_vector`)."""

    async def finish_turn(
        self, turn: Ingested, reply: str | None, reply_tokens: int, calls: Sequence[ModelCallRecord],
        metadata: dict[str, Any] | None = None, *, memory_ids: Sequence[int] = (), outgoing: Outgoing | None = None,
        tool_messages: Sequence[ChatMessage] = (),
    ) -> StoredMessage | None:
        """One write transaction: store the turn's tool calls and results (`tool_messages`, in order:
        memory/tool_rows.py) and the reply (if any) answering turn.message, the model_calls rows,
        count a use of each of the person's memories in `memory_ids` (those the context carried: access_count,
        last_accessed_at), and queue `outgoing`'s parts in the outbox (for the reply, else the message)."""

    # -- the outbox (memory/sql_outbox.py; bot/outbox.py sends) --------------------------------------------------

    async def enqueue(self, user_id: int, message_id: int | None, outgoing: Outgoing) -> list[int]:
        """Queue parts to send to a person (status pending); their ids, in order."""

    async def claim_outbox(self, surface: str, owner: str, ttl: float, limit: int = 32) -> list[OutboxItem]:
        """Lease the due first undelivered part of up to `limit` recipients of `surface` to `owner` for `ttl` s
        (safe across processes: a part is claimed by one sender at a time, a recipient's parts in order)."""

    async def settle_outbox(self, item_id: int, owner: str, status: str, *, provider_ref: str | None = None,
                            error: str | None = None, retry_at: datetime | None = None) -> bool:
        """A claimed part is 'sent' (provider_ref), 'failed' (error) or 'pending' again (retry_at). False
        when `owner` lost its lease."""

    async def renew_outbox(self, item_id: int, owner: str, ttl: float) -> bool:
        """Extend `owner`'s lease on a part it is sending to `ttl` s from now; False when it lost it."""

    async def outbox_next_due(self, surface: str) -> datetime | None:
        """When the next undelivered part of `surface` is due, or None when there is none."""

    async def outbox_undelivered(self, surface: str, recipient: str) -> int:
        """How many parts of `recipient` on `surface` are not delivered yet."""

    async def outbox_pending(self, user_id: int) -> list[dict[str, Any]]:
        """The user's undelivered parts, oldest first."""

    async def outbox_backlog(self) -> tuple[int, datetime | None]:
        """How many parts of every surface are not delivered yet, and when the oldest of them was queued (/readyz,
        /metrics: one indexed read)."""

    async def unanswered(self, grace: float, window: float, limit: int = 50) -> list[Ingested]:
        """Stored messages of people, between `window` and `grace` seconds old, that have no reply, no model call
        and no live turn: turns to resume (recovery, bot/job_list.py)."""

    async def import_rows(self, rows: Sequence[ImportRow]) -> ImportResult:
        """Store many messages in one transaction, skipping (surface, external_id) already stored."""

    #: Whether `hilo import` finds each line's index terms on its reading thread (ImportRow.terms): True where
    #: the store's own Python work leaves the database idle (Postgres, a server process); False where that gains
    #: nothing (SQLite: its thread finds them while the reading thread parses the next lines).
    import_terms_ahead: bool
    @property
    def import_lanes(self) -> int:
        """How many `import_rows` batches `hilo import` may have in flight at once, each of other people's lines
        (memory/importer.py): 1 where one writer is all there is (SQLite); 2 on Postgres, which inserts on a
        backend per connection."""

    # -- message vectors (memory/vectors.py): the embed job and `hilo embed` write, load_context searches ------

    #: None when the database keeps vectors; else why retrieval is lexical only here (set by open()).
    vector_status: str | None

    async def unembedded(self, embedder: str, *, after_id: int = 0, limit: int = 64,
                         user_id: int | None = None) -> list[Pending]:
        """Messages (of `user_id`, or everyone's) with no vector of `embedder` (none, or another embedder's), by
        id above `after_id`, oldest first: a batch to embed. Resumable: pass the last id seen."""

    async def write_vectors(self, embedder: str, rows: Sequence[tuple[int, Sequence[float]]]) -> int:
        """Keep each (message_id, unit vector) of `embedder`, replacing another embedder's vector of the message;
        the vector's owner is the message's. Returns how many were kept (0 when the database keeps none)."""

    async def search_vectors(self, user_id: int, vector: Sequence[float], embedder: str, limit: int = 20,
                             excluded: Sequence[int] = ()) -> dict[int, float]:
        """message_id -> cosine of the person's `limit` nearest messages among vectors of `embedder`, best first."""

    async def embedding_progress(self, embedder: str, user_id: int | None = None) -> tuple[int, int]:
        """(messages with a vector of `embedder`, messages), of one person or of everyone."""

    async def unembedded_memories(self, embedder: str, *, after_id: int = 0, limit: int = 64,
                                  user_id: int | None = None) -> list[Pending]:
        """Current memories (of `user_id`, or everyone's) with no vector of `embedder` (none, another embedder's,
        or older than their wording), by id above `after_id`, oldest first: a batch to embed."""

    async def write_memory_vectors(self, embedder: str,
                                   rows: Sequence[tuple[Pending, Sequence[float]]]) -> MemoryVectors:
        """Keep each memory's vector (if it still says what was embedded), then merge each one with the person's
        nearest current memory of the same kind and embedder when their cosine says they are the same
        (memory/sql_memory_vectors.py). One transaction."""

    async def memory_embedding_progress(self, embedder: str, user_id: int | None = None) -> tuple[int, int]:
        """(current memories with a vector of `embedder`, current memories), of one person or of everyone."""

    async def user_id(self, handle: str, *, create: bool = False) -> int | None:
        """The user with this handle (created when `create`), or None."""

    async def person_zone(self, user_id: int, seen: str | None = None) -> str | None:
        """The person's time zone (an IANA name; None: not known). `seen`: a zone their client named with this
        message (the web widget's), stored when it is new and answered."""

    async def set_person_zone(self, user_id: int, name: str | None) -> None:
        """The person's time zone is `name` (checked by the caller: kernel/zones.py); None: not known."""

    async def find_conversation(self, user_id: int, surface: str) -> int | None:
        """The user's singleton conversation on a surface, or (web) their latest one."""

    async def create_conversation(self, user_id: int, surface: str, title: str | None = None) -> int:
        """A new owned (non-singleton) conversation."""

    async def conversations(self, user_id: int) -> list[ConversationInfo]:
        """The user's conversations, most recently updated first."""

    async def messages(self, user_id: int, conversation_id: int, limit: int = 200) -> list[StoredMessage]:
        """Messages of one of the user's conversations, oldest first (NotFound if not the user's)."""

    async def reply_of(self, user_id: int, message_id: int) -> StoredMessage | None:
        """The assistant's reply to one of the user's messages, if one is stored."""

    async def remember(self, user_id: int, content: str, token_count: int) -> Memory:
        """Store a memory the person stated (a fact, confidence 1.0): add_memory's shortcut, merge and all."""

    # -- memories (memory/sql_memories.py: lifecycle; kernel.types.Memory: the record) --------------------------

    async def add_memory(self, user_id: int, draft: MemoryDraft, *, vector: Sequence[float] | None = None,
                         embedder: str = "") -> MemoryAdded:
        """Add a memory about the user: merged into a near-duplicate (lexical, or vector when `vector` of
        `embedder` is given and a stored one has the same embedder), superseding the current memories of the same
        kind and key (or `draft.supersedes`), else added. InputError (`memory_invalid`) for a bad draft."""

    async def memories(self, user_id: int, *, include_ended: bool = False, limit: int | None = None) -> list[Memory]:
        """The user's memories, newest first: current ones, or with the ended (superseded, expired) ones too."""

    async def memory(self, user_id: int, memory_id: int) -> Memory | None:
        """One of the user's memories (ended ones too), or None (unknown, or someone else's)."""

    async def find_memories(self, user_id: int, words: str) -> list[Memory]:
        """The user's current memories that `words` name best: one, several too close to choose between, none."""

    async def forget_memory(self, user_id: int, memory_id: int) -> bool:
        """Delete one of the user's memories and what derives from it. False when it is not theirs or gone."""

    async def touch_memories(self, user_id: int, memory_ids: Sequence[int]) -> None:
        """Count a use of each memory (finish_turn does it in the turn's own transaction)."""

    async def expire_memories(self, threshold: float, idle: timedelta) -> int:
        """End every current memory whose expires_at passed, or whose importance is below `threshold` and which
        was not used for `idle` (memory/sql_memories.py); the number ended."""

    async def inspect(self, handle: str) -> Inspection | None:
        """Everything stored about the person (JSON-ready), or None if unknown."""

    async def forget(self, handle: str) -> bool:
        """Delete everything about the person. True if there was someone to forget."""

    async def purge_messages(self, surface: str, days: int, batch: int) -> tuple[int, int, int]:
        """The retention policy: delete up to `batch` of the surface's messages older than `days` days, oldest
        first, with their vectors, search terms and emptied episodes; (messages, vectors, episodes) deleted,
        also kept as a `retention_runs` row when something was (memory/sql_retention.py)."""

    async def keep_media(self, user_id: int, message_id: int, row: dict[str, Any]) -> int | None:
        """A media row (migration 0035) of the person's message: `row` holds surface, kind, mime, bytes,
        duration_s, path, transcriber and status (memory/sql_media.py). Its id; None when the message is not the
        person's (forgotten meanwhile)."""

    async def keep_transcript(self, user_id: int, message_id: int, text: str, token_count: int,
                              row: dict[str, Any]) -> int | None:
        """The transcript becomes the person's message's content (index terms, episode, no stale vector) and its
        media row is kept, in one transaction: the row's id, or None when the message is not the person's."""

    async def rewrite_message(self, user_id: int, message_id: int, text: str, token_count: int) -> bool:
        """The person's message now says `text` (a photo's description, bot/vision.py): its index terms, episode
        and vector follow, in one transaction. False when the message is not the person's."""

    async def expired_media(self, before: datetime, limit: int) -> list[tuple[int, str]]:
        """Media files kept since before `before`, oldest first: (media id, path)."""

    async def drop_media_files(self, media_ids: list[int]) -> int:
        """These media rows' files are deleted: their path becomes NULL."""

    async def media_paths(self, handle: str) -> list[str]:
        """The person's kept media files (read before `forget` deletes their rows)."""

    async def retention_runs(self, limit: int = 100) -> list[dict[str, Any]]:
        """The retention job's latest deletions, newest first: ran_at, surface, days and the counts."""

    async def stats(self, start: date, days: int, surfaces: Sequence[str], surface: str | None = None,
                    ) -> dict[str, Any]:
        """`hilo stats`: the turns of `days` UTC days from `start` per (day, surface) and their totals
        (memory/sql_stats.py; the shape: docs/stats.md). Ids and counts only; an empty database gives zeros."""

    async def export(self, handle: str) -> dict[str, Any] | None:
        """Everything stored about the person as JSON (memory/sql_export.py): the `inspect` record's sections,
        every other row keyed to them, vectors as a note; None when nobody has that handle."""

    async def erase(self, handle: str) -> dict[str, int] | None:
        """`forget`, saying what went: {table: rows deleted} (memory/sql_forget.py), None when nobody has that
        handle."""

    async def identities_of(self, handle: str) -> list[tuple[str, str]] | None:
        """The person's identities as (surface, external user id), oldest first; None when nobody has that handle
        (the record of erasures notes them before `erase`: bot/erasures.py)."""

    async def people_page(self, after: int, limit: int) -> list[Person]:
        """Up to `limit` people whose id is above `after`, by id, each with their identities (the record of
        erasures walks everyone so after a restore)."""

    async def erasures_through(self, record: str) -> datetime | None:
        """How far the record of erasures `record` (a digest of its first line) was applied here: its newest
        erasure then; None if never (migration 0047: a restored database holds the backup's mark)."""

    async def mark_erasures(self, record: str, through: datetime) -> None:
        """The record `record` was applied here up to its erasure of `through`."""

    async def model_calls(self, user_id: int) -> list[dict[str, Any]]:
        """The user's model_calls rows, oldest first (JSON-ready)."""

    async def record_model_calls(self, user_id: int, purpose: str, calls: Sequence[ModelCallRecord]) -> None:
        """Keep a background job's model calls for one person ("extract", "summary"), as model_calls rows with no
        message (a turn's are kept by finish_turn, purpose "turn")."""

    async def identity_user(self, surface: str, external_user_id: str, *, create: bool = False) -> int | None:
        """The user an identity (surface, id on that surface) belongs to, or None; `create`: created (with its
        user) on first contact, as a message would (`/remember` before anything else was said)."""

    async def identity_handle(self, surface: str, external_user_id: str) -> str | None:
        """The handle of the user an identity belongs to (whatever it was linked to), or None."""

    async def set_opt_out(self, surface: str, external_user_id: str, opted_out: bool) -> int:
        """Stop (or resume) replies to an identity, creating it (and its user) on first contact; returns the
        user id."""

    async def is_opted_out(self, surface: str, external_user_id: str) -> bool:
        """Whether the identity asked not to be written to."""

    async def issue_link_code(
        self, surface: str, external_user_id: str, code_hash: str, expires_at: datetime, *,
        owner_name: str | None = None, language: str | None = None, conversation_ref: str | None = None,
    ) -> int:
        """Keep a one-time link code (its hash) for the identity's user, with who asked and where (see
        LinkCodeOwner); older unused codes of the identity die. Returns the user id."""

    async def redeem_link_code(
        self, surface: str, external_user_id: str, code_hash: str, policy: LinkPolicy,
        also: tuple[str, str] | None = None, *, confirm: bool = False,
    ) -> Redemption:
        """One step of redeeming a code from an identity (see Redemption). A right code is first a "prompt":
        the identity is recorded as the one shown it (replacing any earlier one) and the attempt counts
        against the code. Only `confirm` from that same identity links: the identity's user merges into the
        code's user. `confirm` from any other identity is a prompt. Every step counts toward the limits:
        wrong codes against the identity and `also` (a second key, e.g. ("ip", address)), which can lock
        either out."""

    async def post_notice(
        self, user_id: int, surface: str, conversation_ref: str | None, text: str, token_count: int,
        outgoing: Outgoing | None = None,
    ) -> StoredMessage:
        """Store `text` as an assistant message (not answering anything) in the user's conversation on
        `surface`: the singleton one, or on the web the conversation `conversation_ref` if it is the user's,
        else their latest, else a new one. The conversation counts as updated. `outgoing`: its parts, queued in
        the outbox in the same transaction."""

    async def add_reminder(self, user_id: int, message_id: int | None, text: str, due_at: datetime,
                           limit: int) -> Reminder | None:
        """A pending reminder of the person's (`message_id`: the message whose turn scheduled it); None when they
        have `limit` pending already (memory/sql_reminders.py)."""

    async def reminders(self, user_id: int) -> list[Reminder]:
        """The person's pending reminders, soonest first."""

    async def cancel_reminder(self, user_id: int, reminder_id: int) -> Reminder | None:
        """The person's pending reminder, cancelled; None when there is no such pending one of theirs."""

    async def due_reminders(self, limit: int = 50) -> list[Reminder]:
        """Everyone's pending reminders whose time came (the `reminders` job's), oldest first."""

    async def last_messages(self, user_id: int, surfaces: Sequence[str]) -> list[StoredMessage]:
        """The person's latest message from a private chat on each of `surfaces` (where they were last active; never
        a group's), latest first."""

    async def deliver_reminder(self, reminder: Reminder, surface: str, conversation_ref: str | None, text: str,
                               token_count: int, outgoing: Outgoing | None) -> StoredMessage | None:
        """One transaction: the reminder marked sent, stored as hilo's message on `surface` (as post_notice) and
        its parts queued; None (nothing written) when it was not pending any more."""

    async def fail_reminder(self, reminder: Reminder, error: str) -> bool:
        """The reminder could not be delivered (`error`: why, never its text); False when not pending."""

    async def link_identity(self, handle: str, surface: str, external_user_id: str, actor: str) -> int | None:
        """Operator link: the identity joins the user with `handle` (None if there is no such user)."""

    async def unlink_identity(self, surface: str, external_user_id: str, actor: str) -> tuple[str, int | None]:
        """Separate an identity from its user: (unlinked | unknown | only_identity, new user id)."""

    async def record_delivery(self, delivery: Delivery) -> int:
        """Record one sent (or finally failed) part of a reply; returns the delivery id."""

    async def update_delivery(self, surface: str, provider_ref: str, status: str, error: str | None = None) -> bool:
        """A provider's later word on a sent part (delivered, read, undelivered...). False if unknown."""

    async def deliveries(self, user_id: int) -> list[dict[str, Any]]:
        """The user's deliveries, oldest first (JSON-ready)."""

    # -- background jobs: leases, so that one process runs each run (memory/jobs.py; bot/jobs.py schedules) -----

    async def register_job(self, name: str, scheduled: bool) -> None:
        """Make sure the job has its row; a new scheduled job is due at once."""

    async def claim_job(self, name: str, owner: str, ttl: float, *, force: bool = False) -> JobClaim:
        """Take a run of the job for `owner`, a lease of `ttl` s, if it is due (or `force`: on demand) and its
        lease is free or expired; exactly one of many concurrent claimers gets it. A forced claim of a running
        job makes it due again once that run ends."""

    async def renew_job(self, name: str, owner: str, ttl: float) -> bool:
        """Extend the run's lease by `ttl` s from now; False when it was taken over."""

    async def finish_job(self, name: str, owner: str, end: JobEnd) -> bool:
        """Release the run's lease, record how it ended and when the job is next due; False when it was
        taken over meanwhile (nothing is recorded then)."""

    async def job_states(self) -> list[JobState]:
        """Every job's row: lease, next due time, last run."""

    async def purge_link_codes(self) -> int:
        """Delete link codes that can never be redeemed again (used, replaced or expired); their number."""

    # -- inbound-delivery records (memory/sql_inbound.py) ---------------------------------------------------

    async def record_inbound(self, surface: str, external_id: str, kind: str, sender: str | None = None) -> bool:
        """Record a delivery that is not a turn (a command, a refusal, STOP / START) before it is acknowledged
        or acted on: True the first time (surface, external_id) is seen, False for a redelivery. `sender`: the
        identity it came from (`forget` deletes the person's records by it)."""

    async def purge_inbound(self, older_than: timedelta) -> int:
        """Delete the inbound-delivery records older than `older_than`; their number."""

    # -- automatic memory extraction: watermarks (memory/sql_extract.py; bot/extract_job.py runs it) ----------

    async def extraction_due(self, every: int, limit: int) -> list[ExtractionDue]:
        """Count the people's messages stored since the last call, then up to `limit` people with at least
        `every` messages not yet extracted (and not waiting for a retry), those extracted longest ago first."""

    async def extraction_batch(self, user_id: int, after_id: int, limit: int,
                               remembered: int) -> tuple[list[StoredMessage], list[Memory]]:
        """The person's own messages after `after_id`, oldest first (at most `limit`), and their newest
        `remembered` current memories. One read transaction."""

    async def keep_extraction(self, user_id: int, done_id: int, taken: int | None,
                              drafts: Sequence[MemoryDraft]) -> list[MemoryAdded]:
        """One write transaction: add the memories (as add_memory does) and move the person's watermark to
        `done_id`, `taken` messages extracted (None: all that were counted). Nothing is written when the
        watermark is past `done_id` already."""

    async def fail_extraction(self, user_id: int, retry_at: datetime) -> None:
        """The person's batch failed (the models, or an unusable answer): one more failure, no try before
        `retry_at`; the watermark stays."""

    async def extraction_marks(self) -> list[ExtractionMark]:
        """Every person's extraction watermark, by user id."""

    # -- episode summaries written by the model (memory/sql_summaries.py; bot/summary_job.py writes them) ------

    async def summaries_due(self, min_messages: int, limit: int) -> list[EpisodeDue]:
        """Up to `limit` episodes that ended (no message for an hour), of at least `min_messages` messages,
        never summarized, those that ended first first."""

    async def episode_messages(self, episode_id: int, limit: int) -> list[StoredMessage]:
        """The episode's messages, oldest first, at most `limit`."""

    async def keep_summary(self, episode_id: int, summary: str | None, model: str) -> bool:
        """Keep the model's summary of the episode (None: passed over, never tried again); False when it had
        one already."""

    async def summaries(self, user_id: int) -> list[dict[str, Any]]:
        """The person's episode summaries, oldest episode first (JSON-ready)."""

    async def drop_summaries(self, user_id: int) -> int:
        """Clear the person's episode summaries (they are not written again; messages are untouched); how many."""

    # -- issue 12, faults: shared counters and the readiness probe (memory/sql_limits.py) ----------------------

    async def hit_rate(self, key: str, limit: int, window_s: int) -> float:
        """Count one hit of `key`, shared by every process on the database: 0.0 when it is within `limit` hits per
        `window_s` s (a sliding-window estimate), else the seconds to wait. One statement."""

    async def hit_rates(self, hits: Sequence[tuple[str, int, int]]) -> float:
        """hit_rate of each (key, limit, window_s) in order, in ONE write transaction, up to the first that must
        wait (its wait), else 0.0: the web's limits before a message (per IP, per visitor) in one round trip."""

    async def purge_counters(self, older_than_s: int) -> int:
        """Delete the counters of windows that began more than `older_than_s` s ago; how many."""

    async def probe(self) -> None:
        """One write transaction of one statement (the probe's counter): StoreError when the database cannot be
        reached or written (down, full, read-only, its file gone)."""

    # -- issue 13, costs: the caps' reservations and the alerts' marks (memory/sql_spend.py, sql_alerts.py) -----

    async def reserve_spend(self, windows: Sequence[Window], amount: float) -> Refused | None:
        """Reserve `amount` USD in every capped window at once, or in none (one write transaction): None when
        reserved, else the window it would take past its cap."""

    async def settle_spend(self, windows: Sequence[Window], delta: float) -> None:
        """Add `delta` (a call's real cost minus its reservation) to each window's spend."""

    async def spent(self, window: Window) -> float:
        """What a window has spent (reservations in flight included)."""

    async def take_alert(self, kind: str, interval: timedelta) -> bool:
        """True when an alert of `kind` may go out now (every process shares the mark), False within `interval`."""

    async def purge_spend(self, older_than: timedelta) -> int:
        """Delete the spend windows that began more than `older_than` ago (the cleanup job); how many."""

    # -- issue 13, admin: the admin page's read-outs (memory/sql_admin.py; bot/admin.py) -------------------------

    async def admin_people(self, offset: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
        """How many people there are, and `limit` of them from `offset` (most recently seen first): handle,
        identities, last seen, counts and cost, JSON-ready."""

    async def admin_person(self, user_id: int) -> dict[str, Any] | None:
        """One person as `admin_people` shows them, or None."""

    async def admin_messages(self, user_id: int, conversation_id: int, before: int | None,
                             limit: int) -> list[StoredMessage]:
        """At most `limit` messages of the person's conversation older than message `before` (None: the newest),
        oldest first; NotFound when the conversation is not theirs."""

    async def admin_costs(self, user_id: int | None, day: datetime, month: datetime) -> dict[str, Any]:
        """Model calls' count, cost and tokens since `day`, since `month` and in all, of the person (None:
        everyone), with their newest spend windows."""

    async def admin_top_spenders(self, offset: int, limit: int) -> list[dict[str, Any]]:
        """People by what their model calls cost in all, most first."""
