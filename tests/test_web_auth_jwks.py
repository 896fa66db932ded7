"""Site logins signed with asymmetric keys (RS256 / ES256) through a JWKS endpoint, as Supabase projects on
JWT signing keys issue them: a real HTTP JWKS server on 127.0.0.1 serving keys made in the test, the real
daemon, PyJWT-signed tokens. The HS256 secret keeps working beside it."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from bot.config import Settings
from kernel import catalog
from kernel.errors import ConfigError
from surfaces.web_jwks import JwksKeys, JwksUnavailable, UnknownKey
from tests.fakes.daemon import free_port, running_daemon
from tests.fakes.jwks import JWKS_PATH, FakeJwks, SigningKey
from tests.fakes.loopback import serving

HS_SECRET = "supabase-legacy-jwt-secret-0123456789"
RSA_KEY = SigningKey.rsa("rsa-key-1")
EC_KEY = SigningKey.ec("ec-key-1")
OTHER_RSA = SigningKey.rsa("rsa-key-1")  # same kid, another key: a forgery


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


@dataclass
class Env:
    client: httpx.AsyncClient
    jwks: FakeJwks

    @property
    def store(self) -> Any:
        return self.client.app.state.hilo["runtime"].pipeline.store  # type: ignore[attr-defined]


@pytest.fixture
async def env(tmp_path: Path) -> AsyncIterator[Env]:
    fake = FakeJwks([RSA_KEY, EC_KEY])
    async with serving(fake.app, name="the JWKS server") as jwks_base:
        settings = Settings.from_mapping({
            "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "s",
            "HILO_JWT_SECRET": HS_SECRET, "HILO_JWT_JWKS_URL": jwks_base + JWKS_PATH,
        })
        async with running_daemon(settings) as client:
            yield Env(client, fake)


def test_jwks_url_setting() -> None:
    url = "https://project.supabase.co/auth/v1/.well-known/jwks.json"
    assert Settings.from_mapping({"HILO_JWT_JWKS_URL": url}).jwt_jwks_url == url
    assert Settings.from_mapping({}).jwt_jwks_url == ""
    with pytest.raises(ConfigError, match="HILO_JWT_JWKS_URL"):
        Settings.from_mapping({"HILO_JWT_JWKS_URL": "project.supabase.co/jwks"})


async def test_rs256_and_es256_logins_are_verified_and_the_keys_fetched_once(env: Env) -> None:
    rsa_user = await env.client.post("/api/messages", json={"text": "hi from rsa"},
                                     headers=bearer(RSA_KEY.sign("user-rsa")))
    assert rsa_user.status_code == 200, rsa_user.text
    assert "session" not in rsa_user.json()  # a site user, not a new anonymous visitor
    assert await env.store.identity_user("web", "site:user-rsa") is not None
    ec_user = await env.client.get("/api/conversations", headers=bearer(EC_KEY.sign("user-ec")))
    assert ec_user.status_code == 200, ec_user.text
    # many requests, some at once, each with a new token of either key: one fetch of the key set in all
    tokens = [key.sign(f"u-{i}") for i in range(12) for key in (RSA_KEY, EC_KEY)]
    answers = await asyncio.gather(*(env.client.get("/api/conversations", headers=bearer(t)) for t in tokens))
    assert [r.status_code for r in answers] == [200] * len(tokens)
    assert env.jwks.requests == 1


async def test_the_hs256_secret_keeps_working_beside_the_jwks(env: Env) -> None:
    now = int(time.time())
    token = jwt.encode({"sub": "legacy-user", "aud": "authenticated", "exp": now + 600}, HS_SECRET,
                       algorithm="HS256")
    r = await env.client.post("/api/messages", json={"text": "hi"}, headers=bearer(token))
    assert r.status_code == 200, r.text
    assert await env.store.identity_user("web", "site:legacy-user") is not None
    assert env.jwks.requests == 0  # an HS256 token never needs the key set


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: OTHER_RSA.sign("u"), "unauthorized"),  # the right kid, the wrong key
        (lambda: RSA_KEY.sign("u", ttl=-120), "session_expired"),
        (lambda: RSA_KEY.sign("u", kid="rotated-away"), "unauthorized"),  # a kid the set does not have
        (lambda: OTHER_RSA.sign("u", kid=EC_KEY.kid), "unauthorized"),  # RS256 against the EC key
        (lambda: RSA_KEY.sign("u", aud="other"), "unauthorized"),
        (lambda: RSA_KEY.sign(None), "unauthorized"),  # no sub: an anon key
        (lambda: jwt.encode({"sub": "u", "aud": "authenticated", "exp": int(time.time()) + 60},
                            RSA_KEY.private, algorithm="PS256", headers={"kid": RSA_KEY.kid}), "unauthorized"),
        # the classic confusion: HS256 "signed" with the public key served in the JWKS
        (lambda: jwt.encode({"sub": "u", "aud": "authenticated", "exp": int(time.time()) + 60},
                            HS_SECRET + "x", algorithm="HS256", headers={"kid": RSA_KEY.kid}), "unauthorized"),
    ],
)
async def test_bad_asymmetric_tokens_are_refused_with_a_clear_401(
    env: Env, make: Any, error: str,
) -> None:
    token = make()
    r = await env.client.post("/api/messages", json={"text": "hi"}, headers=bearer(token))
    assert r.status_code == 401, r.text
    assert r.json() == {"error": error, "message": catalog.t(error, "en")}
    assert (await env.client.get("/api/conversations", headers=bearer(token))).status_code == 401
    assert await env.store.identity_user("web", "site:u") is None


async def test_unknown_kids_do_not_make_a_fetch_each(env: Env, capsys: pytest.CaptureFixture[str]) -> None:
    for i in range(10):
        r = await env.client.get("/api/conversations", headers=bearer(RSA_KEY.sign("u", kid=f"nope-{i}")))
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"
    assert env.jwks.requests == 1
    logged = capsys.readouterr()
    assert "web.jwt_unknown_kid" in logged.out + logged.err and "HILO_JWT_JWKS_URL" in logged.out + logged.err


async def test_a_jwks_that_is_down_gets_401_sign_in_unavailable(
    env: Env, capsys: pytest.CaptureFixture[str],
) -> None:
    env.jwks.status = 503
    r = await env.client.post("/api/messages", json={"text": "hi"}, headers=bearer(RSA_KEY.sign("u")))
    assert r.status_code == 401, r.text
    assert r.json() == {"error": "sign_in_unavailable", "message": catalog.t("sign_in_unavailable", "en")}
    logged = capsys.readouterr()
    assert "web.jwks_unreachable" in logged.out + logged.err and "503" in logged.out + logged.err
    assert await env.store.identity_user("web", "site:u") is None


async def test_a_jwks_nobody_listens_on_gets_401_sign_in_unavailable(tmp_path: Path) -> None:
    settings = Settings.from_mapping({
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "s",
        "HILO_JWT_JWKS_URL": f"http://127.0.0.1:{free_port()}{JWKS_PATH}",
    })
    async with running_daemon(settings) as client:
        r = await client.get("/api/conversations", headers=bearer(EC_KEY.sign("u")))
        assert r.status_code == 401 and r.json()["error"] == "sign_in_unavailable", r.text
        # an RS256/ES256 token when no JWKS is configured at all is simply not valid
    async with running_daemon(settings.with_(jwt_jwks_url="")) as client:
        r = await client.get("/api/conversations", headers=bearer(EC_KEY.sign("u")))
        assert r.status_code == 401 and r.json()["error"] == "unauthorized", r.text


async def test_the_key_set_is_refetched_after_its_lifetime_and_recovers_after_an_outage() -> None:
    fake = FakeJwks([RSA_KEY])
    now = [1000.0]
    async with serving(fake.app, name="the JWKS server") as base:
        keys = JwksKeys(base + JWKS_PATH, ttl_s=600, retry_s=30, clock=lambda: now[0])
        assert (await keys.key(RSA_KEY.kid)).key_id == RSA_KEY.kid
        now[0] += 599
        await keys.key(RSA_KEY.kid)
        assert fake.requests == 1  # still fresh
        now[0] += 2
        fake.status = 503
        assert (await keys.key(RSA_KEY.kid)).key_id == RSA_KEY.kid  # stale, the refetch failed: the old key serves
        assert fake.requests == 2
        fake.keys.append(EC_KEY)  # a new key, published while the endpoint is down
        with pytest.raises(JwksUnavailable):
            await keys.key(EC_KEY.kid)
        assert fake.requests == 2  # not tried again within retry_s
        now[0] += 30
        fake.status = 200
        assert (await keys.key(EC_KEY.kid)).key_id == EC_KEY.kid
        assert fake.requests == 3
        with pytest.raises(UnknownKey):
            await keys.key("never-published")
        assert fake.requests == 3
