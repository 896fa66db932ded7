"""The admin page's read-outs (surfaces/admin.py through bot/admin.py), written once for both dialects: people a page
at a time, one person, a page of a conversation's messages, and costs from model_calls.cost_usd and the caps'
spend_counters. JSON-ready: timestamps as fixed-width UTC text on both dialects. Every query of a person's rows
names their user_id: one person's rows never answer for another's."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from kernel.errors import NotFound
from memory.rows import MSG_COLS, Db, to_message
from memory.sql_people import jsonable
from memory.store import StoredMessage

#: last seen: the person's newest own message (a reply of hilo's is not them being seen)
_LAST_SEEN = "(SELECT max(m.created_at) FROM messages m WHERE m.user_id = u.id AND m.role = 'user')"
_COST = "(SELECT coalesce(sum(c.cost_usd), 0) FROM model_calls c WHERE c.user_id = u.id)"
PEOPLE = (f"SELECT u.id, u.handle, u.created_at, {_LAST_SEEN} AS last_seen, "
          "(SELECT count(*) FROM messages m WHERE m.user_id = u.id), "
          "(SELECT count(*) FROM memories r WHERE r.user_id = u.id AND r.ended_at IS NULL), "
          f"{_COST} FROM users u ORDER BY last_seen DESC NULLS LAST, u.id DESC LIMIT $1 OFFSET $2")
PERSON = PEOPLE.replace("ORDER BY", "WHERE u.id = $3 ORDER BY")
IDENTITIES = ("SELECT user_id, surface, external_user_id, created_at, opted_out_at FROM identities "
              "WHERE user_id = ANY($1::bigint[]) ORDER BY id")
_SUMS = ("SELECT count(*), coalesce(sum(cost_usd), 0), coalesce(sum(tokens_in), 0), coalesce(sum(tokens_out), 0) "
         "FROM model_calls WHERE created_at >= $1")
#: who spent most (all time), a page at a time
TOP = ("SELECT u.id, u.handle, sum(c.cost_usd) AS usd, count(*) FROM model_calls c JOIN users u ON u.id = c.user_id "
       "GROUP BY u.id, u.handle ORDER BY usd DESC, u.id LIMIT $1 OFFSET $2")
COUNTERS = ("SELECT scope, window_start, spent_usd FROM spend_counters WHERE user_id IS NOT DISTINCT FROM $1 "
            "ORDER BY window_start DESC, scope LIMIT 12")


def _person(row: Any, identities: list[dict[str, Any]]) -> dict[str, Any]:
    return {"id": row[0], "handle": row[1], "created_at": jsonable(row[2]), "last_seen": jsonable(row[3]),
            "messages": int(row[4]), "memories": int(row[5]), "cost_usd": round(float(row[6]), 6),
            "identities": identities}


async def _identities(db: Db, user_ids: list[int]) -> dict[int, list[dict[str, Any]]]:
    found: dict[int, list[dict[str, Any]]] = {uid: [] for uid in user_ids}
    for r in await db.all(IDENTITIES, db.ids(user_ids)) if user_ids else []:
        found[r[0]].append({"surface": r[1], "external_user_id": r[2], "created_at": jsonable(r[3]),
                            "opted_out": r[4] is not None})
    return found


async def people(db: Db, offset: int, limit: int) -> tuple[int, list[dict[str, Any]]]:
    """How many people there are, and `limit` of them from `offset`, the most recently seen first."""
    total = int(await db.value("SELECT count(*) FROM users"))
    rows = await db.all(PEOPLE, limit, offset)
    ids = await _identities(db, [r[0] for r in rows])
    return total, [_person(r, ids[r[0]]) for r in rows]


async def person(db: Db, user_id: int) -> dict[str, Any] | None:
    """One person as `people` shows them, or None."""
    row = await db.one(PERSON, 1, 0, user_id)
    return None if row is None else _person(row, (await _identities(db, [user_id]))[user_id])


async def messages_page(db: Db, user_id: int, conversation_id: int, before: int | None,
                        limit: int) -> list[StoredMessage]:
    """At most `limit` messages of one of the person's conversations older than message `before` (None: the
    newest), oldest first. NotFound when the conversation is not theirs."""
    if await db.one("SELECT 1 FROM conversations WHERE id = $1 AND user_id = $2", conversation_id, user_id) is None:
        raise NotFound(f"conversation {conversation_id}")
    rows = await db.all(f"SELECT {MSG_COLS} FROM messages m WHERE m.conversation_id = $1 AND m.user_id = $2 "
                        "AND m.id < $3 ORDER BY m.id DESC LIMIT $4", conversation_id, user_id,
                        before if before is not None else 2**62, limit)
    return [to_message(r) for r in reversed(rows)]


async def _sums(db: Db, since: datetime, user_id: int | None) -> dict[str, Any]:
    sql, args = _SUMS, [db.ts(since)]
    if user_id is not None:
        sql, args = sql + " AND user_id = $2", [*args, user_id]
    n, usd, t_in, t_out = await db.one(sql, *args)
    return {"calls": int(n), "cost_usd": round(float(usd), 6), "tokens_in": int(t_in), "tokens_out": int(t_out)}


async def costs(db: Db, user_id: int | None, day: datetime, month: datetime) -> dict[str, Any]:
    """Model calls' count, cost and tokens today, this month and in all, for the person (None: everyone), and the
    caps' newest spend windows of theirs (global ones for None: spend_counters rows with no user)."""
    counters = await db.all(COUNTERS, user_id)
    return {"today": await _sums(db, day, user_id), "month": await _sums(db, month, user_id),
            "all": await _sums(db, datetime(1970, 1, 1, tzinfo=day.tzinfo), user_id),
            "windows": [{"scope": r[0], "start": r[1], "spent_usd": round(float(r[2]), 6)} for r in counters]}


async def top_spenders(db: Db, offset: int, limit: int) -> list[dict[str, Any]]:
    """People by what their model calls cost in all, most first."""
    return [{"id": r[0], "handle": r[1], "cost_usd": round(float(r[2]), 6), "calls": int(r[3])}
            for r in await db.all(TOP, limit, offset)]
