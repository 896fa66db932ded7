"""SQLite recall: FTS5 finds a bounded set of candidates, BM25 is computed over those only.

FTS5's own `bm25()` cost grew with the person's history twice over (issue 14: 5.7, 8.6, 30.8, 73.0 ms of context
assembly at 1k, 10k, 100k, 300k messages): the OR of the question's terms matched every message holding one of
its common words, each was scored (a docsize read) and sorted; and bm25() counts, per statement, every row
holding each phrase of the query (its IDF), the owner token's phrase included: all of the person's rows.

Here, per index term, FTS5 walks that term's postings in the person's own index newest first and stops at
`per_term(n)` (ORDER BY rowid DESC LIMIT, no row read): a rare term brings all of its messages, a common one
its newest. Each index term is stored scoped to its owner, 'u<id>x<term>' (migrations/sqlite/0033), so a term's
postings are one person's: until then `owner : "u<id>" AND terms : t` walked t's postings over everyone until it
had the person's newest (at 1,000 people x 1,000 messages: 4.0 ms for a question's 8 terms, 0.2 ms scoped). The
union is scored in SQL over the candidates' stored terms (their `terms` column: space-separated stems,
memory/stems.py) with FTS5's formula: for each query term t held tf times,
idf(t) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl)), dl the row's tokens plus the owner token, as
FTS5 counts them. df and N are the person's own (the fts5vocab table: a scoped term's rows, and the owner token's,
all of the person's rows), avgdl the table's (the newest 1,000 rows); all are cached DF_TTL_S, as on Postgres
(memory/pg_terms.py): a stale one only shifts a weight.

The messages returned are those recall may return: load_context's window (the conversation's tail, the
cross-surface turns), a queued later question and what came after `at` are left out before the best are taken, as
Postgres's hilo_recall_hits does (until then the statement returned the window's hits too, and ROWS sought their
neighbours only to drop them).

The index is written behind the turns, in batches (memory/sqlite_fts.py): the person's messages it does not hold
yet (after `fts_progress.upto`, seconds of them) are candidates too, scored the same way, so a message is found
from the moment it is stored.

Episodes come from the same postings, in the same statement (`hits_sql`): an episode holds a term exactly when one
of its messages does, so each episode of the candidate messages scores the sum of its candidates' BM25 scores
(a left-out message's too: the window's messages still bring their episode). Until migration 0044 episodes had an
FTS5 index of their own, and every message stored rewrote its episode's whole document there: ~95% of what a turn
wrote to FTS5, which FTS5 paid back in merges (one write in ~60 waited 20-55 ms at 1,000 people x 1,000 messages);
its statement and its vocab read were 0.9-1.0 ms of a turn's context read. Recall at 2,000 tokens moved 0.455 ->
0.463 (English) and 0.560 -> 0.551 (Spanish) on bench/memory_bench.py. From then until stop 40 the newest 80
candidate episodes were scored as documents over their own stored terms (each term's tf a scan of the episode's
whole text: a third of the statement's time); summing their messages' scores instead, the hits statement at
1,000 x 1,000 went 1.43 -> 0.92 ms p50, 3.16 -> 1.96 ms p99, and the memory benchmark's recall at 500 / 1,000 /
2,000 / 4,000 tokens en 0.420 / 0.442 / 0.459 / 0.477 -> 0.420 / 0.433 / 0.459 / 0.472, es 0.463 / 0.485 / 0.547
/ 0.558 -> 0.472 / 0.494 / 0.556 / 0.557 (with the local embedder, at 2,000: en 0.630 -> 0.635, es 0.652 ->
0.651). The best of an episode's candidates alone (max, not sum) lost es 0.547 -> 0.520 at 2,000.

What is lost: a message holding only common words, older than their newest `per_term` postings, is no
candidate (its score is the lowest of any match anyway); a question of more than SEARCHED_TERMS index terms
searches and scores its rarest SEARCHED_TERMS (a message holding only its commonest words is no candidate);
with `hilo context --at` in the past, a common term's newest postings may all come after `at` (ROWS drops them),
its rarer terms still search the whole history.
"""

from __future__ import annotations

import functools
import json
import time
from typing import Any

from memory.pg_terms import K1, B, idf
from memory.sqlite_fts import UPTO

