"""Postgres recall's term statistics: which search terms are worth a full-text query, at no scan of messages."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from memory.search_terms import selective

#: The planner's statistics of the messages' tsvector (pg_stats, refreshed by ANALYZE: autovacuum in production,
#: `hilo import`, the benchmark after seeding): the table's row estimate, the smallest listed lexeme frequency (a
#: word absent from most_common_elems is rarer than that), and each term's listed frequency (NULL when absent).
#: Catalog reads only: no scan of messages. No row of pg_stats (never analyzed, or empty when analyzed):
#: `analyzed` is false and the terms are counted instead (COUNT_SQL).
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


def tsquery_text(words: Sequence[str]) -> str | None:
    """A to_tsquery('simple', ...) text OR-ing the words, each quoted; None when there is nothing to search.

    Words come from memory.search_terms (runs of letters and digits), so a quoted word holds no quote or
    backslash and nothing the person typed is read as tsquery syntax (no '&', '!', '<->', ':*').
    """
    if not words:
        return None
    return " | ".join("'" + w.replace("'", "''").replace("\\", "\\\\") + "'" for w in words)


async def selective_terms(db: Any, text: str) -> list[str]:
    """memory.search_terms.selective over the planner's estimates (STATS_SQL: no scan); a word the statistics
    do not list counts as the smallest listed frequency (at least one message), so it is kept. Until the table
    is first analyzed they are counted (COUNT_SQL), and then a term no message holds is dropped."""

    async def lookup(missing: list[str]) -> tuple[dict[str, float], float]:
        rows = await db.all(STATS_SQL, missing)
        if rows[0][0]:  # analyzed
            total, floor = float(rows[0][1]), float(rows[0][2]) * float(rows[0][1])
            return {term: max(1.0, float(share) * total if share is not None else floor)
                    for *_, term, share in rows if term is not None}, total
        rows = await db.all(COUNT_SQL, missing)
        return {term: float(doc) for _, term, doc in rows if term is not None and doc}, float(rows[0][0])

    return await selective(text, db.df_cache, lookup)


async def stale(db: Any, imported: int) -> bool:
    """Whether the statistics of messages need an ANALYZE after `imported` new messages: there are none yet, or
    the imports doubled the table since the planner last counted it (a big import: a few ANALYZEs, the last one
    over at least half of what it brought)."""
    row = await db.one(
        "SELECT greatest(c.reltuples, 0), EXISTS (SELECT 1 FROM pg_stats st JOIN pg_namespace n "
        "ON n.nspname = st.schemaname WHERE n.oid = c.relnamespace AND st.tablename = 'messages' "
        "AND st.attname = 'search') FROM pg_class c WHERE c.oid = 'messages'::regclass")
    return not row[1] or imported >= row[0]
