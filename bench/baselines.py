"""The baselines of bench/context_bench.py: what a peer project does for one turn, on the same database.

Both run on the data hilo runs on, through the same driver (sqlite3 on a worker thread, one asyncio.to_thread
hop per query, autocommit, the pragmas hilo sets; asyncpg on one connection held for the run, so every query is
one round trip and nothing is reset between them). Every query is one awaited call: round trips = statements.

  fts   the earlier baseline: dedup check, user, identity, conversation, insert, update, recent history,
        cross-surface, facts, and a full-text query matched over everyone's messages, then filtered by owner
        (SQLite: its index holds each person's words apart), ranked by the engine's BM25 (stops before the
        model: no reply written)
  seed  the seed pattern (the design's "Performance budget"): the person's conversations, their messages of the
        last 24 h, get-or-create the channel conversation, insert the user message; after the model: insert
        the reply, update the conversation (`seed_turn`; bench/web_load_gen.py serves the same turn behind hilo's
        web API, on tables of its own: SEED_SCHEMA)
"""

from __future__ import annotations

import asyncio
import re
import sqlite3
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from kernel import tokens

Sentence = Callable[[], str]
#: The next turn of a baseline: (the person's handle, what they say). Each runner of bench/context_bench.py has
#: people of its own, so that no row writes into a conversation another row's turns read.
NextTurn = Callable[[], tuple[str, str]]


class Conn:
    """One connection as a peer uses it: `q(sql, *args)` is one awaited query. SQL is written once with `$n`
    placeholders (SQLite reads them as `?n`); `ts(moment)` is a timestamp as the backend stores it."""

    dialect = ""

    def __init__(self) -> None:
        self.queries = 0

    async def q(self, sql: str, *args: Any) -> list[Any]:
        raise NotImplementedError

    def ts(self, moment: datetime) -> Any:
        raise NotImplementedError

    async def close(self) -> None:
        raise NotImplementedError


class SqliteConn(Conn):
    dialect = "sqlite"

    def __init__(self, path: str) -> None:
        super().__init__()
        self.conn = sqlite3.connect(path, check_same_thread=False, isolation_level=None)
        for pragma in ("journal_mode = WAL", "busy_timeout = 5000", "foreign_keys = ON", "synchronous = NORMAL"):
            self.conn.execute(f"PRAGMA {pragma}")

    async def q(self, sql: str, *args: Any) -> list[Any]:
        self.queries += 1
        text = re.sub(r"\$(\d+)", r"?\1", sql)
        return await asyncio.to_thread(lambda: self.conn.execute(text, args).fetchall())

    def ts(self, moment: datetime) -> Any:
        return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")

    async def close(self) -> None:
        self.conn.close()


class PgConn(Conn):
    dialect = "postgres"

    def __init__(self, conn: Any) -> None:
        super().__init__()
        self.conn = conn

    @classmethod
    async def connect(cls, dsn: str) -> PgConn:
        import asyncpg

        return cls(await asyncpg.connect(dsn))

    async def q(self, sql: str, *args: Any) -> list[Any]:
        self.queries += 1
        return list(await self.conn.fetch(sql, *args))

    def ts(self, moment: datetime) -> Any:
        return moment

    async def close(self) -> None:
        await self.conn.close()


def _singleton(conn: Conn) -> str:
    return "1" if conn.dialect == "sqlite" else "true"


def _search_sql(conn: Conn, words: list[str], user_id: int) -> tuple[str, str]:
    """The full-text query of the fts baseline: matched over every message, the owner filtered after (SQLite's
    index holds each person's words apart since migration 0033: there the match is already the person's), ranked
    by the engine's own BM25."""
    if conn.dialect == "sqlite":
        terms = " OR ".join(f'"u{int(user_id)}x{w}"' for w in words)
        return ("SELECT m.id, m.content FROM messages_fts f JOIN messages m ON m.id = f.rowid "
                "WHERE messages_fts MATCH $1 AND m.user_id = $2 ORDER BY bm25(messages_fts) LIMIT 20", terms)
    return ("SELECT m.id, m.content FROM messages m, to_tsquery('simple', $1) AS tq "
            "WHERE m.search @@ tq AND m.user_id = $2 ORDER BY ts_rank(m.search, tq) DESC LIMIT 20",
            " | ".join(f"'{w}'" for w in words))


