"""The web surface: the JSON + SSE API a visitor's browser talks to, the embeddable widget and its demo page.

GET  /                                     the demo page (embeds the widget)
GET  /widget.js                            the widget (surfaces/widget/widget.js; see web_widget.py)
GET  /api                                  {"name", "version", "api": [...]}
POST /api/session                          -> {"session": token}            (a new anonymous visitor)
POST /api/messages {"conversation_id"?, "text", "client_message_id"?, "timezone"?}
                                           -> {"conversation_id", "reply", "status", "message_id", "reply_id"}
POST /api/messages/stream (same body)      -> text/event-stream: meta, delta..., done | error (web_stream.py)
GET  /api/conversations                    -> {"conversations": [...]}       (the caller's own only)
GET  /api/conversations/{id}/messages      -> {"conversation_id", "messages": [...]}
GET  /api/memories, DELETE /api/memories/{id}   the caller's memories, forgetting one (web_memories.py)
Every JSON answer to a visitor may also carry "session": a new visitor's token, or a renewed one for a token
getting old (reads renew too); the `hilo_session` cookie carries the same, for HILO_SESSION_MAX_AGE.

Who is calling is web_auth.py (anonymous visitor token, or a site's own login: HMAC token or HS256 JWT);
what may call at all is web_guard.py (origin check, CORS, rate limits). History lives on the server and
the client never sends it; a conversation that is not the caller's is answered 404, exactly like one that
does not exist.
"""

from __future__ import annotations

import hashlib
import uuid
from typing import Any

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from bot import __version__
from bot.config import Settings
from bot.outbox import with_route
from bot.pipeline import Pipeline
from bot.runtime import Runtime
from kernel import log
from kernel.errors import InputError, NotFound, RateLimited
from kernel.types import InboundMessage
from surfaces.web_auth import SESSION_COOKIE, Authenticator, AuthFailed, Caller, Sessions
from surfaces.web_common import MAX_BODY_BYTES, error, lang, message_json, path_id, read_message, unavailable
from surfaces.web_export import ExportView
from surfaces.web_guard import ApiGuard, Endpoint, client_ip, too_many
from surfaces.web_memories import MemoryView
from surfaces.web_stop import TurnOverrun, answer_within_stop, bound_of
from surfaces.web_stream import stream_turn
from surfaces.web_widget import WidgetFiles

__all__ = ["MAX_BODY_BYTES", "SESSION_COOKIE", "Sessions", "WebSurface", "message_json"]

logger = log.get("hilo.web")
#: A message's rate-limit hits (ApiGuard.message_hits): (key, limit, window_s).
Hits = list[tuple[str, int, int]]

API_ROUTES = [
    "POST /api/session", "POST /api/messages", "POST /api/messages/stream", "GET /api/conversations",
    "GET /api/conversations/{id}/messages", "GET /api/memories", "DELETE /api/memories/{id}", "GET /api/export",
    "GET /api/export/{token}",
]


def web_external_id(sender: str, client_message_id: str | None) -> str:
    """The dedup key of a web message, namespaced by sender without ambiguity: a hash of the sender (whose id
    may hold ':'), then the client's id. One person's client ids can never collide with another's."""
    if client_message_id is None:
        return uuid.uuid4().hex
    return hashlib.sha256(sender.encode()).hexdigest()[:32] + ":" + client_message_id


