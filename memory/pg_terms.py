"""Postgres recall: BM25 over the stored tsvector, so that Postgres ranks as SQLite's FTS5 does.

ts_rank knows no inverse document frequency: a common word counts as much as a rare one, which is what cost
Postgres recall against SQLite (docs/memory-benchmark.md). Here each matched row's score is FTS5's BM25 (k1 1.2,
b 0.75) with each term's frequency in the row taken as 1: for each query term t the row holds, idf(t) * (k1 + 1) /
(1 + k1 * (1 - b + b * dl / avgdl)), with dl the row's lexemes (the owner's token left out) and idf(t) =
ln((N - df + 0.5) / (df + 0.5)) (at least 1e-6), FTS5's formula. Each term is one lookup in the row's sorted
tsvector (`search @@ 'term'`): unnesting every matched row's lexemes to count positions cost 3 times as much at
100k messages (121 against 36 ms per question, bench/memory_bench.py's latency questions).

df and N come from the planner's statistics (pg_stats.most_common_elems of messages.search / episodes.search,
refreshed by ANALYZE: autovacuum, `hilo import`, the benchmark after seeding): catalog reads only, no scan of
messages; a word the statistics do not list is rarer than the rarest listed. Before any ANALYZE the terms are
counted through the GIN index instead, capped. avgdl is read from the newest rows. All of it is cached DF_TTL_S.
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Sequence
from typing import Any

K1, B = 1.2, 0.75
#: How long a term's frequency (and the mean row length) is trusted, seconds: it changes slowly, and a stale
#: one only shifts a weight.
DF_TTL_S = 600.0
DF_CACHE_MAX = 50_000
#: A count before any ANALYZE stops here (it is only a weight).
COUNT_CAP = 1000

#: $1 table, $2 terms: (analyzed, total rows, the smallest listed frequency, term, its frequency or NULL).
STATS_SQL = (
    "WITH s AS (SELECT greatest(c.reltuples, 0) AS total, st.attname IS NOT NULL AS analyzed, "
    "  st.most_common_elems::text::text[] AS elems, st.most_common_elem_freqs AS freqs "
    "  FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace "
    "  LEFT JOIN pg_stats st ON st.schemaname = n.nspname AND st.tablename = c.relname AND st.attname = 'search' "
    "  WHERE c.oid = $1::text::regclass) "
    "SELECT s.analyzed, s.total, coalesce(s.freqs[cardinality(s.elems) + 1], 0), w.term, "
    "  s.freqs[array_position(s.elems, w.term)] "
    "FROM s LEFT JOIN unnest($2::text[]) AS w(term) ON true"
)
#: Before any ANALYZE: each term's matches counted (capped), and the table's size (max(id)).
COUNT_SQL = (
    "WITH t AS (SELECT coalesce(max(id), 0) AS total FROM {table}) "
    "SELECT t.total, w.term, (SELECT count(*) FROM (SELECT 1 FROM {table} x "
    "  WHERE w.term IS NOT NULL AND x.search @@ to_tsquery('simple', quote_literal(w.term)) LIMIT $2) s) "
    "FROM t LEFT JOIN unnest($1::text[]) AS w(term) ON true"
)
#: The mean number of lexemes of the newest rows (the owner's token left out): one bounded read (the newest 1,000
#: by the primary key), cached like the frequencies.
AVGDL_SQL = ("SELECT coalesce(avg(length(x.search) - 1), 1) FROM (SELECT search FROM {table} "
             "ORDER BY id DESC LIMIT 1000) x")

#: The BM25 of one row against the query's terms ($1 terms, $2 their idf, $3 avgdl), each term's frequency taken
#: as 1 (short messages rarely repeat a word): idf(t) * (k1 + 1) / (1 + k1 * (1 - b + b * dl / avgdl)) summed over
#: the terms the row holds, each a lookup in its sorted tsvector (no unnest of the row's lexemes).
_BM25 = (
    "(SELECT sum(t.idf) FROM unnest($1::text[], $2::float8[]) AS t(term, idf) "
    "WHERE {alias}.search @@ t.term::tsquery) * {k1p1} / (1 + {k1} * ({one_b} + {b} * "
    "greatest(length({alias}.search) - 1, 1) / $3::float8))"
).format(k1p1=K1 + 1, k1=K1, one_b=1 - B, b=B, alias="{alias}")
#: A term the statistics count in at most RARE_DF rows brings every row of the person that holds it (the GIN index,
#: the owner's token ANDed in: at most RARE_DF rows per term, RARE_CAP in all); a commoner term is looked for
#: among the person's newest NEWEST rows only (messages; NEWEST_EPISODES episodes): issue 14, assembly flat in the
#: history's size. Every candidate is then scored against all the question's terms.
RARE_DF = 500
RARE_CAP = 4000
NEWEST = 1000
NEWEST_EPISODES = 200
#: The share of the rows the planner gives a word its statistics do not list (ts_selfuncs' DEFAULT_TS_MATCH_SEL).
UNLISTED = 0.005
#: The candidates: $4 tsquery text of the rare terms (NULL: none), $5 user, $11 of the common terms (NULL: none),
#: $12 how many of the newest rows; ordered by {at} on the person's (user_id, {at}) index.
_CANDIDATES = (
    "WITH rare AS (SELECT x.id FROM {table} x WHERE $4::text IS NOT NULL "
    "AND x.search @@ (to_tsquery('simple', $4) && quote_literal('_u' || $5::bigint::text)::tsquery) "
    "AND x.user_id = $5 LIMIT " + str(RARE_CAP) + "), "
    "newest AS (SELECT x.id, x.search FROM {table} x WHERE $11::text IS NOT NULL AND x.user_id = $5 "
    "ORDER BY x.{at} DESC LIMIT $12), "
    "cand AS (SELECT id FROM rare UNION SELECT n.id FROM newest n WHERE n.search @@ to_tsquery('simple', $11)) "
)
#: $1..$3 as _BM25, $4 and $11, $12 as _CANDIDATES, $5 user, $6 at, $7 excluded ids, $8 current message, $9 its
#: conversation, $10 limit.
LEXICAL = (
    _CANDIDATES.format(table="messages", at="created_at")
    + "SELECT m.id, " + _BM25.format(alias="m") + " AS score FROM messages m "
    "WHERE m.id IN (SELECT id FROM cand) "
    "AND m.user_id = $5 AND m.created_at <= $6 AND m.id <> ALL($7::bigint[]) "
    "AND ($8::bigint IS NULL OR NOT (m.conversation_id IS NOT DISTINCT FROM $9::bigint "
    "AND m.role = 'user' AND m.id > $8)) "
    "ORDER BY score DESC, m.id DESC LIMIT $10"
)
#: $1..$3 as _BM25, $4 and $11, $12 as _CANDIDATES, $5 user, $6 at, $7 limit.
EPISODES = (
    _CANDIDATES.replace("$11", "$8").replace("$12", "$9").format(table="episodes", at="started_at")
    + "SELECT e.id, " + _BM25.format(alias="e") + " AS score FROM episodes e "
    "WHERE e.id IN (SELECT id FROM cand) AND e.user_id = $5 AND e.started_at <= $6 "
    "ORDER BY score DESC, e.id DESC LIMIT $7"
)


def split(terms: Sequence[str], rare: Sequence[bool]) -> tuple[str | None, str | None]:
    """(the tsquery text of the rare terms, of the common ones)."""
    return (tsquery_text([t for t, r in zip(terms, rare, strict=True) if r]),
            tsquery_text([t for t, r in zip(terms, rare, strict=True) if not r]))


def tsquery_text(words: Sequence[str]) -> str | None:
    """A to_tsquery('simple', ...) text OR-ing the words, each quoted; None when there is nothing to search.

    Words are index terms (memory/stems.py: runs of letters and digits), so a quoted word holds no quote or
    backslash and nothing the person typed is read as tsquery syntax (no '&', '!', '<->', ':*').
    """
    if not words:
        return None
    return " | ".join("'" + w.replace("'", "''").replace("\\", "\\\\") + "'" for w in words)


def idf(df: float, total: float) -> float:
    """FTS5's inverse document frequency (its floor when `df` is most of the rows, or more than there are)."""
    ratio = (total - df + 0.5) / (df + 0.5)
    return max(1e-6, math.log(ratio)) if total > 0 and ratio > 0 else 1e-6


