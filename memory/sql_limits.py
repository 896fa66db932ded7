"""Counters in the database (migration 0026, table rate_counters): rate limits that every process on one database
shares, and the readiness probe's write. A hit is ONE statement: the key's row upserted and its counts returned.

The limit is a sliding-window estimate over two fixed windows (as nginx and Cloudflare count): the hits of the
current window plus those of the previous one weighted by the share of it that the last `window_s` seconds still
cover. Unlike a plain fixed window it never lets twice the limit through around a window's edge, and unlike a
token bucket it needs no read-modify-write: the upsert does it (every SET expression reads the row as it was)."""

from __future__ import annotations

from collections.abc import Sequence

from memory.rows import Db

#: The keys of HIT_ALL as rows of a column k (SQLite spells it from the JSON array: memory/dialect_sqlite.py).
UNNEST_KEYS = "unnest($1::text[]) AS h(k)"
#: $1 key, $2 the current window's start (epoch seconds), $3 the window's length.
HIT = (
    "INSERT INTO rate_counters(key, window_start, hits, prev_hits) VALUES ($1, $2, 1, 0) ON CONFLICT (key) DO UPDATE "
    "SET hits = CASE WHEN rate_counters.window_start = excluded.window_start THEN rate_counters.hits + 1 ELSE 1 END, "
    "prev_hits = CASE WHEN rate_counters.window_start = excluded.window_start THEN rate_counters.prev_hits "
    "WHEN rate_counters.window_start = excluded.window_start - $3 THEN rate_counters.hits ELSE 0 END, "
    "window_start = excluded.window_start RETURNING hits, prev_hits"
)
#: Several keys' hits of one window length in one statement (Postgres: one round trip, not a transaction of one per
#: hit; SQLite: one statement, not three, of a web message's transaction): $1 the keys (distinct: an upsert touches a
#: row once), $2 and $3 as HIT's. Rows (key, hits, prev_hits). `WHERE true`: SQLite reads an upsert after a SELECT
#: only so (its parser would take ON CONFLICT for a join's).
HIT_ALL = (
    "INSERT INTO rate_counters(key, window_start, hits, prev_hits) "
    f"SELECT k, $2::bigint, 1, 0 FROM {UNNEST_KEYS} WHERE true "
    + HIT[HIT.index("ON CONFLICT"):HIT.index("RETURNING")] + "RETURNING key, hits, prev_hits"
)
#: Hits taken back ($1 keys, $2 the window they were counted in): those hit_all counted after one that must wait.
UNHIT = "UPDATE rate_counters SET hits = hits - 1 WHERE key = ANY($1::text[]) AND window_start = $2 AND hits > 0"
#: The readiness probe's own counter (bot/health.py): its hit is the probe's one write.
PROBE_KEY = "probe"
PURGE = "DELETE FROM rate_counters WHERE window_start < $1"


def wait_for(hits: int, prev_hits: int, elapsed: float, limit: int, window_s: int) -> float:
    """0.0 when a hit with these counts is within `limit` per `window_s`, else the seconds until one would be."""
    weight = 1.0 - elapsed / window_s  # the share of the previous window the sliding window still covers
    if prev_hits * weight + hits <= limit:
        return 0.0
    if hits > limit or prev_hits == 0:  # this window alone is over: wait for its end (and the next one's share)
        return window_s - elapsed + 1.0
    # the previous window's weight must fall until prev_hits * weight + hits <= limit
    needed = 1.0 - (limit - hits) / prev_hits
    return max(1.0, (needed - (elapsed / window_s)) * window_s)


async def hit(db: Db, key: str, limit: int, window_s: int) -> float:
    """Count one hit of `key`; 0.0 when it is within `limit` per `window_s` seconds, else seconds to wait."""
    now = db.clock().timestamp()
    start = int(now) - int(now) % window_s
    hits, prev_hits = await db.one(HIT, key, start, window_s)
    return wait_for(int(hits), int(prev_hits), now - start, limit, window_s)


async def hit_each(db: Db, hits: Sequence[tuple[str, int, int]]) -> float:
    """`hit` for each (key, limit, window_s) in order, in one transaction, stopping at the first that must wait
    (its wait; 0.0 when every one is within its limit): what the web checks before a message, in one round trip."""
    for key, limit, window_s in hits:
        wait = await hit(db, key, limit, window_s)
        if wait:
            return wait
    return 0.0


async def hit_all(db: Db, hits: Sequence[tuple[str, int, int]]) -> float:
    """hit_each in one statement: every hit counted at once, then the hits after the first that must wait taken
    back (UNHIT: a statement more, only then), so the counts end as hit_each leaves them. On Postgres, where each
    statement is a round trip, the web's three hits of a message cost one, not a transaction of five; it runs
    outside a transaction there: each statement is atomic, and between the two a concurrent hit may see a key's
    count one higher, only while a limit is refusing anyway. On SQLite it is one statement of the message's
    transaction instead of three (the three hits are ~5% of a web turn's instructions, bench/turn_instructions.py,
    nearly all of it the upserts themselves: one statement saves ~0.5%). Keys that repeat, or windows of different
    lengths, go through hit_each."""
    keys = [key for key, _, _ in hits]
    lengths = {window_s for _, _, window_s in hits}
    if len(lengths) != 1 or len(set(keys)) != len(keys):
        return await hit_each(db, hits)
    (window_s,) = lengths
    now = db.clock().timestamp()
    start = int(now) - int(now) % window_s
    counted = {key: (int(n), int(prev)) for key, n, prev in await db.all(HIT_ALL, db.ids(keys), start, window_s)}
    for i, (key, limit, _) in enumerate(hits):
        wait = wait_for(*counted[key], now - start, limit, window_s)
        if wait:
            if i + 1 < len(keys):
                await db.run(UNHIT, db.ids(keys[i + 1:]), start)
            return wait
    return 0.0


async def probe(db: Db) -> None:
    """The readiness probe: one write of one row."""
    await hit(db, PROBE_KEY, 1 << 30, 1)


async def purge(db: Db, older_than_s: int) -> int:
    """Delete the counters whose window began more than `older_than_s` seconds ago."""
    return await db.run(PURGE, int(db.clock().timestamp()) - older_than_s)
