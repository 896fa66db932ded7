"""The retention policy's deletions, written once (the `retention` job, bot/retention.py, runs them): a surface's
messages older than a cut-off, a batch per transaction, oldest first, with what is derived from them. Their
vectors, deliveries and model calls go by ON DELETE CASCADE, their search terms with them (SQLite's FTS rows by
trigger, Postgres' a column of the row); an episode left without messages goes too (its text and summary were
theirs), and the title of a conversation they were in (its first message's words). Memories stay: they are
what the person or the model chose to keep, each with its own expiry. Each
batch that deleted something is a `retention_runs` row (migration 0030) with its counts; nobody is named."""

from __future__ import annotations

from datetime import timedelta

from memory.rows import Db

_OLDEST = ("SELECT id, episode_id, conversation_id FROM messages WHERE surface = $1 AND created_at < $2 "
           "ORDER BY created_at, id LIMIT $3")
_VECTORS = "SELECT count(*) FROM message_vectors WHERE message_id = ANY($1::bigint[])"
_EMPTY_EPISODES = ("DELETE FROM episodes WHERE id = ANY($1::bigint[]) "
                   "AND NOT EXISTS (SELECT 1 FROM messages m WHERE m.episode_id = episodes.id)")
_RECORD = ("INSERT INTO retention_runs(ran_at, surface, days, messages, vectors, episodes) "
           "VALUES ($1, $2, $3, $4, $5, $6)")


async def purge(db: Db, surface: str, days: int, batch: int) -> tuple[int, int, int]:
    """Delete up to `batch` of the surface's messages older than `days`: (messages, vectors, episodes)."""
    rows = await db.all(_OLDEST, surface, db.ts(db.clock() - timedelta(days=days)), batch)
    if not rows:
        return 0, 0, 0
    ids = db.ids([r[0] for r in rows])
    vectors = int(await db.value(_VECTORS, ids)) if db.vectors else 0
    messages = await db.run("DELETE FROM messages WHERE id = ANY($1::bigint[])", ids)
    touched = sorted({r[1] for r in rows if r[1] is not None})
    episodes = await db.run(_EMPTY_EPISODES, db.ids(touched)) if touched else 0
    # a conversation's title is its first message's words: it goes with the oldest messages
    await db.run("UPDATE conversations SET title = NULL WHERE id = ANY($1::bigint[]) AND title IS NOT NULL",
                 db.ids(sorted({r[2] for r in rows})))
    await db.run(_RECORD, db.ts(db.clock()), surface, days, messages, vectors, episodes)
    return messages, vectors, episodes


async def runs(db: Db, limit: int) -> list[dict[str, object]]:
    """The latest `retention_runs` rows, newest first (what `hilo stats` reads)."""
    keys = ("ran_at", "surface", "days", "messages", "vectors", "episodes")
    rows = await db.all(f"SELECT {', '.join(keys)} FROM retention_runs ORDER BY id DESC LIMIT $1", limit)
    return [dict(zip(keys, r, strict=True)) for r in rows]
