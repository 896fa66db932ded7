"""Episode summaries written by the model (bot/summary_job.py): which episodes wait for one, their messages, the
summary kept, the read-out, and dropping them. Messages are never touched: a summary only adds to its episode row.

An episode (memory/episodes.py, migration 0013) waits for a summary once it has ended (no message for
episodes.GAP: it cannot grow any more), has at least `min_messages` messages and was never summarized
(`summary_at` IS NULL). Keeping a summary sets `summary`, `summary_model` and `summary_at`; an episode the model
could give no usable summary of is passed over with `summary_at` set and no summary. Dropping a person's summaries
(`hilo summaries --drop`) clears `summary` and `summary_model` and keeps `summary_at`, so they are not written
again. Forgetting the person deletes the episodes with them (ON DELETE CASCADE).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from memory.episodes import GAP
from memory.rows import MSG_COLS, Db, to_message, to_ts
from memory.store import StoredMessage


@dataclass(frozen=True, slots=True)
class EpisodeDue:
    """An episode waiting for its summary, and whose it is."""

    id: int
    user_id: int


SUMMARY_KEYS = ("id", "conversation_id", "surface", "started_at", "ended_at", "message_count", "summary",
                "summary_model", "summary_at")
_DUE = ("SELECT id, user_id FROM episodes WHERE summary_at IS NULL AND message_count >= $1 AND ended_at < $2 "
        "ORDER BY ended_at, id LIMIT $3")
_MESSAGES = f"SELECT {MSG_COLS} FROM messages m WHERE m.episode_id = $1 ORDER BY m.created_at, m.id LIMIT $2"
_KEEP = "UPDATE episodes SET summary = $2, summary_model = $3, summary_at = $4 WHERE id = $1 AND summary_at IS NULL"
_DROP = "UPDATE episodes SET summary = NULL, summary_model = NULL WHERE user_id = $1 AND summary IS NOT NULL"
_LISTED = (f"SELECT {', '.join(SUMMARY_KEYS)} FROM episodes WHERE user_id = $1 AND summary IS NOT NULL "
           "ORDER BY started_at, id")


async def due(db: Db, min_messages: int, limit: int) -> list[EpisodeDue]:
    """Up to `limit` ended episodes of at least `min_messages` never summarized, those that ended first first."""
    rows = await db.all(_DUE, min_messages, db.ts(db.clock() - GAP), limit)
    return [EpisodeDue(int(r[0]), int(r[1])) for r in rows]


async def messages(db: Db, episode_id: int, limit: int) -> list[StoredMessage]:
    """The episode's messages, oldest first, at most `limit`."""
    return [to_message(r) for r in await db.all(_MESSAGES, episode_id, limit)]


async def keep(db: Db, episode_id: int, summary: str | None, model: str) -> bool:
    """Keep the episode's summary (None: passed over); False when it had one already (or was passed over)."""
    return bool(await db.run(_KEEP, episode_id, summary, model if summary is not None else None,
                             db.ts(db.clock())))


async def drop(db: Db, user_id: int) -> int:
    """Clear the person's summaries (they are not written again); how many there were."""
    return await db.run(_DROP, user_id)


async def listed(db: Db, user_id: int) -> list[dict[str, Any]]:
    """The person's summaries, oldest episode first, JSON-ready (`hilo inspect`, `hilo summaries`)."""
    rows = await db.all(_LISTED, user_id)
    return [{k: to_ts(v) if isinstance(v, datetime) else v for k, v in zip(SUMMARY_KEYS, r, strict=True)}
            for r in rows]
