"""Who may use the admin page (surfaces/admin.py): the operator who typed HILO_ADMIN_TOKEN into it once.

- Sign-in: `POST /admin/api/session {"token"}`; the token is compared in constant time (both sides hashed first,
  so not even its length shows), and every attempt counts against the client IP's HILO_ADMIN_SIGN_INS_PER_MINUTE in
  the database (surfaces/web_guard.py RateLimiter, memory/sql_limits.py): N processes allow what one does, and a
  guess past the limit is answered 429 without being compared at all.
- Session: the `hilo_admin` cookie, HttpOnly (no script reads it), SameSite=Strict (no request from another site
  carries it, not even a link followed), Secure on https, Path=/admin, for HILO_ADMIN_SESSION_MINUTES. Its value
  is signed with HILO_SECRET_KEY (itsdangerous, a salt of its own: no other token of hilo's passes for it) and
  names a fingerprint of the admin token: changing HILO_ADMIN_TOKEN signs every session out.
- Writes (PATCH, DELETE, sign-out) need, on top of the cookie, the CSRF proof: the `X-Hilo-Csrf` header holding
  an HMAC of the session (handed to the page at sign-in, and by `GET /admin/api/session` after a reload; a page on
  another origin can read neither), and an Origin, when the browser sends one, that is the daemon's own (or
  HILO_PUBLIC_URL's).
The token itself is never logged nor stored.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets

from itsdangerous import BadSignature, URLSafeTimedSerializer
from starlette.requests import Request
from starlette.responses import Response

from surfaces.web_guard import Origins

COOKIE = "hilo_admin"
CSRF_HEADER = "x-hilo-csrf"
COOKIE_PATH = "/admin"


def _digest(text: str) -> bytes:
    return hashlib.sha256(text.encode()).digest()


def token_matches(given: str, expected: str) -> bool:
    """Constant time, whatever the lengths: the digests are compared, never the texts."""
    return bool(expected) and hmac.compare_digest(_digest(given), _digest(expected))


class AdminSessions:
    """Issues and checks admin session cookies, and the CSRF proof of each."""

    SALT = "hilo.admin.session.v1"

    def __init__(self, secret_key: str, admin_token: str, minutes: int) -> None:
        self._serializer = URLSafeTimedSerializer(secret_key, salt=self.SALT)
        self._csrf_key = hashlib.sha256(("hilo.admin.csrf:" + secret_key).encode()).digest()
        self._fingerprint = hashlib.sha256(("hilo.admin.token:" + admin_token).encode()).hexdigest()[:32]
        self.max_age_s = minutes * 60

    def issue(self) -> str:
        return str(self._serializer.dumps({"n": secrets.token_urlsafe(16), "k": self._fingerprint}))

    def valid(self, cookie: str | None) -> bool:
        if not cookie:
            return False
        try:
            data = self._serializer.loads(cookie, max_age=self.max_age_s)
        except BadSignature:  # also SignatureExpired
            return False
        return isinstance(data, dict) and hmac.compare_digest(str(data.get("k", "")), self._fingerprint)

    def csrf(self, cookie: str) -> str:
        return hmac.new(self._csrf_key, cookie.encode(), hashlib.sha256).hexdigest()

    def csrf_ok(self, request: Request, cookie: str) -> bool:
        return hmac.compare_digest(request.headers.get(CSRF_HEADER, ""), self.csrf(cookie))

    def set_cookie(self, request: Request, response: Response, value: str) -> None:
        response.set_cookie(COOKIE, value, max_age=self.max_age_s, path=COOKIE_PATH, httponly=True,
                            samesite="strict", secure=request.url.scheme == "https")  # TLS proxy: HILO_TRUSTED_PROXIES

    def clear_cookie(self, request: Request, response: Response) -> None:
        response.delete_cookie(COOKIE, path=COOKIE_PATH, httponly=True, samesite="strict",
                               secure=request.url.scheme == "https")


def own_origin(request: Request, origins: Origins) -> bool:
    """No Origin (curl, a top-level navigation), or the daemon's own (or HILO_PUBLIC_URL's): never another page."""
    origin = request.headers.get("origin")
    own = f"{request.url.scheme}://{request.url.netloc}"
    return origin is None or origins.allows(origin, own)
