"""The turn's statements, written once: ingest, load_context and finish_turn (the bulk import: memory/sql_import.py).

Each coroutine runs inside ONE transaction the store opened (SQLite: BEGIN IMMEDIATE for writes, BEGIN for reads,
stepped synchronously on its worker thread; Postgres: READ COMMITTED writes; the context's reads each on their own)
and uses as few statements as it can: the common turn is four statements to take a message in, four to read its
context, four to keep the reply. On Postgres, where each is a round trip, a known person's ingest and finish_turn
are one statement each instead (memory/pg_turn.py); these stay the first contact's and redelivery's path there.
SQLite serializes writers; Postgres does not, so the first contact of an identity takes a transaction-scoped
lock (`db.lock`): two deliveries of a new person's first message must not make two users.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kernel.errors import NotFound
from kernel.types import SINGLETON_SURFACES, ChatMessage, InboundMessage, ModelCallRecord, Outgoing
from memory import episodes, sql_memories, sql_outbox, sql_recall, tool_rows, turn_lease
from memory.memory_match import cosines as cosines_of
from memory.rows import (
    MEMORY_COLS,
    MSG_COLS,
    Db,
    Rollback,
    as_dt,
    dump_metadata,
    to_memory,
    to_message,
    unanswered_sql,
)
from memory.stems import index_terms
from memory.store import ContextQuery, ContextRows, Ingested, StoredMessage
from memory.windows import SLACK, WindowCache, newest

#: A redelivered message whose turn never ran is answered if it arrived this recently; older ones (imported
#: history, a redelivery days later) are only dropped.
RESUME_WINDOW = timedelta(hours=1)

INSERT_USER = "INSERT INTO users(handle, created_at) VALUES ($1, $2) ON CONFLICT (handle) DO NOTHING RETURNING id"
#: An upsert of a person's singleton conversation on a surface, and of their conversation of a key (external_ref):
#: the row's updated_at moves forward only (memory/pg_import.py upserts many of each in one statement).
ON_SINGLETON = ("ON CONFLICT (user_id, surface) WHERE singleton "
                "DO UPDATE SET updated_at = greatest(conversations.updated_at, excluded.updated_at)")
ON_REF = ("ON CONFLICT (user_id, surface, external_ref) WHERE external_ref IS NOT NULL "
          "DO UPDATE SET updated_at = greatest(conversations.updated_at, excluded.updated_at)")
UPSERT_SINGLETON = ("INSERT INTO conversations(user_id, surface, singleton, created_at, updated_at) "
                    f"VALUES ($1, $2, true, $3, $4) {ON_SINGLETON} RETURNING id")
UPSERT_BY_REF = ("INSERT INTO conversations(user_id, surface, singleton, title, external_ref, created_at, updated_at) "
                 f"VALUES ($1, $2, false, $3, $4, $5, $6) {ON_REF} RETURNING id")
#: $11 the index terms (memory/stems.py), $12 the episode (memory/episodes.py).
INSERT_MESSAGE = (
    "INSERT INTO messages(conversation_id, user_id, surface, role, content, token_count, external_id, "
    "created_at, metadata, reply_to, terms, episode_id) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12) "
    "ON CONFLICT (surface, external_id) DO NOTHING RETURNING id"
)
#: $12: the call's purpose ('turn'; sql_people.record_calls: the background jobs'), $13 its cost in USD (bot/prices.py),
#: $14 its input tokens read from the provider's prompt cache, $15 the route that chose its model (HILO_MODEL_ROUTES)
INSERT_CALL = (
    "INSERT INTO model_calls(message_id, user_id, model, provider, tokens_in, tokens_out, latency_ms, outcome, "
    "fallback_from, error, created_at, purpose, cost_usd, tokens_cached, route) "
    "VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15)"
)
SELECT_IDENTITY = (
    "SELECT u.id, u.handle FROM identities i JOIN users u ON u.id = i.user_id "
    "WHERE i.surface = $1 AND i.external_user_id = $2"
)
TOUCH = "UPDATE conversations SET updated_at = greatest(updated_at, $1) WHERE id = $2"
#: The reply's touch of its conversation, which also releases the turn's lease ($4 its owner; NULL: none).
FINISH_TOUCH = ("UPDATE conversations SET updated_at = greatest(updated_at, $1), "
                f"{turn_lease.RELEASING.format(owner='$4')} WHERE id = $2 AND user_id = $3")


async def user_by_handle(db: Db, handle: str, created_at: Any, create: bool = True) -> tuple[int | None, bool]:
    """(user id, created now). The common case (a known person) is one statement."""
    row = await db.one("SELECT id FROM users WHERE handle = $1", handle)
    if row is not None or not create:
        return (row[0] if row else None), False
    row = await db.one(INSERT_USER, handle, created_at)
    if row is not None:
        return row[0], True
    # another transaction created it meanwhile (Postgres, READ COMMITTED: a new statement sees it)
    return (await db.one("SELECT id FROM users WHERE handle = $1", handle))[0], False


async def ingest(db: Db, msg: InboundMessage, token_count: int) -> Ingested:
    """Take one message in. A redelivery raises Rollback(None), or Rollback(turn to resume) when its turn never
    ran; a foreign conversation raises NotFound."""
    at = db.ts(msg.received_at)
    created = False
    if msg.handle:
        handle = msg.handle
        user_id, created = await user_by_handle(db, handle, at)
    else:
        row = await _identity(db, SELECT_IDENTITY, msg.surface, msg.sender)
        if row is not None:
            user_id, handle = row
        else:
            user_id, handle = await _first_contact(db, msg.surface, msg.sender, at)
            created = True
    assert user_id is not None
    conversation_id = await _conversation(db, msg, user_id, at)
    metadata = dump_metadata(msg.metadata)
    terms = index_terms(msg.text)
    episode = await episodes.join(db, user_id, conversation_id, msg.surface, msg.received_at, token_count, terms)
    row = await db.one(INSERT_MESSAGE, conversation_id, user_id, msg.surface, "user", msg.text, token_count,
                       msg.external_id, at, metadata, None, terms, episode)
    if row is None:  # (surface, external_id) already stored: undo the user/conversation work
        raise Rollback(await _unanswered(db, msg, user_id))
    stored = StoredMessage(
        id=row[0], conversation_id=conversation_id, user_id=user_id, surface=msg.surface, role="user",
        content=msg.text, token_count=token_count, external_id=msg.external_id, created_at=as_dt(at),
        metadata=json.loads(metadata),
    )
    return Ingested(user_id=user_id, handle=handle, conversation_id=conversation_id, message=stored,
                    created_user=created)


async def ingest_leased(db: Db, msg: InboundMessage, token_count: int, owner: str,
                        ttl: float) -> tuple[Ingested, bool]:
    """`ingest`, and the turn's lease taken for `owner` in the same transaction: (the turn, whether taken). On
    SQLite a statement costs no round trip but every transaction is a hop to the worker thread and a commit: one
    fewer (Postgres does the same in one statement, memory/pg_turn.py)."""
    turn = await ingest(db, msg, token_count)
    return turn, await turn_lease.claim(db, turn.conversation_id, turn.message.id, owner, ttl)


async def _identity(db: Db, sql: str, surface: str, sender: str) -> Any:
    """The identity's row; when there is none, serialize first contacts of the identity (until commit) and look
    again: a concurrent transaction may have created it while this one waited."""
    row = await db.one(sql, surface, sender)
    if row is None and await db.lock(f"identity\x1f{surface}\x1f{sender}"):
        row = await db.one(sql, surface, sender)
    return row


async def _unanswered(db: Db, msg: InboundMessage, user_id: int) -> Ingested | None:
    """A redelivered message: None (drop it) if its turn ran, or the stored turn to resume if it never did
    (the process died between storing the message and calling the model: the person still deserves an answer)."""
    row = await db.one(
        f"SELECT {MSG_COLS}, u.handle FROM messages m JOIN users u ON u.id = m.user_id "
        # only the sender's own message: an id collision must never hand one person's turn to another
        "WHERE m.surface = $1 AND m.external_id = $2 AND m.user_id = $3 AND m.role = 'user' AND m.created_at >= $4 "
        f"AND {unanswered_sql('m')}",
        msg.surface, msg.external_id, user_id, db.ts(db.clock() - RESUME_WINDOW),
    )
    if row is None:
        return None
    stored = to_message(row)
    return Ingested(user_id=stored.user_id, handle=row[-1], conversation_id=stored.conversation_id,
                    message=stored, resumed=True)


async def _first_contact(db: Db, surface: str, sender: str, at: Any) -> tuple[int, str]:
    """A NEW user named after the surface, and the identity that finds it next time. The handle may be taken
    (the identity was unlinked, or linked and forgotten): then it gets a suffix, never the existing user."""
    user_id, handle = await new_user(db, f"{surface}:{sender}", at)
    await db.run("INSERT INTO identities(surface, external_user_id, user_id, created_at) VALUES ($1, $2, $3, $4)",
                 surface, sender, user_id, at)
    return user_id, handle


async def new_user(db: Db, base_handle: str, at: Any) -> tuple[int, str]:
    """A new user named `base_handle`, or `base_handle~2`, `~3`... when taken. Returns (id, handle)."""
    handle, n = base_handle, 1
    while (row := await db.one(INSERT_USER, handle, at)) is None:
        n += 1
        handle = f"{base_handle}~{n}"
    return int(row[0]), handle


async def identity_user(db: Db, surface: str, sender: str, at: Any) -> int:
    """The user of an identity, created on first contact."""
    row = await _identity(db, "SELECT user_id FROM identities WHERE surface = $1 AND external_user_id = $2",
                          surface, sender)
    return int(row[0]) if row is not None else (await _first_contact(db, surface, sender, at))[0]


async def _conversation(db: Db, msg: InboundMessage, user_id: int, at: Any) -> int:
    if msg.surface in SINGLETON_SURFACES:
        if msg.conversation_ref is None:
            return int(await db.value(UPSERT_SINGLETON, user_id, msg.surface, at, at))
        # A named place on a singleton surface (a Telegram group): the person's own conversation there.
        return int(await db.value(UPSERT_BY_REF, user_id, msg.surface, None, msg.conversation_ref, at, at))
    if msg.conversation_ref is None:
        return int(await db.value(
            "INSERT INTO conversations(user_id, surface, singleton, title, created_at, updated_at) "
            "VALUES ($1, $2, false, $3, $4, $5) RETURNING id", user_id, msg.surface, title_of(msg.text), at, at,
        ))
    found = await db.value(TOUCH + " AND user_id = $3 AND surface = $4 RETURNING id", at,
                           conversation_id_of(msg.conversation_ref), user_id, msg.surface)
    if found is None:  # not theirs, or gone: never say which
        raise NotFound(f"conversation {msg.conversation_ref!r}")
    return int(found)


def title_of(text: str) -> str | None:
    """A new conversation's title: the first line of its first message, 60 characters at most."""
    return text.strip().split("\n", 1)[0][:60] or None


