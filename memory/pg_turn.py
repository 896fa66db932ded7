"""A turn's writes on Postgres in one statement each (issue 14: at most 8 round trips a turn, on the wire).

memory/sql_turns.py writes a turn as a transaction of several statements, and on Postgres every statement, BEGIN
and COMMIT is a round trip (two through a transaction pooler, which asyncpg cannot prepare against). Here the
common cases are one data-modifying statement each, its own transaction:

- `ingest` of a message from a known person (by handle or identity): the conversation (upserted, inserted or
  touched), the turn lease taken on that same row when it is free and no earlier message of the conversation
  waits for its answer (memory/turn_lease.py's TAKE, on the row the statement writes anyway), the message, and
  its episode (memory/episodes.py: the id is picked first, the episode row written only when the message was).
  What is not the common case returns None and the caller runs sql_turns.ingest in a transaction: a first contact
  (a new user and identity, serialized by a lock), a redelivery (its message was stored: is it to be resumed?).
- `finish_turn`: the conversation touched, the reply and its episode, the model calls, the memories used and the
  parts to send, as sql_turns.finish_turn writes them, in the same order of row locks (conversation, then
  episode). Nothing is written when the conversation is gone (forgotten meanwhile): None.

The sub-statements of one WITH see one snapshot and none sees another's rows; each runs once. A message's
episode row is written by a sub-statement that reads the message's RETURNING, so it runs only when the message
was inserted; the message names the episode by the id picked before (a foreign key is checked at the end of
the statement, when the episode row exists).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from kernel.errors import NotFound
from kernel.types import SINGLETON_SURFACES, InboundMessage, Ingested, ModelCallRecord, Outgoing, StoredMessage
from memory import episodes, turn_lease
from memory.rows import Db, as_dt, dump_metadata, numbered
from memory.sql_turns import conversation_id_of, title_of
from memory.stems import index_terms

#: The person: by :handle, or by the identity of :sender on :surface.
_BY_HANDLE = "SELECT u.id, u.handle FROM users u WHERE u.handle = :handle"
_BY_IDENTITY = ("SELECT u.id, u.handle FROM identities i JOIN users u ON u.id = i.user_id "
                "WHERE i.surface = :surface AND i.external_user_id = :sender")

#: The lease's columns as the statement that writes the conversation row sets them (memory/turn_lease.py's TAKE):
#: :owner, :expires its expiry, :now, :oldest the oldest earlier message that still holds the turn up
#: (turn_lease.ORDER_WAIT). Taken when free, lapsed or ours, no earlier message of the conversation waits for its
#: answer, and the message (:surface, :external_id) is not stored already (a redelivery takes no lease).
_LEASE_SET = (
    "(turn_owner, turn_expires_at) = (SELECT CASE WHEN lease.free THEN :owner ELSE c.turn_owner END, "
    "CASE WHEN lease.free THEN :expires ELSE c.turn_expires_at END FROM (SELECT "
    + turn_lease.free_sql("c.", "c.id", ":owner", ":now", ":oldest")
    + " AND NOT EXISTS (SELECT 1 FROM messages d WHERE d.surface = :surface AND d.external_id = :external_id) "
    "AS free) AS lease)"
)


#: The conversation, by kind, as `conv` (id, lease taken), for `person`: a singleton surface's one conversation
#: (sql_turns.UPSERT_SINGLETON), a named place on it (:ref its reference: sql_turns.UPSERT_BY_REF), a new
#: conversation of a surface with many (the web without a conversation id; :ref its title: the lease is free), or
#: a named conversation of theirs on this surface (:ref its id). :surface surface, :at the message's time.
_CONVERSATION = {
    "singleton": ("INSERT INTO conversations AS c(user_id, surface, singleton, created_at, updated_at, turn_owner, "
                  "turn_expires_at) SELECT person.id, :surface, true, :at, :at, :owner, :expires FROM person "
                  "ON CONFLICT (user_id, surface) WHERE singleton DO UPDATE SET "
                  f"updated_at = greatest(c.updated_at, excluded.updated_at), {_LEASE_SET} "
                  "RETURNING c.id, c.turn_owner = :owner AS taken"),
    "by_ref": ("INSERT INTO conversations AS c(user_id, surface, singleton, title, external_ref, created_at, "
               "updated_at, turn_owner, turn_expires_at) SELECT person.id, :surface, false, :ref, :ref, :at, :at, "
               ":owner, :expires FROM person ON CONFLICT (user_id, surface, external_ref) "
               "WHERE external_ref IS NOT NULL DO UPDATE SET "
               f"updated_at = greatest(c.updated_at, excluded.updated_at), {_LEASE_SET} "
               "RETURNING c.id, c.turn_owner = :owner AS taken"),
    "new": ("INSERT INTO conversations(user_id, surface, singleton, title, created_at, updated_at, turn_owner, "
            "turn_expires_at) SELECT person.id, :surface, false, :ref, :at, :at, :owner, :expires FROM person "
            "WHERE NOT EXISTS (SELECT 1 FROM messages d WHERE d.surface = :surface AND d.external_id = :external_id) "
            "RETURNING id, true AS taken"),
    "touch": (f"UPDATE conversations AS c SET updated_at = greatest(c.updated_at, :at), {_LEASE_SET} "
              "FROM person WHERE c.id = :ref::bigint AND c.user_id = person.id AND c.surface = :surface "
              "RETURNING c.id, c.turn_owner = :owner AS taken"),
}


def _ingest_sql(person: str, conversation: str) -> str:
    return (
        f"WITH person AS ({person}), conv AS ({_CONVERSATION[conversation]}), "
        f"ep AS (SELECT coalesce({episodes.LATEST_OPEN.format(conversation='conv.id', since=':since')}, "
        f"{episodes.NEXT_ID}) AS id, conv.id AS conversation_id FROM conv), "
        "msg AS (INSERT INTO messages(conversation_id, user_id, surface, role, content, token_count, external_id, "
        "created_at, metadata, reply_to, terms, episode_id) SELECT ep.conversation_id, person.id, :surface, 'user', "
        ":text, :tokens, :external_id, :at, :metadata::jsonb, NULL, :terms, ep.id FROM ep, person "
        "ON CONFLICT (surface, external_id) DO NOTHING RETURNING id), "
        "episode AS (INSERT INTO episodes(id, user_id, conversation_id, surface, started_at, ended_at, "
        "message_count, token_count, terms) SELECT ep.id, person.id, ep.conversation_id, :surface, :at, :at, 1, "
        f":tokens, :terms FROM ep, person, msg {episodes.MERGE}) "
        "SELECT person.id, person.handle, conv.id, conv.taken, msg.id FROM person "
        "LEFT JOIN conv ON true LEFT JOIN msg ON true"
    )


_INGEST = {(p, c): numbered(_ingest_sql(sql, c)) for p, sql in (("handle", _BY_HANDLE), ("identity", _BY_IDENTITY))
           for c in _CONVERSATION}


def _kind(msg: InboundMessage) -> tuple[str, Any]:
    """(the conversation's kind, the web conversation's id or None)."""
    if msg.surface in SINGLETON_SURFACES:
        return ("singleton" if msg.conversation_ref is None else "by_ref"), None
    if msg.conversation_ref is None:
        return "new", None
    return "touch", conversation_id_of(msg.conversation_ref)


async def ingest(db: Db, msg: InboundMessage, token_count: int, owner: str,
                 ttl: float) -> tuple[Ingested, bool] | None:
    """(the turn, whether its lease was taken for `owner`), or None when this is not the common case (no such
    person yet, or the message was stored already): then sql_turns.ingest decides. NotFound for a conversation
    that is not theirs (never which)."""
    kind, ref = _kind(msg)
    person = "handle" if msg.handle else "identity"
    now = db.clock()
    at = db.ts(msg.received_at)
    metadata = dump_metadata(msg.metadata)
    terms = index_terms(msg.text)
    title = msg.conversation_ref if kind == "by_ref" else title_of(msg.text)
    sql, names = _INGEST[person, kind]
    values = {
        "handle": msg.handle, "sender": msg.sender, "surface": msg.surface, "at": at,
        "since": db.ts(msg.received_at - episodes.GAP), "text": msg.text, "tokens": token_count,
        "metadata": metadata, "terms": terms, "owner": owner, "expires": db.ts(now + timedelta(seconds=ttl)),
        "now": db.ts(now), "oldest": db.ts(now - timedelta(seconds=turn_lease.ORDER_WAIT * ttl)),
        "external_id": msg.external_id, "ref": ref if kind == "touch" else title,
    }
    row = await db.one(sql, *(values[n] for n in names))
    if row is None:  # no such person: a first contact
        return None
    user_id, handle, conversation_id, taken, message_id = row
    if conversation_id is None:
        if kind == "new":  # a redelivery: no new conversation was made for it
            return None
        raise NotFound(f"conversation {msg.conversation_ref!r}")  # not theirs, or gone: never say which
    if message_id is None:  # stored already: a redelivery
        if taken:  # it raced its own twin: the lease is not this one's to keep
            await db.run(turn_lease.RELEASE, conversation_id, owner)
        return None
    stored = StoredMessage(
        id=message_id, conversation_id=conversation_id, user_id=user_id, surface=msg.surface, role="user",
        content=msg.text, token_count=token_count, external_id=msg.external_id, created_at=as_dt(at),
        metadata=json.loads(metadata),
    )
    return Ingested(user_id=user_id, handle=handle, conversation_id=conversation_id, message=stored), bool(taken)


#: $1 conversation, $2 user, $3 the reply's moment, $4 surface, $5 reply (NULL: none), $6 its tokens, $7 its
#: metadata, $8 the message it answers, $9 its index terms, $10 $3 minus the episode gap; the model calls as
#: arrays $11..$19; $20 the memories used; the parts to send: $21 surface, $22 recipient, $23 the parts, $24 the
#: platform message the first part answers, $25 now; $26 the owner of the turn lease the touch releases (NULL: none);
#: $27 the model calls' cached input tokens, $28 their routes.
#: Returns (the reply's id, whether the conversation is there).
FINISH = (
    "WITH conv AS (UPDATE conversations SET updated_at = greatest(updated_at, $3), "
    f"{turn_lease.RELEASING.format(owner='$26::text')} WHERE id = $1 AND user_id = $2 RETURNING id), "
    f"ep AS (SELECT coalesce({episodes.LATEST_OPEN.format(conversation='$1', since='$10')}, {episodes.NEXT_ID}) "
    "AS id FROM conv WHERE $5::text IS NOT NULL), "
    "reply AS (INSERT INTO messages(conversation_id, user_id, surface, role, content, token_count, external_id, "
    "created_at, metadata, reply_to, terms, episode_id) SELECT $1, $2, $4, 'assistant', $5, $6, NULL, $3, $7::jsonb, "
    "$8, $9, ep.id FROM ep RETURNING id), "
    "episode AS (INSERT INTO episodes(id, user_id, conversation_id, surface, started_at, ended_at, message_count, "
    f"token_count, terms) SELECT ep.id, $2, $1, $4, $3, $3, 1, $6, $9 FROM ep, reply {episodes.MERGE}), "
    "calls AS (INSERT INTO model_calls(message_id, user_id, model, provider, tokens_in, tokens_out, latency_ms, "
    "outcome, fallback_from, error, created_at, purpose, cost_usd, tokens_cached, route) SELECT $8, $2, c.model, "
    "c.provider, c.tin, c.tout, c.lat, c.outcome, c.fb, c.err, $3, 'turn', c.cost, c.cached, c.route FROM "
    "unnest($11::text[], $12::text[], $13::int[], $14::int[], $15::int[], $16::text[], $17::text[], $18::text[], "
    "$19::float8[], $27::int[], $28::text[]) AS c(model, provider, tin, tout, lat, outcome, fb, err, cost, cached, "
    "route) "
    "WHERE EXISTS (SELECT 1 FROM conv)), "
    "used AS (UPDATE memories SET access_count = access_count + 1, last_accessed_at = $3 WHERE user_id = $2 "
    "AND id = ANY($20::bigint[]) AND EXISTS (SELECT 1 FROM conv)), "
    "parts AS (INSERT INTO deliveries(user_id, message_id, surface, recipient, part, parts, status, body, reply_to, "
    "attempts, next_at, created_at, updated_at) SELECT $2, coalesce((SELECT id FROM reply), $8), $21, $22, p.i, "
    "cardinality($23::text[]), 'pending', p.body, CASE WHEN p.i = 1 THEN $24 END, 0, $25, $25, $25 "
    "FROM unnest($23::text[]) WITH ORDINALITY AS p(body, i) WHERE EXISTS (SELECT 1 FROM conv)) "
    "SELECT (SELECT id FROM reply), EXISTS (SELECT 1 FROM conv)"
)


async def finish_turn(
    db: Db, turn: Ingested, reply: str | None, reply_tokens: int, calls: Sequence[ModelCallRecord],
    metadata: dict[str, Any] | None, memory_ids: Sequence[int] = (), outgoing: Outgoing | None = None,
    lease_owner: str | None = None,
) -> StoredMessage | None:
    """sql_turns.finish_turn in one statement (see FINISH), releasing `lease_owner`'s lease with the touch."""
    moment = max(db.clock(), turn.message.created_at)  # a reply never sorts before what it answers
    msg = turn.message
    meta = dump_metadata(metadata)
    terms = index_terms(reply) if reply is not None else ""
    parts = list(outgoing.parts) if outgoing is not None else []
    row = await db.one(
        FINISH, turn.conversation_id, turn.user_id, db.ts(moment), msg.surface, reply, reply_tokens, meta, msg.id,
        terms, db.ts(moment - episodes.GAP),
        [c.model for c in calls], [c.provider for c in calls], [c.tokens_in for c in calls],
        [c.tokens_out for c in calls], [c.latency_ms for c in calls], [c.outcome for c in calls],
        [c.fallback_from for c in calls], [c.error for c in calls], [c.cost_usd for c in calls],
        db.ids(list(memory_ids)), outgoing.surface if outgoing is not None else None,
        outgoing.recipient if outgoing is not None else None, parts,
        outgoing.reply_to if outgoing is not None else None, db.ts(db.clock()), lease_owner,
        [c.tokens_cached for c in calls], [c.route for c in calls],
    )
    if row is None or row[0] is None:
        return None
    return StoredMessage(
        id=int(row[0]), conversation_id=turn.conversation_id, user_id=turn.user_id, surface=msg.surface,
        role="assistant", content=reply or "", token_count=reply_tokens, external_id=None, created_at=moment,
        metadata=json.loads(meta), reply_to=msg.id,
    )
