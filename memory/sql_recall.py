"""Recall over the person's whole history, written once: gather candidates, score them (memory/retrieval.py).

Inside load_context's reads, two statements whatever the history's size (on SQLite, where a statement costs no
round trip, after a probe that skips the search when nothing of the person's lies outside the window, and the
terms' document frequencies when they are not cached):
1. lexical hits: the best LEXICAL_HITS messages by BM25 over their index terms, and episode hits: the best
   EPISODE_HITS episodes (the dialect's `hits`, one statement: on SQLite the sum of their candidate messages'
   scores, memory/sqlite_terms.py; on Postgres BM25 over their whole text, migration 0032's hilo_recall_hits);
2. the rows: those messages, their neighbours (the message before and after in the conversation) and every
   message of the best EPISODE_MEMBERS episodes (MEMBERS_CAP at most), with the same exclusions as (1).
With a query vector, one more: the person's nearest `search_limit` messages (memory/sql_vectors.py). (2) reads
their rows too, without their neighbours (`gather` says why); when the question is embedded while the rest is read
(SQLite: Store.load_context's `vector`), `gather` runs without it and `finish` reads the rows of the vector hits
that (2) did not bring, in a statement of their own. Every candidate gets its cosine with the question, not only
the vector hits: on Postgres (2) joins each row's vector and computes it; SQLite takes it from the person's cached
matrix (no statement). Measured on bench/memory_bench.py: 0.551 / 0.618 (EN / ES at 2,000 tokens) when the other
candidates took the floor of the vector term, 0.582 / 0.646 with their own cosines. Then `retrieval.score` fuses the
terms and the best `search_limit` are returned with their components.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from memory import retrieval
from memory import sql_vectors as vectors
from memory.rows import MSG_COLS, Db, as_dt, to_message
from memory.stems import query_terms
from memory.store import ContextQuery, StoredMessage

#: Lexical hits scored per question; episode hits; episodes whose every message is a candidate, if they hold at
#: most MEMBERS_CAP messages (a longer run is a day of chatter, not a scene: its messages come only as hits and
#: neighbours). Measured on bench/memory_bench.py (docs/memory-benchmark.md).
LEXICAL_HITS = 100
EPISODE_HITS = 20
EPISODE_MEMBERS = 8
MEMBERS_CAP = 40

#: $1 lexical hits, $2 user, $3 at, $4 excluded ids, $5 current message, $6 its conversation, $7 episodes whose
#: messages all come, $8 the longest such episode, $9 more messages wanted without their neighbours (the vector
#: hits that are no lexical hit; `more` holds these and the episodes' members: rows wanted without their
#: neighbours). Each row: MSG_COLS, episode id, the previous and next message's id (a lexical
#: hit's own; NULL on the other rows: `candidates` reads them from the hits).
#: The message before / after message `x` of its conversation: ORDER BY ... LIMIT 1 is one seek of
#: (conversation_id, id) in both dialects (SQLite's max() with a range would walk the conversation).
PREV = ("(SELECT p.id FROM messages p WHERE p.conversation_id = {x}.conversation_id AND p.id < {x}.id "
        "ORDER BY p.id DESC LIMIT 1)")
NEXT = ("(SELECT n.id FROM messages n WHERE n.conversation_id = {x}.conversation_id AND n.id > {x}.id "
        "ORDER BY n.id LIMIT 1)")
#: Each hit's neighbours are sought once, for the hit: retrieval's neighbour term counts a hit's lexical score only,
#: so what a row must know is which hit lies next to it, and the hit knows (the message before a hit has that hit
#: as its next: nothing lies between them; `candidates`). Until then every row sought its own two neighbours again,
#: some 600 index seeks at 1,000 people x 1,000 messages (Postgres's own copy of this statement sought each once,
#: and the other side of a neighbour and the episodes' members still twice). `wanted` keeps each row's known
#: neighbours and joins `messages` by key, in both dialects. Interleaved against the statements it replaced, over
#: the statements of 300 turns at 100 x 1,000: SQLite 0.88x, Postgres 0.93x (0.94x with vectors); a LEFT JOIN of
#: the hits instead costs Postgres a scan of them per row (1.18x with vectors). `{cosine}` and `{join}`: the
#: dialect's cosine of each row with the question, when it computes it in SQL (sql_vectors.row_cosine);
#: pg_context's READ holds the same statement.
ROWS_OF = (
    f"WITH hit AS MATERIALIZED (SELECT m.id, {PREV.format(x='m')} AS prev_id, {NEXT.format(x='m')} AS next_id "
    "FROM messages m WHERE m.id = ANY($1::bigint[])), "
    "more AS (SELECT m.id FROM messages m WHERE m.episode_id IN (SELECT e.id FROM episodes e "
    "WHERE e.id = ANY($7::bigint[]) AND e.message_count <= $8) UNION ALL SELECT m.id FROM messages m "
    "WHERE m.id = ANY($9::bigint[])), "
    "wanted AS (SELECT id, max(prev_id) AS prev_id, max(next_id) AS next_id FROM (SELECT id, prev_id, next_id "
    "FROM hit UNION ALL SELECT prev_id, NULL, NULL FROM hit UNION ALL SELECT next_id, NULL, NULL FROM hit "
    "UNION ALL SELECT id, NULL, NULL FROM more) AS k WHERE id IS NOT NULL GROUP BY id) "
    f"SELECT {MSG_COLS}, m.episode_id, w.prev_id, w.next_id, {{cosine}} "
    "FROM wanted w JOIN messages m ON m.id = w.id {join} WHERE m.user_id = $2 AND m.created_at <= $3 "
    "AND m.id <> ALL($4::bigint[]) "
    "AND ($5::bigint IS NULL OR NOT (m.conversation_id IS NOT DISTINCT FROM $6::bigint AND m.role = 'user' "
    "AND m.id > $5))"
)
#: Is anything of the person's left to recall: more of their messages at or before $2 than the window holds ($4:
#: how many of the held messages are the person's at or before $2, known in Python; the current message $5 apart,
#: counted here). $3 = $4 + 2 entries of (user_id, created_at) at most are counted: one more than could be left out
#: answers yes. (It compared each entry with a table of the left-out ids built from their JSON: 157k instructions of
#: a web turn, bench/turn_instructions.py; tests/test_windows.py keeps that statement as the oracle.)
OUTSIDE = (
    "SELECT (SELECT count(*) FROM (SELECT 1 FROM messages m WHERE m.user_id = $1 AND m.created_at <= $2 LIMIT $3) p) "
    "> $4 + (SELECT count(*) FROM messages c WHERE c.id = $5 AND c.user_id = $1 AND c.created_at <= $2)"
)
#: Each row also carries its cosine with the question when the dialect computes it there ($10: sql_vectors.row_cosine).
ROWS = ROWS_OF.format(cosine="NULL", join="")


@dataclass(slots=True)
class Gathered:
    """What recall reads up to its scoring (`gather`): the lexical and episode hits, the vector hits (None until
    searched), and ROWS' rows; the moment and left-out ids as the dialect passes them. `nothing`: nothing of the
    person's lies outside the window."""

    at: Any
    out: Any
    hits: dict[int, float] = field(default_factory=dict)
    episode_scores: dict[int, float] = field(default_factory=dict)
    near: dict[int, float] | None = None
    rows: list[Any] = field(default_factory=list)
    nothing: bool = False