#: Candidates one question may gather from the messages' postings, shared among its terms; the least a term may
#: bring. (480, 60) until the memory benchmark (bench/memory_bench.py, at 500/1,000/2,000/4,000 tokens) showed the
#: same recall with 360: en 0.411/0.442/0.463/0.481 -> 0.411/0.442/0.463/0.485, es 0.463/0.485/0.551/0.563 both;
#: with the local embedder en 0.462 -> 0.466 at 500, the rest the same; (240, 30) lost 0.004 at 2,000 in both
#: languages. The hits statement took 0.92x the time (interleaved over 976 captured statements at 100 x 1,000).
#: (240, 30) since issue 14's pre-model p99 (SQLite, 1,000 x 1,000): with SEARCHED_TERMS 8, the memory benchmark at
#: 2,000 tokens en 0.463 -> 0.459, es 0.551 -> 0.547 (with the local embedder 0.626 -> 0.630, 0.656 -> 0.652), within
#: the issue's one point of 0.455 / 0.551; a lexical turn's pre-model p50 / p99 over three interleaved rounds of
#: 1,000 turns, (360, 45) 10 terms -> (360, 45) 8 terms -> (240, 30) 8 terms: 6.50 / 12.57 -> 5.30 / 10.07 -> 4.95 /
#: 8.91 ms (memory/sqlite_terms.py's SEARCHED_TERMS says why 8).
BUDGET = (240, 30)
#: Index terms a question searches at most: past them, the ones rarest in the person's messages (highest idf). A
#: statement's work is its candidates times its terms (each candidate's tf of each term), and every term brings at
#: least BUDGET's 45 postings: it grew with the square of a question's length (at 1,000 people x 1,000 messages, a
#: turn's read took 4.3 ms at a median question's 8-10 terms and 8-10 ms at 13-18). The commonest terms of a long
#: question weigh least in BM25 and bring only their newest postings anyway. The memory benchmark's questions have
#: at most 9; bench/context_bench.py's everyday lines 8 at the median, 12 at p90. 10 until issue 14's pre-model p99:
#: at 8 the memory benchmark's recall is the same at every budget (at 6 es fell 0.551 -> 0.507 at 2,000 tokens), and
#: the questions past 8 terms, half of context_bench's lines and the whole of its tail, read 8 terms' postings:
#: load_context's p50 / p99 3.85 / 8.95 -> 2.87 / 5.57 ms in one interleaved pair of 1,000 turns (BUDGET: both).
SEARCHED_TERMS = 8
DF_TTL_S = 600.0
DF_CACHE_MAX = 50_000


