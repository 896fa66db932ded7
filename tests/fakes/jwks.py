"""A loopback JWKS endpoint, as Supabase Auth serves one (`/auth/v1/.well-known/jwks.json`), with keys made in
the test by `cryptography`, and tokens signed with them by PyJWT.

`FakeJwks.app` serves `{"keys": [...]}`; `requests` counts what was fetched; `status` other than 200 plays an
outage (its body is then an error page, as a proxy in front of a down service would answer).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import jwt
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from jwt.algorithms import ECAlgorithm, RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response
from starlette.routing import Route

JWKS_PATH = "/auth/v1/.well-known/jwks.json"
PrivateKey = rsa.RSAPrivateKey | ec.EllipticCurvePrivateKey


@dataclass
class SigningKey:
    """A private key, its kid and alg; `jwk()` is its public half as a JWKS entry."""

    kid: str
    alg: str
    private: PrivateKey

    @classmethod
    def rsa(cls, kid: str) -> SigningKey:
        return cls(kid, "RS256", rsa.generate_private_key(public_exponent=65537, key_size=2048))

    @classmethod
    def ec(cls, kid: str) -> SigningKey:
        return cls(kid, "ES256", ec.generate_private_key(ec.SECP256R1()))

    def jwk(self) -> dict[str, Any]:
        public = self.private.public_key()
        if isinstance(public, rsa.RSAPublicKey):
            data: dict[str, Any] = RSAAlgorithm.to_jwk(public, as_dict=True)
        else:
            data = ECAlgorithm.to_jwk(public, as_dict=True)
        return {**data, "kid": self.kid, "alg": self.alg, "use": "sig", "key_ops": ["verify"]}

    def sign(self, sub: str | None, *, ttl: int = 3600, kid: str | None = None, alg: str | None = None,
             **claims: Any) -> str:
        """A Supabase-shaped access token for `sub` (None: without one, like Supabase's anon key), signed with
        this key; the header's kid and alg can be set to something else."""
        now = int(time.time())
        payload = {**({"sub": sub} if sub is not None else {}), "aud": "authenticated", "role": "authenticated",
                   "iat": now, "exp": now + ttl, "iss": "https://project.supabase.co/auth/v1", **claims}
        return jwt.encode(payload, self.private, algorithm=alg or self.alg,
                          headers={"kid": kid if kid is not None else self.kid})


@dataclass
class FakeJwks:
    keys: list[SigningKey] = field(default_factory=list)
    requests: int = 0
    status: int = 200

    @property
    def app(self) -> Starlette:
        async def jwks(request: Request) -> Response:
            self.requests += 1
            if self.status != 200:
                return PlainTextResponse("upstream unavailable", status_code=self.status)
            return JSONResponse({"keys": [k.jwk() for k in self.keys]})

        return Starlette(routes=[Route(JWKS_PATH, jwks, methods=["GET"])])
