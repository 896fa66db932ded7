"""Who is calling the web API: an anonymous visitor, or a person logged in on the embedding site.

A site user token travels only as `Authorization: Bearer <token>`. The anonymous visitor's token travels as a
Bearer token (the widget, cross-origin), the `X-Hilo-Session` header, or the HttpOnly SameSite=Lax
`hilo_session` cookie (same-origin clients); a site token found in those two is refused, and query strings are
never read. Three kinds of token, told apart by their shape and then verified in constant time:

- visitor session  `<payload>.<time>.<sig>`        itsdangerous, HILO_SECRET_KEY; identity (web, <visitor id>);
                                                   valid for HILO_SESSION_MAX_AGE after it was issued, and
                                                   renewed (a fresh token handed back) once it is a tenth as old
- site user (HMAC) `<user id>.<expiry>.<hex sig>`  HMAC-SHA256(HILO_SITE_SECRET, "<user id>.<expiry>")
- site user (JWT)  `<header>.<claims>.<sig>`       a Supabase Auth (or any OpenID) access token: HS256 with
                                                   HILO_JWT_SECRET, or RS256 / ES256 with a key of the JWKS at
                                                   HILO_JWT_JWKS_URL (surfaces.web_jwks, cached); `exp` and `sub`
                                                   required, `aud` checked; the alg must be its key's

Visitor tokens from before sessions expired (`<payload>.<sig>`, no time in them) are answered 401
`session_expired`: nothing tells one issued yesterday from one stolen years ago. The widget then starts
afresh as a new visitor.

A site user is the identity (web, "site:<user id>"): the same hilo user on every device they log in from.
Visitor ids are hex, so the two can never collide.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from itsdangerous import BadSignature, TimestampSigner, URLSafeSerializer, URLSafeTimedSerializer
from starlette.requests import Request

from bot.config import Settings
from kernel import log
from kernel.errors import HiloError

if TYPE_CHECKING:  # PyJWT (and cryptography, through web_jwks) load on first use: most requests are visitors'
    from surfaces.web_jwks import JwksKeys

SESSION_COOKIE = "hilo_session"
#: Visitor tokens whose signature checked out, kept so that a visitor's next request is not checked again.
VERIFIED_KEPT = 4096
SITE_PREFIX = "site:"
#: A site's user id: printable ASCII without spaces (Supabase uuids, numeric ids, emails, "auth0|123").
_USER_ID = re.compile(r"^[\x21-\x7e]{1,200}$")
_HMAC_TOKEN = re.compile(r"^(?P<user>.+)\.(?P<exp>\d{1,12})\.(?P<sig>[0-9a-f]{64})$")
_JWT_LEEWAY_S = 10
#: Asymmetric algorithms taken from the JWKS (Supabase's signing keys are RS256 or ES256).
JWKS_ALGORITHMS = ("RS256", "ES256")

logger = log.get("hilo.web.auth")


class AuthFailed(HiloError):
    """A credential was sent but is not valid. `key` is the catalogue text to answer with (401)."""

    def __init__(self, key: str = "unauthorized") -> None:
        super().__init__(key)
        self.key = key


@dataclass(frozen=True, slots=True)
class Caller:
    """The web identity of a request: `sender` is the external user id of (web, sender)."""

    sender: str
    kind: str  # "visitor" | "site"
    #: A visitor token to hand back to the client: a new visitor's (nothing valid was sent), or a renewed one.
    new_token: str | None = field(default=None, repr=False)


@dataclass(frozen=True, slots=True)
class Session:
    """A valid visitor token: who it is, and a fresh token for them when the one presented is getting old."""

    visitor: str
    renewed: str | None


class _SignedAt(TimestampSigner):
    """A TimestampSigner whose clock is one given moment (tokens issued 'in the past', for tests and tools)."""

    def __init__(self, *args: Any, at: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._at = int(at)

    def get_timestamp(self) -> int:
        return self._at


class Sessions:
    """Issues and checks anonymous visitor tokens. A forged or foreign-key token is simply not a session; an
    expired one, or one from before tokens carried their time, is AuthFailed("session_expired")."""

    SALT = "hilo.web.session.v2"
    LEGACY_SALT = "hilo.web.session.v1"  # untimed tokens: recognized only to be refused as expired

    def __init__(self, secret_key: str, max_age_s: int = 30 * 24 * 3600) -> None:
        self._secret_key = secret_key
        self._serializer = URLSafeTimedSerializer(secret_key, salt=self.SALT)
        self._legacy = URLSafeSerializer(secret_key, salt=self.LEGACY_SALT)
        self.max_age_s = max_age_s
        #: Renew once a tenth of the lifetime has passed: someone who comes back within 90% of it stays.
        self.renew_after_s = max_age_s / 10
        #: token -> (visitor, the moment it was signed), for tokens whose signature checked out: a visitor sends
        #: the same token with every request, and checking it (HMAC, base64, JSON) was 3.5% of the event loop's
        #: time in a web turn (py-spy, c=1). The same string always checks the same way; its age is checked
        #: every time. Oldest out first beyond VERIFIED_KEPT.
        self._verified: OrderedDict[str, tuple[str, float]] = OrderedDict()

    def issue(self, *, now: float | None = None) -> tuple[str, str]:
        """A new visitor id and its token (issued `now`, default: this moment)."""
        visitor = secrets.token_hex(16)
        return visitor, self._token(visitor, now)

    def _token(self, visitor: str, now: float | None) -> str:
        if now is None:
            return str(self._serializer.dumps({"v": visitor}))
        at = URLSafeTimedSerializer(self._secret_key, salt=self.SALT, signer=_SignedAt, signer_kwargs={"at": now})
        return str(at.dumps({"v": visitor}))

    def check(self, token: str) -> Session | None:
        """The session of a valid visitor token; None when the token is not one of ours at all."""
        verified = self._verified.get(token)
        if verified is None:
            verified = self._verify(token)
            if verified is None:
                return None
            if len(self._verified) >= VERIFIED_KEPT:
                self._verified.popitem(last=False)
            self._verified[token] = verified
        visitor, signed_at = verified
        # The age is checked here rather than by itsdangerous, which refuses a token stamped a second
        # "in the future" by another machine whose clock runs ahead.
        age = time.time() - signed_at
        if age > self.max_age_s:
            raise AuthFailed("session_expired")
        return Session(visitor, self._token(visitor, None) if age >= self.renew_after_s else None)

    def _verify(self, token: str) -> tuple[str, float] | None:
        """(visitor, signed at) of a token whose signature is ours; None when it is not one of ours at all."""
        try:
            data, signed_at = self._serializer.loads(token, return_timestamp=True)
        except BadSignature:
            try:
                self._legacy.loads(token)
            except BadSignature:
                return None
            raise AuthFailed("session_expired") from None
        visitor = data.get("v") if isinstance(data, dict) else None
        if not isinstance(visitor, str) or not visitor:
            return None
        return visitor, signed_at.timestamp()


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


async def verify_jwt(token: str, *, secret: str, audience: tuple[str, ...], jwks: JwksKeys | None) -> str:
    """The `sub` of a valid JWT: HS256 with `secret`, or RS256/ES256 with its kid's key from `jwks`.
    AuthFailed("session_expired") when expired, ("sign_in_unavailable") when the keys cannot be fetched."""
    import jwt

    from surfaces.web_jwks import JwksUnavailable, UnknownKey

    try:
        header = jwt.get_unverified_header(token)
    except jwt.PyJWTError:
        raise AuthFailed() from None
    alg, kid = header.get("alg"), header.get("kid")
    key: Any
    if alg == "HS256" and secret:
        key = secret
    elif alg in JWKS_ALGORITHMS and jwks is not None and isinstance(kid, str) and kid:
        try:
            jwk = await jwks.key(kid)
        except JwksUnavailable:
            raise AuthFailed("sign_in_unavailable") from None
        except UnknownKey:
            raise AuthFailed() from None
        if jwk.algorithm_name != alg:  # never let a token choose how its key is used
            _refused(alg, f"its key {kid!r} is {jwk.algorithm_name}: the token is not from that key's issuer")
            raise AuthFailed()
        key = jwk.key
    else:
        _refused(alg if isinstance(alg, str) else None, _fix(alg, jwks))
        raise AuthFailed()
    try:
        claims = jwt.decode(
            token, key, algorithms=[alg], audience=list(audience) or None, leeway=_JWT_LEEWAY_S,
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


def _fix(alg: object, jwks: JwksKeys | None) -> str:
    """What the operator can do about a token refused for its algorithm."""
    if alg == "HS256":
        return "HS256 tokens need HILO_JWT_SECRET (the project's JWT secret)"
    if alg in JWKS_ALGORITHMS and jwks is None:
        return (f"{alg} tokens need HILO_JWT_JWKS_URL "
                "(for Supabase: https://<project>.supabase.co/auth/v1/.well-known/jwks.json)")
    if alg in JWKS_ALGORITHMS:
        return "the token has no kid: its issuer does not sign with JWKS keys"
    return "hilo takes HS256 (HILO_JWT_SECRET), RS256 and ES256 (HILO_JWT_JWKS_URL) site logins"


def _refused(alg: str | None, fix: str) -> None:
    logger.warning("web.jwt_refused", alg=(alg or "")[:20], fix=fix)


def request_token(request: Request) -> tuple[str, bool] | None:
    """The credential a request carries and whether it came as a Bearer token (the only place a site token is
    taken from). Query strings are never read: URLs end up in logs, histories and Referer headers."""
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("bearer "):
        token = auth[7:].strip()
        return (token, True) if token else None
    header = request.headers.get("x-hilo-session")
    if header:
        return header, False
    # The cookie rides along on any same-site request, also from another allowed page of the site: it counts
    # only on the server's own origin (or with no Origin at all: top-level navigation, curl).
    origin = request.headers.get("origin")
    if origin is not None and origin.lower() != f"{request.url.scheme}://{request.url.netloc}".lower():
        return None
    cookie = request.cookies.get(SESSION_COOKIE)
    return (cookie, False) if cookie else None


class Authenticator:
    """Turns a request's credential into a Caller. Raises AuthFailed for a credential that is not valid."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.sessions = Sessions(settings.secret_key, settings.session_max_age)
        self.jwks: JwksKeys | None = None
        if settings.jwt_jwks_url:
            from surfaces.web_jwks import JwksKeys

            self.jwks = JwksKeys(settings.jwt_jwks_url)

    async def caller(self, request: Request, *, issue: bool = False) -> Caller | None:
        """The caller; None when no credential was sent (a new visitor when `issue`)."""
        credential = request_token(request)
        if credential is None:
            if not issue:
                return None
            visitor, new_token = self.sessions.issue()
            return Caller(visitor, "visitor", new_token)
        token, bearer = credential
        return await self.resolve(token, sites=bearer)

    async def resolve(self, token: str, *, sites: bool = True) -> Caller:
        """The caller a token names; a site token only when `sites` (it came as a Bearer token)."""
        s = self.settings
        session = self.sessions.check(token)
        if session is not None:
            return Caller(session.visitor, "visitor", session.renewed)
        if not sites:
            raise AuthFailed()  # a site token in a visitor-only place (X-Hilo-Session, the cookie), or junk
        if _HMAC_TOKEN.match(token):
            return Caller(SITE_PREFIX + verify_site_token(s.site_secret, token), "site")
        if token.count(".") == 2:
            sub = await verify_jwt(token, secret=s.jwt_secret, audience=s.jwt_audience, jwks=self.jwks)
            return Caller(SITE_PREFIX + sub, "site")
        raise AuthFailed()  # a token that is not ours: never silently swap identities
