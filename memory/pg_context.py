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
With a query vector the same statement also carries (`read_sql`):
- each memory's vector of the question's embedder, whose cosine Python computes (as sql_turns.load_context);
- `near`, when the database keeps vectors: the person's nearest messages by hilo_nearest (migrations/postgres/0043:
  the HNSW scan's settings are the function's own SET clauses, so it needs no transaction and no SET, also behind a
  transaction pooler), handed the same ids to leave out; they join the lexical hits in `recalled`, and every
  recalled row carries its cosine (joined from message_vectors, the question's vector parsed once).
Then memory/retrieval.py scores the candidates as sql_recall.recall does: the same rows, scores and memory cosines
as sql_turns.load_context (tests/test_pg_context.py), in one round trip instead of seven.

A turn's question is embedded while the store reads (Store.load_context's `vector`): `read_ahead` is READ with the
memories' vectors of the question's embedder and no `near`, run meanwhile, and `finish` the vector's part after it
in one statement more (`finish_sql`: the nearest messages, the rows of those the read ahead did not bring, and the
cosines of those it did): the same context as the one statement with the vector (tests/test_pg_context.py), two
round trips instead of one, the first hidden behind the embedding. Measured with the local embedder (p50 ~4 ms) at
200 people x 1,000 messages, 300 turns interleaved, the read's time beyond the embedding's: p50/p99 10.78/18.11 ms
(embedding, then the one statement) -> 7.27/15.43 ms.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from memory import pg_terms, retrieval, sql_recall, sql_vectors
from memory.memory_match import cosines as cosines_of
from memory.rows import MEMORY_COLS, MSG_COLS, Db, renumbered, to_memory, to_message
from memory.sql_turns import RECENT_AND_CROSS
from memory.stems import query_terms
from memory.store import ContextQuery, ContextRows, Memory, StoredMessage

#: What each row of READ is: its first column.
FACT, RECENT, CROSS, LEXICAL, EPISODE, AVGDL_MESSAGES, AVGDL_EPISODES, RECALLED, NEAR, COSINE = range(10)
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


@functools.cache
def finish_sql(dim: int) -> str:
    """What `read_ahead` left for the question's vector, in one statement: the person's nearest messages
    (hilo_nearest, as read_sql's `near`), the rows of those the read ahead did not bring (without neighbours, as
    read_sql reads a vector hit's), and the cosine of each row it did bring, as read_sql's join computes it.
    $1 the embedder, $2 the vector (pgvector's text form), $3 user, $4 the ids left out (the window and the current
    message), $5 how many nearest, $6 at, $7 the current message, $8 its conversation, $9 the rows read ahead."""
    vector = f"(SELECT $2::text::halfvec({dim}))"
    return (
        f"WITH near AS MATERIALIZED (SELECT n.message_id, n.cosine FROM hilo_nearest($1, {dim}, $2::text, $3, "
        "$4::bigint[], $5::int) AS n), "
        "late AS ("
        + renumbered(sql_recall.ROWS_OF, {
            1: "ARRAY[]::bigint[]", 2: "$3", 3: "$6", 4: "$4::bigint[]", 5: "$7", 6: "$8", 7: "ARRAY[]::bigint[]",
            8: "0", 9: "ARRAY(SELECT message_id FROM near WHERE message_id <> ALL($9::bigint[]))"}).format(
            cosine="nr.cosine", join="JOIN near nr ON nr.message_id = m.id")
        + ") "
        # the typed branch first: a NULL column of the first two branches would be made text
        + _row(RECALLED, message=[f"r.{c}" for c in _MSG], extra=["r.episode_id", "r.prev_id", "r.next_id",
                                                                   "r.cosine::float8"])
        + " FROM late AS r(" + ", ".join(_MSG) + ", episode_id, prev_id, next_id, cosine) UNION ALL "
        + f"SELECT {NEAR}, message_id, " + ", ".join(["NULL"] * (len(_MSG) + 2)) + ", cosine, "
        + ", ".join(["NULL"] * len(_MEMORY)) + " FROM near UNION ALL "
        + f"SELECT {COSINE}, v.message_id, " + ", ".join(["NULL"] * (len(_MSG) + 2))
        + f", 1 - (v.vector::halfvec({dim}) <=> {vector}), " + ", ".join(["NULL"] * len(_MEMORY))
        + f" FROM message_vectors v WHERE v.message_id = ANY($9::bigint[]) AND v.user_id = $3 AND v.embedder = $1 "
        f"AND v.dim = {dim}"
    )


@dataclass(slots=True)
class Read:
    """A context read's rows by kind: the memories (and their vectors of the question's embedder), the window,
    recall's hits, its rows (MSG_COLS, episode, neighbours, cosine) and the cosines known of them; `excluded`:
    the window's ids and the current message's, which recall leaves out."""

    facts: list[Memory] = field(default_factory=list)
    blobs: list[tuple[int, Any]] = field(default_factory=list)
    conversation: list[StoredMessage] = field(default_factory=list)
    cross: list[StoredMessage] = field(default_factory=list)
    hits: dict[int, float] = field(default_factory=dict)
    episode_scores: dict[int, float] = field(default_factory=dict)
    nearest: dict[int, float] = field(default_factory=dict)
    rows: list[Any] = field(default_factory=list)
    cosines: dict[int, float] = field(default_factory=dict)
    excluded: list[int] = field(default_factory=list)