def per_term(n_terms: int) -> int:
    """The postings one of `n_terms` index terms may bring (its newest)."""
    total, least = BUDGET
    return max(least, total // max(1, n_terms))


#: The text a message is scored over: its stored terms (a message without them, its content).
TEXT = "coalesce({row}terms, {row}content)"


def scoped(user_id: int, term: str) -> str:
    """A term as the person's FTS5 index holds it (migrations/sqlite/0033): 'u<id>x<term>'."""
    return f"u{int(user_id)}x{term}"


def term_query(user_id: int, term: str) -> str:
    """The FTS5 query of one index term in one person's postings: a quoted string, so nothing the person typed is
    read as FTS syntax (index terms are letters and digits: memory/stems.py)."""
    return f'"{scoped(user_id, term)}"'


#: The parameters before the terms' (`params`): each term's three come after them.
_TERMS = 9


def _tf(n_terms: int, rows: str) -> str:
    # each token between its own two spaces, so that ' t ' occurrences never overlap: tf = removed length / |' t '|;
    # computed once per row and term (materialized: the score names each tf twice, and an episode's text is long)
    return ", ".join(f"((length({rows}.x) - length(replace({rows}.x, ?{_TERMS + 2 + 3 * i}, ''))) / "
                     f"length(?{_TERMS + 2 + 3 * i})) AS f{i}" for i in range(n_terms))


def _score(n_terms: int, rows: str, avgdl: int) -> str:
    norm = f"{K1} * ({1 - B} + {B} * {rows}.dl / ?{avgdl})"
    return " + ".join(f"?{_TERMS + 3 + 3 * i} * {rows}.f{i} * {K1 + 1} / ({rows}.f{i} + {norm})"
                      for i in range(n_terms))


def _padded(text: str) -> str:
    """A row's text with each token between two spaces (`_tf`), and its length in FTS5 tokens (the owner token
    counted, as FTS5 counts it)."""
    return (f"' ' || replace({text}, ' ', '  ') || ' ' AS x, "
            f"length({text}) - length(replace({text}, ' ', '')) + 2 AS dl")


@functools.cache
def hits_sql(n_terms: int) -> str:
    """$1 user, $2 the messages' mean length, $3 the per-term limit, $4 messages wanted, $5 episodes wanted, $6 the
    turn's moment (`at`), $7 the ids to leave out (JSON), $8 the current message (or NULL), $9 its conversation;
    then per term i (0-based): $10+3i its FTS5 query (`term_query`), $11+3i the term padded ' t ', $12+3i its
    idf. Rows (kind, id, score), each kind best first: 0 the messages, 1 the episodes.

    The candidate messages are each term's newest postings and the person's messages the index does not hold
    yet (memory/sqlite_fts.py), scored as FTS5 would over their stored terms, with the terms' idfs in the
    person's messages (a candidate of the tail that holds none of the terms scores 0 and is dropped). The messages
    returned are the best of those that may be recalled: at or before $6, not left out ($7: the context's
    window), and not a later question of the current conversation (a queued turn), as sql_recall's ROWS keeps
    them and as Postgres's hilo_recall_hits returns them. An episode scores the sum of its candidates' scores, a
    left-out one's included."""
    postings = " UNION ".join(
        f"SELECT id FROM (SELECT rowid AS id FROM messages_fts WHERE messages_fts MATCH ?{_TERMS + 1 + 3 * i} "
        "ORDER BY rowid DESC LIMIT ?3)" for i in range(n_terms))
    # the person's messages the index does not hold yet (memory/sqlite_fts.py: a rowid range past `upto`, seconds
    # of messages): candidates all, scored like the rest, kept only where a term matched (score > 0). '+' keeps the
    # planner on that range: on user_id's index it walked all of the person's messages (1,000 a person: the
    # pre-model p50 went 4.7-5.3x -> 5.5-6.2x the seed pattern's in bench/context_bench.py)
    postings += f" UNION SELECT id FROM messages WHERE id > ({UPTO}) AND +user_id = ?1"
    return (
        f"WITH cand(id) AS ({postings}), "
        f"d AS MATERIALIZED (SELECT x.id, x.episode_id AS episode, {_padded(TEXT.format(row='x.'))}, "
        "x.created_at <= ?6 AND x.id NOT IN (SELECT value FROM json_each(?7)) AND (?8 IS NULL OR NOT "
        "(x.conversation_id IS ?9 AND x.role = 'user' AND x.id > ?8)) AS recallable "
        "FROM messages x WHERE x.id IN (SELECT id FROM cand) AND x.user_id = ?1), "
        f"t AS MATERIALIZED (SELECT d.id, d.episode, d.recallable, d.dl, {_tf(n_terms, 'd')} FROM d), "
        f"s AS MATERIALIZED (SELECT t.id, t.episode, t.recallable, {_score(n_terms, 't', 2)} AS score FROM t) "
        "SELECT 0, id, score FROM (SELECT s.id, s.score FROM s WHERE s.recallable AND s.score > 0 "
        "ORDER BY s.score DESC, s.id DESC LIMIT ?4) "
        "UNION ALL SELECT 1, id, score FROM (SELECT s.episode AS id, sum(s.score) AS score FROM s "
        "WHERE s.episode IS NOT NULL AND s.score > 0 GROUP BY s.episode ORDER BY score DESC, id DESC LIMIT ?5)"
    )


async def mean_length(db: Any) -> float:
    """The messages' mean length in FTS5 tokens, over the newest 1,000; cached DF_TTL_S."""
    cache: dict[tuple[str, str], tuple[float, float]] = db.df_cache
    now = time.monotonic()
    hit = cache.get(("messages", ""))
    if hit is not None and hit[1] > now:
        return hit[0]
    (avgdl,) = await db.one(
        f"SELECT coalesce(avg(length(t) - length(replace(t, ' ', '')) + 2), 2) FROM (SELECT {TEXT.format(row='')} AS t "
        "FROM messages ORDER BY id DESC LIMIT 1000)")
    value = max(1.0, float(avgdl))
    cache[("messages", "")] = (value, now + DF_TTL_S)
    return value


async def weights(db: Any, user_id: int, terms: list[str]) -> list[float]:
    """Each term's idf in the person's messages, from the cache or the fts5vocab table: a scoped term's document
    frequency is its count among the person's messages, the owner token's ('u<id>') their message count."""
    cache: dict[tuple[str, str], tuple[float, float]] = db.df_cache
    now = time.monotonic()
    if len(cache) > DF_CACHE_MAX:
        cache.clear()
    owner = f"u{int(user_id)}"
    keys = [scoped(user_id, t) for t in terms]
    known = {k: hit[0] for k in [*keys, owner] if (hit := cache.get(("messages", k))) is not None and hit[1] > now}
    missing = [k for k in [owner, *keys] if k not in known]
    if missing:
        found = dict(await db.all("SELECT term, doc FROM messages_fts_vocab WHERE term IN (SELECT value FROM "
                                  "json_each(?1))", json.dumps(missing)))
        for key in missing:  # the owner's first: the terms' idf needs it
            known[key] = float(found.get(key, 0)) if key == owner else idf(float(found.get(key, 0)), known[owner])
            cache[("messages", key)] = (known[key], now + DF_TTL_S)
    return [known[k] for k in keys]


def strongest(terms: list[str], idfs: list[float]) -> tuple[list[str], list[float]]:
    """The SEARCHED_TERMS terms of highest idf (all of them when there are no more), in the question's order."""
    if len(terms) <= SEARCHED_TERMS:
        return terms, idfs
    kept = sorted(sorted(range(len(terms)), key=lambda i: -idfs[i])[:SEARCHED_TERMS])
    return [terms[i] for i in kept], [idfs[i] for i in kept]


def params(user_id: int, terms: list[str], idfs: list[float], avgdl: float, limit: int, episode_limit: int,
           at: Any, excluded: str, current: int | None, conversation: int | None) -> list[Any]:
    """The parameters of `hits_sql(len(terms))`: `at` as the store writes times, `excluded` a JSON list of ids."""
    out: list[Any] = [user_id, avgdl, per_term(len(terms)), limit, episode_limit, at, excluded, current,
                      conversation]
    assert len(out) == _TERMS
    for term, weight in zip(terms, idfs, strict=True):
        out += [term_query(user_id, term), f" {term} ", weight]
    return out
