"""Voice notes, audio and photos in the store, written once (migration 0035): the media row of a downloaded file, the
transcript that becomes its message's content, and the files the retention job or `hilo forget` deletes.

`transcribed` rewrites the person's message as if they had typed the transcript: its content, token count and
index terms (so search finds it: SQLite's FTS row by trigger, Postgres' generated column), its episode's terms
(recomputed from its messages), and no vector (the embed job embeds the new text). Every statement names the
person's user_id: nothing of one person is reachable through another's ids.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from memory import episodes
from memory.rows import Db
from memory.stems import index_terms

_INSERT = ("INSERT INTO media(user_id, message_id, surface, kind, mime, bytes, duration_s, path, transcriber, "
           "status, created_at) VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11) RETURNING id")
_REWRITE = ("UPDATE messages SET content = $1, token_count = $2, terms = $3 "
            "WHERE id = $4 AND user_id = $5 AND role = 'user' RETURNING episode_id")
_KEPT = "SELECT id, path FROM media WHERE path IS NOT NULL AND created_at < $1 ORDER BY created_at, id LIMIT $2"
MEDIA_KEYS = ("id", "message_id", "surface", "kind", "mime", "bytes", "duration_s", "path", "transcriber", "status",
              "created_at")


async def keep(db: Db, user_id: int, message_id: int, row: dict[str, Any]) -> int | None:
    """A media row of the person's message: `row` holds surface, kind, mime, bytes, duration_s, path,
    transcriber and status. Its id; None when the message is not the person's (forgotten meanwhile: the message
    is locked until the row is in, so a forget waits for it and deletes it too)."""
    if await db.value("SELECT id FROM messages WHERE id = $1 AND user_id = $2 FOR UPDATE", message_id,
                      user_id) is None:
        return None
    return await _insert(db, user_id, message_id, row)


async def _insert(db: Db, user_id: int, message_id: int, row: dict[str, Any]) -> int:
    return int(await db.value(
        _INSERT, user_id, message_id, row["surface"], row["kind"], row.get("mime"), row.get("bytes"),
        row.get("duration_s"), row.get("path"), row.get("transcriber"), row["status"], db.ts(db.clock())))


async def transcribed(db: Db, user_id: int, message_id: int, text: str, token_count: int, row: dict[str, Any],
                      ) -> int | None:
    """The transcript is now the message's content (and its media row says by whom): the media row's id, or None
    when the message is not the person's (forgotten meanwhile)."""
    if not await rewrite(db, user_id, message_id, text, token_count):
        return None
    return await _insert(db, user_id, message_id, row)  # the rewrite found (and locked) the person's message


async def rewrite(db: Db, user_id: int, message_id: int, text: str, token_count: int) -> bool:
    """The person's message now says `text` (a transcript, a photo's description): its token count, index terms,
    episode terms, and no stale vector. False when the message is not the person's (forgotten meanwhile)."""
    episode = await db.one(_REWRITE, text, token_count, index_terms(text), message_id, user_id)
    if episode is None:
        return False
    if episode[0] is not None:
        await episodes.refresh(db, {int(episode[0])})
    if db.vectors:  # a vector of the placeholder text: the embed job embeds the new text instead
        await db.run("DELETE FROM message_vectors WHERE message_id = $1 AND user_id = $2", message_id, user_id)
    return True


async def expired(db: Db, before: datetime, limit: int) -> list[tuple[int, str]]:
    """Files kept since before `before`, oldest first: (media id, path)."""
    return [(int(r[0]), str(r[1])) for r in await db.all(_KEPT, db.ts(before), limit)]


async def dropped(db: Db, media_ids: list[int]) -> int:
    """The files of these rows are deleted: their path is NULL (the row, its transcriber and size stay)."""
    return await db.run("UPDATE media SET path = NULL WHERE id = ANY($1::bigint[])", db.ids(media_ids))


async def paths_of(db: Db, handle: str) -> list[str]:
    """The person's kept files (before `hilo forget` deletes their rows)."""
    rows = await db.all("SELECT m.path FROM media m JOIN users u ON u.id = m.user_id "
                        "WHERE u.handle = $1 AND m.path IS NOT NULL", handle)
    return [str(r[0]) for r in rows]