def conversation_id_of(ref: str) -> int:
    """The conversation id a client names (the web's conversation_id); NotFound when it is not one."""
    try:
        found = int(ref)
    except ValueError:
        raise NotFound(f"conversation {ref!r}") from None
    if not -(2**63) <= found < 2**63:
        raise NotFound(f"conversation {ref!r}")
    return found


#: The current conversation's newest turns ($5 of them; queued turns, user messages stored after the current one
#: $4, excluded; assistant messages stay): $1 conversation, $2 user, $3 the turn's moment. Index
#: (conversation_id, id). The last column says which part of RECENT_AND_CROSS a row is (0).
RECENT = (
    f"SELECT * FROM (SELECT {MSG_COLS}, 0 FROM messages m WHERE m.conversation_id = $1 AND m.user_id = $2 "
    "AND m.created_at <= $3 AND ($4::bigint IS NULL OR (m.id <> $4 AND (m.role <> 'user' OR m.id < $4))) "
    "ORDER BY m.id DESC LIMIT $5) AS recent"
)
#: The person's turns on other surfaces since $6 ($8 of them, newest first; $7 the turn's surface), at or before
#: $3, outside conversation $1. Index (user_id, created_at). The last column: 1.
CROSS = (
    f"SELECT * FROM (SELECT {MSG_COLS}, 1 FROM messages m WHERE m.user_id = $2 AND m.created_at >= $6 "
    "AND m.created_at <= $3 AND m.surface <> $7 AND m.conversation_id IS DISTINCT FROM $1::bigint "
    "ORDER BY m.created_at DESC, m.id DESC LIMIT $8) AS cross_surface"
)
#: Both in one statement (Postgres: pg_context.py's one round trip).
RECENT_AND_CROSS = f"{RECENT} UNION ALL {CROSS}"
#: SQLite with a window kept (memory/windows.py): the conversation's rows of the person after id $4, unfiltered
#: ($5 at most, newest first), and the cross-surface turns.
AFTER_AND_CROSS = (
    f"SELECT * FROM (SELECT {MSG_COLS}, 0 FROM messages m WHERE m.conversation_id = $1 AND m.user_id = $2 "
    f"AND m.id > $4 ORDER BY m.id DESC LIMIT $5) AS recent UNION ALL {CROSS}"
)


