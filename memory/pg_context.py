"""A turn's context read on Postgres in one statement (issue 14: a turn in at most 8 round trips on the wire,
through a transaction pooler too, where every statement costs two).

sql_turns.load_context reads the memories, the conversation's tail with the cross-surface turns, recall's hits
(after recall's term statistics, when a word is not cached) and the recalled rows in four or five statements,
each one or two round trips. Here they are the sub-statements of one SELECT (one snapshot, no transaction):

- `facts`: the person's current memories, newest first (as sql_turns.load_context);
- `turns`: the conversation's tail and the other surfaces' turns (sql_turns.RECENT_AND_CROSS);
- `hits`: hilo_recall_hits (migrations/postgres/0032, 0034): the lexical and episode hits, planned with the real
  values; it is handed the ids of `turns` (and the current message) to leave out, and the terms' weights from
  the term statistics this process caches (`weights`; one statement of their own every ten minutes);
- `recalled`: sql_recall's rows of those hits (the hits, their neighbours, the best episodes' members), each
  hit's neighbours sought once, for the hit (`sql_recall.ROWS_OF`).
With a query vector (the embedder is on: the question was embedded before the read) the same statement also
carries (`read_sql`):
- each memory's vector of the question's embedder, whose cosine Python computes (as sql_turns.load_context);
- `near`, when the database keeps vectors: the person's nearest messages by hilo_nearest (migrations/postgres/0043:
  the HNSW scan's settings are the function's own SET clauses, so it needs no transaction and no SET, also behind a
  transaction pooler), handed the same ids to leave out; they join the lexical hits in `recalled`, and every
  recalled row carries its cosine (joined from message_vectors, the question's vector parsed once).
Then memory/retrieval.py scores the candidates as sql_recall.recall does: the same rows, scores and memory cosines
as sql_turns.load_context (tests/test_pg_context.py), in one round trip instead of seven.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from typing import Any

from memory import pg_terms, retrieval, sql_recall
from memory.memory_match import cosines as cosines_of
from memory.rows import MEMORY_COLS, MSG_COLS, Db, renumbered, to_memory, to_message
from memory.sql_turns import RECENT_AND_CROSS
from memory.stems import query_terms
from memory.store import ContextQuery, ContextRows, Memory, StoredMessage

#: What each row of READ is: its first column.
FACT, RECENT, CROSS, LEXICAL, EPISODE, AVGDL_MESSAGES, AVGDL_EPISODES, RECALLED, NEAR = range(9)
#: Columns of a row after its kind: a message (MSG_COLS), its episode, the previous and next message of its
#: conversation, a score (a hit's; a recalled row's or a vector hit's cosine); then a memory (MEMORY_COLS), and with a
#: query vector the memory's vector of its embedder (NULL: another embedder's, or none).
_MSG = [c.strip().removeprefix("m.") for c in MSG_COLS.split(",")]
_MEMORY = [c.strip() for c in MEMORY_COLS.split(",")]
_WIDTH = len(_MSG) + 4 + len(_MEMORY)


def _row(kind: int, message: list[str] | None = None, extra: list[str] | None = None,
         memory: list[str] | None = None, blob: str | None = None) -> str:
    # the extra columns typed: NULL in the first two branches would make them text
    extra = extra or ["NULL::bigint"] * 3 + ["NULL::float8"]
    cols = [*(message or ["NULL"] * len(_MSG)), *extra, *(memory or ["NULL"] * len(_MEMORY))]
    assert len(cols) == _WIDTH
    return f"SELECT {kind}, " + ", ".join(cols + ([blob] if blob is not None else []))


@functools.cache
def read_sql(vector: bool = False, dim: int = 0) -> str:
    """READ, or with a query vector (`vector`) its variant: each memory's vector of the question's embedder ($21)
    comes along, and when the database keeps vectors (`dim` > 0, the question's dimension) the person's nearest
    messages too: hilo_nearest (migrations/postgres/0043; $22 the question's vector, $23 how many), whose hits
    join the lexical hits in `recalled` (without their neighbours: sql_recall.gather), every recalled row with its
    cosine."""
    near = vector and dim > 0
    hit_ids = "SELECT hit_id FROM hits WHERE hit_kind = 0"
    plain = "ARRAY[]::bigint[]"  # sql_recall.ROWS_OF's $9: the vector hits, read without their neighbours
    cosine, join = "NULL", ""
    if near:
        plain = f"ARRAY(SELECT message_id FROM near EXCEPT {hit_ids})"
        # a vector hit's row takes the cosine the search gave it (the same expression, which
        # sql_vectors.candidate_cosines keeps over the row's anyway): a halfvec cosine is some 1.5 us at 512
        # dimensions: about 0.4 ms of the read's p50 (8.6 -> 8.2) with recall's 128 vector hits at 100 x 1,000
        cosine = f"coalesce(nr.cosine, 1 - (v.vector::halfvec({dim}) <=> (SELECT $22::text::halfvec({dim}))))"
        join = ("LEFT JOIN near nr ON nr.message_id = m.id "
                f"LEFT JOIN message_vectors v ON v.message_id = m.id AND v.embedder = $21 AND v.dim = {dim}")
    blob, none = ("CASE WHEN embedder = $21 THEN vector END", "NULL::bytea") if vector else (None, None)
    return (
        f"WITH facts AS (SELECT {MEMORY_COLS}{', ' + blob + ' AS blob' if blob else ''} FROM memories "
        "WHERE user_id = $1 AND ended_at IS NULL "
        "AND created_at <= $2 AND (expires_at IS NULL OR expires_at > $2) ORDER BY id DESC LIMIT $3), "
        f"turns({', '.join(_MSG)}, side) AS ("
        + renumbered(RECENT_AND_CROSS, {1: "$4", 2: "$1", 3: "$2", 4: "$5", 5: "$6", 6: "$7", 7: "$8", 8: "$9"})
        + "), excluded AS (SELECT ARRAY(SELECT id FROM turns UNION ALL SELECT $5::bigint WHERE $5::bigint IS NOT NULL) "
        "AS ids), "
        "hits AS MATERIALIZED (SELECT h.* FROM excluded, hilo_recall_hits($10::text[], $1, $2, excluded.ids, $5, $4, "
        "$13, $14, $11::float8, $12::float8, $17::float8[], $18::boolean[], $19::float8[], $20::boolean[]) AS h), "
        + ("near AS MATERIALIZED (SELECT n.message_id, n.cosine FROM excluded, "
           f"hilo_nearest($21, {dim}, $22::text, $1, excluded.ids, $23::int) AS n), " if near else "")
        + "recalled AS ("
        + renumbered(sql_recall.ROWS_OF, {
            1: f"ARRAY({hit_ids})", 2: "$1", 3: "$2",
            4: "(SELECT ids FROM excluded)", 5: "$5", 6: "$4",
            7: "ARRAY(SELECT hit_id FROM hits WHERE hit_kind = 1 ORDER BY hit_score DESC, hit_id DESC LIMIT $15)",
            8: "$16", 9: plain}).format(cosine=cosine, join=join)
        + ") "
        + _row(FACT, memory=_MEMORY, blob="blob" if vector else None) + " FROM facts UNION ALL "
        + _row(RECENT, message=_MSG, blob=none).replace(f"SELECT {RECENT}, ", f"SELECT {RECENT} + side, ")
        + " FROM turns UNION ALL SELECT 3 + hit_kind, hit_id, " + ", ".join(["NULL"] * (len(_MSG) + 2))
        + ", hit_score, " + ", ".join(["NULL"] * len(_MEMORY) + ([none] if none else [])) + " FROM hits UNION ALL "
        + (f"SELECT {NEAR}, message_id, " + ", ".join(["NULL"] * (len(_MSG) + 2)) + ", cosine, "
           + ", ".join(["NULL"] * len(_MEMORY) + [str(none)]) + " FROM near UNION ALL " if near else "")
        + _row(RECALLED, message=[f"r.{c}" for c in _MSG], extra=["r.episode_id", "r.prev_id", "r.next_id",
                                                                   "r.cosine::float8"], blob=none)
        + " FROM recalled AS r(" + ", ".join(_MSG) + ", episode_id, prev_id, next_id, cosine)"
    )


#: $1 user, $2 at, $3 memories, $4 conversation, $5 current message, $6 recent limit, $7 cross-surface since,
#: $8 surface, $9 cross-surface limit, $10 the question's terms (empty: no recall), $11 $12 the mean row length of
#: messages and episodes (NULL: read), $13 lexical hits, $14 episode hits, $15 episodes whose messages all come,
#: $16 the longest such episode, $17 $18 the idfs and rare flags of the terms in messages, $19 $20 in episodes (NULL:
#: hilo_recall_hits reads them: `weights`); with a query vector (read_sql) $21 its embedder, $22 the vector (pgvector's
#: text form), $23 how many nearest messages.
READ = read_sql()


#: recall's hits alone, by the same function (sql_recall.recall's statements through PgDb.hits: bench/recall_lab.py, and
#: the statements this read replaced, which tests/test_pg_context.py compares it with):
#: $1 terms, $2 user, $3 at, $4 excluded ids, $5 current message, $6 its conversation, $7 lexical hits, $8 episode
#: hits, $9 $10 the mean row length of messages and episodes (NULL: read), $11 to $14 `weights`. Rows (kind, id,
#: score), kinds as the function's: 0 lexical, 1 episode, 2 and 3 the mean row lengths.
HITS = ("SELECT hit_kind, hit_id, hit_score FROM hilo_recall_hits($1::text[], $2, $3, $4::bigint[], $5, $6, $7, $8, "
        "$9::float8, $10::float8, $11::float8[], $12::boolean[], $13::float8[], $14::boolean[])")
_TABLES = ("messages", "episodes")


def cached_avgdl(db: Db) -> list[float | None]:
    """The mean row length of messages and of episodes while cached (pg_terms.DF_TTL_S), else None: read again."""
    cache: dict[Any, tuple[float, float]] = db.df_cache  # type: ignore[attr-defined]
    now = time.monotonic()
    return [hit[0] if (hit := cache.get((table, ""))) is not None and hit[1] > now else None for table in _TABLES]


async def weights(db: Db, terms: list[str]) -> list[Any]:
    """The terms' idfs and rare flags in messages, then in episodes, from the process's cached term statistics
    (pg_terms.cached: migration 0034); NULLs for a table with none yet (the function reads them) and for no terms."""
    if not terms:
        return [None] * 4
    out: list[Any] = []
    for stats in (await pg_terms.cached(db)).values():
        out += stats.weights(terms) if stats is not None else (None, None)
    return out


def pg_literal(vector: Sequence[float]) -> str:
    """pgvector's text form of a vector: '[0.1,0.2,...]' (6 digits: more than a halfvec keeps)."""
    return "[" + ",".join(f"{x:.6g}" for x in vector) + "]"


def keep_avgdl(db: Db, which: int, value: float) -> None:
    """Cache the mean row length the function read: `which` 0 messages, 1 episodes."""
    db.df_cache[(_TABLES[which], "")] = (value, time.monotonic() + pg_terms.DF_TTL_S)  # type: ignore[attr-defined]


async def load_context(db: Db, q: ContextQuery) -> ContextRows:
    """sql_turns.load_context in one statement (READ, or read_sql's variant with a query vector)."""
    terms = query_terms(q.search_text) if q.search_limit > 0 else []
    avgdl = cached_avgdl(db)
    recent = q.recent_limit if q.conversation_id is not None else 0
    question = q.query_vector or ()
    vector = bool(question)
    # as sql_vectors.recall and row_cosine: the vector search needs the question's embedder and pgvector
    near = vector and bool(q.embedder) and db.vectors
    extra: list[Any] = [q.embedder] if vector else []
    if near:
        extra += [pg_literal(question), max(q.search_limit, 0)]
    rows = await db.all(
        read_sql(vector, len(question) if near else 0), q.user_id, db.ts(q.at), max(q.facts_limit, 0),
        q.conversation_id, q.current_message_id, recent, db.ts(q.cross_since), q.surface, max(q.cross_limit, 0),
        terms, *avgdl, sql_recall.LEXICAL_HITS, sql_recall.EPISODE_HITS, sql_recall.EPISODE_MEMBERS,
        sql_recall.MEMBERS_CAP, *await weights(db, terms), *extra,
    )
    facts: list[Memory] = []
    blobs: list[tuple[int, Any]] = []
    conversation: list[StoredMessage] = []
    cross: list[StoredMessage] = []
    hits: dict[int, float] = {}
    episode_scores: dict[int, float] = {}
    nearest: dict[int, float] = {}
    recalled_rows = []
    mem = 1 + len(_MSG) + 4
    for r in rows:
        kind = r[0]
        if kind == FACT:
            facts.append(to_memory(r[mem:mem + len(_MEMORY)]))
            if vector:
                blobs.append((int(r[mem]), r[mem + len(_MEMORY)]))
        elif kind in (RECENT, CROSS):
            (conversation if kind == RECENT else cross).append(to_message(r[1:mem - 4]))
        elif kind == LEXICAL:
            hits[int(r[1])] = float(r[mem - 1])
        elif kind == EPISODE:
            episode_scores[int(r[1])] = float(r[mem - 1])
        elif kind in (AVGDL_MESSAGES, AVGDL_EPISODES):
            keep_avgdl(db, kind - AVGDL_MESSAGES, float(r[mem - 1]))
        elif kind == NEAR:
            nearest[int(r[1])] = float(r[mem - 1])
        else:
            recalled_rows.append(r[1:mem])
    facts.sort(key=lambda f: f.id)
    # the memories' cosines with the question, as sql_turns.load_context computes them (oldest memory first)
    cosines = cosines_of(question, sorted(blobs)) if vector and facts else {}
    # A reply sorts right after the message it answers, even when a queued turn was stored in between.
    conversation.sort(key=lambda m: (m.reply_to if m.reply_to is not None else m.id, m.id))
    cross.sort(key=lambda m: (m.created_at, m.id))
    recalled: list[StoredMessage] = []
    scores: dict[int, dict[str, float]] = {}
    if recalled_rows:
        by_id = {int(r[0]): r for r in recalled_rows}
        candidates = sql_recall.candidates(recalled_rows, hits)
        # every candidate's cosine (the rows carry theirs), the vector hits' as the search gave them: as
        # sql_vectors.candidate_cosines
        row_cosines = {int(r[0]): float(r[14]) for r in recalled_rows if r[14] is not None} if near else {}
        scores = retrieval.best(candidates, episode_scores, q.search_text, {**row_cosines, **nearest} or None,
                                q.search_limit)
        recalled = [to_message(by_id[i][:11]) for i in scores]
    return ContextRows(facts=facts, conversation=conversation, cross_surface=cross, recalled=recalled,
                       recall_scores=scores, memory_cosines=cosines)
