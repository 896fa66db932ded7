"""Web visitor sessions expire and are renewed while in use; site tokens are accepted only as Bearer tokens.

The real daemon under uvicorn on 127.0.0.1 with the real SQLite store and the echo model; old tokens are made
with `Sessions.issue(now=...)`, the code the daemon issues them with, at a moment in the past.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest
from itsdangerous import URLSafeSerializer

from bot.config import Settings
from kernel import catalog
from kernel.errors import ConfigError
from surfaces.web_auth import AuthFailed, Sessions, sign_site_token
from tests.fakes.daemon import running_daemon

SECRET = "test-secret"
MAX_AGE = 3600
SITE_SECRET = "site-secret-for-tests"
JWT_SECRET = "supabase-jwt-secret-for-tests-0123456789"


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


def settings(tmp_path: Path) -> Settings:
    return Settings.from_mapping({
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": SECRET,
        "HILO_SESSION_MAX_AGE": str(MAX_AGE), "HILO_SITE_SECRET": SITE_SECRET, "HILO_JWT_SECRET": JWT_SECRET,
    })


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with running_daemon(settings(tmp_path)) as c:
        yield c


def aged(seconds: float) -> tuple[str, str]:
    """A visitor and their token, issued `seconds` ago."""
    return Sessions(SECRET, MAX_AGE).issue(now=time.time() - seconds)


def store_of(client: httpx.AsyncClient) -> Any:
    return client.app.state.hilo["runtime"].pipeline.store  # type: ignore[attr-defined]


def test_session_max_age_setting() -> None:
    assert Settings.from_mapping({}).session_max_age == 30 * 24 * 3600
    assert Settings.from_mapping({"HILO_SESSION_MAX_AGE": "86400"}).session_max_age == 86400
    for bad in ("soon", "10"):
        with pytest.raises(ConfigError, match="HILO_SESSION_MAX_AGE"):
            Settings.from_mapping({"HILO_SESSION_MAX_AGE": bad})


async def test_an_expired_visitor_session_gets_401_session_expired_and_stores_nothing(
    client: httpx.AsyncClient,
) -> None:
    visitor, token = aged(MAX_AGE + 60)
    r = await client.post("/api/messages", json={"text": "hello"}, headers=bearer(token))
    assert r.status_code == 401, r.text
    assert r.json() == {"error": "session_expired", "message": catalog.t("session_expired", "en")}
    r = await client.post("/api/messages", json={"text": "hola"}, headers={**bearer(token), "accept-language": "es"})
    assert r.status_code == 401 and r.json()["message"] == catalog.t("session_expired", "es")
    r = await client.post("/api/messages/stream", json={"text": "hello"}, headers={"x-hilo-session": token})
    assert r.status_code == 401 and r.json()["error"] == "session_expired"
    r = await client.get("/api/conversations", headers=bearer(token))
    assert r.status_code == 401 and r.json()["error"] == "session_expired"
    assert await store_of(client).identity_user("web", visitor) is None


async def test_an_untimed_token_from_before_expiry_existed_is_refused_as_expired(client: httpx.AsyncClient) -> None:
    # Exactly what hilo issued before sessions expired: signed, but with no time in it. It cannot be told
    # apart from one stolen years ago, so it is refused; the widget then starts a new visitor.
    legacy = URLSafeSerializer(SECRET, salt="hilo.web.session.v1").dumps({"v": "ab" * 16})
    r = await client.post("/api/messages", json={"text": "hello"}, headers=bearer(legacy))
    assert r.status_code == 401 and r.json()["error"] == "session_expired", r.text
    assert await store_of(client).identity_user("web", "ab" * 16) is None


async def test_a_session_in_use_is_renewed_and_stays_the_same_visitor(client: httpx.AsyncClient) -> None:
    _, fresh = aged(0)
    r = await client.post("/api/messages", json={"text": "one"}, headers=bearer(fresh))
    assert r.status_code == 200 and "session" not in r.json()  # young: nothing to renew
    visitor, old = aged(MAX_AGE * 0.9)  # near expiry
    first = await client.post("/api/messages", json={"text": "my locker is 4711"}, headers=bearer(old))
    assert first.status_code == 200, first.text
    renewed = first.json()["session"]
    assert renewed != old and first.cookies.get("hilo_session") == renewed
    checked = Sessions(SECRET, MAX_AGE).check(renewed)
    assert checked is not None and checked.visitor == visitor and checked.renewed is None  # brand new
    # the renewed token is the same visitor: same conversations, and it goes on after the old one expires
    convs = (await client.get("/api/conversations", headers=bearer(renewed))).json()["conversations"]
    assert [c["id"] for c in convs] == [first.json()["conversation_id"]]
    # streaming hands the renewed token over in its `meta` event
    async with client.stream("POST", "/api/messages/stream", json={"text": "two"}, headers=bearer(old)) as s:
        assert s.status_code == 200
        meta = None
        async for line in s.aiter_lines():
            if line.startswith("data: ") and meta is None:
                meta = line
    assert meta is not None and '"session"' in meta


# ---- site tokens travel only as `Authorization: Bearer` ------------------------------------------------------

def site_tokens() -> list[str]:
    now = int(time.time())
    return [
        sign_site_token(SITE_SECRET, "u-1"),
        jwt.encode({"sub": "u-1", "aud": "authenticated", "exp": now + 3600}, JWT_SECRET, algorithm="HS256"),
    ]


@pytest.mark.parametrize("kind", ["hmac", "jwt"])
async def test_a_site_token_is_accepted_as_a_bearer_token_only(client: httpx.AsyncClient, kind: str) -> None:
    token = site_tokens()[0 if kind == "hmac" else 1]
    ok = await client.get("/api/conversations", headers=bearer(token))
    assert ok.status_code == 200, ok.text
    # the visitor-only places: refused outright, never a silent login
    r = await client.get("/api/conversations", headers={"x-hilo-session": token})
    assert r.status_code == 401 and r.json()["error"] == "unauthorized", r.text
    r = await client.post("/api/messages", json={"text": "hi"}, headers={"x-hilo-session": token})
    assert r.status_code == 401 and r.json()["error"] == "unauthorized", r.text
    client.cookies.set("hilo_session", token)
    r = await client.get("/api/conversations")
    assert r.status_code == 401 and r.json()["error"] == "unauthorized", r.text
    client.cookies.clear()
    # query strings are never read: no credential at all
    for name in ("token", "access_token", "session", "site_token"):
        r = await client.get(f"/api/conversations?{name}={token}")
        assert r.status_code == 401 and r.json()["error"] == "unauthorized"
        r = await client.post(f"/api/messages?{name}={token}", json={"text": "hi"})
        assert r.status_code == 200 and r.json()["session"]  # a new anonymous visitor, not the site user
        client.cookies.clear()
    assert await store_of(client).identity_user("web", "site:u-1") is None


async def test_the_session_cookie_lasts_as_long_as_the_token(client: httpx.AsyncClient) -> None:
    for path, body in (("/api/session", None), ("/api/messages", {"text": "hi"})):
        client.cookies.clear()  # a new visitor each time
        r = await client.post(path, json=body)
        assert r.status_code == 200, r.text
        cookie = r.headers["set-cookie"]
        assert cookie.startswith("hilo_session=") and f"Max-Age={MAX_AGE};" in cookie, cookie


async def test_reading_renews_an_old_session_too(client: httpx.AsyncClient) -> None:
    """A visitor who only reads (opens the widget, looks at a conversation) keeps their session as well."""
    visitor, old = aged(MAX_AGE * 0.9)
    posted = (await client.post("/api/messages", json={"text": "one"}, headers=bearer(old))).json()
    paths = ("/api/conversations", f"/api/conversations/{posted['conversation_id']}/messages")
    for path in paths:
        r = await client.get(path, headers=bearer(old))
        assert r.status_code == 200, r.text
        renewed = r.json().get("session")
        assert renewed is not None and renewed != old, (path, r.json())
        assert r.cookies.get("hilo_session") == renewed
        assert f"Max-Age={MAX_AGE};" in r.headers["set-cookie"]
        checked = Sessions(SECRET, MAX_AGE).check(renewed)
        assert checked is not None and checked.visitor == visitor and checked.renewed is None
        young = await client.get(path, headers=bearer(renewed))
        assert young.status_code == 200 and "session" not in young.json() and "set-cookie" not in young.headers
    # the same through the cookie (same-origin clients): the renewed token comes back as the cookie
    client.cookies.clear()
    client.cookies.set("hilo_session", old)
    try:
        r = await client.get(paths[0])
        assert r.status_code == 200 and [c["id"] for c in r.json()["conversations"]] == [posted["conversation_id"]]
        assert r.cookies.get("hilo_session") == r.json()["session"] != old
    finally:
        client.cookies.clear()


def test_a_checked_token_is_not_checked_again_and_still_expires(monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = Sessions("test-secret", max_age_s=100)
    visitor, token = sessions.issue(now=1_000_000.0)
    checked: list[str] = []
    loads = sessions._serializer.loads

    def counting(*args: Any, **kwargs: Any) -> Any:
        checked.append(args[0])
        return loads(*args, **kwargs)

    monkeypatch.setattr(sessions._serializer, "loads", counting)
    monkeypatch.setattr(time, "time", lambda: 1_000_050.0)
    first, again = sessions.check(token), sessions.check(token)
    assert first is not None and again is not None and first.visitor == again.visitor == visitor
    assert checked == [token]  # its signature was checked once
    assert sessions.check(token[:-2] + ("AA" if token[-2:] != "AA" else "BB")) is None  # forged: never kept
    assert sessions.check(Sessions("another-key").issue()[1]) is None
    monkeypatch.setattr(time, "time", lambda: 1_000_101.0)
    with pytest.raises(AuthFailed, match="session_expired"):
        sessions.check(token)  # kept, and expired all the same
