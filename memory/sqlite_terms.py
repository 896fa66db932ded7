"""SQLite recall: FTS5 finds a bounded set of candidates, BM25 is computed over those only.

FTS5's own `bm25()` cost grew with the person's history twice over (issue 14: 5.7, 8.6, 30.8, 73.0 ms of context
assembly at 1k, 10k, 100k, 300k messages): the OR of the question's terms matched every message holding one of
its common words, each was scored (a docsize read) and sorted; and bm25() counts, per statement, every row
holding each phrase of the query (its IDF), the owner token's phrase included: all of the person's rows.

Here, per index term, FTS5 walks that term's postings in the person's own index newest first and stops at
`per_term(table, n)` (ORDER BY rowid DESC LIMIT, no row read): a rare term brings all of its messages, a common one
its newest. Each index term is stored scoped to its owner, 'u<id>x<term>' (migrations/sqlite/0033), so a term's
postings are one person's: until then `owner : "u<id>" AND terms : t` walked t's postings over everyone until it
had the person's newest (at 1,000 people x 1,000 messages: 4.0 ms for a question's 8 terms, 0.2 ms scoped). The
union is scored in SQL over the candidates' stored terms (their `terms` column: space-separated stems,
memory/stems.py) with FTS5's formula: for each query term t held tf times,
idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)), dl the row's tokens plus the owner token, as
FTS5 counts them. df and N are the person's own (the fts5vocab tables: a scoped term's rows, and the owner token's,
all of the person's rows), avgdl the table's (the newest 1,000 rows); all are cached DF_TTL_S, as on Postgres
(memory/pg_terms.py): a stale one only shifts a weight.

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


def scoped(user_id: int, term: str) -> str:
    """A term as the person's FTS5 index holds it (migrations/sqlite/0033): 'u<id>x<term>'."""
    return f"u{int(user_id)}x{term}"


def term_query(user_id: int, term: str) -> str:
    """The FTS5 query of one index term in one person's postings: a quoted string, so nothing the person typed is
    read as FTS syntax (index terms are letters and digits: memory/stems.py)."""
    return f'"{scoped(user_id, term)}"'


def bounded_sql(table: str, n_terms: int) -> str:
    """$1 user, $2 avgdl, $3 per-term limit, $4 limit, then per term i (0-based): $5+3i its FTS5 query
    (`term_query`), $6+3i the term padded ' t ', $7+3i its idf. Rows: (id, score), best first."""
    fts, text, owner = TABLES[table]
    postings = " UNION ".join(
        f"SELECT id FROM (SELECT rowid AS id FROM {fts} WHERE {fts} MATCH ?{5 + 3 * i} ORDER BY rowid DESC LIMIT ?3)"
        for i in range(n_terms))
    # each token between its own two spaces, so that ' t ' occurrences never overlap: tf = removed length / |' t '|;
    # computed once per row and term (materialized: the score names each tf twice, and an episode's text is long)
    tf = ", ".join("((length(d.x) - length(replace(d.x, ?{p}, ''))) / length(?{p})) AS f{i}".format(p=6 + 3 * i, i=i)
                   for i in range(n_terms))
    norm = f"{K1} * ({1 - B} + {B} * t.dl / ?2)"
    score = " + ".join(f"?{7 + 3 * i} * t.f{i} * {K1 + 1} / (t.f{i} + {norm})" for i in range(n_terms))
    return (
        f"WITH cand(id) AS ({postings}), "
        f"d AS MATERIALIZED (SELECT x.id, ' ' || replace({text}, ' ', '  ') || ' ' AS x, "
        f"length({text}) - length(replace({text}, ' ', '')) + 2 AS dl "
        f"FROM {table} x WHERE x.id IN (SELECT id FROM cand) AND {owner} = ?1), "
        f"t AS MATERIALIZED (SELECT d.id, d.dl, {tf} FROM d) "
        f"SELECT t.id, {score} AS score FROM t ORDER BY score DESC, t.id DESC LIMIT ?4"
    )


async def weights(db: Any, table: str, user_id: int, terms: list[str]) -> tuple[list[float], float]:
    """(each term's idf in the person's history, the table's mean row length in FTS5 tokens), from the cache or
    the fts5vocab table: a scoped term's document frequency is its count among the person's rows, the owner token's
    ('u<id>') the person's row count."""
    cache: dict[tuple[str, str], tuple[float, float]] = db.df_cache
    now = time.monotonic()
    if len(cache) > DF_CACHE_MAX:
        cache.clear()
    owner = f"u{int(user_id)}"
    keys = [scoped(user_id, t) for t in terms]
    known = {k: hit[0] for k in [*keys, owner, ""] if (hit := cache.get((table, k))) is not None and hit[1] > now}
    if "" not in known:
        (avgdl,) = await db.one(
            f"SELECT coalesce(avg(length(t) - length(replace(t, ' ', '')) + 2), 2) FROM (SELECT "
            f"{TABLES[table][1].replace('x.', '')} AS t FROM {table} ORDER BY id DESC LIMIT 1000)")
        known[""] = max(1.0, float(avgdl))
        cache[(table, "")] = (known[""], now + DF_TTL_S)
    missing = [k for k in [owner, *keys] if k not in known]
    if missing:
        found = dict(await db.all(f"SELECT term, doc FROM {TABLES[table][0]}_vocab "
                                  "WHERE term IN (SELECT value FROM json_each(?1))", json.dumps(missing)))
        for key in missing:  # the owner's first: the terms' idf needs it
            known[key] = float(found.get(key, 0)) if key == owner else idf(float(found.get(key, 0)), known[owner])
            cache[(table, key)] = (known[key], now + DF_TTL_S)
    return [known[k] for k in keys], known[""]


def params(table: str, user_id: int, terms: list[str], idfs: list[float], avgdl: float, limit: int,
           query: Any) -> list[Any]:
    """The parameters of `bounded_sql(table, len(terms))`; `query(term)`: a term's FTS5 query."""
    out: list[Any] = [user_id, avgdl, per_term(table, len(terms)), limit]
    for term, weight in zip(terms, idfs, strict=True):
        out += [query(term), f" {term} ", weight]
    return out
