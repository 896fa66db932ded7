"""What the SQLite queries stand on: a counting connection wrapper, timestamps, row conversion, FTS queries.

Timestamps are stored as fixed-width UTC ISO text ('YYYY-MM-DDTHH:MM:SS.ffffffZ'), so comparing the text
compares the moments, and every index on a timestamp column is an index on time.
"""

from __future__ import annotations

import json
import sqlite3
import time
from collections.abc import Iterable, Sequence
from datetime import UTC, datetime
from typing import Any

from memory.search_terms import search_terms
from memory.store import Fact, StoredMessage

Params = Sequence[Any] | dict[str, Any]

#: The columns of a message, in the order `to_message` reads them (alias `m`).
MSG_COLS = (
    "m.id, m.conversation_id, m.user_id, m.surface, m.role, m.content, m.token_count, m.external_id, "
    "m.created_at, m.metadata, m.reply_to"
)
FACT_COLS = "id, user_id, content, token_count, created_at"


class Db:
    """The connection as the queries see it: every statement is fully stepped (RETURNING rows are read
    before COMMIT) and counted in `counters["statements"]` (an executemany counts once: one prepared
    statement, like one batched call on Postgres)."""

    def __init__(
        self, conn: sqlite3.Connection, counters: dict[str, int],
        df_cache: dict[str, tuple[int, float]] | None = None,
    ) -> None:
        self.conn = conn
        self.counters = counters
        #: term -> (document frequency, monotonic expiry): see selective_terms
        self.df_cache: dict[str, tuple[int, float]] = {} if df_cache is None else df_cache

    def all(self, sql: str, params: Params = ()) -> list[Any]:
        self.counters["statements"] += 1
        return self.conn.execute(sql, params).fetchall()

    def one(self, sql: str, params: Params = ()) -> Any:
        rows = self.all(sql, params)
        return rows[0] if rows else None

    def run(self, sql: str, params: Params = ()) -> int:
        """Execute a statement without result rows; return the number of rows it changed."""
        self.counters["statements"] += 1
        return self.conn.execute(sql, params).rowcount

    def many(self, sql: str, rows: Iterable[Params]) -> int:
        """executemany; return the number of rows changed (ON CONFLICT DO NOTHING skips count 0)."""
        self.counters["statements"] += 1
        return self.conn.executemany(sql, rows).rowcount


def to_ts(moment: datetime) -> str:
    """A datetime as stored. Naive datetimes are taken as UTC."""
    if moment.tzinfo is None:
        moment = moment.replace(tzinfo=UTC)
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def from_ts(text: str) -> datetime:
    """A stored timestamp as an aware UTC datetime."""
    return datetime.fromisoformat(text)


def utcnow() -> datetime:
    return datetime.now(UTC)


def dump_metadata(metadata: dict[str, Any] | None) -> str:
    # default=str: a stray datetime or Path in platform extras must not lose the person's message.
    return json.dumps(metadata or {}, ensure_ascii=False, default=str, separators=(",", ":"))


def load_metadata(text: str | None) -> dict[str, Any]:
    if not text or text == "{}":
        return {}
    value = json.loads(text)
    return value if isinstance(value, dict) else {"value": value}


def to_message(row: Sequence[Any]) -> StoredMessage:
    """A row selected with MSG_COLS."""
    return StoredMessage(
        id=row[0], conversation_id=row[1], user_id=row[2], surface=row[3], role=row[4], content=row[5],
        token_count=row[6], external_id=row[7], created_at=from_ts(row[8]),
        metadata=load_metadata(row[9]), reply_to=row[10],
    )


def message_json(message: StoredMessage) -> dict[str, Any]:
    """A message as `inspect` shows it."""
    return {
        "id": message.id, "role": message.role, "content": message.content, "surface": message.surface,
        "external_id": message.external_id, "token_count": message.token_count,
        "created_at": to_ts(message.created_at), "reply_to": message.reply_to, "metadata": message.metadata,
    }


def to_fact(row: Sequence[Any]) -> Fact:
    """A row selected with FACT_COLS."""
    return Fact(id=row[0], user_id=row[1], content=row[2], token_count=row[3], created_at=from_ts(row[4]))


def fts_query(text: str, user_id: int, words: list[str] | None = None) -> str | None:
    """A safe FTS5 query for free text, restricted to one owner; None when there is nothing to search.

    Each search term (see memory.search_terms) becomes a quoted string: a word token holds no '"', so
    nothing the person typed is read as FTS syntax (no column filters, NEAR, '*', '^'). Terms are OR-ed
    (BM25 ranks rows matching more and rarer words first). The AND with `owner : "u<id>"` lets FTS5 skip
    through other people's rows instead of scoring them.
    """
    words = search_terms(text) if words is None else words
    if not words:
        return None
    terms = " OR ".join(f'"{word}"' for word in words)
    return f'owner : "u{int(user_id)}" AND content : ({terms})'


#: A term found in more than this share of all messages is not searched (its BM25 weight is near zero).
COMMON_TERM_SHARE = 0.05
#: At most this many terms, the rarest, are searched.
MAX_SEARCHED_TERMS = 8


#: How long a term's document frequency is trusted (seconds). Reading it costs a walk of the term's posting
#: list (about 0.5 ms for a common word), and it changes slowly; a stale figure only shifts a ranking weight.
DF_TTL_S = 600.0
DF_CACHE_MAX = 50_000


def selective_terms(db: Db, text: str) -> list[str]:
    """The search terms of `text` worth a lexical search, rarest first.

    Document frequencies come from the FTS5 vocabulary (fts5vocab), cached in `db.df_cache` for DF_TTL_S;
    terms in more than COMMON_TERM_SHARE of the messages are dropped, since scoring every row that holds
    them is what makes a search slow, and their weight in the ranking is small. Terms the index has never
    seen are dropped too: they cannot match (and are not cached, so a new word is found at once).
    """
    words = search_terms(text)
    if not words:
        return []
    now = time.monotonic()
    cache = db.df_cache
    freq = {w: hit[0] for w in words if (hit := cache.get(w)) is not None and hit[1] > now}
    missing = [w for w in words if w not in freq]
    if missing:
        if len(cache) > DF_CACHE_MAX:
            cache.clear()
        for term, doc in db.all(
            "SELECT term, doc FROM messages_fts_vocab WHERE term IN (SELECT value FROM json_each(?))",
            (json.dumps(missing),),
        ):
            freq[term] = doc
            cache[term] = (doc, now + DF_TTL_S)
    total = db.one("SELECT max(id) FROM messages")[0] or 0
    limit = max(50, int(total * COMMON_TERM_SHARE))
    kept = sorted((w for w in words if 0 < freq.get(w, 0) <= limit), key=lambda w: freq[w])
    return kept[:MAX_SEARCHED_TERMS]