@dataclass(slots=True)
class ReadContext:
    """What `read_context` read of a context: everything but what needs the question's vector (`finish_context`
    adds it): the memories' rows (with their vectors of q.embedder), the conversation and cross-surface turns,
    and recall's gathered rows (None: no recall)."""

    facts_rows: list[Any]
    conversation: list[StoredMessage]
    cross: list[StoredMessage]
    excluded: list[int]
    recall: sql_recall.Gathered | None


async def load_context(db: Db, q: ContextQuery) -> ContextRows:
    """Memories (with their cosines to a query vector), the current conversation and cross-surface turns (one
    statement) and recall (memory/sql_recall.py: three SELECTs, plus the dialect's term statistics on Postgres
    when there is something to search, and one vector search with a query vector), every row at or before the
    turn's moment."""
    return await finish_context(db, q, await read_context(db, q, search=True))


async def read_context(db: Db, q: ContextQuery, *, search: bool = False) -> ReadContext:
    """load_context's reads but the vector search (`search`: that too, with q's vector). Without it, a store
    reads this while the question is embedded, and `finish_context` with the vector after (the memories' vectors
    of q.embedder come along whenever it is named)."""
    at, cur = db.ts(q.at), q.current_message_id
    facts_rows: list[Any] = []
    if q.facts_limit > 0:
        # each memory's vector of the question's embedder comes along (NULL otherwise): its cosine
        facts_rows = list(reversed(await db.all(
            f"SELECT {MEMORY_COLS}, CASE WHEN embedder = $4 THEN vector END FROM memories WHERE user_id = $1 "
            "AND ended_at IS NULL AND created_at <= $2 AND (expires_at IS NULL OR expires_at > $2) "
            "ORDER BY id DESC LIMIT $3", q.user_id, at, q.facts_limit, q.embedder,
        )))
    conversation: list[StoredMessage] = []
    cross: list[StoredMessage] = []
    recent = q.recent_limit if q.conversation_id is not None else 0
    if recent > 0 and db.windows is not None:
        conversation, cross = await _through_window(db, db.windows, q, at, recent)
    elif recent > 0 or q.cross_limit > 0:
        for r in await db.all(RECENT_AND_CROSS, q.conversation_id, q.user_id, at, cur, recent,
                              db.ts(q.cross_since), q.surface, q.cross_limit):
            (conversation if r[-1] == 0 else cross).append(to_message(r[:-1]))
    # A reply sorts right after the message it answers, even when a queued turn was stored in between.
    conversation.sort(key=lambda m: (m.reply_to if m.reply_to is not None else m.id, m.id))
    cross.reverse()
    excluded = [m.id for m in conversation] + [m.id for m in cross] + ([cur] if cur is not None else [])
    gathered = (await sql_recall.gather(db, q, excluded, search=search, held=[*conversation, *cross])
                if q.search_limit > 0 else None)
    return ReadContext(facts_rows, conversation, cross, excluded, gathered)


