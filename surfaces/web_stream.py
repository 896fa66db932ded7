"""One web turn as Server-Sent Events: POST /api/messages/stream.

    event: meta    data: {"conversation_id", "message_id"[, "session"]}    the message is stored
    event: delta   data: {"text"}                                          a piece of the reply
    event: reset   data: {}                                                discard the pieces shown so far
    event: done    data: {"conversation_id", "message_id", "reply_id", "status", "reply"}
    event: error   data: {"error", "message", "status"}

The turn runs as a tracked task (`runtime.tasks`) that feeds an asyncio.Queue; the response only reads the
queue. A client that goes away stops the reading, never the turn: the reply is still stored and shows up in
the conversation's history. Errors known before the message is stored (a conversation that is not the
caller's, a store that is down) are plain JSON answers with their HTTP status, like POST /api/messages;
after that they arrive as an `error` event (also when the daemon stops before the turn ends: 503
"restarting_kept", surfaces/web_stop.py). A comment line every few seconds keeps proxies from closing a
connection while the model thinks.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Sequence
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse

from bot.pipeline import Pipeline
from bot.tasks import TaskSet
from kernel import catalog, log
from kernel.errors import Draining, InputError, NotFound, RateLimited, StoreError
from kernel.types import InboundMessage, Ingested
from surfaces.web_common import RETRY_AFTER_S, unavailable
from surfaces.web_guard import too_many

logger = log.get("hilo.web.stream")

KEEPALIVE_S = 15.0
Event = tuple[str, dict[str, Any]]
TERMINAL = ("done", "error")


def sse(kind: str, data: dict[str, Any]) -> bytes:
    return f"event: {kind}\ndata: {json.dumps(data, ensure_ascii=False)}\n\n".encode()


def _failure(exc: BaseException, lang: str) -> tuple[int, str, dict[str, object]]:
    if isinstance(exc, InputError):
        return (413 if exc.key == "message_too_long" else 400), exc.key, exc.params
    if isinstance(exc, NotFound):
        return 404, "not_found", {}
    if isinstance(exc, RateLimited):
        return 429, "rate_limited", {"seconds": exc.wait}
    if isinstance(exc, StoreError):  # down, locked, full or broken: the person is told to try again
        return 503, "store_unavailable", {}
    return 500, "internal_error", {}


async def stream_turn(
    request: Request, pipeline: Pipeline, tasks: TaskSet, msg: InboundMessage, *,
    new_session: str | None = None, bound: asyncio.Future[None] | None = None,
    limits: Sequence[tuple[str, int, int]] = (),
) -> Response:
    """Start the turn of `msg` (`limits`: Pipeline.take's); answer with its events (or a JSON error if it failed
    before being stored: 429 with Retry-After when a rate limit was reached)."""
    queue: asyncio.Queue[Event] = asyncio.Queue()  # unbounded: the turn never waits for a slow reader
    lang = msg.language or "en"

    async def on_ingested(turn: Ingested) -> None:
        meta: dict[str, Any] = {"conversation_id": turn.conversation_id, "message_id": turn.message.id}
        if new_session:
            meta["session"] = new_session
        queue.put_nowait(("meta", meta))

    async def on_delta(text: str, reset: bool) -> None:
        queue.put_nowait(("reset", {}) if reset else ("delta", {"text": text}))

    async def run() -> None:
        try:
            out = await pipeline.handle(msg, on_delta=on_delta, on_ingested=on_ingested, limits=limits)
        except Exception as exc:
            status, key, params = _failure(exc, lang)
            if status == 500:
                logger.error("web.stream_failed", error=type(exc).__name__)
            message = catalog.t(key, lang, **params)
            event: dict[str, Any] = {"error": key, "message": message, "status": status}
            if status == 429:  # before the message was stored: answered as JSON with Retry-After (below)
                event["seconds"] = params["seconds"]
            if status == 503:
                event["retry_after"] = RETRY_AFTER_S
            queue.put_nowait(("error", event))
            return
        done: dict[str, Any] = {
            "conversation_id": out.conversation_id, "message_id": out.message_id, "reply_id": out.reply_id,
            "status": out.status, "reply": out.text or None,
        }
        if new_session and out.status == "command":  # a command is answered without a `meta` event
            done["session"] = new_session
        queue.put_nowait(("done", done))

    try:
        tasks.spawn(run(), name="web.stream_turn")
    except Draining:  # shutting down: no new turns
        return unavailable(request, "restarting")
    first = await queue.get()
    if first[0] == "error":
        data = first[1]
        if data["status"] == 429:
            return too_many(request, data["seconds"])
        if data["status"] == 503:
            return unavailable(request, data["error"])
        return JSONResponse({"error": data["error"], "message": data["message"]}, status_code=data["status"])
    return StreamingResponse(_events(first, queue, bound, lang), media_type="text/event-stream", headers={
        "cache-control": "no-store", "x-accel-buffering": "no",  # nginx: pass each event through at once
    })


async def _events(first: Event, queue: asyncio.Queue[Event], bound: asyncio.Future[None] | None,
                  lang: str) -> AsyncIterator[bytes]:
    """The turn's events as they come; at the stop's `bound` (bot/shutdown.py: the daemon stops and uvicorn would
    cut the stream) an `error` event, 503 "restarting_kept": the message is stored and the turn goes on."""
    yield sse(*first)
    if first[0] in TERMINAL:
        return
    stop: asyncio.Future[None] = bound if bound is not None else asyncio.get_running_loop().create_future()
    while True:
        getter: asyncio.Future[Any] = asyncio.ensure_future(queue.get())
        done, _ = await asyncio.wait({getter, stop}, timeout=KEEPALIVE_S, return_when=asyncio.FIRST_COMPLETED)
        if getter not in done:
            getter.cancel()
            if stop.done():
                yield sse("error", {"error": "restarting_kept", "message": catalog.t("restarting_kept", lang),
                                    "status": 503, "retry_after": RETRY_AFTER_S})
                return
            yield b": keep-alive\n\n"
            continue
        kind, data = getter.result()
        # Events already waiting go out in one write (a fast model queues many deltas at once: one write each
        # was a third of the loop's time at c=8 with the echo model); each is still its own SSE event.
        events = [sse(kind, data)]
        while kind not in TERMINAL and not queue.empty():
            kind, data = queue.get_nowait()
            events.append(sse(kind, data))
        yield b"".join(events)
        if kind in TERMINAL:
            return
