"""What the fake model provider (tests/fakes/model_server.py) does with one request, and the helpers that build it.

`ok`, `status`, `rate_limited`, `overloaded`, `slow` and `cut` are the usual answers and failures; `in_stream`,
`cut_event` and `replay` bring what the providers really send (tests/fakes/recorded_shapes.py) into a test.
"""

from __future__ import annotations

import json
import threading
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass, replace
from typing import Any

from starlette.responses import Response, StreamingResponse


@dataclass(frozen=True, slots=True)
class Behaviour:
    """What the fake does with one request. Build these with the helpers below."""

    kind: str = "ok"  # "ok" | "status" | "cut" | "in_stream" | "cut_event" | "replay"
    text: str | None = None
    status: int = 200
    headers: tuple[tuple[str, str], ...] = ()
    delay: float = 0.0  # seconds to sleep before answering (slow)
    gate: threading.Event | None = None  # held: answer only once the test sets it (at most 60 s)
    after_chunks: int = 2  # cut / in_stream / cut_event: text chunks sent before it happens
    raw: str | None = None  # in_stream: the SSE event sent; replay: the recorded stream
    body: str | None = None  # replay: the recorded JSON body
    tool: str | None = None  # calls_tool: the tool's name
    arguments: str | None = None  # calls_tool: its arguments (JSON text)


def ok(text: str | None = None) -> Behaviour:
    """Answer normally (JSON or SSE as the request asks); `text` defaults to "fake reply to: <last user>"."""
    return Behaviour("ok", text=text)


def status(code: int, headers: dict[str, str] | None = None) -> Behaviour:
    """Answer an HTTP error in the provider's error shape (503, 500, 401, 400 ...)."""
    return Behaviour("status", status=code, headers=tuple((headers or {}).items()))


def rate_limited(retry_after: float | None = 1.0, *, ms: bool = False) -> Behaviour:
    """429 with a `retry-after` header in seconds (or `retry-after-ms` when ms=True); None sends no header."""
    headers: dict[str, str] = {}
    if retry_after is not None:
        if ms:
            headers["retry-after-ms"] = str(int(retry_after * 1000))
        else:
            headers["retry-after"] = f"{retry_after:g}"
    return status(429, headers)


def overloaded() -> Behaviour:
    """Anthropic's 529 overloaded_error."""
    return status(529)


def slow(seconds: float, then: Behaviour | None = None) -> Behaviour:
    """Sleep before answering with `then` (default ok())."""
    return replace(then or ok(), delay=seconds)


def held(gate: threading.Event, then: Behaviour | None = None) -> Behaviour:
    """Answer with `then` (default ok()) only once `gate` is set: the test decides when the model "returns"."""
    return replace(then or ok(), gate=gate)


def cut(after_chunks: int = 2, text: str | None = None) -> Behaviour:
    """Stream `after_chunks` text chunks, then drop the connection (a JSON request gets a truncated body)."""
    return Behaviour("cut", text=text, after_chunks=after_chunks)


def in_stream(raw: str, after_chunks: int = 2, text: str | None = None) -> Behaviour:
    """Stream `after_chunks` text chunks, then the SSE event `raw` (e.g. a recorded in-band error), then end the
    response cleanly without [DONE] / message_stop, as OpenRouter, vLLM and Anthropic do after such an event."""
    return Behaviour("in_stream", text=text, after_chunks=after_chunks, raw=raw)


def cut_event(after_chunks: int = 2, text: str | None = None) -> Behaviour:
    """Stream `after_chunks` text chunks, then the first half of the next event's bytes, then end cleanly: a JSON
    event cut in the middle with no transport error to show for it."""
    return Behaviour("cut_event", text=text, after_chunks=after_chunks)


def calls_tool(name: str, arguments: dict[str, Any], text: str = "") -> Behaviour:
    """Answer with a call of the tool `name` (after `text`, if any) in the provider's recorded shape
    (tests/fakes/tool_answers.py); a request whose `tool_choice` is "none" gets ok() instead, as a real model
    that may not call tools answers in text."""
    return Behaviour("tool_call", text=text, tool=name, arguments=json.dumps(arguments))


def replay(stream: str | None = None, body: str | None = None) -> Behaviour:
    """Answer with recorded bytes: `stream` (SSE) to a streaming request, `body` (JSON, status 200) to a plain
    one. An Anthropic plain request with only a `stream` gets the Message that stream folds into."""
    return Behaviour("replay", raw=stream, body=body)


class Cut(Exception):
    """Raised inside a streaming body to make uvicorn drop the connection mid-response."""


BREAKS = ("cut", "in_stream", "cut_event")


def break_with(b: Behaviour, next_event: bytes) -> bytes:
    """What a breaking behaviour sends instead of `next_event` (its generator returns right after)."""
    if b.kind == "cut":
        raise Cut()
    if b.kind == "in_stream":
        return (b.raw or "").encode()
    return next_event[: len(next_event) // 2]  # cut_event


def replayed(b: Behaviour, stream: bool, fold: Callable[[str], str] | None) -> Response:
    """The response of a `replay` behaviour: its stream one event per chunk, or its body (`fold` turns a stream
    into the body a plain request gets, when only a stream was recorded)."""
    if stream:
        assert b.raw is not None, "replay(): this test sent a streaming request but recorded no stream"
        events = [event + "\n\n" for event in b.raw.strip("\n").split("\n\n")]

        async def body() -> AsyncIterator[bytes]:
            for event in events:  # one event per chunk, as a server sends them
                yield event.encode()

        return StreamingResponse(body(), media_type="text/event-stream")
    raw = b.body if b.body is not None else (fold(b.raw) if fold is not None and b.raw is not None else None)
    assert raw is not None, "replay(): this test sent a plain request but recorded no body"
    return Response(raw, media_type="application/json")
