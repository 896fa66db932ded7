"""Turn leases: one active turn per conversation across every process on a database, also through a pooler.

A lease is two columns of the conversation row (migration 0010): `turn_owner` (who holds it) and
`turn_expires_at` (when it lapses unless renewed). It is taken with ONE conditional UPDATE in its own short
transaction (free, expired, or already ours), renewed every ttl/3 by a tracked background task while the turn
runs, and released by the statement that stores the reply (RELEASING, in its touch of the conversation row: see
Held), or on its own when the turn ends without one; a process that died leaves a lease that the next turn takes
over once it expired.
Nothing lives in a server session, so it works behind a transaction pooler (pgbouncer, Supabase's port 6543),
where session advisory locks land on whatever server session the pooler hands out.

Once the lease is held, the message is checked again: a redelivery that a second process stored while the first
ran the turn finds the reply (or the model call) there, and is a duplicate. On Postgres that check is a statement
of its own, after the UPDATE: in READ COMMITTED a statement that waited for the row sees the row's newest version
but other tables as they were when it began, which could miss a reply stored just before the lease was released.

The SQL is written once; the moments come from the store's clock (`store.clock`, injectable in tests), so the
processes of one database need clocks that agree well within the ttl (NTP does that).
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any

from kernel import log
from memory.rows import Db, unanswered_sql

logger = log.get("hilo.turn_lease")

#: Seconds a lease lasts without renewal: how long a conversation stays blocked after its process died.
TTL = 30.0
#: Waiting for a lease: the first retry after this many seconds, doubling up to MAX_WAIT.
FIRST_WAIT, MAX_WAIT = 0.01, 0.25

#: A turn waits for the conversation's earlier messages (each person's replies in the order of their messages,
#: also when their messages reach different processes), but never for one stored longer than ORDER_WAIT ttls
#: ago: a message that will not be answered (its process died: recovery answers it once the lease lapsed) holds
#: up the later ones for a bounded time only.
ORDER_WAIT = 2.0


def free_sql(row: str, conversation: str, owner: str, now: str, oldest: str, before: str | None = None) -> str:
    """SQL: the lease of conversation row `row` (its table's name or alias and a dot: "conversations." or "c.") may
    be taken by `owner`: it is free, ours or lapsed at `now`, and no earlier user message of the conversation
    stored since `oldest` (and before message `before`, when given) waits for its answer. Written once: TAKE, and
    ingest's one statement on Postgres (memory/pg_turn.py), which takes the lease as it stores the message.

    The earlier messages are sought among the person's (the conversation's user_id: a conversation's messages
    are always its person's) since `oldest`, by messages(user_id, created_at), a few rows; `+` keeps both
    planners off messages(conversation_id, id), which read the conversation's whole history one row at a time
    (0.18 ms at 700 messages on SQLite: tests/test_turn_statements.py counts the steps)."""
    earlier = f"AND e.id < {before} " if before is not None else ""
    return (f"({row}turn_owner IS NULL OR {row}turn_owner = {owner} OR {row}turn_expires_at < {now}) "
            f"AND NOT EXISTS (SELECT 1 FROM messages e WHERE e.user_id = {row}user_id AND e.created_at > {oldest} "
            f"AND +e.conversation_id = {conversation} AND e.role = 'user' {earlier}AND {unanswered_sql('e')})")


TAKE = ("UPDATE conversations SET turn_owner = $2, turn_expires_at = $3 "
        f"WHERE id = $1 AND {free_sql('conversations.', '$1', '$2', '$4', '$6', before='$5')}")
#: The earliest earlier message of the conversation that holds this turn up and that nobody answers: older
#: than the grace ($4), no reply, no model call, and the conversation's lease free or lapsed ($5 now). Its
#: process died (or stopped) after storing it; the waiting turn answers it first (`hold`'s `adopt`).
ORPHAN = (
    "SELECT e.id FROM messages e JOIN conversations c ON c.id = e.conversation_id "
    "WHERE e.conversation_id = $1 AND e.role = 'user' AND e.id < $2 AND e.created_at > $3 AND e.created_at <= $4 "
    "AND (c.turn_owner IS NULL OR c.turn_expires_at < $5) "
    f"AND {unanswered_sql('e')} ORDER BY e.id LIMIT 1"
)
RENEW = "UPDATE conversations SET turn_expires_at = $3 WHERE id = $1 AND turn_owner = $2"
RELEASE = "UPDATE conversations SET turn_owner = NULL, turn_expires_at = NULL WHERE id = $1 AND turn_owner = $2"
#: The SET of a conversation update that also releases the lease of owner {owner} (NULL: of nobody): the turn's
#: reply touches its conversation row anyway (memory/sql_turns.py FINISH_TOUCH, memory/pg_turn.py FINISH).
RELEASING = ("turn_owner = CASE WHEN turn_owner = {owner} THEN NULL ELSE turn_owner END, "
             "turn_expires_at = CASE WHEN turn_owner = {owner} THEN NULL ELSE turn_expires_at END")
#: The turn of message $1 already ran (a reply, or a recorded model call: a turn whose models all failed), or the
#: message is gone (forgotten): nothing to answer.
ANSWERED = (
    "SELECT EXISTS (SELECT 1 FROM messages r WHERE r.reply_to = $1) "
    "OR EXISTS (SELECT 1 FROM model_calls c WHERE c.message_id = $1) "
    "OR NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = $1)"
)


async def claim(db: Db, conversation_id: int, message_id: int, owner: str, ttl: float) -> bool:
    """TAKE: whether `owner` holds the lease now. Not taken while an earlier message of the conversation, younger
    than ORDER_WAIT ttls, waits for its turn. The transaction that stores a message claims it alone
    (sql_turns.ingest_leased): nothing can have answered a message that did not exist (a reply or a model call
    names a message id, and ids are never used twice: AUTOINCREMENT, sequences)."""
    now = db.clock()
    return bool(await db.run(TAKE, conversation_id, owner, db.ts(now + timedelta(seconds=ttl)), db.ts(now),
                             message_id, db.ts(now - timedelta(seconds=ORDER_WAIT * ttl))))


async def take(db: Db, conversation_id: int, message_id: int, owner: str, ttl: float) -> tuple[bool, bool]:
    """(taken, answered): `claim`, then the check, a statement of its own after the UPDATE (see the module's
    docstring)."""
    if await claim(db, conversation_id, message_id, owner, ttl):
        return True, bool(await db.value(ANSWERED, message_id))
    # forgotten: nothing to wait for
    return False, not await db.value("SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1)", conversation_id)


async def orphan(db: Db, conversation_id: int, message_id: int, ttl: float, grace: float) -> int | None:
    """The id of the earlier message that holds up `message_id`'s turn with nobody to answer it, or None."""
    now = db.clock()
    found = await db.value(ORPHAN, conversation_id, message_id, db.ts(now - timedelta(seconds=ORDER_WAIT * ttl)),
                           db.ts(now - timedelta(seconds=grace)), db.ts(now))
    return None if found is None else int(found)


async def renew(db: Db, conversation_id: int, owner: str, ttl: float) -> bool:
    return bool(await db.run(RENEW, conversation_id, owner, db.ts(db.clock() + timedelta(seconds=ttl))))


async def release(db: Db, conversation_id: int, owner: str) -> None:
    await db.run(RELEASE, conversation_id, owner)


#: os.urandom(4).hex() is secrets.token_hex(4) without importing secrets (hmac, random): ms of every command's start
_HOST = f"{socket.gethostname()[:40]}:{os.getpid()}:{os.urandom(4).hex()}"
_turns = itertools.count(1)


def new_owner() -> str:
    """A name for one turn's lease: host, process, a random part (pids are reused) and a counter."""
    return f"{_HOST}:{next(_turns)}"


#: The store's transaction call: tx("lease", logic, *args) (memory/sql_store.py)
Tx = Callable[..., Awaitable[Any]]


#: The turn of an earlier message that a waiting turn answers first (the pipeline's `answer_stored`).
Adopt = Callable[[int], Awaitable[None]]


@dataclass
class Held:
    """A lease as its turn holds it: `owner` once held; `ending` while the turn's last write runs, which releases
    it in its own transaction (no renewal then); `released` once it did (nothing left to release)."""

    owner: str | None = None
    ending: bool = False
    released: bool = False


#: A lease its turn's message took when it was stored (SqlStore.ingest, memory/pg_turn.py): (owner, its age in
#: seconds as the turn starts, by the store's clock: the one its expiry was written with).
Taken = tuple[str, float]


@contextlib.asynccontextmanager
async def hold(tx: Tx, conversation_id: int, message_id: int, ttl: float, counters: dict[str, int],
               adopt: Adopt | None = None, grace: float = 0.0, taken: Taken | None = None,
               held_as: Held | None = None) -> AsyncIterator[bool]:
    """Hold the conversation's lease while the body runs; yields True when message `message_id` was answered
    already (the caller returns a duplicate without calling the model). A waiter retries with backoff, and stops
    waiting as soon as it sees the message answered. While it waits at the longest backoff, it looks for an
    earlier message that nobody answers (`orphan`: older than `grace`, its lease lapsed) and has `adopt` answer
    it first, so a person's replies keep their order after a crash without waiting for the recover job.
    `taken`: the lease the statement that stored the message took (no statement here while it is fresh, well
    within its ttl: nobody else can hold it, and nobody can have answered a message whose lease was taken as it
    was stored); an older one is taken again under the same owner, as any other.
    `held_as`: the lease as the body sees it, for a last write that releases it (the turn's reply: see Held).
    `counters` counts failed attempts ("turn_lease_waits"), renewals ("turn_lease_renewals") and adoptions
    ("turn_lease_adopted")."""
    owner = new_owner() if taken is None else taken[0]
    wait = FIRST_WAIT
    held, answered = taken is not None and taken[1] < ttl / 3, False
    while not held:
        held, answered = await tx("lease", take, conversation_id, message_id, owner, ttl)
        if held or answered:
            break
        counters["turn_lease_waits"] = counters.get("turn_lease_waits", 0) + 1
        if adopt is not None and wait >= MAX_WAIT:
            earlier = await tx("read", orphan, conversation_id, message_id, ttl, grace)
            if earlier is not None:
                counters["turn_lease_adopted"] = counters.get("turn_lease_adopted", 0) + 1
                logger.info("turn.adopting", conversation_id=conversation_id, message_id=earlier,
                            waiting=message_id)
                await adopt(earlier)  # then the usual pause: another waiter may be answering it right now
        await asyncio.sleep(wait)
        wait = min(wait * 2, MAX_WAIT)
    if not held:
        yield True
        return
    lease = held_as if held_as is not None else Held()
    lease.owner = owner
    # The renewer is a task only for a turn that outlasts a third of the ttl (a model's slow answer): a timer until
    # then, as cheap to cancel as to set, so a turn that ends sooner (most) starts and cancels no task.
    renewer: asyncio.Task[None] | None = None

    def renew_from_now() -> None:
        nonlocal renewer
        renewer = asyncio.ensure_future(_renew_until_cancelled(tx, conversation_id, lease, ttl, counters))

    timer = asyncio.get_running_loop().call_later(ttl / 3, renew_from_now)
    try:
        yield answered
    finally:
        timer.cancel()
        if renewer is not None:
            renewer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await renewer
        if not lease.released:  # unless the reply's write released it (Held)
            try:
                await tx("lease", release, conversation_id, owner)
            except Exception as exc:  # the lease lapses after ttl: the next turn takes it over then
                logger.warning("turn.lease_not_released", conversation_id=conversation_id, error=type(exc).__name__)


async def _renew_until_cancelled(tx: Tx, conversation_id: int, lease: Held, ttl: float, counters: dict[str, int],
                                 ) -> None:
    """Renew now (a third of the ttl went by since the lease was taken), then every third of it."""
    while True:
        if not (lease.ending or lease.released):  # the last write releases it: renewing now could only race it
            try:
                renewed = await tx("lease", renew, conversation_id, lease.owner, ttl)
                counters["turn_lease_renewals"] = counters.get("turn_lease_renewals", 0) + 1
                if not renewed and not lease.released:
                    # Another process took it over (this one stalled past the ttl): this turn still ends, but the
                    # conversation is no longer serialized; say so loudly.
                    logger.warning("turn.lease_lost", conversation_id=conversation_id)
                    return
            except Exception as exc:  # a failed renewal is retried at the next tick, well before expiry
                logger.warning("turn.lease_not_renewed", conversation_id=conversation_id,
                               error=type(exc).__name__)
        await asyncio.sleep(ttl / 3)
