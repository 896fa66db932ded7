"""A loopback fake of the Telegram Bot API, for the real python-telegram-bot (and `hilo serve`) to talk to.

Serves `/bot{token}/{method}` on 127.0.0.1 (uvicorn in a background thread): getMe, getUpdates (hands out the
queued updates from `offset` on; long-polls up to `timeout` seconds, capped at `max_long_poll`, waking as soon
as one is queued; 409 while a webhook is set, like Telegram), sendMessage (held while `hold(gate)` says so),
sendChatAction, sendDocument, setWebhook, deleteWebhook, getWebhookInfo, setMyCommands, getFile, and the files
it names at /file/bot{token}/{path} (`add_file`; chunked, with no size stated, when asked). Any other method is 404;
another token is 401. Bodies are form-urlencoded (as the library sends them), JSON, or multipart/form-data (the
library's upload of a file: sendDocument), parsed by tests/fakes/multipart.py.

Every call is recorded (`calls`), sent messages in order (`sent`), uploaded files (`documents`).
`fail("sendMessage", ...)` scripts the next answers of a method: a 429 with retry_after, a 502, a 403...
Builders (`text_update`, `photo_update`, `mention`) make the updates tests enqueue (polling) or POST to the
daemon (webhook).
"""

from __future__ import annotations

import asyncio
import itertools
import json
import threading
import time
from collections import deque
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.fakes import multipart
from tests.fakes.loopback import HeldSends, ThreadedServer

TOKEN = "123456:TEST-token_for-the-fake"
BOT_ID = 123456
BOT_USERNAME = "hilo_test_bot"


@dataclass(frozen=True, slots=True)
class Call:
    method: str
    params: dict[str, Any]
    at: float


@dataclass(frozen=True, slots=True)
class Sent:
    chat_id: int
    text: str
    message_id: int
    reply_to: int | None


@dataclass(frozen=True, slots=True)
class Document:
    """A file sent with sendDocument: its bytes as uploaded, the name the upload gave it, the caption."""

    chat_id: int
    filename: str
    data: bytes
    caption: str | None
    message_id: int


@dataclass(frozen=True, slots=True)
class Failure:
    status: int
    description: str
    retry_after: int | None = None


@dataclass
class _State:
    updates: list[dict[str, Any]] = field(default_factory=list)
    calls: list[Call] = field(default_factory=list)
    sent: list[Sent] = field(default_factory=list)
    documents: list[Document] = field(default_factory=list)
    failures: dict[str, deque[Failure]] = field(default_factory=dict)
    webhook: dict[str, Any] = field(default_factory=dict)
    confirmed: int = 0  # the highest update_id confirmed by an offset
    files: dict[str, tuple[str, bytes, bool]] = field(default_factory=dict)  # file_id -> (path, bytes, size stated)
    downloads: list[str] = field(default_factory=list)  # the file paths fetched


def _param(value: str) -> Any:
    """Form values are strings; objects and lists arrive JSON-encoded."""
    if value[:1] in "[{":
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