async def recall(db: Db, q: ContextQuery) -> tuple[list[StoredMessage], dict[int, dict[str, float]]]:
    """The recalled messages, best first (at most q.search_limit), and each one's score components: of every
    message of the person but the current one (no window left out: bench/recall_lab.py)."""
    if q.search_limit <= 0:
        return [], {}
    excluded = [q.current_message_id] if q.current_message_id is not None else []
    return await finish(db, q, excluded, await gather(db, q, excluded, held=()))


async def gather(db: Db, q: ContextQuery, excluded: list[int], *, held: Sequence[StoredMessage],
                 search: bool = True) -> Gathered:
    """Recall's reads up to its scoring: the probe, the hits, the vector hits (q's vector; not when `search` is
    False: the question is embedded meanwhile, `finish` searches them) and ROWS. `excluded`: the ids of `held` (the
    window's messages) and the current message's."""
    g = Gathered(db.ts(q.at), db.ids(excluded))  # the ids as the dialect passes them, converted once
    # where a statement costs no round trip (SQLite), a person whose whole history is in the window already (a
    # web visitor's first hundred turns) is not searched: OUTSIDE says so instead of the search's five statements
    if db.probes and not await _outside(db, q, g.at, held):
        g.nothing = True
        return g
    terms = query_terms(q.search_text)
    lexical, found = await db.hits(q, terms, g.out, LEXICAL_HITS, EPISODE_HITS) if terms else ([], [])
    g.hits, g.episode_scores = dict(lexical), dict(found)
    if search:
        g.near = await vectors.recall(db, q, excluded)
    if not g.hits and not g.episode_scores and not g.near:
        return g
    members = sorted(g.episode_scores, key=lambda e: -g.episode_scores[e])[:EPISODE_MEMBERS]
    # A vector hit comes without its neighbours: seeking them cost 128 hits two index seeks and a row each, for
    # candidates far in meaning that share no word with the question (the neighbour term counts a lexical hit's
    # score only). bench/memory_bench.py with the local embedder, at 2,000 tokens: en 0.617 -> 0.626, es 0.667 ->
    # 0.656 (1,000: 0.534 -> 0.534, 0.564 -> 0.573); bench/context_bench.py's SQLite hilo +vec pre-model p50 ~11.0
    # -> ~9.0 ms at 1,000 x 1,000 (three interleaved pairs of 300 turns).
    g.rows = await _rows(db, q, g, sorted(g.hits), members, sorted(set(g.near or ()) - set(g.hits)))
    return g