class WebSurface:
    """The web API, the widget and the demo page. Always on."""

    name = "web"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.auth = Authenticator(settings)
        self.sessions = self.auth.sessions
        self.guard = ApiGuard(settings, lambda: self._runtime.pipeline.rate_limits if self._runtime else None)
        self.files = WidgetFiles()
        self._runtime: Runtime | None = None
        self.memory_view = MemoryView(self._reader, self._answer, lambda: self.pipeline.history)
        self.export_view = ExportView(self._reader, lambda: self.pipeline.exports)

    @property
    def runtime(self) -> Runtime:
        if self._runtime is None:
            raise RuntimeError("the web surface has not started")
        return self._runtime

    @property
    def pipeline(self) -> Pipeline:
        return self.runtime.pipeline

    async def start(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def stop(self) -> None:
        return None

    def routes(self) -> list[BaseRoute]:
        def api(path: str, endpoint: Endpoint, method: str, *, counts_itself: bool = False) -> Route:
            return Route(path, self.guard(endpoint, counts_itself=counts_itself), methods=[method, "OPTIONS"])

        return [
            Route("/", self.files.demo_page, methods=["GET"]),
            Route("/widget.js", self.files.widget_js, methods=["GET"]),
            api("/api", self.index, "GET"),
            api("/api/session", self.new_session, "POST"),
            # a message's request counts in its IP's request limit with its message limits (one transaction)
            api("/api/messages", self.post_message, "POST", counts_itself=True),
            api("/api/messages/stream", self.post_message_stream, "POST", counts_itself=True),
            api("/api/conversations", self.list_conversations, "GET"),
            api("/api/conversations/{conversation_id}/messages", self.list_messages, "GET"),
            api("/api/memories", self.memory_view.list, "GET"),
            api("/api/memories/{memory_id}", self.memory_view.forget, "DELETE"),
            api("/api/export", self.export_view.mine, "GET"),
            api("/api/export/{token}", self.export_view.by_link, "GET"),
        ]

    async def index(self, request: Request) -> Response:
        return JSONResponse({"name": "hilo", "version": __version__, "widget": self.files.version,
                             "api": API_ROUTES})

    async def new_session(self, request: Request) -> Response:
        _, token = self.sessions.issue()
        response = JSONResponse({"session": token})
        self._set_cookie(request, response, token)
        return response

    async def _inbound(self, request: Request) -> tuple[InboundMessage, Caller, Hits] | Response:
        """Check the caller (before reading the body), then read and check the text: the message, its caller and
        its rate limits' hits, which the pipeline counts as it stores the message (Pipeline.take: on SQLite in
        the same hop to the store). A message refused here counts them on its own, and is refused with 429 when
        one must wait."""
        try:
            caller = await self.auth.caller(request, issue=True)
        except AuthFailed as exc:
            wait = await self.guard.request_limit(request)
            return too_many(request, wait) if wait else error(request, 401, exc.key)
        assert caller is not None
        body = await read_message(request)
        if isinstance(body, Response):
            return await self._refused(request, caller, body)
        # The route names the visitor: a turn cut by a stop is answered by recovery (bot/outbox.py), its reply
        # stored for the conversation's next read (the web sends nothing: it answers in the HTTP response).
        msg = with_route(InboundMessage(
            surface="web", sender=caller.sender,
            external_id=web_external_id(caller.sender, body.client_message_id),
            text=body.text,
            conversation_ref=str(body.conversation_id) if body.conversation_id is not None else None,
            language=lang(request), client_ip=client_ip(request),
            # the browser's time zone: the `now` tool's (bot/tools/builtin.py)
            metadata={"timezone": body.timezone} if body.timezone else {},
        ), caller.sender)
        try:
            self.pipeline.validate(msg)
        except InputError as exc:
            return await self._refused(
                request, caller, error(request, 413 if exc.key == "message_too_long" else 400, exc.key, **exc.params))
        return msg, caller, self.guard.message_hits(request, caller.sender)

    async def _refused(self, request: Request, caller: Caller, refusal: Response) -> Response:
        """`refusal` for a message that will not be stored, once its rate limits counted it (429 when one must
        wait): a refused message counts as a sent one."""
        wait = await self.guard.message_limits(request, caller.sender)
        return too_many(request, wait) if wait else refusal

    async def post_message(self, request: Request) -> Response:
        prepared = await self._inbound(request)
        if isinstance(prepared, Response):
            return prepared
        msg, caller, hits = prepared
        try:
            out = await answer_within_stop(self.runtime, self.pipeline, msg, hits)
        except RateLimited as limited:
            return too_many(request, limited.wait)
        except TurnOverrun as late:  # the daemon stops, the turn goes on in the task set: 503, never a 500
            return unavailable(request, late.key)
        except InputError as exc:
            return error(request, 413 if exc.key == "message_too_long" else 400, exc.key, **exc.params)
        except NotFound:
            return error(request, 404, "not_found")
        return self._answer(request, caller, {
            "conversation_id": out.conversation_id, "reply": out.text or None, "status": out.status,
            "message_id": out.message_id, "reply_id": out.reply_id,
        })

    def _answer(self, request: Request, caller: Caller, payload: dict[str, Any]) -> JSONResponse:
        """`payload` as JSON, with the caller's new or renewed visitor token (if any) in its `session` field
        and in the cookie: every route that knows the caller hands it back, so reading renews too."""
        if caller.new_token:
            payload["session"] = caller.new_token
        response = JSONResponse(payload)
        if caller.new_token:
            self._set_cookie(request, response, caller.new_token)
        return response

    def _set_cookie(self, request: Request, response: Response, token: str) -> None:
        # For same-origin clients only: HttpOnly (no script reads it), SameSite=Lax (no cross-site requests
        # carry it). It lasts as long as the token (HILO_SESSION_MAX_AGE). The widget never relies on it: it
        # sends its token as a Bearer header.
        response.set_cookie(SESSION_COOKIE, token, max_age=self.sessions.max_age_s, httponly=True,
                            samesite="lax", secure=request.url.scheme == "https")  # TLS proxy: HILO_TRUSTED_PROXIES

    async def post_message_stream(self, request: Request) -> Response:
        prepared = await self._inbound(request)
        if isinstance(prepared, Response):
            return prepared
        msg, caller, hits = prepared
        response = await stream_turn(
            request, self.pipeline, self.runtime.tasks, msg, new_session=caller.new_token,
            bound=bound_of(self.runtime), limits=hits)
        if caller.new_token and response.status_code == 200:
            self._set_cookie(request, response, caller.new_token)
        return response

    async def _reader(self, request: Request) -> tuple[Caller, int | None] | Response:
        """The caller and their user id (None: not seen yet), or the 401 to answer with."""
        try:
            caller = await self.auth.caller(request)
        except AuthFailed as exc:
            return error(request, 401, exc.key)
        if caller is None:
            return error(request, 401, "unauthorized")
        return caller, await self.pipeline.history.identity_user("web", caller.sender)

    async def list_conversations(self, request: Request) -> Response:
        reader = await self._reader(request)
        if isinstance(reader, Response):
            return reader
        caller, user_id = reader
        convs = await self.pipeline.history.conversations(user_id) if user_id is not None else []
        return self._answer(request, caller, {"conversations": [
            {"id": c.id, "title": c.title, "created_at": c.created_at.isoformat(),
             "updated_at": c.updated_at.isoformat(), "message_count": c.message_count}
            for c in convs if c.surface == "web"
        ]})

    async def list_messages(self, request: Request) -> Response:
        reader = await self._reader(request)
        if isinstance(reader, Response):
            return reader
        caller, user_id = reader
        conversation_id = path_id(request.path_params["conversation_id"])
        if conversation_id is None:
            return error(request, 404, "not_found")
        try:
            if user_id is None:
                raise NotFound(conversation_id)
            messages = await self.pipeline.history.messages(user_id, conversation_id)
        except NotFound:
            return error(request, 404, "not_found")
        return self._answer(request, caller, {"conversation_id": conversation_id,
                                              "messages": [message_json(m) for m in messages]})

