"""The public keys of a site's login, fetched from its JWKS endpoint (HILO_JWT_JWKS_URL) and cached.

Supabase projects on JWT signing keys sign access tokens with RS256 or ES256 and publish the public halves at
`https://<project>.supabase.co/auth/v1/.well-known/jwks.json`; any OpenID provider does the same. PyJWT turns
a JWK into a key (`jwt.PyJWKSet`); this module only fetches and caches, asynchronously (httpx: a fetch never
blocks the event loop), one fetch at a time however many requests wait for it:

- the key set is kept for `ttl_s` (10 minutes), then fetched again when next needed;
- a token naming a kid the set does not have fetches it again (a rotated key), but at most once per `retry_s`,
  so tokens with made-up kids cannot make hilo hammer the endpoint;
- a fetch that fails is not tried again for `retry_s` either; the keys fetched before stay in use meanwhile.

Errors (both logged with what the operator can do about them):

    JwksError
     ├── JwksUnavailable   the key set could not be fetched, and no key of that kid is known from before
     └── UnknownKey        the set has no key of that kid
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import httpx
import jwt

from kernel import log
from kernel.errors import HiloError

logger = log.get("hilo.web.jwks")

MAX_JWKS_BYTES = 256 * 1024


class JwksError(HiloError):
    """A token's key cannot be had."""


class JwksUnavailable(JwksError):
    """The JWKS endpoint did not answer with a key set (and no key of that kid is known from before)."""


class UnknownKey(JwksError):
    """The key set has no key of the token's kid."""


class JwksKeys:
    """The signing keys at `url`, by kid."""

    def __init__(self, url: str, *, ttl_s: float = 600.0, retry_s: float = 30.0, timeout_s: float = 5.0,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.url = url
        self.ttl_s, self.retry_s, self.timeout_s = ttl_s, retry_s, timeout_s
        self._clock = clock
        self._keys: dict[str, jwt.PyJWK] = {}
        self._fetched_at: float | None = None  # the last fetch that worked
        self._tried_at: float | None = None  # the last fetch, whatever its outcome
        self._failed = False
        self._lock = asyncio.Lock()

    def _fresh(self, now: float) -> bool:
        return self._fetched_at is not None and now - self._fetched_at < self.ttl_s

    async def key(self, kid: str) -> jwt.PyJWK:
        """The key named `kid`; JwksUnavailable or UnknownKey when there is none to be had."""
        if kid in self._keys and self._fresh(self._clock()):
            return self._keys[kid]
        async with self._lock:  # one fetch; whoever waited finds its result
            now = self._clock()
            needed = kid not in self._keys or not self._fresh(now)
            if needed and (self._tried_at is None or now - self._tried_at >= self.retry_s):
                await self._fetch()
        found = self._keys.get(kid)
        if found is not None:
            return found
        if self._failed:
            raise JwksUnavailable(self.url)
        logger.warning("web.jwt_unknown_kid", kid=kid[:100], known=sorted(self._keys),
                       fix="the token was signed with a key that is not in HILO_JWT_JWKS_URL: check that the URL is "
                           "the JWKS of the project that issues the tokens")
        raise UnknownKey(kid)

    async def _fetch(self) -> None:
        self._tried_at = self._clock()
        try:
            async with httpx.AsyncClient(timeout=self.timeout_s, follow_redirects=True) as client:
                response = await client.get(self.url, headers={"accept": "application/json"})
            if response.status_code != 200:
                raise _Unusable(f"HTTP {response.status_code}")
            if len(response.content) > MAX_JWKS_BYTES:
                raise _Unusable(f"{len(response.content)} bytes: not a key set")
            keys = jwt.PyJWKSet.from_dict(response.json()).keys
        except (httpx.HTTPError, _Unusable, ValueError, jwt.PyJWKSetError) as exc:
            self._failed = True
            logger.error("web.jwks_unreachable", url=self.url, error=str(exc)[:200] or type(exc).__name__,
                         kept=len(self._keys),
                         fix="check that HILO_JWT_JWKS_URL is reachable from this host and serves {\"keys\": [...]} "
                             "(for Supabase: https://<project>.supabase.co/auth/v1/.well-known/jwks.json)")
            return
        self._keys = {k.key_id: k for k in keys if k.key_id}
        self._fetched_at, self._failed = self._tried_at, False
        logger.info("web.jwks_fetched", url=self.url, keys=len(self._keys))


class _Unusable(JwksError):
    """An answer from the JWKS endpoint that is not a key set."""
