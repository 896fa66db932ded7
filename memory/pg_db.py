"""What the Postgres queries stand on: a counting connection wrapper, row conversion, search queries.

Timestamps are timestamptz: Python passes and gets aware datetimes (asyncpg hands them back in UTC), and JSON
read-outs render them as SQLite stores them ('YYYY-MM-DDTHH:MM:SS.ffffffZ', `to_ts`), so `hilo inspect --json`
prints the same text on both backends.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from memory.search_terms import search_terms
from memory.sqlite_db import COMMON_TERM_SHARE, DF_CACHE_MAX, DF_TTL_S, MAX_SEARCHED_TERMS, load_metadata, to_ts
from memory.store import Fact, StoredMessage

#: The columns of a message, in the order `to_message` reads them (alias `m`).
MSG_COLS = (
    "m.id, m.conversation_id, m.user_id, m.surface, m.role, m.content, m.token_count, m.external_id, "
    "m.created_at, m.metadata::text, m.reply_to"
)
FACT_COLS = "id, user_id, content, token_count, created_at"


class PgDb:
    """An asyncpg connection (inside the store's transaction) as the queries see it. Every statement is
    counted in `counters["statements"]`; an executemany counts once (one batched call)."""

    def __init__(self, conn: Any, counters: dict[str, int], df_cache: dict[str, tuple[float, float]]) -> None:
        self.conn = conn
        self.counters = counters
        #: term -> (matching messages: estimated, or counted and capped; monotonic expiry): see selective_terms
        self.df_cache = df_cache

    async def all(self, sql: str, *args: Any) -> list[Any]:
        self.counters["statements"] += 1
        return list(await self.conn.fetch(sql, *args))

    async def one(self, sql: str, *args: Any) -> Any:
        self.counters["statements"] += 1
        return await self.conn.fetchrow(sql, *args)

    async def value(self, sql: str, *args: Any) -> Any:
        self.counters["statements"] += 1
        return await self.conn.fetchval(sql, *args)

    async def run(self, sql: str, *args: Any) -> int:
        """Execute a statement without result rows; return the number of rows it changed."""
        self.counters["statements"] += 1
        return rowcount(await self.conn.execute(sql, *args))

    async def many(self, sql: str, rows: Iterable[Sequence[Any]]) -> None:
        self.counters["statements"] += 1
        await self.conn.executemany(sql, rows)


def rowcount(status: str) -> int:
    """The row count of a command status ("INSERT 0 3", "UPDATE 2", "DELETE 0"); 0 when there is none."""
    last = status.rsplit(" ", 1)[-1]
    return int(last) if last.isdigit() else 0


def aware(moment: datetime) -> datetime:
    """A datetime as stored: naive datetimes are taken as UTC (as memory.sqlite_db.to_ts does)."""
    return moment.replace(tzinfo=UTC) if moment.tzinfo is None else moment


def to_message(row: Sequence[Any]) -> StoredMessage:
    """A row selected with MSG_COLS."""
    return StoredMessage(
        id=row[0], conversation_id=row[1], user_id=row[2], surface=row[3], role=row[4], content=row[5],
        token_count=row[6], external_id=row[7], created_at=row[8],
        metadata=load_metadata(row[9]), reply_to=row[10],
    )


def to_fact(row: Sequence[Any]) -> Fact:
    """A row selected with FACT_COLS."""
    return Fact(id=row[0], user_id=row[1], content=row[2], token_count=row[3], created_at=row[4])


def jsonable(value: Any) -> Any:
    """A column value as the SQLite read-outs show it: timestamps as fixed-width UTC text."""
    return to_ts(value) if isinstance(value, datetime) else value


def record_json(keys: Sequence[str], row: Sequence[Any]) -> dict[str, Any]:
    return {k: jsonable(v) for k, v in zip(keys, row, strict=True)}


def tsquery_text(words: Sequence[str]) -> str | None:
    """A to_tsquery('simple', ...) text OR-ing the words, each quoted; None when there is nothing to search.

    Words come from memory.search_terms (runs of letters and digits), so a quoted word holds no quote or
    backslash and nothing the person typed is read as tsquery syntax (no '&', '!', '<->', ':*').
    """
    if not words:
        return None
    return " | ".join("'" + w.replace("'", "''").replace("\\", "\\\\") + "'" for w in words)


#: The planner's statistics of the messages' tsvector (pg_stats, refreshed by ANALYZE: autovacuum in production,
#: the benchmark after seeding): the table's row estimate, the smallest listed lexeme frequency (a word absent
#: from most_common_elems is rarer than that), and each term's listed frequency (NULL when absent). Catalog
#: reads only: no scan of messages. No row of pg_stats (never analyzed, or empty when analyzed): `analyzed` is
#: false and the terms are counted instead (COUNT_SQL).
STATS_SQL = (
    "WITH s AS (SELECT greatest(c.reltuples, 0) AS total, st.attname IS NOT NULL AS analyzed, "
    "  st.most_common_elems::text::text[] AS elems, st.most_common_elem_freqs AS freqs "
    "  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "  LEFT JOIN pg_stats st ON st.schemaname = n.nspname AND st.tablename = c.relname AND st.attname = 'search' "
    "  WHERE c.oid = 'messages'::regclass) "
    "SELECT s.analyzed, s.total, coalesce(s.freqs[cardinality(s.elems) + 1], 0), w.term, "
    "  s.freqs[array_position(s.elems, w.term)] "
    "FROM s LEFT JOIN unnest($1::text[]) AS w(term) ON true"
)

#: Before any ANALYZE: the matches of each term, counted through the GIN index and capped just past the "too
#: common" limit (the count is only compared with that limit, and a capped count costs at most limit+1 index
#: entries), plus the size of the table (max(id), one index probe), in one statement.
COUNT_SQL = (
    "WITH t AS (SELECT coalesce(max(id), 0) AS total FROM messages) "
    "SELECT t.total, w.term, (SELECT count(*) FROM (SELECT 1 FROM messages m "
    "  WHERE w.term IS NOT NULL AND m.search @@ to_tsquery('simple', quote_literal(w.term)) "
    "  LIMIT greatest(50, t.total / 20) + 1) s) "
    "FROM t LEFT JOIN unnest($1::text[]) AS w(term) ON true"
)


async def selective_terms(db: PgDb, text: str) -> list[str]:
    """The search terms of `text` worth a lexical search, rarest first (memory.sqlite_db.selective_terms on
    Postgres): terms in more than COMMON_TERM_SHARE of the messages (at least 50) are dropped, at most
    MAX_SEARCHED_TERMS are kept.

    Frequencies are the planner's estimates (STATS_SQL: no scan), cached in `db.df_cache` for DF_TTL_S; a word
    the statistics do not list counts as the smallest listed frequency (at least one message), so it is kept.
    Until the table is first analyzed they are counted (COUNT_SQL), and then a term no message holds is dropped
    (and not cached, so a new word is found at once)."""
    words = search_terms(text)
    if not words:
        return []
    now = time.monotonic()
    cache = db.df_cache
    freq = {w: hit[0] for w in words if (hit := cache.get(w)) is not None and hit[1] > now}
    missing = [w for w in words if w not in freq]
    if len(cache) > DF_CACHE_MAX:
        cache.clear()
    rows = await db.all(STATS_SQL, missing)
    analyzed, total = bool(rows[0][0]), float(rows[0][1])
    if analyzed:
        floor = float(rows[0][2]) * total
        for *_, term, share in rows:
            if term is not None:
                freq[term] = max(1.0, float(share) * total if share is not None else floor)
                cache[term] = (freq[term], now + DF_TTL_S)
    else:
        rows = await db.all(COUNT_SQL, missing)
        total = float(rows[0][0]) if rows else 0.0
        for _, term, doc in rows:
            if term is not None:
                freq[term] = float(doc)
                if doc:
                    cache[term] = (float(doc), now + DF_TTL_S)
    limit = max(50.0, total * COMMON_TERM_SHARE)
    kept = sorted((w for w in words if 0 < freq.get(w, 0) <= limit), key=lambda w: freq[w])
    return kept[:MAX_SEARCHED_TERMS]
