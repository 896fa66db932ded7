"""SQLite recall: FTS5 finds a bounded set of candidates, BM25 is computed over those only.

FTS5's own `bm25()` cost grew with the person's history twice over (issue 14: 5.7, 8.6, 30.8, 73.0 ms of context
assembly at 1k, 10k, 100k, 300k messages): the OR of the question's terms matched every message holding one of
its common words, each was scored (a docsize read) and sorted; and bm25() counts, per statement, every row
holding each phrase of the query (its IDF), the owner token's phrase included: all of the person's rows.

Here, per index term, FTS5 walks that term's postings among the person's rows newest first and stops at
`per_term(table, n)` (ORDER BY rowid DESC LIMIT: a lazy merge of two doclists, no row read): a rare term brings all of
its messages, a common one its newest. The union is scored in SQL over the candidates' stored terms (their
`terms` column: space-separated stems, memory/stems.py) with FTS5's formula: for each query term t held tf times,
idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)), dl the row's tokens plus the owner token, as
FTS5 counts them. df (from the fts5vocab tables), the table's size (max(id)) and avgdl (the newest 1,000 rows)
are cached DF_TTL_S, as on Postgres (memory/pg_terms.py): a stale one only shifts a weight.

What is lost: a message holding only common words, older than their newest `per_term` postings, is no
candidate (its score is the lowest of any match anyway); with `hilo context --at` in the past, a common term's
newest postings may all come after `at` (ROWS drops them), its rarer terms still search the whole history.
"""

from __future__ import annotations

import json
import time
from typing import Any

from memory.pg_terms import K1, B, idf

#: table -> (candidates one question may gather, shared among its terms; the least a term may bring). An
#: episode is a long document (a run's terms), so fewer of them are scored.
BUDGET = {"messages": (480, 60), "episodes": (160, 20)}
DF_TTL_S = 600.0
DF_CACHE_MAX = 50_000


def per_term(table: str, n_terms: int) -> int:
    """The postings one of `n_terms` index terms may bring (its newest) from `table`."""
    total, least = BUDGET[table]
    return max(least, total // max(1, n_terms))


#: table -> (FTS5 table, its text column, the owner's column)
TABLES = {"messages": ("messages_fts", "coalesce(x.terms, x.content)", "x.user_id"),
          "episodes": ("episodes_fts", "x.terms", "x.user_id")}


def bounded_sql(table: str, n_terms: int) -> str:
    """$1 user, $2 avgdl, $3 per-term limit, $4 limit, then per term i (0-based): $5+3i its FTS5 query (the
    owner's token ANDed in), $6+3i the term padded ' t ', $7+3i its idf. Rows: (id, score), best first."""
    fts, text, owner = TABLES[table]
    postings = " UNION ".join(
        f"SELECT id FROM (SELECT rowid AS id FROM {fts} WHERE {fts} MATCH ?{5 + 3 * i} ORDER BY rowid DESC LIMIT ?3)"
        for i in range(n_terms))
    # each token between its own two spaces, so that ' t ' occurrences never overlap: tf = removed length / |' t '|
    tf = ["((length(d.x) - length(replace(d.x, ?{p}, ''))) / length(?{p}))".format(p=6 + 3 * i)
          for i in range(n_terms)]
    norm = f"{K1} * ({1 - B} + {B} * d.dl / ?2)"
    score = " + ".join(f"?{7 + 3 * i} * {f} * {K1 + 1} / ({f} + {norm})" for i, f in enumerate(tf))
    return (
        f"WITH cand(id) AS ({postings}), "
        f"d AS MATERIALIZED (SELECT x.id, ' ' || replace({text}, ' ', '  ') || ' ' AS x, "
        f"length({text}) - length(replace({text}, ' ', '')) + 2 AS dl "
        f"FROM {table} x WHERE x.id IN (SELECT id FROM cand) AND {owner} = ?1) "
        f"SELECT d.id, {score} AS score FROM d ORDER BY score DESC, d.id DESC LIMIT ?4"
    )


async def weights(db: Any, table: str, terms: list[str]) -> tuple[list[float], float]:
    """(each term's idf, the table's mean row length in FTS5 tokens), from the cache or the fts5vocab table."""
    cache: dict[tuple[str, str], tuple[float, float]] = db.df_cache
    now = time.monotonic()
    if len(cache) > DF_CACHE_MAX:
        cache.clear()
    known = {t: hit[0] for t in [*terms, "", "#"] if (hit := cache.get((table, t))) is not None and hit[1] > now}
    if "#" not in known or "" not in known:
        total, avgdl = await db.one(
            f"SELECT (SELECT coalesce(max(id), 0) FROM {table}), (SELECT coalesce(avg(length(t) - "
            f"length(replace(t, ' ', '')) + 2), 2) FROM (SELECT {TABLES[table][1].replace('x.', '')} AS t "
            f"FROM {table} ORDER BY id DESC LIMIT 1000))")
        known["#"], known[""] = float(total), max(1.0, float(avgdl))
        cache[(table, "#")] = (known["#"], now + DF_TTL_S)
        cache[(table, "")] = (known[""], now + DF_TTL_S)
    missing = [t for t in terms if t not in known]
    if missing:
        found = dict(await db.all(f"SELECT term, doc FROM {TABLES[table][0]}_vocab "
                                  "WHERE term IN (SELECT value FROM json_each(?1))", json.dumps(missing)))
        for term in missing:
            known[term] = idf(float(found.get(term, 0)), known["#"])
            cache[(table, term)] = (known[term], now + DF_TTL_S)
    return [known[t] for t in terms], known[""]


def params(table: str, user_id: int, terms: list[str], idfs: list[float], avgdl: float, limit: int,
           query: Any) -> list[Any]:
    """The parameters of `bounded_sql(table, len(terms))`; `query(term)`: a term's FTS5 query."""
    out: list[Any] = [user_id, avgdl, per_term(table, len(terms)), limit]
    for term, weight in zip(terms, idfs, strict=True):
        out += [query(term), f" {term} ", weight]
    return out
