"""Turn leases: one active turn per conversation across every process on a database, also through a pooler.

A lease is two columns of the conversation row (migration 0010): `turn_owner` (who holds it) and
`turn_expires_at` (when it lapses unless renewed). It is taken with ONE conditional UPDATE in its own short
transaction (free, expired, or already ours), renewed every ttl/3 by a tracked background task while the turn
runs, and released at the end; a process that died leaves a lease that the next turn takes over once it expired.
Nothing lives in a server session, so it works behind a transaction pooler (pgbouncer, Supabase's port 6543),
where session advisory locks land on whatever server session the pooler hands out.

Once the lease is held, the message is checked again: a redelivery that a second process stored while the first
ran the turn finds the reply (or the model call) there, and is a duplicate. On Postgres that check is a statement
of its own, after the UPDATE: in READ COMMITTED a statement that waited for the row sees the row's newest version
but other tables as they were when it began, which could miss a reply stored just before the lease was released.

The SQL is written once (`$n` placeholders; SQLite reads them as `?n`); only the clock differs. Both dialects use
the database's clock, so the processes of one database never compare clocks of different machines.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import secrets
import socket
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass

from kernel import log

logger = log.get("hilo.turn_lease")

#: Seconds a lease lasts without renewal: how long a conversation stays blocked after its process died.
TTL = 30.0
#: Waiting for a lease: the first retry after this many seconds, doubling up to MAX_WAIT.
FIRST_WAIT, MAX_WAIT = 0.01, 0.25

_CLOCKS = {
    "postgres": ("clock_timestamp()", "clock_timestamp() + make_interval(secs => $3)"),
    "sqlite": ("strftime('%Y-%m-%dT%H:%M:%fZ', 'now')",
               "strftime('%Y-%m-%dT%H:%M:%fZ', 'now', printf('%+.3f seconds', $3))"),
}

_TAKE = (
    "UPDATE conversations SET turn_owner = $2, turn_expires_at = {expires} "
    "WHERE id = $1 AND (turn_owner IS NULL OR turn_owner = $2 OR turn_expires_at < {now})"
)
_RENEW = "UPDATE conversations SET turn_expires_at = {expires} WHERE id = $1 AND turn_owner = $2"
_RELEASE = "UPDATE conversations SET turn_owner = NULL, turn_expires_at = NULL WHERE id = $1 AND turn_owner = $2"
#: The turn of message $1 already ran (a reply, or a recorded model call: a turn whose models all failed), or the
#: message is gone (forgotten): nothing to answer.
_ANSWERED = (
    "SELECT EXISTS (SELECT 1 FROM messages r WHERE r.reply_to = $1) "
    "OR EXISTS (SELECT 1 FROM model_calls c WHERE c.message_id = $1) "
    "OR NOT EXISTS (SELECT 1 FROM messages m WHERE m.id = $1)"
)
_EXISTS = "SELECT EXISTS (SELECT 1 FROM conversations WHERE id = $1)"


@dataclass(frozen=True, slots=True)
class LeaseSql:
    """The lease statements of one dialect."""

    take: str  # $1 conversation, $2 owner, $3 ttl seconds
    renew: str  # the same parameters
    release: str  # $1 conversation, $2 owner
    answered: str  # $1 message
    exists: str  # $1 conversation


def lease_sql(dialect: str) -> LeaseSql:
    now, expires = _CLOCKS[dialect]
    texts = [t.format(now=now, expires=expires) for t in (_TAKE, _RENEW, _RELEASE, _ANSWERED, _EXISTS)]
    if dialect == "sqlite":
        texts = [re.sub(r"\$(\d+)", r"?\1", t) for t in texts]
    return LeaseSql(*texts)


_HOST = f"{socket.gethostname()[:40]}:{os.getpid()}:{secrets.token_hex(4)}"
_turns = itertools.count(1)


def new_owner() -> str:
    """A name for one turn's lease: host, process, a random part (pids are reused) and a counter."""
    return f"{_HOST}:{next(_turns)}"


#: take(conversation_id, message_id, owner, ttl) -> (taken, answered)
Take = Callable[[int, int, str, float], Awaitable[tuple[bool, bool]]]
#: renew(conversation_id, owner, ttl) -> still ours
Renew = Callable[[int, str, float], Awaitable[bool]]
#: release(conversation_id, owner)
Release = Callable[[int, str], Awaitable[None]]


@contextlib.asynccontextmanager
async def hold(
    take: Take, renew: Renew, release: Release, conversation_id: int, message_id: int, *,
    ttl: float = TTL, counters: dict[str, int] | None = None,
) -> AsyncIterator[bool]:
    """Hold the conversation's lease while the body runs; yields True when message `message_id` was answered
    already (the caller returns a duplicate without calling the model). A waiter retries with backoff, and stops
    waiting as soon as it sees the message answered. `counters` counts failed attempts ("turn_lease_waits") and
    renewals ("turn_lease_renewals")."""
    owner = new_owner()
    wait = FIRST_WAIT
    while True:
        taken, answered = await take(conversation_id, message_id, owner, ttl)
        if taken or answered:
            break
        if counters is not None:
            counters["turn_lease_waits"] = counters.get("turn_lease_waits", 0) + 1
        await asyncio.sleep(wait)
        wait = min(wait * 2, MAX_WAIT)
    if not taken:
        yield True
        return
    renewer = asyncio.create_task(_renew_until_cancelled(renew, conversation_id, owner, ttl, counters))
    try:
        yield answered
    finally:
        renewer.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await renewer
        try:
            await release(conversation_id, owner)
        except Exception as exc:  # the lease lapses after ttl: the next turn takes it over then
            logger.warning("turn.lease_not_released", conversation_id=conversation_id, error=type(exc).__name__)


async def _renew_until_cancelled(
    renew: Renew, conversation_id: int, owner: str, ttl: float, counters: dict[str, int] | None,
) -> None:
    while True:
        await asyncio.sleep(ttl / 3)
        try:
            renewed = await renew(conversation_id, owner, ttl)
            if counters is not None:
                counters["turn_lease_renewals"] = counters.get("turn_lease_renewals", 0) + 1
            if not renewed:
                # Another process took it over (this one stalled past the ttl): this turn still ends, but the
                # conversation is no longer serialized; say so loudly.
                logger.warning("turn.lease_lost", conversation_id=conversation_id)
                return
        except Exception as exc:  # a failed renewal is retried at the next tick, well before expiry
            logger.warning("turn.lease_not_renewed", conversation_id=conversation_id, error=type(exc).__name__)