async def _run(conn: Conn, turns: int, next_turn: NextTurn,
               turn: Callable[[str, str], Awaitable[tuple[float, float]]]) -> dict[str, list[float]]:
    """Run `turn(handle, text)` (-> context ms, pre-model ms) `turns` times; count its queries."""
    out: dict[str, list[float]] = {"context_ms": [], "pre_model_ms": [], "statements": [], "round_trips": []}
    for _ in range(turns):
        start = conn.queries
        ctx_ms, pre_ms = await turn(*next_turn())
        out["context_ms"].append(ctx_ms)
        out["pre_model_ms"].append(pre_ms)
        out["statements"].append(conn.queries - start)
        out["round_trips"].append(conn.queries - start)
    return out


async def run_fts(conn: Conn, turns: int, next_turn: NextTurn, cross_hours: int) -> dict[str, list[float]]:
    one = _singleton(conn)

    async def turn(handle: str, text: str) -> tuple[float, float]:
        t0 = time.perf_counter()
        ext = f"bench-fts-{uuid.uuid4().hex}"
        await conn.q("SELECT 1 FROM messages WHERE surface = 'telegram' AND external_id = $1", ext)
        [(uid,)] = await conn.q("SELECT id FROM users WHERE handle = $1", handle)
        await conn.q("SELECT user_id FROM identities WHERE surface = 'telegram' AND external_user_id = $1", handle)
        [(cid,)] = await conn.q("SELECT id FROM conversations WHERE user_id = $1 AND surface = 'telegram' "
                                f"AND singleton = {one}", uid)
        now = datetime.now(UTC)
        await conn.q("INSERT INTO messages (conversation_id, user_id, surface, role, content, token_count, "
                     "external_id, created_at, metadata) VALUES ($1, $2, 'telegram', 'user', $3, $4, $5, $6, '{}')",
                     cid, uid, text, tokens.count(text), ext, conn.ts(now))
        await conn.q("UPDATE conversations SET updated_at = $1 WHERE id = $2", conn.ts(now), cid)
        t1 = time.perf_counter()
        await conn.q("SELECT id, role, content, token_count FROM messages WHERE conversation_id = $1 "
                     "ORDER BY id DESC LIMIT 50", cid)
        since = conn.ts(datetime.now(UTC) - timedelta(hours=cross_hours))
        await conn.q("SELECT id, content, token_count FROM messages WHERE user_id = $1 AND surface <> 'telegram' "
                     "AND created_at >= $2 ORDER BY created_at DESC LIMIT 20", uid, since)
        await conn.q("SELECT content FROM memories WHERE user_id = $1", uid)
        sql, match = _search_sql(conn, re.findall(r"\w+", text.lower())[:8], uid)
        await conn.q(sql, match, uid)
        t2 = time.perf_counter()
        return (t2 - t1) * 1000, (t2 - t0) * 1000

    return await _run(conn, turns, next_turn, turn)


#: The seed pattern's tables when it runs on a database of its own (bench/web_load_gen.py `seed`, behind hilo's web
#: API): the columns and the conversation key its queries use, as a peer project keeps them; nothing for recall.
SEED_SCHEMA = (
    "CREATE TABLE IF NOT EXISTS users (id INTEGER PRIMARY KEY, handle TEXT UNIQUE NOT NULL, created_at TEXT)",
    "CREATE TABLE IF NOT EXISTS conversations (id INTEGER PRIMARY KEY, user_id INTEGER NOT NULL, surface TEXT, "
    "singleton INTEGER NOT NULL DEFAULT 0, created_at TEXT, updated_at TEXT)",
    "CREATE UNIQUE INDEX IF NOT EXISTS conversations_singleton ON conversations (user_id, surface) "
    "WHERE singleton = 1",
    "CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, conversation_id INTEGER, user_id INTEGER, "
    "surface TEXT, role TEXT, content TEXT, token_count INTEGER, external_id TEXT, created_at TEXT, metadata TEXT, "
    "reply_to INTEGER)",
    "CREATE INDEX IF NOT EXISTS messages_user_time ON messages (user_id, created_at)",
)


