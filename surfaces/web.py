"""The web JSON API: a visitor, identified by a signed session token, talks to hilo over HTTP.

POST /api/session                          -> {"session": token}            (a new anonymous visitor)
POST /api/messages {"conversation_id"?, "text", "client_message_id"?}
                                           -> {"conversation_id", "reply", "status", "message_id", "reply_id"}
GET  /api/conversations                    -> {"conversations": [...]}       (the visitor's own only)
GET  /api/conversations/{id}/messages      -> {"conversation_id", "messages": [...]}

The token is sent back as `Authorization: Bearer <token>`, an `X-Hilo-Session` header or the `hilo_session`
cookie. It is an HMAC-signed visitor id (itsdangerous, HILO_SECRET_KEY); history lives on the server and the
client never sends it. A visitor is the identity (web, visitor id); a conversation that is not theirs is
answered 404, exactly like one that does not exist.
"""

from __future__ import annotations

import json
import secrets
import uuid
from typing import Any

from itsdangerous import BadSignature, URLSafeSerializer
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import BaseRoute, Route

from bot import __version__, catalog, log
from bot.config import Settings
from bot.errors import InputError, NotFound
from bot.pipeline import Pipeline
from bot.types import InboundMessage
from memory.store import StoredMessage, StoreUnavailable
from surfaces.base import Runtime

logger = log.get("hilo.web")

SESSION_COOKIE = "hilo_session"
MAX_BODY_BYTES = 64 * 1024


class Sessions:
    """Issues and checks visitor tokens. A forged or foreign-key token is simply not a session."""

    def __init__(self, secret_key: str) -> None:
        self._serializer = URLSafeSerializer(secret_key, salt="hilo.web.session.v1")

    def issue(self) -> tuple[str, str]:
        visitor = secrets.token_hex(16)
        return visitor, self._serializer.dumps({"v": visitor})

    def visitor(self, token: str | None) -> str | None:
        if not token:
            return None
        try:
            data = self._serializer.loads(token)
        except BadSignature:
            return None
        visitor = data.get("v") if isinstance(data, dict) else None
        return visitor if isinstance(visitor, str) and visitor else None


