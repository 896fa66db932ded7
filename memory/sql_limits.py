"""Fixed-window counters in the database (migration 0026, table rate_counters): rate limits that every process
on one database shares, and the readiness probe's write. A hit is ONE statement: the key's row upserted, its
count going on within the window or starting again at 1 in a newer one, the count returned."""

from __future__ import annotations

from datetime import datetime

from memory.rows import Db

HIT = (
    "INSERT INTO rate_counters(key, window_start, hits) VALUES ($1, $2, 1) ON CONFLICT (key) DO UPDATE SET "
    "hits = CASE WHEN rate_counters.window_start = excluded.window_start THEN rate_counters.hits + 1 ELSE 1 END, "
    "window_start = excluded.window_start RETURNING hits"
)
#: The readiness probe's own counter (bot/health.py): its hit is the probe's one write.
PROBE_KEY = "probe"
PURGE = "DELETE FROM rate_counters WHERE window_start < $1"


def window_of(now: datetime, window_s: int) -> int:
    """The start (epoch seconds) of the window of `window_s` seconds that holds `now`."""
    epoch = int(now.timestamp())
    return epoch - epoch % window_s


async def hit(db: Db, key: str, window_s: int) -> tuple[int, float]:
    """Count one hit of `key`: (the hits in the current window, this one included; seconds until it ends)."""
    now = db.clock()
    start = window_of(now, window_s)
    hits = await db.value(HIT, key, start)
    return int(hits), max(0.0, start + window_s - now.timestamp())


async def purge(db: Db, older_than_s: int) -> int:
    """Delete the counters whose window began more than `older_than_s` seconds ago."""
    return await db.run(PURGE, int(db.clock().timestamp()) - older_than_s)