async def finish_context(db: Db, q: ContextQuery, read: ReadContext) -> ContextRows:
    """The context from `read` (`read_context`'s, of q without its vector or with it) and q's vector: the
    memories' cosines, recall's vector search if `read` left it, and recall's scoring."""
    facts = [to_memory(r[:-1]) for r in read.facts_rows]
    cosines = cosines_of(q.query_vector, [(int(r[0]), r[-1]) for r in read.facts_rows]) if q.query_vector else {}
    recalled: list[StoredMessage] = []
    scores: dict[int, dict[str, float]] = {}
    if read.recall is not None:
        recalled, scores = await sql_recall.finish(db, q, read.excluded, read.recall)
    return ContextRows(facts=facts, conversation=read.conversation, cross_surface=read.cross, recalled=recalled,
                       recall_scores=scores, memory_cosines=cosines)


async def _through_window(db: Db, windows: WindowCache, q: ContextQuery, at: Any,
                          recent: int) -> tuple[list[StoredMessage], list[StoredMessage]]:
    """The conversation's newest `recent` turns and the cross-surface ones, both newest first as RECENT_AND_CROSS
    gives them, through the conversation's kept window: of the conversation only the rows after the newest one
    kept are read (memory/windows.py)."""
    assert q.conversation_id is not None
    key = (q.conversation_id, q.user_id)
    kept = windows.get(key)
    cap = recent + SLACK
    new: list[StoredMessage] = []
    cross: list[StoredMessage] = []
    for r in await db.all(AFTER_AND_CROSS, q.conversation_id, q.user_id, at, kept.after if kept else -1, cap,
                          db.ts(q.cross_since), q.surface, q.cross_limit):
        (new if r[-1] == 0 else cross).append(to_message(r[:-1]))
    picked = newest(windows.read(key, kept, new, cap), recent, q.at, q.current_message_id)
    if picked is None:  # the turn's filters left too few of the rows kept: read with them
        windows.counters["fallbacks"] += 1
        picked = [to_message(r[:-1]) for r in await db.all(RECENT, q.conversation_id, q.user_id, at,
                                                            q.current_message_id, recent)]
    return picked, cross


