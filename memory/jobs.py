"""Job leases: the rows that let ONE process of many run each run of a background job (bot/jobs.py schedules).

A job is a row of `jobs` (migration 0012) named after it: its lease (`owner`, `expires_at`), when it is next due
(`due_at`; NULL: on demand only), an on-demand request that came while it ran (`requested_at`), and its last run
(`started_at`, `finished_at`, `outcome`, `error`: an exception's type name, never its text, `duration_ms`, `runs`).

- claim: a run is taken when the job is due (or asked for: `force`) and its lease is free or expired: SELECT
  ... FOR UPDATE SKIP LOCKED on the row, then the UPDATE that sets owner and expiry, in one transaction. Postgres
  (READ COMMITTED): a second claimer skips the locked row instead of waiting for it, and a claimer that finds it
  unlocked reads the committed row (held). SQLite spells the lock away (dialect_sqlite.SPELLINGS): BEGIN
  IMMEDIATE already serializes its writers. No server-session state (advisory locks, SET, prepared names): it
  holds behind pgbouncer in transaction mode.
  A forced claim that finds the job running records the request: that run's end makes the job due at once.
- renew: extends the expiry while the run still holds the lease (every ttl/3, by the scheduler).
- finish: releases the lease and records the outcome and the next due time, in one statement. A process that
  died leaves a lease that a claimer takes over once it expired (the run is done again: at least once).

"Now" is the store's clock (`db.clock()`), so the machines of one database compare their clocks: keep them in
sync (NTP); a lease's ttl is the margin.

The logic is written once, as coroutines over the store's `Db` (memory/rows.py) like the rest of the store.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from memory.rows import Db, as_dt


@dataclass(frozen=True, slots=True)
class JobClaim:
    """What a claim found. `at`: the store's "now" of the claim (the run's start when claimed). Not claimed:
    `next_try` is when a claim may succeed (the lease's expiry while it runs, else its due time; None: on
    demand only, or no such job)."""

    claimed: bool
    at: datetime
    next_try: datetime | None = None


@dataclass(frozen=True, slots=True)
class JobEnd:
    """How a run ended. outcome: ok | failed | cancelled (shutdown cut it short) | lost (its lease was taken
    over). `every`: the job's period (None: on demand only); it is next due `every` s after `started_at`, and
    not before it ended."""

    outcome: str
    error: str | None
    started_at: datetime
    duration_ms: int
    every: float | None


@dataclass(frozen=True, slots=True)
class JobState:
    """A job's row, for `inspect`-like read-outs and tests."""

    name: str
    owner: str | None
    expires_at: datetime | None
    due_at: datetime | None
    requested_at: datetime | None
    started_at: datetime | None
    finished_at: datetime | None
    outcome: str | None
    error: str | None
    duration_ms: int | None
    runs: int


_REGISTER = ("INSERT INTO jobs(name, due_at) VALUES ($1, $2) "
             "ON CONFLICT (name) DO UPDATE SET due_at = coalesce(jobs.due_at, excluded.due_at)")
#: The claim: lock the row if it is claimable and nobody else is claiming it ($1 name, $2 now, $3 force) ...
_LOCK = ("SELECT 1 FROM jobs WHERE name = $1 AND (owner IS NULL OR expires_at < $2) "
         "AND (due_at <= $2 OR $3::boolean) FOR UPDATE SKIP LOCKED")
#: ... then take it ($1 name, $2 owner, $3 expiry, $4 now).
_TAKE = "UPDATE jobs SET owner = $2, expires_at = $3, started_at = $4, requested_at = NULL WHERE name = $1"
_SEEN = "SELECT owner, expires_at, due_at FROM jobs WHERE name = $1"
_REQUEST = "UPDATE jobs SET requested_at = $2 WHERE name = $1"
_RENEW = "UPDATE jobs SET expires_at = $3 WHERE name = $1 AND owner = $2"
#: $1 name, $2 owner, $3 now, $4 outcome, $5 error, $6 duration, $7 next due (NULL: on demand only). The casts
#: are for Postgres (it cannot type a bare parameter inside CASE); SQLite reads `$n::type` as `?n`.
_FINISH = ("UPDATE jobs SET owner = NULL, expires_at = NULL, finished_at = $3, outcome = $4, error = $5, "
           "duration_ms = $6, runs = runs + 1, requested_at = NULL, "
           "due_at = CASE WHEN requested_at IS NOT NULL THEN $3::timestamptz ELSE $7::timestamptz END "
           "WHERE name = $1 AND owner = $2")
_STATES = ("SELECT name, owner, expires_at, due_at, requested_at, started_at, finished_at, outcome, error, "
           "duration_ms, runs FROM jobs ORDER BY name")
#: The cleanup job's work: link codes that can never be redeemed again (used, replaced or expired) say nothing.
_PURGE_LINK_CODES = "DELETE FROM link_codes WHERE used_at IS NOT NULL OR expires_at < $1"


def _when(value: Any) -> datetime | None:
    return None if value is None else as_dt(value)


async def register(db: Db, name: str, scheduled: bool) -> None:
    """The job's row, due now when it is scheduled and new (a row that exists keeps its due time)."""
    await db.run(_REGISTER, name, db.ts(db.clock()) if scheduled else None)


async def claim(db: Db, name: str, owner: str, ttl: float, force: bool = False) -> JobClaim:
    """Take a run of `name` for `owner` (a lease of `ttl` s) if it is due (or `force`) and free or expired."""
    now = db.clock()
    at, expires = db.ts(now), db.ts(now + timedelta(seconds=ttl))
    if await db.one(_LOCK, name, at, force) is not None:
        await db.run(_TAKE, name, owner, expires, at)
        return JobClaim(True, now)
    row = await db.one(_SEEN, name)
    if row is None:
        return JobClaim(False, now)
    held_until = _when(row[1]) if row[0] is not None else None
    if force and held_until is not None:
        await db.run(_REQUEST, name, at)  # running now: it runs again once that run ends
    return JobClaim(False, now, held_until if held_until is not None and held_until >= now else _when(row[2]))


async def renew(db: Db, name: str, owner: str, ttl: float) -> bool:
    """Extend the lease; False when `owner` no longer holds it (taken over)."""
    return bool(await db.run(_RENEW, name, owner, db.ts(db.clock() + timedelta(seconds=ttl))))


async def finish(db: Db, name: str, owner: str, end: JobEnd) -> bool:
    """Release the lease and record the run (see JobEnd); False when `owner` no longer held it."""
    now = db.clock()
    due = None if end.every is None else db.ts(max(end.started_at + timedelta(seconds=end.every), now))
    return bool(await db.run(_FINISH, name, owner, db.ts(now), end.outcome, end.error, end.duration_ms, due))


async def states(db: Db) -> list[JobState]:
    """Every job's row, by name."""
    return [JobState(r[0], r[1], _when(r[2]), _when(r[3]), _when(r[4]), _when(r[5]), _when(r[6]), r[7], r[8],
                     r[9], int(r[10])) for r in await db.all(_STATES)]


async def purge_link_codes(db: Db) -> int:
    """Delete link codes that are used (or replaced) or expired; their number."""
    return await db.run(_PURGE_LINK_CODES, db.ts(db.clock()))