@dataclass(frozen=True, slots=True)
class SeedTurn:
    """One turn of the seed pattern: its conversation, the person's message, the reply, and the time to the end of
    the context read and to the model call (ms)."""

    conversation_id: int
    message_id: int
    reply: str
    context_ms: float
    pre_model_ms: float


def _ok(history: list[dict[str, str]]) -> str:
    return "ok"


async def seed_turn(conn: Conn, handle: str, text: str, surface: str = "telegram",
                    answer: Callable[[list[dict[str, str]]], str] = _ok) -> SeedTurn | None:
    """The seed pattern, one awaited query a step: the person's conversations, their messages of the last 24 h,
    get-or-create their conversation on `surface`, insert the message; `answer(history)` is the model (zero
    latency); insert the reply, update the conversation. None when nobody has the handle. A person with no
    conversation yet (a web visitor's first message) costs one query more, to find them."""
    one = _singleton(conn)
    t0 = time.perf_counter()
    convs = await conn.q("SELECT c.id, c.surface, c.user_id FROM conversations c JOIN users u "
                         "ON u.id = c.user_id WHERE u.handle = $1", handle)
    if not convs:
        convs = await conn.q("SELECT NULL, NULL, id FROM users WHERE handle = $1", handle)
        if not convs:
            return None
    uid = convs[0][2]
    now = datetime.now(UTC)
    recent = await conn.q("SELECT role, content, created_at FROM messages WHERE user_id = $1 "
                          "AND created_at >= $2 ORDER BY created_at", uid, conn.ts(now - timedelta(hours=24)))
    history = [{"role": role, "content": content} for role, content, _ in recent]
    t1 = time.perf_counter()
    [(cid,)] = await conn.q(
        "INSERT INTO conversations (user_id, surface, singleton, created_at, updated_at) "
        f"VALUES ($1, $3, {one}, $2, $2) ON CONFLICT (user_id, surface) WHERE singleton = {one} "
        "DO UPDATE SET surface = excluded.surface RETURNING id", uid, conn.ts(now), surface)
    [(mid,)] = await conn.q(
        "INSERT INTO messages (conversation_id, user_id, surface, role, content, token_count, external_id, "
        "created_at, metadata) VALUES ($1, $2, $7, 'user', $3, $4, $5, $6, '{}') RETURNING id",
        cid, uid, text, tokens.count(text), f"bench-seed-{uuid.uuid4().hex}", conn.ts(now), surface)
    t2 = time.perf_counter()
    history.append({"role": "user", "content": text})
    reply = answer(history)
    done = conn.ts(datetime.now(UTC))
    await conn.q("INSERT INTO messages (conversation_id, user_id, surface, role, content, token_count, "
                 "created_at, metadata, reply_to) VALUES ($1, $2, $6, 'assistant', $5, $7, $3, '{}', $4)",
                 cid, uid, done, mid, reply, surface, tokens.count(reply))
    await conn.q("UPDATE conversations SET updated_at = $1 WHERE id = $2", done, cid)
    return SeedTurn(cid, mid, reply, (t1 - t0) * 1000, (t2 - t0) * 1000)


async def run_seed(conn: Conn, turns: int, next_turn: NextTurn) -> dict[str, list[float]]:
    async def turn(handle: str, text: str) -> tuple[float, float]:
        done = await seed_turn(conn, handle, text)
        assert done is not None, handle
        return done.context_ms, done.pre_model_ms

    return await _run(conn, turns, next_turn, turn)
