"""What stands in front of every /api route: the origin check, CORS, and rate limits.

Origins: a browser names the page that makes a request in its `Origin` header. The API answers only pages
on the daemon's own origin, HILO_PUBLIC_URL's origin and HILO_ALLOWED_ORIGINS (exact `scheme://host[:port]`,
`https://*.example.com` for subdomains, or `*`); any other Origin gets 403 before anything is read or
written, and no CORS headers, so a page elsewhere can neither call the API nor read an answer. Requests
without an Origin (curl, server-to-server, same-origin GETs) pass: they cannot carry a visitor's browser
credentials from another site (the cookie is SameSite=Lax; the widget's Bearer token lives in the embedding
site's own localStorage). CORS never allows credentials: cross-origin calls use the Bearer token only.

Rate limits: counted in the database (migration 0026, memory/sql_limits.py), so N processes on one database
allow what one does. Per IP, every API request (5x HILO_RATE_LIMIT_IP per minute) and every message
(HILO_RATE_LIMIT_IP per minute); per visitor or site user, messages (HILO_RATE_LIMIT_VISITOR per minute).
Over the limit: 429 with Retry-After and the catalogue's "rate_limited" text. A message's hits are counted with it:
the pipeline hands them to the store's ingest (on SQLite in the same hop as the message; `message_hits`); one refused
before (its body, its token) counts them here.
"""

from __future__ import annotations

import math
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bot import metrics
from bot.config import Settings
from bot.ports import RateLimits
from kernel import log
from kernel.digests import rate_subject
from kernel.errors import StoreError
from surfaces.web_common import error, unavailable

logger = log.get("hilo.web")

Endpoint = Callable[[Request], Awaitable[Response]]

ALLOWED_HEADERS = "authorization, content-type, accept-language, x-hilo-session"
REQUESTS_PER_MESSAGE = 5
#: The limits' window: HILO_RATE_LIMIT_* are per minute.
WINDOW_S = 60


class RateLimiter:
    """`per_minute` hits per key, counted in the database (`pipeline.rate_limits`, memory/sql_limits.py: one
    upsert a hit, a sliding-window estimate over one-minute windows), so every process on the database shares
    the count. Keys are hashed: no IP address or visitor id is stored. A database that cannot count lets the hit
    through (logged): the endpoint's own store work then answers 503."""

    def __init__(self, name: str, per_minute: int, counters: Callable[[], RateLimits | None]) -> None:
        self.name = name
        self.per_minute = per_minute
        self._counters = counters
        self._failing = False  # said once when the database cannot count, and once when it can again

    async def hit(self, key: str, *more: tuple[RateLimiter, str]) -> float:
        """Count one hit: 0.0 when allowed, else the seconds until the next one is. With `more` ((limiter, key)
        pairs), theirs too after this one, up to the first that must wait, in one transaction."""
        counters = self._counters()
        if counters is None:  # not started: nothing else answers either
            return 0.0
        try:
            if more:
                wait = await counters.hit_rates([self.entry(key), *(limiter.entry(k) for limiter, k in more)])
            else:
                wait = await counters.hit_rate(*self.entry(key))
        except StoreError as exc:
            if not self._failing:
                self._failing = True
                logger.warning("web.rate_limit_unavailable", limit=self.name, error=type(exc).__name__)
            return 0.0
        if self._failing:
            self._failing = False
            logger.info("web.rate_limit_back", limit=self.name)
        return wait

    def entry(self, key: str) -> tuple[str, int, int]:
        """One hit of `key` as RateLimits.hit_rates (and Store.ingest's `limits`) take it."""
        return self._key(key), self.per_minute, WINDOW_S

    def _key(self, key: str) -> str:
        return f"{self.name}:{rate_subject(key)}"


def too_many(request: Request, retry_after: float, surface: str = "web") -> JSONResponse:
    metrics.refused(surface, "rate_limited")
    seconds = max(1, math.ceil(retry_after))
    response = error(request, 429, "rate_limited", seconds=seconds)
    response.headers["retry-after"] = str(seconds)
    return response