async def finish_turn(
    db: Db, turn: Ingested, reply: str | None, reply_tokens: int, calls: Sequence[ModelCallRecord],
    metadata: dict[str, Any] | None, memory_ids: Sequence[int] = (), outgoing: Outgoing | None = None,
    tool_messages: Sequence[ChatMessage] = (), lease_owner: str | None = None,
) -> StoredMessage | None:
    """The turn's tool calls and results (memory/tool_rows.py; before the reply, in the reply's episode), the reply,
    the usage rows, the conversation's updated_at, the uses of the memories and the parts to send
    (`outgoing`, queued in the outbox: memory/sql_outbox.py; for the reply, or the person's message when there
    is no reply), together, releasing the turn's lease (`lease_owner`'s) in the same statement as the touch.
    None, and nothing written, when the conversation is gone (forgotten meanwhile)."""
    moment = max(db.clock(), turn.message.created_at)  # a reply never sorts before what it answers
    at, msg = db.ts(moment), turn.message
    stored: StoredMessage | None = None
    # The conversation row first, then its episode, as ingest and post_notice lock them: the other order
    # deadlocked on Postgres against the same person's next message (tests/test_scale_serve.py).
    if not await db.run(FINISH_TOUCH, at, turn.conversation_id, turn.user_id, lease_owner):
        return None  # the conversation is gone (forgotten while the turn ran): nothing to keep
    for used in tool_messages:
        role, content, used_meta = tool_rows.stored_form(used)
        used_terms, used_tokens = index_terms(content), used.tokens or 0
        used_episode = await episodes.join(db, turn.user_id, turn.conversation_id, msg.surface, moment, used_tokens,
                                           used_terms)
        await db.value(INSERT_MESSAGE, turn.conversation_id, turn.user_id, msg.surface, role, content, used_tokens,
                       None, at, dump_metadata(used_meta), msg.id, used_terms, used_episode)
    if reply is not None:
        meta = dump_metadata(metadata)
        terms = index_terms(reply)
        episode = await episodes.join(db, turn.user_id, turn.conversation_id, msg.surface, moment, reply_tokens,
                                      terms)
        message_id = await db.value(INSERT_MESSAGE, turn.conversation_id, turn.user_id, msg.surface, "assistant",
                                    reply, reply_tokens, None, at, meta, msg.id, terms, episode)
        stored = StoredMessage(
            id=message_id, conversation_id=turn.conversation_id, user_id=turn.user_id, surface=msg.surface,
            role="assistant", content=reply, token_count=reply_tokens, external_id=None, created_at=moment,
            metadata=json.loads(meta), reply_to=msg.id,
        )
    if calls:
        await db.many(INSERT_CALL, [
            (msg.id, turn.user_id, c.model, c.provider, c.tokens_in, c.tokens_out, c.latency_ms, c.outcome,
             c.fallback_from, c.error, at, "turn", c.cost_usd, c.tokens_cached, c.route) for c in calls
        ])
    await sql_memories.touch(db, turn.user_id, memory_ids, moment)
    if outgoing is not None and outgoing.parts:
        await sql_outbox.enqueue(db, turn.user_id, stored.id if stored is not None else msg.id, outgoing)
    return stored