async def weights(db: Any, table: str, terms: list[str]) -> tuple[list[float], float]:
    """(each term's idf, the table's mean row length), from the cache or the statistics."""
    idfs, avgdl, _ = await stats(db, table, terms)
    return idfs, avgdl


async def stats(db: Any, table: str, terms: list[str]) -> tuple[list[float], float, list[bool]]:
    """(each term's idf, the table's mean row length, whether each term is rare: counted in at most RARE_DF rows,
    or not listed by the statistics at all), from the cache or the statistics."""
    cache: dict[tuple[str, str], tuple[float, float]] = db.df_cache
    now = time.monotonic()
    if len(cache) > DF_CACHE_MAX:
        cache.clear()
    # (table, term) -> (idf, expiry); (table, "~" + term) -> (1.0 when rare, expiry); (table, "") -> avgdl
    keys = [*terms, *("~" + t for t in terms), ""]
    known = {t: hit[0] for t in keys if (hit := cache.get((table, t))) is not None and hit[1] > now}
    missing = [t for t in terms if t not in known or "~" + t not in known]
    if missing:
        rows = await db.all(STATS_SQL, table, missing)
        total = float(rows[0][1])
        if rows[0][0]:  # analyzed
            # an unlisted word: as the planner guesses it (at most 0.5% of the rows), never above the rarest listed
            floor = min(float(rows[0][2]), UNLISTED) * total
            found = {term: (max(1.0, float(share) * total if share is not None else floor), share is None)
                     for *_, term, share in rows if term is not None}
        else:
            rows = await db.all(COUNT_SQL.format(table=table), missing, COUNT_CAP)
            total = float(rows[0][0])
            found = {term: (float(n), False) for _, term, n in rows if term is not None}
        for term, (df, unlisted) in found.items():
            known[term] = idf(df, total)
            known["~" + term] = float(unlisted or df <= RARE_DF)
            cache[(table, term)] = (known[term], now + DF_TTL_S)
            cache[(table, "~" + term)] = (known["~" + term], now + DF_TTL_S)
    if "" not in known:
        known[""] = max(1.0, float(await db.value(AVGDL_SQL.format(table=table))))
        cache[(table, "")] = (known[""], now + DF_TTL_S)
    return [known[t] for t in terms], known[""], [known["~" + t] > 0 for t in terms]


