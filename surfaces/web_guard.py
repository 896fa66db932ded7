"""What stands in front of every /api route: the origin check, CORS, and rate limits.

Origins: a browser names the page that makes a request in its `Origin` header. The API answers only pages
on the daemon's own origin, HILO_PUBLIC_URL's origin and HILO_ALLOWED_ORIGINS (exact `scheme://host[:port]`,
`https://*.example.com` for subdomains, or `*`); any other Origin gets 403 before anything is read or
written, and no CORS headers, so a page elsewhere can neither call the API nor read an answer. Requests
without an Origin (curl, server-to-server, same-origin GETs) pass: they cannot carry a visitor's browser
credentials from another site (the cookie is SameSite=Lax; the widget's Bearer token lives in the embedding
site's own localStorage). CORS never allows credentials: cross-origin calls use the Bearer token only.

Rate limits: in-process token buckets (per daemon process; N processes allow N times as much).
Per IP, every API request (5x HILO_RATE_LIMIT_IP per minute) and every message (HILO_RATE_LIMIT_IP per
minute); per visitor or site user, messages (HILO_RATE_LIMIT_VISITOR per minute). Over the limit: 429 with
Retry-After and the catalogue's "rate_limited" text.
"""

from __future__ import annotations

import math
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from bot.config import Settings
from kernel import log
from kernel.errors import StoreError
from surfaces.web_common import error, unavailable

logger = log.get("hilo.web")

Endpoint = Callable[[Request], Awaitable[Response]]

ALLOWED_HEADERS = "authorization, content-type, accept-language, x-hilo-session"
REQUESTS_PER_MESSAGE = 5


class RateLimiter:
    """Token buckets per key: `per_minute` requests in a burst, refilled evenly over a minute."""

    def __init__(self, per_minute: int, *, clock: Callable[[], float] = time.monotonic,
                 max_keys: int = 50_000) -> None:
        self.capacity = float(per_minute)
        self.rate = per_minute / 60.0
        self._clock = clock
        self._max_keys = max_keys
        # key -> (tokens left, when), least recently used first: past max_keys the oldest go
        self._buckets: OrderedDict[str, tuple[float, float]] = OrderedDict()

    def hit(self, key: str) -> float:
        """Take one token: 0.0 when allowed, else the seconds until the next one is available."""
        now = self._clock()
        tokens, when = self._buckets.get(key, (self.capacity, now))
        tokens = min(self.capacity, tokens + (now - when) * self.rate)
        allowed = tokens >= 1.0
        self._buckets[key] = (tokens - 1.0 if allowed else tokens, now)
        self._buckets.move_to_end(key)
        while len(self._buckets) > self._max_keys:  # O(1) per hit: the least recently seen keys go first
            self._buckets.popitem(last=False)
        return 0.0 if allowed else (1.0 - tokens) / self.rate


def too_many(request: Request, retry_after: float) -> JSONResponse:
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
    """Wraps each /api endpoint: origin check, CORS preflight and headers, per-IP request limit."""

    def __init__(self, settings: Settings, *, clock: Callable[[], float] = time.monotonic) -> None:
        self.origins = Origins(settings.allowed_origins, settings.public_url)
        self.ip_requests = RateLimiter(settings.rate_limit_ip * REQUESTS_PER_MESSAGE, clock=clock)
        self.ip_messages = RateLimiter(settings.rate_limit_ip, clock=clock)
        self.visitor_messages = RateLimiter(settings.rate_limit_visitor, clock=clock)

    def __call__(self, endpoint: Endpoint) -> Endpoint:
        async def guarded(request: Request) -> Response:
            origin = request.headers.get("origin")
            own = f"{request.url.scheme}://{request.url.netloc}"
            if origin is not None and not self.origins.allows(origin, own):
                return error(request, 403, "origin_not_allowed")
            if request.method == "OPTIONS":
                response: Response = Response(status_code=204, headers={
                    "access-control-allow-methods": "GET, POST, DELETE, OPTIONS",
                    "access-control-allow-headers": ALLOWED_HEADERS,
                    "access-control-max-age": "600",
                })
            else:
                wait = self.ip_requests.hit(client_ip(request))
                response = too_many(request, wait) if wait else await _answer(endpoint, request)
            if origin is not None:
                response.headers["access-control-allow-origin"] = origin
                response.headers["access-control-expose-headers"] = "retry-after"
            response.headers["vary"] = "Origin"
            response.headers.setdefault("cache-control", "no-store")
            response.headers["x-content-type-options"] = "nosniff"
            return response

        return guarded

    def message_limits(self, request: Request, sender: str) -> float:
        """Seconds to wait before this sender (and their IP) may send another message; 0.0 to go ahead."""
        return self.ip_messages.hit(client_ip(request)) or self.visitor_messages.hit(sender)


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
