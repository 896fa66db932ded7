"""The web rows of bench/context_bench.py: hilo's web turn and a bare Starlette endpoint doing one insert.

Both are called in process through raw ASGI messages (bench/turn_instructions.py `post_json`: no HTTP client, whose
cyclic garbage the collector would free inside the other rows' timed turns) and timed the same way, from sending
the request to reading the JSON answer. hilo's turn is the real app (create_app with the web surface only) with a
model that answers at once, for people of its own (each a visitor token whose web identity is theirs, in one
conversation each): its time is the pre-model work plus the reply's write and the HTTP layers. The bare endpoint
reads the JSON body and inserts one message (sqlite3 through asyncio.to_thread; an asyncpg pool, as an endpoint
holds one).
"""

from __future__ import annotations

import contextlib
import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from bench.baselines import Conn, Sentence
from bench.turn_instructions import post_json
from bot.app import create_app
from bot.config import Settings
from bot.models.base import Completion
from kernel.types import ModelCallRecord
from surfaces.web import WebSurface

Runner = Callable[[int], Awaitable[dict[str, list[float]]]]


@dataclass
class _Answer:
    completion: Completion
    calls: list[ModelCallRecord] = field(default_factory=list)


class InstantChain:
    """A model chain that answers at once: what is left of a turn is hilo's own work."""

    async def complete(self, messages: Any) -> _Answer:
        return _Answer(Completion("ok", 1, 1), [ModelCallRecord("bench", "bench", 1, 1, 0, "ok")])

    async def aclose(self) -> None:
        return None


def _result(turn_ms: list[float], stmts: list[int], trips: list[int]) -> dict[str, list[float]]:
    return {"turn_ms": turn_ms, "statements": stmts, "round_trips": trips}  # type: ignore[dict-item]


@contextlib.asynccontextmanager
async def hilo_web(settings: Settings, store: Any, raw: Conn, people: Sequence[tuple[int, str]],
                   say: Callable[[str], str], pick: Callable[[int], int]) -> AsyncIterator[Runner]:
    """A runner of hilo's web turn for `people` ((user id, language); each gets a web identity, inserted through
    `raw`, and one conversation, made by a first request): each turn is one person's, `pick(len(people))`."""
    web = WebSurface(settings)
    app = create_app(settings, store=store, chain=InstantChain(), surfaces=[web])
    async with app.router.lifespan_context(app):
        sessions: list[tuple[str, int, str]] = []
        for user_id, lang in people:
            visitor, token = web.sessions.issue()
            await raw.q("INSERT INTO identities (surface, external_user_id, user_id, created_at) "
                        "VALUES ('web', $1, $2, $3)", visitor, user_id, raw.ts(datetime.now(UTC)))
            first = await post_json(app, "/api/messages", json.dumps({"text": say(lang)}).encode(), token)
            sessions.append((token, first["conversation_id"], lang))

        async def run(turns: int) -> dict[str, list[float]]:
            turn_ms: list[float] = []
            stmts: list[int] = []
            trips: list[int] = []
            for _ in range(turns):
                token, cid, lang = sessions[pick(len(sessions))]
                body = json.dumps({"text": say(lang), "conversation_id": cid}).encode()
                before = dict(store.counters)
                t0 = time.perf_counter()
                answer = await post_json(app, "/api/messages", body, token)
                turn_ms.append((time.perf_counter() - t0) * 1000)
                assert answer["status"] == "ok", answer
                stmts.append(store.counters["statements"] - before["statements"])
                trips.append(store.counters["round_trips"] - before["round_trips"])
            return _result(turn_ms, stmts, trips)

        yield run


@contextlib.asynccontextmanager
async def bare_endpoint(insert: Callable[[str], Awaitable[int]], sentence: Sentence) -> AsyncIterator[Runner]:
    """A runner of a bare Starlette endpoint whose whole work is `insert(text)` (one query)."""

    async def post(request: Request) -> JSONResponse:
        body = await request.json()
        return JSONResponse({"id": await insert(body["text"])})

    app = Starlette(routes=[Route("/messages", post, methods=["POST"])])

    async def run(turns: int) -> dict[str, list[float]]:
        turn_ms: list[float] = []
        for _ in range(turns):
            t0 = time.perf_counter()
            await post_json(app, "/messages", json.dumps({"text": sentence()}).encode())
            turn_ms.append((time.perf_counter() - t0) * 1000)
        return _result(turn_ms, [1] * turns, [1] * turns)

    yield run


INSERT_ONE = ("INSERT INTO messages (conversation_id, user_id, surface, role, content, token_count, external_id, "
              "created_at, metadata) VALUES ($1, $2, 'web', 'user', $3, 0, $4, $5, '{}') RETURNING id")


def sqlite_insert(raw: Conn, conversation_id: int, user_id: int) -> Callable[[str], Awaitable[int]]:
    async def insert(text: str) -> int:
        rows = await raw.q(INSERT_ONE, conversation_id, user_id, text, uuid.uuid4().hex, raw.ts(datetime.now(UTC)))
        return int(rows[0][0])
    return insert


@contextlib.asynccontextmanager
async def pg_insert(dsn: str, conversation_id: int, user_id: int) -> AsyncIterator[Callable[[str], Awaitable[int]]]:
    import asyncpg

    pool = await asyncpg.create_pool(dsn, min_size=1, max_size=10)
    try:
        async def insert(text: str) -> int:
            return int(await pool.fetchval(INSERT_ONE, conversation_id, user_id, text, uuid.uuid4().hex,
                                           datetime.now(UTC)))
        yield insert
    finally:
        await pool.close()