async def stale(db: Any, imported: int) -> bool:
    """Whether the statistics of messages need an ANALYZE after `imported` new messages: there are none yet, or
    the imports doubled the table since the planner last counted it (a big import: a few ANALYZEs, the last one
    over at least half of what it brought)."""
    row = await db.one(
        "SELECT greatest(c.reltuples, 0), EXISTS (SELECT 1 FROM pg_stats st JOIN pg_namespace n "
        "ON n.nspname = st.schemaname WHERE n.oid = c.relnamespace AND st.tablename = 'messages' "
        "AND st.attname = 'search') FROM pg_class c WHERE c.oid = 'messages'::regclass")
    return not row[1] or imported >= row[0]


def _shifted(sql: str, by: int) -> str:
    return re.sub(r"\$(\d+)", lambda m: f"${int(m[1]) + by}", sql)


#: LEXICAL's rows (0, id, score) and EPISODES' (1, id, score) in one statement: one round trip, not two (issue 14:
#: a turn in at most 8 on the wire). $1..$12 as LEXICAL, $13..$21 as EPISODES' $1..$9.
HITS = (f"SELECT 0, * FROM ({LEXICAL}) AS lexical "
        f"UNION ALL SELECT 1, * FROM ({_shifted(EPISODES, 12)}) AS episode_hits")

