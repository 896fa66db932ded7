"""The admin page: people, their conversations and messages, their memories (edit, delete), and costs. OFF unless
HILO_ADMIN_TOKEN is set: without it the app has no /admin route at all (404). Who may use it: surfaces/admin_auth.py.
What it reads and writes: bot/admin.py (this module imports no memory module). docs/admin.md walks through it.

GET    /admin                                      the page (surfaces/admin/index.html, its texts from the catalogue)
GET    /admin/admin.js                             its script (plain JavaScript, no build step)
POST   /admin/api/session {"token"}                sign in -> {"csrf", "expires_in"} + the session cookie
GET    /admin/api/session                          -> {"csrf", "expires_in"} while signed in (the page after a reload)
DELETE /admin/api/session                          sign out
GET    /admin/api/people?offset=&limit=            -> {"total", "offset", "limit", "people": [...]}
GET    /admin/api/people/{id}                      -> {"person", "conversations", "costs"}
GET    /admin/api/people/{id}/conversations/{cid}/messages?before=&limit=   -> {"messages", "before"}
GET    /admin/api/people/{id}/memories             -> {"memories": [...]} (current and ended, newest first)
PATCH  /admin/api/people/{id}/memories/{mid} {"content"}   -> {"memory", "outcome", "previous"}
DELETE /admin/api/people/{id}/memories/{mid}       -> {"forgotten"}
GET    /admin/api/costs?offset=&limit=             -> {"everyone": {...}, "top": [...]}
Errors are `{"error", "message"}` JSON in the caller's language (401 admin_sign_in_needed, 403 admin_token_wrong
or admin_csrf, 404 not_found, 409 admin_memory_ended, 429 rate_limited, 503 store_unavailable); a person or
conversation that is not there is 404, also when it is someone else's. Logs carry ids and sizes: never a message,
a memory's text or the token.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from starlette.requests import ClientDisconnect, Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from bot.admin import Admin, MemoryEnded
from bot.config import Settings
from bot.runtime import Runtime
from kernel import log
from kernel.errors import InputError, NotFound, StoreError
from surfaces.admin_auth import COOKIE, AdminSessions, own_origin, token_matches
from surfaces.admin_files import AdminFiles
from surfaces.http_body import BadJson, BodyTooLarge, parse_json, read_body
from surfaces.web_common import error, path_id, unavailable
from surfaces.web_guard import Origins, RateLimiter, client_ip, too_many

logger = log.get("hilo.admin")
Endpoint = Callable[[Request], Awaitable[Response]]
#: A sign-in or an edit is a short JSON object.
MAX_BODY_BYTES = 16 * 1024
HEADERS = {"cache-control": "no-store", "x-content-type-options": "nosniff", "referrer-policy": "no-referrer",
           "x-frame-options": "DENY"}


class AdminSurface:
    """The admin page and its JSON API, on the daemon's own Starlette app."""

    name = "admin"

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sessions = AdminSessions(settings.secret_key, settings.admin_token, settings.admin_session_minutes)
        self.origins = Origins((), settings.public_url)
        self.sign_ins = RateLimiter("admin-sign-in", settings.admin_sign_ins_per_minute,
                                    lambda: self._runtime.pipeline.rate_limits if self._runtime else None)
        self.files = AdminFiles()
        self._runtime: Runtime | None = None

    @property
    def admin(self) -> Admin:
        if self._runtime is None:
            raise StoreError("the admin page has not started")
        return self._runtime.pipeline.admin

    async def start(self, runtime: Runtime) -> None:
        self._runtime = runtime

    async def stop(self) -> None:
        return None

    def routes(self) -> list[BaseRoute]:
        def api(path: str, endpoint: Endpoint, method: str, signed_in: bool = True) -> Route:
            return Route("/admin/api" + path, self._guarded(endpoint, signed_in), methods=[method])

        person = "/people/{user_id}"
        return [
            Route("/admin", self.files.page, methods=["GET"]),
            Route("/admin/admin.js", self.files.script, methods=["GET"]),
            api("/session", self.sign_in, "POST", signed_in=False),
            api("/session", self.session, "GET"),
            api("/session", self.sign_out, "DELETE"),
            api("/people", self.people, "GET"),
            api(person, self.person, "GET"),
            api(person + "/conversations/{conversation_id}/messages", self.messages, "GET"),
            api(person + "/memories", self.memories, "GET"),
            api(person + "/memories/{memory_id}", self.edit_memory, "PATCH"),
            api(person + "/memories/{memory_id}", self.forget_memory, "DELETE"),
            api("/costs", self.costs, "GET"),
        ]

    def _guarded(self, endpoint: Endpoint, signed_in: bool) -> Endpoint:
        """The session (401), for writes the CSRF proof (403), and a database in the way as 503, never a 500."""
        async def guarded(request: Request) -> Response:
            write = request.method not in ("GET", "HEAD")
            cookie = request.cookies.get(COOKIE)
            if write and not own_origin(request, self.origins):
                response: Response = error(request, 403, "admin_csrf")
            elif signed_in and not self.sessions.valid(cookie):
                response = error(request, 401, "admin_sign_in_needed")
            elif signed_in and write and not self.sessions.csrf_ok(request, cookie or ""):
                response = error(request, 403, "admin_csrf")
            else:
                try:
                    response = await endpoint(request)
                except StoreError as exc:
                    logger.error("admin.store_failed", path=request.url.path, error=type(exc).__name__)
                    response = unavailable(request)
            response.headers.update(HEADERS)
            return response

        return guarded

    async def _body(self, request: Request) -> dict[str, object] | Response:
        try:
            data = parse_json(await read_body(request, MAX_BODY_BYTES))
        except BodyTooLarge as exc:
            return error(request, 413, "payload_too_large", limit=exc.limit)
        except BadJson as exc:
            return error(request, 400, exc.key, **exc.params)
        except ClientDisconnect:
            return error(request, 400, "bad_request", detail="the body was cut off")
        return data if isinstance(data, dict) else error(request, 400, "bad_request", detail="send a JSON object")

    def _signed_in(self, cookie: str) -> JSONResponse:
        return JSONResponse({"csrf": self.sessions.csrf(cookie), "expires_in": self.sessions.max_age_s})

    async def sign_in(self, request: Request) -> Response:
        wait = await self.sign_ins.hit(client_ip(request))  # before the token is even read: no guess past it
        if wait:
            logger.warning("admin.sign_in", outcome="rate_limited")
            return too_many(request, wait, surface="admin")
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        token = body.get("token")
        if not isinstance(token, str) or not token_matches(token, self.settings.admin_token):
            logger.warning("admin.sign_in", outcome="wrong_token")
            return error(request, 403, "admin_token_wrong")
        cookie = self.sessions.issue()
        response = self._signed_in(cookie)
        self.sessions.set_cookie(request, response, cookie)
        logger.info("admin.sign_in", outcome="ok", minutes=self.settings.admin_session_minutes)
        return response

    async def session(self, request: Request) -> Response:
        return self._signed_in(request.cookies.get(COOKIE, ""))

    async def sign_out(self, request: Request) -> Response:
        response = JSONResponse({"signed_out": True})
        self.sessions.clear_cookie(request, response)
        logger.info("admin.sign_out")
        return response

    async def people(self, request: Request) -> Response:
        numbers = _numbers(request, "offset", "limit")
        if numbers is None:
            return error(request, 400, "bad_request", detail="offset and limit are whole numbers")
        offset, limit = numbers
        return JSONResponse(await self.admin.people(offset or 0, limit))

    async def person(self, request: Request) -> Response:
        user_id = path_id(request.path_params["user_id"])
        found = await self.admin.person(user_id) if user_id is not None else None
        return error(request, 404, "not_found") if found is None else JSONResponse(found)

    async def messages(self, request: Request) -> Response:
        user_id = path_id(request.path_params["user_id"])
        conversation_id = path_id(request.path_params["conversation_id"])
        numbers = _numbers(request, "before", "limit")
        if numbers is None:
            return error(request, 400, "bad_request", detail="before and limit are whole numbers")
        before, limit = numbers
        if user_id is None or conversation_id is None:
            return error(request, 404, "not_found")
        try:
            page = await self.admin.messages(user_id, conversation_id, before, limit)
        except NotFound:
            return error(request, 404, "not_found")
        return JSONResponse(page)

    async def memories(self, request: Request) -> Response:
        user_id = path_id(request.path_params["user_id"])
        if user_id is None or await self.admin.person(user_id) is None:
            return error(request, 404, "not_found")
        return JSONResponse({"memories": await self.admin.memories(user_id)})

    async def edit_memory(self, request: Request) -> Response:
        user_id = path_id(request.path_params["user_id"])
        memory_id = path_id(request.path_params["memory_id"], prefix="m")
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        content = body.get("content")
        if not isinstance(content, str):
            return error(request, 400, "bad_request", detail='send {"content": "..."}')
        if user_id is None or memory_id is None:
            return error(request, 404, "not_found")
        try:
            edited = await self.admin.edit_memory(user_id, memory_id, content)
        except MemoryEnded:
            return error(request, 409, "admin_memory_ended")
        except InputError as exc:  # memory_invalid (empty): its detail says what is wrong
            return error(request, 400, "bad_request", detail=str(exc))
        if edited is None:
            return error(request, 404, "not_found")
        logger.info("admin.memory_edited", user_id=user_id, memory_id=memory_id, outcome=edited.outcome,
                    chars=len(content))
        return JSONResponse({"memory": edited.memory, "outcome": edited.outcome, "previous": f"m{edited.previous}"})

    async def forget_memory(self, request: Request) -> Response:
        user_id = path_id(request.path_params["user_id"])
        memory_id = path_id(request.path_params["memory_id"], prefix="m")
        if user_id is None or memory_id is None or not await self.admin.forget_memory(user_id, memory_id):
            return error(request, 404, "not_found")
        logger.info("admin.memory_forgotten", user_id=user_id, memory_id=memory_id)
        return JSONResponse({"forgotten": f"m{memory_id}"})

    async def costs(self, request: Request) -> Response:
        numbers = _numbers(request, "offset", "limit")
        if numbers is None:
            return error(request, 400, "bad_request", detail="offset and limit are whole numbers")
        offset, limit = numbers
        return JSONResponse({"everyone": await self.admin.costs(None),
                             "top": await self.admin.top_spenders(offset or 0, limit)})


def _numbers(request: Request, *names: str) -> list[int | None] | None:
    """Whole-number query parameters (None each when absent); None when one is not a whole number (a 400)."""
    found: list[int | None] = []
    for name in names:
        raw = request.query_params.get(name) or None
        if raw is not None and not (raw.isascii() and raw.isdigit() and len(raw) <= 18):
            return None
        found.append(int(raw) if raw is not None else None)
    return found
