"""Alert marks (migration 0028, table alert_marks): one alert per kind per interval, whatever process sends it.

Taking a kind's turn is ONE upsert: the kind's row is written with now only where its last alert is at least the
interval old (or there is none), and RETURNING says whether this process won the turn. On Postgres two processes
taking it at once serialize on the row; the second sees the first's fresh mark and gets nothing back."""

from __future__ import annotations

from datetime import timedelta

from memory.rows import Db

#: $1 kind, $2 now, $3 now - interval
TAKE = ("INSERT INTO alert_marks(kind, sent_at) VALUES ($1, $2) ON CONFLICT (kind) DO UPDATE "
        "SET sent_at = excluded.sent_at WHERE alert_marks.sent_at <= $3 RETURNING kind")


async def take(db: Db, kind: str, interval: timedelta) -> bool:
    """True when an alert of `kind` may be sent now (and the mark is taken), False within the interval."""
    now = db.clock()
    return await db.one(TAKE, kind, db.ts(now), db.ts(now - interval)) is not None
