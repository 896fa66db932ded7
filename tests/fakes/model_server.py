"""A loopback fake of the OpenAI and Anthropic HTTP APIs, scriptable per request, for the real SDKs to talk to.

Routes: POST /v1/chat/completions (JSON, or SSE ending in `data: [DONE]` with a usage chunk), POST /v1/messages
(JSON, or SSE events message_start .. message_stop with usage), POST /v1/embeddings (tests/fakes/embeddings_api.py)
and POST /v1/audio/transcriptions (multipart in, JSON {"text"} out: tests/fakes/transcriptions_api.py).
It listens on 127.0.0.1 only, on a free port, served by uvicorn in a background thread.

Scripting: each request takes the next behaviour from its model's queue (`script(model=...)`), else from the
shared queue (`enqueue(...)`), else the model's default, else `ok()`, which answers
"fake reply to: <last user message>". Structured output: an OpenAI request with `response_format` gets the
scripted text as its message content (the JSON the model wrote); an Anthropic request whose `tool_choice` forces
a tool gets a `tool_use` block of that tool whose input is the scripted text's JSON object.
Tools: `calls_tool(name, arguments)` answers with a call of that tool in the recorded shapes
(tests/fakes/tool_answers.py), unless the request's `tool_choice` is "none" (then it answers ok()).
Behaviours: `ok(text)`, `rate_limited(retry_after)`, `status(503)`,
`overloaded()` (529), `slow(seconds)`, `cut(after_chunks)` (connection dropped), `in_stream(raw, after_chunks)` (an
event such as a recorded in-band error, then the stream ends), `cut_event(after_chunks)` (half an event, then a
clean end) and `replay(stream=..., body=...)`, which answers with a recorded stream or body byte for byte
(tests/fakes/recorded_shapes.py holds the providers' own recordings).

Use from a test module: `from tests.fakes import model_server as fake`, then module-level
`model_server_session = fake.model_server_session; model_server = fake.model_server` (or list
"tests.fakes.model_server" in a conftest's `pytest_plugins`), then take the `model_server` fixture; its `.base_url`
is "http://127.0.0.1:PORT" (OpenAI SDK: base_url + "/v1"; Anthropic SDK: base_url as is).
"""

from __future__ import annotations

import asyncio
import json
import threading
from collections import deque
from collections.abc import AsyncIterator, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes import embeddings_api, multipart, tool_answers, transcriptions_api
from tests.fakes.loopback import ThreadedServer
from tests.fakes.model_behaviours import (
    BREAKS,
    Behaviour,
    Cut,
    break_with,
    calls_tool,
    cut,
    cut_event,
    held,
    in_stream,
    ok,
    overloaded,
    rate_limited,
    replay,
    replayed,
    slow,
    status,
)
from tests.fakes.prompt_cache import PromptCache, words
from tests.fakes.recorded_shapes import anthropic_message_of

__all__ = [
    "Behaviour", "FakeModelServer", "RecordedRequest", "calls_tool", "cut", "cut_event", "held", "in_stream",
    "model_server",
    "model_server_session", "ok", "overloaded", "rate_limited", "replay", "slow", "status",
]


@dataclass(frozen=True, slots=True)
class RecordedRequest:
    path: str
    model: str
    body: dict[str, Any]
    headers: dict[str, str]

    @property
    def stream(self) -> bool:
        return bool(self.body.get("stream"))


@dataclass
class _Script:
    queue: deque[Behaviour] = field(default_factory=deque)
    default: Behaviour | None = None


def _last_user(messages: Iterable[Any]) -> str:
    for message in reversed(list(messages)):
        if isinstance(message, dict) and message.get("role") == "user":
            content = message.get("content")
            if isinstance(content, list):  # Anthropic content blocks
                return " ".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
            return str(content)
    return ""


def _words(text: str) -> list[str]:
    parts = text.split(" ")
    return [p + (" " if i < len(parts) - 1 else "") for i, p in enumerate(parts)]