def _origin_of(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else ""


class Origins:
    """Which page origins may call the API."""

    def __init__(self, allowed: tuple[str, ...], public_url: str = "") -> None:
        self.any = "*" in allowed
        self.exact = {o for o in allowed if "*" not in o}
        if public_url and _origin_of(public_url):
            self.exact.add(_origin_of(public_url))
        # "https://*.example.com:8443" -> ("https", ".example.com:8443")
        self.suffixes = [(o.split("://")[0], o.split("://*")[1]) for o in allowed if "://*." in o]

    def allows(self, origin: str, own: str) -> bool:
        origin = origin.lower()
        if origin == own.lower() or self.any or origin in self.exact:
            return True
        scheme, _, rest = origin.partition("://")
        return any(scheme == s and rest.endswith(suffix) for s, suffix in self.suffixes)


class ApiGuard:
    """Wraps each /api endpoint: origin check, CORS preflight and headers, per-IP request limit. `counters`
    gives the shared counters once the daemon started (`pipeline.rate_limits`)."""

    def __init__(self, settings: Settings, counters: Callable[[], RateLimits | None]) -> None:
        self.origins = Origins(settings.allowed_origins, settings.public_url)
        self.ip_requests = RateLimiter("ip", settings.rate_limit_ip * REQUESTS_PER_MESSAGE, counters)
        self.ip_messages = RateLimiter("ip-messages", settings.rate_limit_ip, counters)
        self.visitor_messages = RateLimiter("visitor", settings.rate_limit_visitor, counters)

    def __call__(self, endpoint: Endpoint, *, counts_itself: bool = False) -> Endpoint:
        """`endpoint` guarded. `counts_itself`: the endpoint counts the per-IP request itself, in the transaction
        of its message limits (message_limits), or with request_limit when it refuses before knowing the sender."""

        async def guarded(request: Request) -> Response:
            origin = request.headers.get("origin")
            # the page's own origin, built only when the request names one (request.url parses the whole URL;
            # browsers send Origin on every POST, so only other clients skip it)
            if origin is not None and not self.origins.allows(origin, f"{request.url.scheme}://{request.url.netloc}"):
                return error(request, 403, "origin_not_allowed")
            if request.method == "OPTIONS":
                response: Response = Response(status_code=204, headers={
                    "access-control-allow-methods": "GET, POST, DELETE, OPTIONS",
                    "access-control-allow-headers": ALLOWED_HEADERS,
                    "access-control-max-age": "600",
                })
            else:
                wait = 0.0 if counts_itself else await self.ip_requests.hit(client_ip(request))
                response = too_many(request, wait) if wait else await _answer(endpoint, request)
            if origin is not None:
                response.headers["access-control-allow-origin"] = origin
                response.headers["access-control-expose-headers"] = "retry-after"
            response.headers["vary"] = "Origin"
            response.headers.setdefault("cache-control", "no-store")
            response.headers["x-content-type-options"] = "nosniff"
            return response

        return guarded

    def message_hits(self, request: Request, sender: str) -> list[tuple[str, int, int]]:
        """A message's hits: the IP's request and message limits and the sender's, in the order they are counted
        (up to the first that must wait). A message to store hands them to the pipeline, which counts them with
        it (Pipeline.take); a refused one counts them with message_limits."""
        return [limiter.entry(key) for limiter, key in self._message_limiters(request, sender)]

    async def message_limits(self, request: Request, sender: str) -> float:
        """Seconds to wait before this sender (and their IP) may send another message; 0.0 to go ahead. The
        request counts in the IP's request limit too, in the same transaction (an endpoint that `counts_itself`)."""
        (first, key), *more = self._message_limiters(request, sender)
        return await first.hit(key, *more)

    def _message_limiters(self, request: Request, sender: str) -> list[tuple[RateLimiter, str]]:
        ip = client_ip(request)
        return [(self.ip_requests, ip), (self.ip_messages, ip), (self.visitor_messages, sender)]

    async def request_limit(self, request: Request) -> float:
        """The per-IP request limit alone, for an endpoint that `counts_itself` and refuses before it knows who
        sends (a bad session token): every request counts, refused or not."""
        return await self.ip_requests.hit(client_ip(request))


async def _answer(endpoint: Endpoint, request: Request) -> Response:
    """The endpoint's answer; a database that fails (down, locked, full, broken) is a 503, never a 500."""
    try:
        return await endpoint(request)
    except StoreError as exc:
        cause = exc.__cause__
        logger.error("web.store_failed", path=request.url.path, error=type(exc).__name__,
                     cause=type(cause).__name__ if cause else None)
        return unavailable(request)


def client_ip(request: Request) -> str:
    # uvicorn puts X-Forwarded-For here only on connections from HILO_TRUSTED_PROXIES (bot/cli.py): a header
    # sent by anyone else never changes whose limits count.
    return request.client.host if request.client else "unknown"