async def _outside(db: Db, q: ContextQuery, at: Any, held: Sequence[StoredMessage]) -> bool:
    """OUTSIDE for the messages `held` and the current one."""
    cur = q.current_message_id
    mine = len({m.id for m in held if m.user_id == q.user_id and m.created_at <= q.at and m.id != cur})
    return bool(await db.value(OUTSIDE, q.user_id, at, mine + 2, mine, cur))


async def finish(db: Db, q: ContextQuery, excluded: list[int], g: Gathered,
                 ) -> tuple[list[StoredMessage], dict[int, dict[str, float]]]:
    """The vector search `gather` left (with q's vector, if any: the rows of its hits that ROWS did not bring
    are read apart, without neighbours as ever) and the scoring of every candidate: the messages, best first,
    and their components."""
    if g.nothing:
        return [], {}
    if g.near is None:
        g.near = await vectors.recall(db, q, excluded)
        have = {int(r[0]) for r in g.rows}
        late = sorted(i for i in g.near if i not in have)
        if late:
            g.rows += await _rows(db, q, g, [], [], late)
    if not g.rows:
        return [], {}
    by_id = {int(r[0]): r for r in g.rows}
    gathered = candidates(g.rows, g.hits)
    in_rows = (None if vectors.row_cosine(db, q) is None
               else {int(r[0]): float(r[14]) for r in g.rows if r[14] is not None})
    cosines = await vectors.candidate_cosines(db, q, g.near, list(by_id), in_rows)
    scores = retrieval.best(gathered, g.episode_scores, q.search_text, cosines or None, q.search_limit)
    # only the returned rows become messages (a few of the hundreds of candidates at 100k messages)
    return [to_message(by_id[i][:11]) for i in scores], scores


async def _rows(db: Db, q: ContextQuery, g: Gathered, hits: list[int], members: list[int],
                plain: list[int]) -> list[Any]:
    """ROWS for lexical hits `hits` (with their neighbours), the episodes `members` and messages `plain`."""
    cosine = vectors.row_cosine(db, q)
    sql, extra = (ROWS, ()) if cosine is None else (ROWS_OF.format(join=cosine[0], cosine=cosine[1]), (cosine[2],))
    return list(await db.all(sql, db.ids(hits), q.user_id, g.at, g.out, q.current_message_id, q.conversation_id,
                             db.ids(members), MEMBERS_CAP, db.ids(plain), *extra))


def _first(row: Sequence[Any]) -> int:
    return int(row[0])


def candidates(rows: Sequence[Any], hits: Mapping[int, float]) -> list[retrieval.Candidate]:
    """ROWS' rows as retrieval's candidates (`hits`: message id -> BM25). A hit's row carries its two neighbours; any
    other row learns from the hits which hit lies before or after it (the hit's next or previous is the row). A
    neighbour that is no hit stays unknown: retrieval scores it as no neighbour (both take the floor). In id order,
    however the rows came (ROWS once, or ROWS and the rows of a question's vector hits after it: `finish`): the
    scores' sums over the candidates then add up in one order."""
    rows = sorted(rows, key=_first)
    before: dict[int, int] = {}  # row id -> the hit right before it
    after: dict[int, int] = {}  # row id -> the hit right after it
    for r in rows:
        if r[12] is not None:
            after[int(r[12])] = int(r[0])
        if r[13] is not None:
            before[int(r[13])] = int(r[0])
    out = []
    for r in rows:
        i = int(r[0])
        out.append(retrieval.Candidate(i, as_dt(r[8]), float(hits.get(i, 0.0)), r[11],
                                       r[12] if r[12] is not None else before.get(i),
                                       r[13] if r[13] is not None else after.get(i)))
    return out