class FakeBotApi(HeldSends):
    """The fake. `start()` / `stop()`; `reset()` between tests."""

    def __init__(self, token: str = TOKEN, max_long_poll: float = 0.3) -> None:
        self.token = token
        self.max_long_poll = max_long_poll
        self._lock = threading.Lock()
        self._state = _State()
        self._update_ids = itertools.count(1000)
        self._message_ids = itertools.count(5000)
        self.app = Starlette(routes=[Route("/bot{token}/{method}", self._dispatch, methods=["GET", "POST"]),
                                     Route("/file/bot{token}/{path:path}", self._file, methods=["GET"])])
        self._loopback = ThreadedServer(self.app, name="fake-bot-api")

    @property
    def base_url(self) -> str:
        """What TELEGRAM_API_BASE_URL is set to."""
        return self._loopback.base_url

    @property
    def port(self) -> int:
        return self._loopback.port

    # -- scripting and inspection -------------------------------------------------------------------------
    def enqueue(self, *updates: dict[str, Any]) -> None:
        """Updates for getUpdates to hand out (polling), in order."""
        with self._lock:
            self._state.updates.extend(updates)

    def fail(self, method: str, status: int = 429, *, retry_after: int | None = None, times: int = 1,
             description: str | None = None) -> None:
        """The next `times` calls of `method` answer an error (429 carries retry_after, 1 s by default)."""
        if status == 429 and retry_after is None:
            retry_after = 1
        text = description or {429: f"Too Many Requests: retry after {retry_after}", 403: "Forbidden: bot was "
                               "blocked by the user", 502: "Bad Gateway", 400: "Bad Request"}.get(status, "Error")
        with self._lock:
            self._state.failures.setdefault(method, deque()).extend([Failure(status, text, retry_after)] * times)

    @property
    def calls(self) -> list[Call]:
        with self._lock:
            return list(self._state.calls)

    @property
    def sent(self) -> list[Sent]:
        with self._lock:
            return list(self._state.sent)

    @property
    def confirmed(self) -> int:
        """The highest update_id an offset confirmed (getUpdates hands it out no more)."""
        with self._lock:
            return self._state.confirmed

    @property
    def webhook(self) -> dict[str, Any]:
        with self._lock:
            return dict(self._state.webhook)

    def calls_of(self, method: str) -> list[Call]:
        return [c for c in self.calls if c.method == method]

    @property
    def documents(self) -> list[Document]:
        with self._lock:
            return list(self._state.documents)

    def sent_to(self, chat_id: int) -> list[Sent]:
        return [s for s in self.sent if s.chat_id == chat_id]

    async def wait_sent(self, count: int, *, chat_id: int | None = None, timeout: float = 10.0) -> list[Sent]:
        """Wait until at least `count` messages were sent (to `chat_id`), then return them."""
        deadline = time.monotonic() + timeout
        while True:
            sent = self.sent if chat_id is None else self.sent_to(chat_id)
            if len(sent) >= count:
                return sent
            if time.monotonic() > deadline:
                raise AssertionError(f"expected {count} sent messages, got {len(sent)}: {sent!r}")
            await asyncio.sleep(0.01)

    def wait_sent_sync(self, count: int, *, timeout: float = 20.0) -> list[Sent]:
        deadline = time.monotonic() + timeout
        while len(self.sent) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"expected {count} sent messages, got {len(self.sent)}")
            time.sleep(0.02)
        return self.sent

    async def wait_for(self, predicate: Callable[[], bool], timeout: float = 10.0) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                raise AssertionError("condition not met in time")
            await asyncio.sleep(0.01)

    def add_file(self, file_id: str, data: bytes, *, state_size: bool = True) -> None:
        """A file getFile knows and /file/bot<token>/<path> serves; `state_size=False`: getFile and the download
        do not say its size (the download is chunked), as a self-hosted Bot API server may not."""
        with self._lock:
            self._state.files[file_id] = (f"voice/file_{len(self._state.files)}.oga", data, state_size)

    @property
    def downloads(self) -> list[str]:
        with self._lock:
            return list(self._state.downloads)

    def reset(self) -> None:
        with self._lock:
            self._state = _State()
        self.hold(None)

    # -- update builders ----------------------------------------------------------------------------------
    def message(
        self, text: str | None = None, *, user_id: int = 42, chat_id: int | None = None, chat_type: str = "private",
        language_code: str | None = "en", username: str | None = "alice", first_name: str = "Alice",
        message_id: int | None = None, reply_to_bot: bool = False, entities: list[dict[str, Any]] | None = None,
        **extra: Any,
    ) -> dict[str, Any]:
        """A Message object as Telegram sends it (private chat by default; chat_id defaults to user_id)."""
        chat_id = user_id if chat_id is None else chat_id
        user: dict[str, Any] = {"id": user_id, "is_bot": False, "first_name": first_name}
        if username:
            user["username"] = username
        if language_code:
            user["language_code"] = language_code
        chat: dict[str, Any] = {"id": chat_id, "type": chat_type}
        if chat_type == "private":
            chat["first_name"] = first_name
        else:
            chat["title"] = "Test group"
        msg: dict[str, Any] = {"message_id": message_id or next(self._message_ids), "date": int(time.time()),
                               "chat": chat, "from": user, **extra}
        if text is not None:
            msg["text"] = text
        if entities:
            msg["entities"] = entities
        if reply_to_bot:
            msg["reply_to_message"] = {
                "message_id": next(self._message_ids), "date": int(time.time()), "chat": chat, "text": "earlier",
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "hilo", "username": BOT_USERNAME},
            }
        return msg

    def update(self, message: dict[str, Any], *, kind: str = "message", update_id: int | None = None,
               ) -> dict[str, Any]:
        return {"update_id": update_id or next(self._update_ids), kind: message}

    def text_update(self, text: str, **kw: Any) -> dict[str, Any]:
        update_id = kw.pop("update_id", None)
        return self.update(self.message(text, **kw), update_id=update_id)

    def photo_update(self, caption: str | None = None, **kw: Any) -> dict[str, Any]:
        photo = [{"file_id": "AgAD", "file_unique_id": "u1", "width": 90, "height": 90}]
        extra: dict[str, Any] = {"photo": photo}
        if caption is not None:
            extra["caption"] = caption
        return self.update(self.message(None, **kw, **extra))

    def voice_update(self, file_id: str, data: bytes, duration: int, *, size: int | None = None,
                     **kw: Any) -> dict[str, Any]:
        """A voice note (Telegram's Voice object: Ogg Opus); `size` the file_size it states (default: the real one)."""
        voice = {"file_id": file_id, "file_unique_id": f"u-{file_id}", "duration": duration,
                 "mime_type": "audio/ogg", "file_size": len(data) if size is None else size}
        return self.update(self.message(None, **kw, voice=voice))

    def mention(self, text: str) -> tuple[str, list[dict[str, Any]]]:
        """`text` with "@bot" in front, and its mention entity (offsets in UTF-16 units, as Telegram counts)."""
        handle = f"@{BOT_USERNAME}"
        return f"{handle} {text}", [{"type": "mention", "offset": 0, "length": len(handle)}]

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._loopback.start()

    def stop(self) -> None:
        self._loopback.stop()

    # -- the API ------------------------------------------------------------------------------------------
    async def _dispatch(self, request: Request) -> JSONResponse:
        raw = await request.body()
        content_type = request.headers.get("content-type", "")
        if content_type.startswith("application/json"):
            params = json.loads(raw or b"{}")
        elif content_type.startswith("multipart/form-data"):
            fields, files = multipart.parse(content_type, raw)
            params = {name: _param(value) for name, value in fields.items()}
            params.update({name: {"filename": f[0], "data": f[1]} for name, f in files.items()})
        else:
            params = {k: _param(v) for k, v in parse_qsl(raw.decode())}
        method = request.path_params["method"]
        with self._lock:
            self._state.calls.append(Call(method, params, time.monotonic()))
        if request.path_params["token"] != self.token:
            return _error(401, "Unauthorized")
        with self._lock:
            queue = self._state.failures.get(method)
            failure = queue.popleft() if queue else None
        if failure is not None:
            extra = {"retry_after": failure.retry_after} if failure.retry_after else None
            return _error(failure.status, failure.description, extra)
        if method == "sendMessage" and not await self.released(request):
            return _error(499, "client gone")
        handler = getattr(self, f"_m_{method}", None)
        if handler is None:
            return _error(404, "Not Found: method not found")
        result = await handler(params)
        if isinstance(result, JSONResponse):
            return result
        return JSONResponse({"ok": True, "result": result})

    async def _m_getFile(self, params: dict[str, Any]) -> Any:
        with self._lock:
            found = self._state.files.get(str(params.get("file_id")))
        if found is None:
            return _error(400, "Bad Request: invalid file_id")
        path, data, stated = found
        result = {"file_id": params["file_id"], "file_unique_id": f"u-{params['file_id']}", "file_path": path}
        return {**result, "file_size": len(data)} if stated else result

    async def _file(self, request: Request) -> Response:
        if request.path_params["token"] != self.token:
            return Response(status_code=401)
        path = request.path_params["path"]
        with self._lock:
            found = next(((d, stated) for p, d, stated in self._state.files.values() if p == path), None)
            self._state.downloads.append(path)
        if found is None:
            return Response(status_code=404)
        data, stated = found
        if stated:
            return Response(data, media_type="application/octet-stream")

        async def chunks() -> AsyncIterator[bytes]:
            for start in range(0, len(data), 64 * 1024):
                yield data[start:start + 64 * 1024]

        return StreamingResponse(chunks(), media_type="application/octet-stream")

    async def _m_getMe(self, params: dict[str, Any]) -> Any:
        return {"id": BOT_ID, "is_bot": True, "first_name": "hilo", "username": BOT_USERNAME,
                "can_join_groups": True, "can_read_all_group_messages": False, "supports_inline_queries": False}

    async def _m_getUpdates(self, params: dict[str, Any]) -> Any:
        with self._lock:
            if self._state.webhook.get("url"):
                return _error(409, "Conflict: can't use getUpdates method while webhook is active")
        offset = int(params.get("offset") or 0)
        limit = int(params.get("limit") or 100)
        wait = min(float(params.get("timeout") or 0), self.max_long_poll)
        deadline = time.monotonic() + wait
        while True:
            with self._lock:
                if offset:  # Telegram forgets the updates an offset confirms
                    self._state.confirmed = max(self._state.confirmed, offset - 1)
                    self._state.updates = [u for u in self._state.updates if u["update_id"] >= offset]
                ready = self._state.updates[:limit]
            if ready or time.monotonic() >= deadline:
                return ready
            await asyncio.sleep(0.01)

    async def _m_sendMessage(self, params: dict[str, Any]) -> Any:
        chat_id, text = int(params["chat_id"]), str(params["text"])
        if not text.strip() or len(text.encode("utf-16-le")) // 2 > 4096:
            return _error(400, "Bad Request: message text is empty or too long")
        reply = params.get("reply_parameters")
        reply_to = int(reply["message_id"]) if isinstance(reply, dict) else None
        message_id = next(self._message_ids)
        with self._lock:
            self._state.sent.append(Sent(chat_id, text, message_id, reply_to))
        return {"message_id": message_id, "date": int(time.time()), "text": text,
                "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
                "from": {"id": BOT_ID, "is_bot": True, "first_name": "hilo", "username": BOT_USERNAME}}

    async def _m_sendDocument(self, params: dict[str, Any]) -> Any:
        upload = params.get("document")
        if not isinstance(upload, dict):  # a file_id or URL string: not what hilo sends
            return _error(400, "Bad Request: wrong file identifier/HTTP URL specified")
        chat_id, data, caption = int(params["chat_id"]), upload["data"], params.get("caption")
        message_id = next(self._message_ids)
        with self._lock:
            self._state.documents.append(Document(chat_id, upload["filename"], data, caption, message_id))
        # the Message Telegram answers with: the document as a File, the caption beside it
        result: dict[str, Any] = {
            "message_id": message_id, "date": int(time.time()),
            "chat": {"id": chat_id, "type": "private" if chat_id > 0 else "group"},
            "from": {"id": BOT_ID, "is_bot": True, "first_name": "hilo", "username": BOT_USERNAME},
            "document": {"file_name": upload["filename"], "mime_type": "application/json",
                         "file_id": f"BQACAgQAAxkDAAI{message_id}", "file_unique_id": f"AgAD{message_id}",
                         "file_size": len(data)},
        }
        if caption:
            result["caption"] = caption
        return result

    async def _m_sendChatAction(self, params: dict[str, Any]) -> Any:
        return True

    async def _m_setWebhook(self, params: dict[str, Any]) -> Any:
        with self._lock:
            self._state.webhook = {"url": params.get("url", ""), "secret_token": params.get("secret_token"),
                                   "allowed_updates": params.get("allowed_updates")}
        return True

    async def _m_deleteWebhook(self, params: dict[str, Any]) -> Any:
        with self._lock:
            self._state.webhook = {}
            if str(params.get("drop_pending_updates", "")).lower() == "true":
                self._state.updates = []
        return True

    async def _m_getWebhookInfo(self, params: dict[str, Any]) -> Any:
        with self._lock:
            return {"url": self._state.webhook.get("url", ""), "has_custom_certificate": False,
                    "pending_update_count": len(self._state.updates)}

    async def _m_setMyCommands(self, params: dict[str, Any]) -> Any:
        return True


def _error(status: int, description: str, parameters: dict[str, Any] | None = None) -> JSONResponse:
    body: dict[str, Any] = {"ok": False, "error_code": status, "description": description}
    if parameters:
        body["parameters"] = parameters
    return JSONResponse(body, status_code=status)


@pytest.fixture(scope="session")
def bot_api_session() -> Iterator[FakeBotApi]:
    """One fake Bot API for the whole test session."""
    api = FakeBotApi()
    api.start()
    try:
        yield api
    finally:
        api.stop()


@pytest.fixture
def bot_api(bot_api_session: FakeBotApi) -> Iterator[FakeBotApi]:
    """The session's fake Bot API, with nothing queued or recorded."""
    bot_api_session.reset()
    yield bot_api_session
    bot_api_session.reset()
