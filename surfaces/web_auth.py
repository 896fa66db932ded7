"""Who is calling the web API: an anonymous visitor, or a person logged in on the embedding site.

Every credential travels as `Authorization: Bearer <token>` (the widget, cross-origin) or, for the
anonymous visitor only, the `X-Hilo-Session` header or the HttpOnly SameSite=Lax `hilo_session` cookie
(same-origin clients). Three kinds of token, told apart by their shape and then verified in constant time:

- visitor session  `<payload>.<sig>`               itsdangerous, HILO_SECRET_KEY; identity (web, <visitor id>)
- site user (HMAC) `<user id>.<expiry>.<hex sig>`  HMAC-SHA256(HILO_SITE_SECRET, "<user id>.<expiry>")
- site user (JWT)  `<header>.<claims>.<sig>`       HS256 with HILO_JWT_SECRET (e.g. a Supabase Auth access
                                                   token): `exp` and `sub` required, `aud` checked

A site user is the identity (web, "site:<user id>"): the same hilo user on every device they log in from.
Visitor ids are hex, so the two can never collide.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from dataclasses import dataclass

from itsdangerous import BadSignature, URLSafeSerializer
from starlette.requests import Request

from bot.config import Settings

SESSION_COOKIE = "hilo_session"
SITE_PREFIX = "site:"
#: A site's user id: printable ASCII without spaces (Supabase uuids, numeric ids, emails, "auth0|123").
_USER_ID = re.compile(r"^[\x21-\x7e]{1,200}$")
_HMAC_TOKEN = re.compile(r"^(?P<user>.+)\.(?P<exp>\d{1,12})\.(?P<sig>[0-9a-f]{64})$")
_JWT_LEEWAY_S = 10


class AuthFailed(Exception):
    """A credential was sent but is not valid. `key` is the catalogue text to answer with (401)."""

    def __init__(self, key: str = "unauthorized") -> None:
        super().__init__(key)
        self.key = key


@dataclass(frozen=True, slots=True)
class Caller:
    """The web identity of a request: `sender` is the external user id of (web, sender)."""

    sender: str
    kind: str  # "visitor" | "site"
    #: A visitor token issued by this very request (nothing valid was sent): return it to the client.
    new_token: str | None = None


class Sessions:
    """Issues and checks anonymous visitor tokens. A forged or foreign-key token is simply not a session."""

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


def sign_site_token(secret: str, user_id: str, ttl_s: int = 3600, *, now: float | None = None) -> str:
    """A site user token, as the site's backend makes it (any language can: see docs/widget.md)."""
    if not _USER_ID.match(user_id):
        raise ValueError("a site user id is 1-200 printable ASCII characters without spaces")
    expiry = int((time.time() if now is None else now) + ttl_s)
    payload = f"{user_id}.{expiry}"
    return f"{payload}.{hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()}"


def verify_site_token(secret: str, token: str, *, now: float | None = None) -> str:
    """The user id of a valid HMAC site token. AuthFailed("session_expired") when expired, else AuthFailed."""
    m = _HMAC_TOKEN.match(token)
    if not secret or m is None:
        raise AuthFailed()
    payload = f"{m['user']}.{m['exp']}"
    expected = hmac.new(secret.encode(), payload.encode(), hashlib.sha256).hexdigest()
    if not hmac.compare_digest(expected, m["sig"]) or not _USER_ID.match(m["user"]):
        raise AuthFailed()
    if int(m["exp"]) <= (time.time() if now is None else now):
        raise AuthFailed("session_expired")
    return m["user"]


def verify_jwt(secret: str, token: str, audience: tuple[str, ...]) -> str:
    """The `sub` of a valid HS256 JWT (exp required); AuthFailed("session_expired") when expired."""
    import jwt  # PyJWT, imported on first use: most requests carry visitor tokens

    if not secret:
        raise AuthFailed()
    try:
        claims = jwt.decode(
            token, secret, algorithms=["HS256"], audience=list(audience) or None, leeway=_JWT_LEEWAY_S,
            options={"require": ["exp", "sub"], "verify_aud": bool(audience)},
        )
    except jwt.ExpiredSignatureError:
        raise AuthFailed("session_expired") from None
    except jwt.PyJWTError:
        raise AuthFailed() from None
    sub = claims.get("sub")
    if not isinstance(sub, str) or not _USER_ID.match(sub):
        raise AuthFailed()
    return sub


def request_token(request: Request) -> str | None:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        return auth[7:].strip() or None
    header = request.headers.get("x-hilo-session")
    if header:
        return header
    # The cookie rides along on any same-site request, also from another allowed page of the site: it counts
    # only on the server's own origin (or with no Origin at all: top-level navigation, curl).
    origin = request.headers.get("origin")
    if origin is not None and origin.lower() != f"{request.url.scheme}://{request.url.netloc}".lower():
        return None
    return request.cookies.get(SESSION_COOKIE)


class Authenticator:
    """Turns a request's credential into a Caller. Raises AuthFailed for a credential that is not valid."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sessions = Sessions(settings.secret_key)

    def caller(self, request: Request, *, issue: bool = False) -> Caller | None:
        """The caller; None when no credential was sent (a new visitor when `issue`)."""
        token = request_token(request)
        if token is None:
            if not issue:
                return None
            visitor, new_token = self.sessions.issue()
            return Caller(visitor, "visitor", new_token)
        return self.resolve(token)

    def resolve(self, token: str) -> Caller:
        s = self.settings
        if _HMAC_TOKEN.match(token):
            return Caller(SITE_PREFIX + verify_site_token(s.site_secret, token), "site")
        visitor = self.sessions.visitor(token)
        if visitor is not None:
            return Caller(visitor, "visitor")
        if token.count(".") == 2:
            return Caller(SITE_PREFIX + verify_jwt(s.jwt_secret, token, s.jwt_audience), "site")
        raise AuthFailed()  # a token that is not ours: never silently swap identities