def _token(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip()
    return request.headers.get("x-hilo-session") or request.cookies.get(SESSION_COOKIE)


def _lang(request: Request) -> str:
    return catalog.language(request.headers.get("accept-language"))


def _error(request: Request, status: int, key: str, **params: object) -> JSONResponse:
    return JSONResponse({"error": key, "message": catalog.t(key, _lang(request), **params)}, status_code=status)


def message_json(m: StoredMessage) -> dict[str, Any]:
    return {
        "id": m.id, "role": m.role, "content": m.content, "surface": m.surface,
        "created_at": m.created_at.isoformat(), "reply_to": m.reply_to,
    }


class WebSurface:
    """The web JSON API (and, in its own module, the widget). Always on."""

    name = "web"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sessions = Sessions(settings.secret_key)
        self._pipeline: Pipeline | None = None

    @property
    def pipeline(self) -> Pipeline:
        if self._pipeline is None:
            raise RuntimeError("the web surface has not started")
        return self._pipeline

    async def start(self, runtime: Runtime) -> None:
        self._pipeline = runtime.pipeline

    async def stop(self) -> None:
        return None

    def routes(self) -> list[BaseRoute]:
        return [
            Route("/", self.index),
            Route("/api/session", self.new_session, methods=["POST"]),
            Route("/api/messages", self.post_message, methods=["POST"]),
            Route("/api/conversations", self.list_conversations, methods=["GET"]),
            Route("/api/conversations/{conversation_id:int}/messages", self.list_messages, methods=["GET"]),
        ]

    async def index(self, request: Request) -> JSONResponse:
        return JSONResponse({
            "name": "hilo", "version": __version__,
            "api": ["POST /api/session", "POST /api/messages", "GET /api/conversations",
                    "GET /api/conversations/{id}/messages"],
        })

    async def new_session(self, request: Request) -> JSONResponse:
        _, token = self.sessions.issue()
        response = JSONResponse({"session": token})
        _set_cookie(response, token)
        return response

    async def _user_id(self, visitor: str) -> int | None:
        store = self.pipeline.store
        return await store.user_id(f"web:{visitor}")

    async def post_message(self, request: Request) -> JSONResponse:
        length = request.headers.get("content-length")
        if length is not None and (not length.isdigit() or int(length) > MAX_BODY_BYTES):
            return _error(request, 413, "payload_too_large", limit=MAX_BODY_BYTES)
        body = await request.body()
        if len(body) > MAX_BODY_BYTES:
            return _error(request, 413, "payload_too_large", limit=MAX_BODY_BYTES)
        try:
            data = json.loads(body)
        except (ValueError, UnicodeDecodeError):
            return _error(request, 400, "bad_request", detail="the body is not JSON")
        if not isinstance(data, dict) or not isinstance(data.get("text"), str):
            return _error(request, 400, "bad_request", detail='send {"text": "..."}')
        conversation_id = data.get("conversation_id")
        if conversation_id is not None and (isinstance(conversation_id, bool) or not isinstance(conversation_id, int)):
            return _error(request, 400, "bad_request", detail="conversation_id must be a number")
        client_id = data.get("client_message_id")
        if client_id is not None and (not isinstance(client_id, str) or not 0 < len(client_id) <= 100):
            return _error(request, 400, "bad_request", detail="client_message_id must be a short string")

        token = _token(request)
        visitor = self.sessions.visitor(token)
        new_token = None
        if visitor is None:
            if token:  # a token was sent but is not ours: never silently swap identities
                return _error(request, 401, "unauthorized")
            visitor, new_token = self.sessions.issue()
        msg = InboundMessage(
            surface="web", sender=visitor,
            # namespaced by visitor: one visitor's client ids can never collide with another's
            external_id=f"{visitor}:{client_id or uuid.uuid4().hex}",
            text=data["text"], conversation_ref=str(conversation_id) if conversation_id is not None else None,
            language=_lang(request),
        )
        try:
            out = await self.pipeline.handle(msg)
        except InputError as exc:
            status = 413 if exc.key == "message_too_long" else 400
            return _error(request, status, exc.key, **exc.params)
        except NotFound:
            return _error(request, 404, "not_found")
        except StoreUnavailable:
            return _error(request, 503, "store_unavailable")
        payload: dict[str, Any] = {
            "conversation_id": out.conversation_id, "reply": out.text or None, "status": out.status,
            "message_id": out.message_id, "reply_id": out.reply_id,
        }
        if new_token:
            payload["session"] = new_token
        response = JSONResponse(payload)
        if new_token:
            _set_cookie(response, new_token)
        return response

    async def list_conversations(self, request: Request) -> JSONResponse:
        visitor = self.sessions.visitor(_token(request))
        if visitor is None:
            return _error(request, 401, "unauthorized")
        user_id = await self._user_id(visitor)
        convs = await self.pipeline.store.conversations(user_id) if user_id is not None else []
        return JSONResponse({"conversations": [
            {"id": c.id, "title": c.title, "created_at": c.created_at.isoformat(),
             "updated_at": c.updated_at.isoformat(), "message_count": c.message_count}
            for c in convs if c.surface == "web"
        ]})

    async def list_messages(self, request: Request) -> JSONResponse:
        visitor = self.sessions.visitor(_token(request))
        if visitor is None:
            return _error(request, 401, "unauthorized")
        conversation_id = int(request.path_params["conversation_id"])
        user_id = await self._user_id(visitor)
        try:
            if user_id is None:
                raise NotFound(conversation_id)
            messages = await self.pipeline.store.messages(user_id, conversation_id)
        except NotFound:
            return _error(request, 404, "not_found")
        return JSONResponse({"conversation_id": conversation_id, "messages": [message_json(m) for m in messages]})


def _set_cookie(response: JSONResponse, token: str) -> None:
    response.set_cookie(SESSION_COOKIE, token, max_age=365 * 24 * 3600, httponly=True, samesite="lax")
