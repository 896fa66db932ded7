"""Spend counters (migration 0027, table spend_counters): the caps' reservations, written once for both dialects.

A model call's worst case is reserved BEFORE the call in every window that has a cap (the person's day and month,
everyone's day and month), in ONE transaction: each window's row is upserted with `spent + amount` only where
that stays within its cap (`ON CONFLICT ... DO UPDATE ... WHERE spent + amount <= cap RETURNING`). On Postgres the
conflicting row is locked and the WHERE is checked against its newest committed version, so two processes
reserving at once never pass a cap between them; SQLite serializes writers anyway (BEGIN IMMEDIATE). A window
that refuses rolls the whole transaction back: no window keeps a part of a refused reservation. The rows are
always taken in the order of `Window`s given (person before everyone, day before month), so concurrent
reservations lock in one order and never deadlock.

When the call ends, `settle` adds (real cost - reserved) to the same rows: what stays counted is what was spent.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from memory.rows import Db, Rollback

_INSERT = ("INSERT INTO spend_counters(scope, user_id, window_start, spent_usd, updated_at) "
           "VALUES ($1, $2, $3, $4, $5) ")
_UPDATE = ("DO UPDATE SET spent_usd = spend_counters.spent_usd + excluded.spent_usd, updated_at = excluded.updated_at "
           "WHERE spend_counters.spent_usd + excluded.spent_usd <= $6 RETURNING spent_usd")
#: $1 scope, $2 user id (NULL: everyone), $3 window start, $4 amount, $5 now, $6 the window's cap
RESERVE_PERSON = _INSERT + "ON CONFLICT (scope, user_id, window_start) WHERE user_id IS NOT NULL " + _UPDATE
RESERVE_GLOBAL = _INSERT + "ON CONFLICT (scope, window_start) WHERE user_id IS NULL " + _UPDATE
#: $4 what to add (real cost - reserved: usually negative), $5 now
SETTLE = ("UPDATE spend_counters SET spent_usd = greatest(spent_usd + $4, 0), updated_at = $5 "
          "WHERE scope = $1 AND user_id IS NOT DISTINCT FROM $2 AND window_start = $3")
#: $1 the person who stays, $2 the one who joins them (linking): the joiner's windows add to the stayer's
MERGE = ("INSERT INTO spend_counters(scope, user_id, window_start, spent_usd, updated_at) "
         "SELECT scope, $1, window_start, spent_usd, updated_at FROM spend_counters WHERE user_id = $2 "
         "ON CONFLICT (scope, user_id, window_start) WHERE user_id IS NOT NULL "
         "DO UPDATE SET spent_usd = spend_counters.spent_usd + excluded.spent_usd")
SPENT = ("SELECT spent_usd FROM spend_counters "
         "WHERE scope = $1 AND user_id IS NOT DISTINCT FROM $2 AND window_start = $3")


@dataclass(frozen=True, slots=True)
class Window:
    """One capped window: `scope` "day" or "month", `user_id` the person (None: everyone), `start` its first
    day ('YYYY-MM-DD', UTC), `cap_usd` its cap."""

    scope: str
    user_id: int | None
    start: str
    cap_usd: float


@dataclass(frozen=True, slots=True)
class Refused:
    """The window a reservation did not fit in, and what it had spent (reserved included) then."""

    window: Window
    spent_usd: float


async def reserve(db: Db, windows: Sequence[Window], amount: float) -> Refused | None:
    """Reserve `amount` USD in every window, or in none: None when reserved, else the first window it would
    take past its cap (the transaction rolls back)."""
    now = db.ts(db.clock())
    for w in windows:
        sql = RESERVE_GLOBAL if w.user_id is None else RESERVE_PERSON
        row = await db.one(sql, w.scope, w.user_id, w.start, amount, now, w.cap_usd) if amount <= w.cap_usd else None
        if row is None:
            spent = await db.value(SPENT, w.scope, w.user_id, w.start)
            raise Rollback(Refused(w, float(spent or 0.0)))
    return None


async def settle(db: Db, windows: Sequence[Window], delta: float) -> None:
    """Add `delta` USD (a call's real cost minus what it reserved) to each window's row, never below 0."""
    if delta:
        now = db.ts(db.clock())
        for w in windows:
            await db.run(SETTLE, w.scope, w.user_id, w.start, delta, now)


async def spent(db: Db, window: Window) -> float:
    """What `window` has spent and reserved so far."""
    return float(await db.value(SPENT, window.scope, window.user_id, window.start) or 0.0)


async def merge(db: Db, src: int, dst: int) -> None:
    """Two people become one (memory/sql_linking.py): what `src` spent counts in `dst`'s windows (src's rows go
    with its user row), so linking a new identity never gives a person a fresh cap."""
    await db.run(MERGE, dst, src)


async def purge(db: Db, before: str) -> int:
    """Delete the windows that began before `before` ('YYYY-MM-DD'): they no longer cap anything."""
    return await db.run("DELETE FROM spend_counters WHERE window_start < $1", before)