async def load_context(db: Db, q: ContextQuery) -> ContextRows:
    """sql_turns.load_context in one statement (READ, or read_sql's variant with a query vector)."""
    question = q.query_vector or ()
    near = sql_vectors.search_vector(db, q) is not None
    return _context(q, await _read(db, q, bool(question), len(question) if near else 0), near)


async def read_ahead(db: Db, q: ContextQuery) -> Read:
    """What of `q`'s context needs no query vector, read while the question is embedded (`q` names its embedder
    and has no vector yet): read_sql's statement, each memory's vector of that embedder along; `finish` ends it."""
    return await _read(db, q, bool(q.embedder), 0)


async def finish(db: Db, q: ContextQuery, read: Read) -> ContextRows:
    """The context of `read` (read_ahead's) and `q`'s vector: with one, and pgvector, recall's vector part
    (finish_sql: one statement); without one (the embedding gave nothing), the lexical context."""
    question = q.query_vector or ()
    near = sql_vectors.search_vector(db, q) is not None
    if near and q.search_limit > 0:
        _sort(db, read, await db.all(
            finish_sql(len(question)), q.embedder, pg_literal(question), q.user_id, read.excluded, q.search_limit,
            db.ts(q.at), q.current_message_id, q.conversation_id, [int(r[0]) for r in read.rows]))
    return _context(q, read, near)


async def _read(db: Db, q: ContextQuery, vector: bool, dim: int) -> Read:
    """read_sql(vector, dim)'s statement for `q` (dim > 0: with the nearest messages), its rows by kind."""
    terms = query_terms(q.search_text) if q.search_limit > 0 else []
    recent = q.recent_limit if q.conversation_id is not None else 0
    extra: list[Any] = [q.embedder] if vector else []
    if dim:
        extra += [pg_literal(q.query_vector or ()), max(q.search_limit, 0)]
    rows = await db.all(
        read_sql(vector, dim), q.user_id, db.ts(q.at), max(q.facts_limit, 0),
        q.conversation_id, q.current_message_id, recent, db.ts(q.cross_since), q.surface, max(q.cross_limit, 0),
        terms, *cached_avgdl(db), sql_recall.LEXICAL_HITS, sql_recall.EPISODE_HITS, sql_recall.EPISODE_MEMBERS,
        sql_recall.MEMBERS_CAP, *await weights(db, terms), *extra,
    )
    read = _sort(db, Read(), rows, blobs=vector)
    current = [q.current_message_id] if q.current_message_id is not None else []
    read.excluded = [m.id for m in read.conversation] + [m.id for m in read.cross] + current
    return read


_MEM = 1 + len(_MSG) + 4  # where a row's memory columns begin


def _sort(db: Db, read: Read, rows: Sequence[Any], blobs: bool = False) -> Read:
    """`rows` (read_sql's or finish_sql's) into `read`, by kind; `blobs`: the memories carry their vectors."""
    mem = _MEM
    for r in rows:
        kind = r[0]
        if kind == FACT:
            read.facts.append(to_memory(r[mem:mem + len(_MEMORY)]))
            if blobs:
                read.blobs.append((int(r[mem]), r[mem + len(_MEMORY)]))
        elif kind in (RECENT, CROSS):
            (read.conversation if kind == RECENT else read.cross).append(to_message(r[1:mem - 4]))
        elif kind == LEXICAL:
            read.hits[int(r[1])] = float(r[mem - 1])
        elif kind == EPISODE:
            read.episode_scores[int(r[1])] = float(r[mem - 1])
        elif kind in (AVGDL_MESSAGES, AVGDL_EPISODES):
            keep_avgdl(db, kind - AVGDL_MESSAGES, float(r[mem - 1]))
        elif kind == NEAR:
            read.nearest[int(r[1])] = float(r[mem - 1])
        elif kind == COSINE:
            read.cosines[int(r[1])] = float(r[mem - 1])
        else:
            read.rows.append(r[1:mem])
            if r[mem - 1] is not None:  # its cosine with the question, when the read had one
                read.cosines[int(r[1])] = float(r[mem - 1])
    return read


def _context(q: ContextQuery, read: Read, near: bool) -> ContextRows:
    """The context of `read`: the memories' cosines with `q`'s vector (if any), the window in order, and recall's
    scoring of its rows (with every row's cosine when `near`: the vector search ran)."""
    question = q.query_vector or ()
    facts = sorted(read.facts, key=lambda f: f.id)
    # the memories' cosines with the question, as sql_turns.load_context computes them (oldest memory first)
    cosines = cosines_of(question, sorted(read.blobs)) if question and facts else {}
    # A reply sorts right after the message it answers, even when a queued turn was stored in between.
    conversation = sorted(read.conversation, key=lambda m: (m.reply_to if m.reply_to is not None else m.id, m.id))
    cross = sorted(read.cross, key=lambda m: (m.created_at, m.id))
    recalled: list[StoredMessage] = []
    scores: dict[int, dict[str, float]] = {}
    if read.rows:
        by_id = {int(r[0]): r for r in read.rows}
        candidates = sql_recall.candidates(read.rows, read.hits)
        # every candidate's cosine (the rows carry theirs), the vector hits' as the search gave them: as
        # sql_vectors.candidate_cosines
        row_cosines = {**read.cosines, **read.nearest} if near else {}
        scores = retrieval.best(candidates, read.episode_scores, q.search_text, row_cosines or None, q.search_limit)
        recalled = [to_message(by_id[i][:11]) for i in scores]
    return ContextRows(facts=facts, conversation=conversation, cross_surface=cross, recalled=recalled,
                       recall_scores=scores, memory_cosines=cosines)
