"""Episodes: one conversation's run of messages with no gap over GAP, written once for both dialects.

An episode row (migration 0013) holds its span, its message and token counts and the index terms of all its
messages (memory/stems.py), which lexical recall scores as one document (memory/retrieval.py). A message gets
its episode when it is stored, in the same transaction:
- a live message or reply (`join`): one statement, an upsert on the conversation's latest episode if it ended
  at most GAP before, else a new one;
- a bulk import or the reindex of old rows (`assign` then `refresh`): runs found in Python, new episodes
  inserted, then the touched episodes' counts, span and terms recomputed from their messages (so rows an
  import skipped as already stored count once).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from memory.rows import Db, as_dt

#: The longest silence inside one episode.
GAP = timedelta(hours=1)

#: $1 conversation, $2 user, $3 surface, $4 the message's time minus GAP, $5 its time, $6 tokens, $7 terms.
#: The id is the conversation's latest episode that ended since $4 (its row updated), else a new one (SQLite
#: spells the nextval NULL: the AUTOINCREMENT key).
JOIN = (
    "INSERT INTO episodes(id, user_id, conversation_id, surface, started_at, ended_at, message_count, token_count, "
    "terms) VALUES (coalesce((SELECT e.id FROM episodes e WHERE e.conversation_id = $1 AND e.ended_at >= $4 "
    "ORDER BY e.ended_at DESC, e.id DESC LIMIT 1), nextval(pg_get_serial_sequence('episodes', 'id'))), "
    "$2, $1, $3, $5, $5, 1, $6, $7) "
    "ON CONFLICT (id) DO UPDATE SET ended_at = greatest(episodes.ended_at, excluded.ended_at), "
    "started_at = least(episodes.started_at, excluded.started_at), "
    "message_count = episodes.message_count + 1, token_count = episodes.token_count + excluded.token_count, "
    "terms = CASE WHEN excluded.terms = '' THEN episodes.terms WHEN episodes.terms = '' THEN excluded.terms "
    "ELSE episodes.terms || ' ' || excluded.terms END RETURNING id"
)
_LATEST = ("SELECT e.conversation_id, e.id, e.ended_at FROM episodes e WHERE e.id IN (SELECT max(x.id) "
           "FROM episodes x WHERE x.conversation_id = ANY($1::bigint[]) GROUP BY x.conversation_id)")
_NEW = ("INSERT INTO episodes(user_id, conversation_id, surface, started_at, ended_at, message_count, token_count) "
        "VALUES ($1, $2, $3, $4, $4, 0, 0) RETURNING id")
_REFRESH = (
    "UPDATE episodes SET message_count = s.n, token_count = s.tokens, started_at = s.first, ended_at = s.last, "
    "terms = s.terms FROM (SELECT m.episode_id, count(*) AS n, sum(m.token_count) AS tokens, "
    "min(m.created_at) AS first, max(m.created_at) AS last, "
    "coalesce(string_agg(nullif(m.terms, ''), ' '), '') AS terms "
    "FROM messages m WHERE m.episode_id = ANY($1::bigint[]) GROUP BY m.episode_id) s WHERE episodes.id = s.episode_id"
)
_EMPTY = "DELETE FROM episodes WHERE id = ANY($1::bigint[]) AND message_count = 0"


async def join(db: Db, user_id: int, conversation_id: int, surface: str, at: datetime, tokens: int,
               terms: str) -> int:
    """The episode of a message stored now at `at` (one statement: see JOIN)."""
    return int(await db.value(JOIN, conversation_id, user_id, surface, db.ts(at - GAP), db.ts(at), tokens, terms))


@dataclass(frozen=True, slots=True)
class Placed:
    """A message to place in an episode: its conversation, owner, surface and time."""

    conversation_id: int
    user_id: int
    surface: str
    at: datetime


async def assign(db: Db, items: Sequence[Placed]) -> tuple[list[int], set[int]]:
    """(the episode of each item, in order; every episode touched). New episodes are inserted empty: call
    `refresh` once the messages carry their episode ids."""
    conversations = sorted({i.conversation_id for i in items})
    latest: dict[int, tuple[int, datetime]] = {}
    if conversations:
        for conv, eid, ended in await db.all(_LATEST, db.ids(conversations)):
            latest[int(conv)] = (int(eid), as_dt(ended))
    order = sorted(range(len(items)), key=lambda k: (items[k].conversation_id, items[k].at, k))
    out: list[int] = [0] * len(items)
    touched: set[int] = set()
    current: dict[int, tuple[int, datetime]] = {}
    for k in order:
        item = items[k]
        run = current.get(item.conversation_id) or latest.get(item.conversation_id)
        if run is None or item.at - run[1] > GAP or item.at < run[1] - GAP:
            eid = int(await db.value(_NEW, item.user_id, item.conversation_id, item.surface, db.ts(item.at)))
            run = (eid, item.at)
        run = (run[0], max(run[1], item.at))
        current[item.conversation_id] = run
        out[k] = run[0]
        touched.add(run[0])
    return out, touched


async def refresh(db: Db, episode_ids: set[int]) -> None:
    """Recompute the episodes' counts, span and terms from their messages; drop those left empty."""
    if episode_ids:
        ids: Any = db.ids(sorted(episode_ids))
        await db.run(_REFRESH, ids)
        await db.run(_EMPTY, ids)
