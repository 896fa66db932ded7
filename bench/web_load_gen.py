"""The processes of bench/web_load.py besides `hilo serve`: the bare endpoint, the seed pattern's endpoint and the
HTTP load generator.

    python -m bench.web_load_gen bare --port P --db FILE      Starlette + uvicorn; POST /messages reads the JSON
                                                             body and inserts one row (sqlite3, WAL, through
                                                             asyncio.to_thread, as an endpoint would); POST
                                                             /stream does the same, then streams three SSE events
    python -m bench.web_load_gen seed --port P --db FILE      the seed pattern behind hilo's web API (`seed_app`):
                                                             POST /api/session, /api/messages, /api/messages/stream
    python -m bench.web_load_gen setup --url U --visitors N --history H   N web visitors (real session tokens from
                                                             POST /api/session), each with a conversation of H turns
                                                             already answered; prints them as JSON
    python -m bench.web_load_gen load --url U --path P --concurrency C --requests R --visitors FILE [--stream]
                                                             R requests by C workers over one keep-alive pool;
                                                             worker w sends as visitors w, w + C, ... in turn (no
                                                             two workers share a conversation); prints JSON

The generator is httpx (AsyncClient, keep-alive) in its own process; it reports its own CPU time so the
bench can tell when it, not the server, is the limit.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import random
import resource
import sqlite3
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable
from datetime import UTC, datetime
from typing import Any

import httpx

from bench.baselines import SEED_SCHEMA, SeedTurn, SqliteConn, seed_turn
from bench.memory_filler import user_line


def bare_app(db: str) -> Any:
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    conn = sqlite3.connect(db, check_same_thread=False, isolation_level=None)
    for pragma in ("journal_mode = WAL", "busy_timeout = 5000", "synchronous = NORMAL"):
        conn.execute(f"PRAGMA {pragma}")
    conn.execute("CREATE TABLE IF NOT EXISTS messages (id INTEGER PRIMARY KEY, conversation_id INTEGER, "
                 "user_id INTEGER, surface TEXT, role TEXT, content TEXT, token_count INTEGER, "
                 "external_id TEXT UNIQUE, created_at TEXT, metadata TEXT)")

    def insert(text: str, conversation_id: int) -> int:
        row = conn.execute(
            "INSERT INTO messages (conversation_id, user_id, surface, role, content, token_count, external_id, "
            "created_at, metadata) VALUES (?, 1, 'web', 'user', ?, 0, ?, ?, '{}') RETURNING id",
            (conversation_id, text, uuid.uuid4().hex, datetime.now(UTC).isoformat())).fetchone()
        return int(row[0])

    async def post(request: Request) -> Response:
        body = await request.json()
        new_id = await asyncio.to_thread(insert, body["text"], body.get("conversation_id") or 0)
        return JSONResponse({"conversation_id": body.get("conversation_id"), "reply": "ok", "status": "ok",
                             "message_id": new_id})

    async def stream(request: Request) -> Response:
        body = await request.json()
        new_id = await asyncio.to_thread(insert, body["text"], body.get("conversation_id") or 0)

        return _sse("start", {"message_id": new_id}, "ok")

    return Starlette(routes=[Route("/messages", post, methods=["POST"]), Route("/stream", stream, methods=["POST"]),
                             Route("/healthz", _health)], lifespan=_closing(conn.close))


def seed_app(db: str) -> Any:
    """The seed pattern (docs/architecture.md, "Performance budget"; bench/baselines.py `seed_turn`, as
    bench/context_bench.py runs it) behind hilo's web API, on tables of its own (`SEED_SCHEMA`), through the
    baselines' driver (sqlite3, asyncio.to_thread per query, autocommit); its zero-latency model answers with the
    question's echo. POST /api/session makes the visitor (a random token, its handle); POST /api/messages and
    /api/messages/stream take the same body as hilo's, so `setup` and `load` drive it unchanged."""
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, Response
    from starlette.routing import Route

    conn = SqliteConn(db)
    for ddl in SEED_SCHEMA:
        conn.conn.execute(ddl)

    def echo(history: list[dict[str, str]]) -> str:
        return f"You said: {history[-1]['content']}"

    async def session(request: Request) -> Response:
        token = uuid.uuid4().hex
        await conn.q("INSERT INTO users (handle, created_at) VALUES ($1, $2)", token, conn.ts(datetime.now(UTC)))
        return JSONResponse({"session": token})

    async def turn(request: Request) -> SeedTurn | None:
        handle = request.headers.get("authorization", "").removeprefix("Bearer ")
        body = await request.json()
        return await seed_turn(conn, handle, body["text"], "web", echo)

    def unknown() -> Response:
        return JSONResponse({"error": "unknown visitor"}, status_code=401)

    async def post(request: Request) -> Response:
        out = await turn(request)
        return unknown() if out is None else JSONResponse(
            {"conversation_id": out.conversation_id, "reply": out.reply, "status": "ok",
             "message_id": out.message_id})

    async def stream(request: Request) -> Response:
        out = await turn(request)
        return unknown() if out is None else _sse("meta", {"conversation_id": out.conversation_id}, out.reply)

    return Starlette(routes=[Route("/api/session", session, methods=["POST"]),
                             Route("/api/messages", post, methods=["POST"]),
                             Route("/api/messages/stream", stream, methods=["POST"]), Route("/healthz", _health)],
                     lifespan=_closing(conn.conn.close))