def _sse(data: Any, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    payload = data if isinstance(data, str) else json.dumps(data)
    return f"{head}data: {payload}\n\n".encode()


class FakeModelServer:
    """The fake provider. `start()` / `stop()`; `reset()` between tests; `.requests` records what arrived."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._shared: deque[Behaviour] = deque()
        self._scripts: dict[str, _Script] = {}
        self._by_text: list[tuple[str, Behaviour]] = []
        self.requests: list[RecordedRequest] = []
        #: prompt caching as the providers report it (tests/fakes/prompt_cache.py); `reset()` empties it
        self.cache = PromptCache()
        self.app = Starlette(routes=[
            Route("/v1/chat/completions", self._openai, methods=["POST"]),
            Route("/v1/messages", self._anthropic, methods=["POST"]),
            Route("/v1/embeddings", self._embeddings, methods=["POST"]),
            Route("/v1/audio/transcriptions", self._transcriptions, methods=["POST"]),
        ])
        self._loopback = ThreadedServer(self.app, name="fake-model-server")

    @property
    def base_url(self) -> str:
        return self._loopback.base_url

    @property
    def port(self) -> int:
        return self._loopback.port

    # -- scripting ----------------------------------------------------------------------------------------
    def enqueue(self, *behaviours: Behaviour) -> None:
        """Behaviours for the next requests of any model (after that model's own script)."""
        with self._lock:
            self._shared.extend(behaviours)

    def script(self, model: str, behaviours: Iterable[Behaviour] = (), default: Behaviour | None = None) -> None:
        """Behaviours for the next requests naming `model`; `default` answers once they are used up."""
        with self._lock:
            entry = self._scripts.setdefault(model, _Script())
            entry.queue.extend(behaviours)
            if default is not None:
                entry.default = default

    def when_text(self, contains: str, behaviour: Behaviour) -> None:
        """Every request whose last user message contains `contains` gets `behaviour` (before any script): for
        requests that arrive concurrently, in no order, and must be told apart by what they ask."""
        with self._lock:
            self._by_text.append((contains, behaviour))

    def reset(self) -> None:
        with self._lock:
            self._by_text.clear()
            self._shared.clear()
            self._scripts.clear()
            self.requests = []
        self.cache.reset()

    async def wait_requests(self, count: int, timeout: float = 10.0) -> list[RecordedRequest]:
        """The first `count` requests, once they have arrived (polled: they arrive on the server's thread)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + timeout
        while len(self.requests) < count:
            if loop.time() > deadline:
                raise AssertionError(f"the fake provider got {len(self.requests)} requests, not {count}")
            await asyncio.sleep(0.005)
        with self._lock:
            return self.requests[:count]

    def requests_for(self, model: str) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.model == model]

    def _next(self, model: str) -> Behaviour:
        with self._lock:
            entry = self._scripts.get(model)
            if entry and entry.queue:
                return entry.queue.popleft()
            if self._shared:
                return self._shared.popleft()
            if entry and entry.default is not None:
                return entry.default
            return ok()

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._loopback.start()

    def stop(self) -> None:
        self._loopback.stop()

    # -- routes -------------------------------------------------------------------------------------------
    async def _receive(self, request: Request, path: str,
                       body: dict[str, Any] | None = None) -> tuple[RecordedRequest, Behaviour]:
        if body is None:
            body = json.loads(await request.body() or b"{}")
        record = RecordedRequest(path, str(body.get("model", "")), body, dict(request.headers))
        with self._lock:
            self.requests.append(record)
        asked = _last_user(body.get("messages", []))
        with self._lock:
            chosen = next((b for contains, b in self._by_text if contains in asked), None)
        behaviour = chosen if chosen is not None else self._next(record.model)
        if behaviour.delay:
            await asyncio.sleep(behaviour.delay)
        if behaviour.gate is not None:
            await asyncio.get_running_loop().run_in_executor(None, behaviour.gate.wait, 60.0)
        if behaviour.kind == "tool_call" and tool_answers.wants_text(body):
            behaviour = ok()
        return record, behaviour

    async def _openai(self, request: Request) -> Response:
        record, b = await self._receive(request, "/v1/chat/completions")
        if b.kind == "status":
            kind = {429: "rate_limit_exceeded", 401: "invalid_api_key"}.get(b.status, "server_error")
            return JSONResponse({"error": {"message": f"fake {b.status}", "type": kind, "code": kind}},
                                status_code=b.status, headers=dict(b.headers))
        if b.kind == "replay":
            return replayed(b, record.stream, None)
        model, messages = record.model, record.body.get("messages", [])
        text = b.text if b.text is not None else f"fake reply to: {_last_user(messages)}"
        usage: dict[str, Any] = {"prompt_tokens": sum(words(m.get("content", "")) for m in messages),
                                 "completion_tokens": len(text.split())}
        usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
        cached = self.cache.openai(model, messages)
        if cached:
            usage["prompt_tokens_details"] = {"cached_tokens": cached, "audio_tokens": 0}
        if not record.stream:
            if b.kind == "cut":
                return _truncated_json()
            message, finish = (tool_answers.openai_message(b) if b.kind == "tool_call"
                               else ({"role": "assistant", "content": text}, "stop"))
            return JSONResponse({
                "id": "chatcmpl-fake", "object": "chat.completion", "created": 0, "model": model,
                "choices": [{"index": 0, "message": message, "finish_reason": finish, "logprobs": None}],
                "usage": usage,
            })

        def chunk(delta: dict[str, Any], finish: str | None = None) -> bytes:
            return _sse({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0, "model": model,
                         "choices": [{"index": 0, "delta": delta, "finish_reason": finish, "logprobs": None}]})

        async def events() -> AsyncIterator[bytes]:
            if b.kind == "tool_call":
                for delta, finish in tool_answers.openai_deltas(b):
                    yield chunk(delta, finish)
                yield _sse({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                            "model": model, "choices": [], "usage": usage})
                yield _sse("[DONE]")
                return
            yield chunk({"role": "assistant", "content": ""})
            for i, word in enumerate(_words(text)):
                if i >= b.after_chunks and b.kind in BREAKS:
                    yield break_with(b, chunk({"content": word}))
                    return
                yield chunk({"content": word})
            yield chunk({}, "stop")
            if (record.body.get("stream_options") or {}).get("include_usage"):
                yield _sse({"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": 0,
                            "model": model, "choices": [], "usage": usage})
            yield _sse("[DONE]")

        return StreamingResponse(events(), media_type="text/event-stream")

    async def _embeddings(self, request: Request) -> Response:
        record, b = await self._receive(request, "/v1/embeddings")
        return embeddings_api.answer(record.body, b)

    async def _transcriptions(self, request: Request) -> Response:
        fields, files = multipart.parse(request.headers.get("content-type", ""), await request.body())
        # recorded: the fields, and the file's name and size (its bytes stay out of the record)
        seen = {**fields, "file": {"filename": files["file"][0], "bytes": len(files["file"][1])}} if "file" in files \
            else dict(fields)
        _, b = await self._receive(request, "/v1/audio/transcriptions", seen)
        return transcriptions_api.answer(fields, files, b)

    async def _anthropic(self, request: Request) -> Response:
        record, b = await self._receive(request, "/v1/messages")
        if b.kind == "status":
            kind = {429: "rate_limit_error", 529: "overloaded_error", 401: "authentication_error",
                    400: "invalid_request_error"}.get(b.status, "api_error")
            return JSONResponse({"type": "error", "error": {"type": kind, "message": f"fake {b.status}"}},
                                status_code=b.status, headers=dict(b.headers))
        if b.kind == "replay":
            return replayed(b, record.stream, anthropic_message_of)
        model, messages = record.model, record.body.get("messages", [])
        text = b.text if b.text is not None else f"fake reply to: {_last_user(messages)}"
        system = record.body.get("system", "")
        system_text = " ".join(part.get("text", "") for part in system) if isinstance(system, list) else system
        tokens_in = words(system_text) + sum(words(m.get("content", "")) for m in messages)
        inputs = self.cache.anthropic(model, record.body, tokens_in)
        tokens_out = len(text.split())
        message = {"id": "msg_fake", "type": "message", "role": "assistant", "model": model,
                   "stop_reason": None, "stop_sequence": None}
        if not record.stream:
            if b.kind == "cut":
                return _truncated_json()
            usage = {**inputs, "output_tokens": tokens_out}
            if b.kind == "tool_call":
                return JSONResponse({**message, "content": tool_answers.anthropic_content(b),
                                     "stop_reason": "tool_use", "usage": usage})
            tool = _forced_tool(record.body, text)
            if tool is not None:  # structured output: the forced tool's call, as ANTHROPIC_TOOL_ONLY_JSON shows it
                return JSONResponse({**message, "content": [tool], "stop_reason": "tool_use", "usage": usage})
            return JSONResponse({**message, "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
                                 "usage": usage})

        async def events() -> AsyncIterator[bytes]:
            yield _sse({"type": "message_start", "message": {
                **message, "content": [], "usage": {**inputs, "output_tokens": 1}}},
                "message_start")
            if b.kind == "tool_call":
                for name, data in tool_answers.anthropic_events(b):
                    yield _sse(data, name)
                yield _sse({"type": "message_delta", "delta": {"stop_reason": "tool_use", "stop_sequence": None},
                            "usage": {"output_tokens": tokens_out}}, "message_delta")
                yield _sse({"type": "message_stop"}, "message_stop")
                return
            yield _sse({"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
                       "content_block_start")
            yield _sse({"type": "ping"}, "ping")
            for i, word in enumerate(_words(text)):
                delta = _sse({"type": "content_block_delta", "index": 0,
                              "delta": {"type": "text_delta", "text": word}}, "content_block_delta")
                if i >= b.after_chunks and b.kind in BREAKS:
                    yield break_with(b, delta)
                    return
                yield delta
            yield _sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
            yield _sse({"type": "message_delta", "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                        "usage": {"output_tokens": tokens_out}}, "message_delta")
            yield _sse({"type": "message_stop"}, "message_stop")

        return StreamingResponse(events(), media_type="text/event-stream")


def _forced_tool(body: dict[str, Any], text: str) -> dict[str, Any] | None:
    """The tool_use block answering a request whose `tool_choice` forces one tool, when the scripted text is a
    JSON object (its input); None otherwise (the answer is text)."""
    choice = body.get("tool_choice") or {}
    if choice.get("type") != "tool":
        return None
    try:
        arguments = json.loads(text)
    except ValueError:
        return None
    if not isinstance(arguments, dict):
        return None
    return {"type": "tool_use", "id": "toolu_fake", "name": choice.get("name"), "input": arguments}


def _truncated_json() -> Response:
    async def body() -> AsyncIterator[bytes]:
        yield b'{"id": "cut", "choi'
        raise Cut()

    return StreamingResponse(body(), media_type="application/json")


@pytest.fixture(scope="session")
def model_server_session() -> Iterator[FakeModelServer]:
    """One fake provider for the whole test session."""
    server = FakeModelServer()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def model_server(model_server_session: FakeModelServer) -> Iterator[FakeModelServer]:
    """The session's fake provider, with no script and no recorded requests."""
    model_server_session.reset()
    yield model_server_session
    model_server_session.reset()