def _closing(close: Callable[[], None]) -> Callable[[Any], contextlib.AbstractAsyncContextManager[None]]:
    """An app's lifespan that closes its database connection at shutdown (uvicorn's, or a test's
    `app.router.lifespan_context(app)`)."""
    @contextlib.asynccontextmanager
    async def lifespan(app: Any) -> AsyncIterator[None]:
        try:
            yield
        finally:
            close()

    return lifespan


def _sse(first: str, data: dict[str, Any], text: str) -> Any:
    """The stream both endpoints answer with: event `first` with `data`, one delta of `text`, done."""
    from starlette.responses import StreamingResponse

    async def events() -> Any:
        yield f"event: {first}\ndata: {json.dumps(data)}\n\n"
        yield f"event: delta\ndata: {json.dumps({'text': text})}\n\n"
        yield f"event: done\ndata: {json.dumps({'status': 'ok'})}\n\n"

    return StreamingResponse(events(), media_type="text/event-stream")


async def _health(request: Any) -> Any:
    from starlette.responses import PlainTextResponse

    return PlainTextResponse("ok")


def serve(app: Any, port: int) -> None:
    import uvicorn

    uvicorn.run(app, host="127.0.0.1", port=port, log_config=None, log_level="warning", access_log=False)


async def setup(url: str, visitors: int, history: int, seed: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    out: list[dict[str, Any]] = []
    async with httpx.AsyncClient(base_url=url, timeout=60) as client:
        for v in range(visitors):
            token = (await client.post("/api/session")).json()["session"]
            headers = {"authorization": f"Bearer {token}"}
            cid = None
            lang = "es" if v % 2 else "en"
            for _ in range(history):
                r = await client.post("/api/messages", json={"text": user_line(lang, rng), "conversation_id": cid},
                                      headers=headers)
                r.raise_for_status()
                cid = r.json()["conversation_id"]
            out.append({"token": token, "conversation_id": cid, "lang": lang})
    return out


async def load(url: str, path: str, concurrency: int, requests: int, visitors: list[dict[str, Any]],
               stream: bool, seed: int) -> dict[str, Any]:
    rng = random.Random(seed)
    latencies: list[float] = []
    errors = 0
    counter = iter(range(requests))
    limits = httpx.Limits(max_connections=concurrency, max_keepalive_connections=concurrency)
    async with httpx.AsyncClient(base_url=url, timeout=120, limits=limits) as client:
        async def worker(w: int) -> None:
            nonlocal errors
            mine = visitors[w::concurrency] or [visitors[w % len(visitors)]]
            for k, _ in enumerate(counter):
                v = mine[k % len(mine)]
                body = {"text": user_line(v["lang"], rng), "conversation_id": v["conversation_id"]}
                headers = {"authorization": f"Bearer {v['token']}"}
                t0 = time.perf_counter()
                r = await client.post(path, json=body, headers=headers)
                data = r.content
                latencies.append((time.perf_counter() - t0) * 1000)
                ok = r.status_code == 200 and (b"event: done" in data if stream else b'"status":"ok"' in data)
                errors += not ok

        cpu0, t0 = time.process_time(), time.perf_counter()
        await asyncio.gather(*(worker(w) for w in range(concurrency)))
        wall, cpu = time.perf_counter() - t0, time.process_time() - cpu0
    latencies.sort()
    n = len(latencies)
    return {"requests": n, "errors": errors, "seconds": wall, "rps": n / wall,
            "p50_ms": latencies[n // 2], "p99_ms": latencies[min(n - 1, int(n * 0.99))],
            "gen_cpu_frac": cpu / wall, "gen_max_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024}


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser()
    sub = p.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("bare")
    b.add_argument("--port", type=int, required=True)
    b.add_argument("--db", required=True)
    sd = sub.add_parser("seed")
    sd.add_argument("--port", type=int, required=True)
    sd.add_argument("--db", required=True)
    s = sub.add_parser("setup")
    s.add_argument("--url", required=True)
    s.add_argument("--visitors", type=int, default=64)
    s.add_argument("--history", type=int, default=6)
    s.add_argument("--seed", type=int, default=14)
    ld = sub.add_parser("load")
    ld.add_argument("--url", required=True)
    ld.add_argument("--path", required=True)
    ld.add_argument("--concurrency", type=int, required=True)
    ld.add_argument("--requests", type=int, required=True)
    ld.add_argument("--visitors", required=True, help="the JSON file `setup` printed")
    ld.add_argument("--stream", action="store_true")
    ld.add_argument("--seed", type=int, default=1)
    args = p.parse_args(argv)
    if args.cmd in ("bare", "seed"):
        serve((bare_app if args.cmd == "bare" else seed_app)(args.db), args.port)
    elif args.cmd == "setup":
        print(json.dumps(asyncio.run(setup(args.url, args.visitors, args.history, args.seed))))
    else:
        with open(args.visitors) as f:
            visitors = json.load(f)
        print(json.dumps(asyncio.run(load(args.url, args.path, args.concurrency, args.requests, visitors,
                                          args.stream, args.seed))))
    return 0


if __name__ == "__main__":
    sys.exit(main())
