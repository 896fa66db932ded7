"""The web JSON API on a real uvicorn server on 127.0.0.1, with the real SQLite store and the echo model."""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import json
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import jwt
import pytest

from bot.config import Settings
from bot.jobs import JobRegistry
from bot.models.base import ConnectionFailed
from bot.models.echo import EchoProvider
from bot.models.factory import build_chain
from bot.retry import RetryPolicy
from kernel import catalog
from kernel.errors import ConfigError
from surfaces.web_auth import sign_site_token, verify_site_token
from surfaces.web_common import RETRY_AFTER_S
from tests.fakes.browser import SlowEcho
from tests.fakes.daemon import running_daemon
from tests.fakes.full_disk import PAGE_SIZED_TEXT, disk_full, read_only


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'hilo.db'}", secret_key="test-secret",
                        data_dir=str(tmp_path))  # as from_mapping makes it: the database's directory
    async with running_daemon(settings) as c:
        yield c


def bearer(token: str) -> dict[str, str]:
    return {"authorization": f"Bearer {token}"}


async def test_post_message_issues_a_session_and_answers_with_echo(client: httpx.AsyncClient) -> None:
    r = await client.post("/api/messages", json={"text": "hello hilo"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert body["status"] == "ok" and "hello hilo" in body["reply"] and body["reply"].startswith("[echo")
    assert body["session"] and r.cookies.get("hilo_session") == body["session"]
    convs = (await client.get("/api/conversations", headers=bearer(body["session"]))).json()["conversations"]
    assert [c["id"] for c in convs] == [body["conversation_id"]]
    msgs = (await client.get(f"/api/conversations/{body['conversation_id']}/messages",
                             headers=bearer(body["session"]))).json()["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant"] and msgs[0]["content"] == "hello hilo"


async def test_nul_inside_text_is_dropped_and_the_rest_kept(client: httpx.AsyncClient) -> None:
    """Postgres text cannot hold NUL: every surface's message loses it at the edge (InboundMessage), on SQLite too."""
    r = await client.post("/api/messages", json={"text": "hi\u0000there \u0000\u0000friend"})
    assert r.status_code == 200, r.text
    body = r.json()
    assert "hithere friend" in body["reply"] and "\x00" not in body["reply"]
    msgs = (await client.get(f"/api/conversations/{body['conversation_id']}/messages",
                             headers=bearer(body["session"]))).json()["messages"]
    assert msgs[0]["content"] == "hithere friend"
    r = await client.post("/api/messages", json={"text": "\u0000\u0000"}, headers=bearer(body["session"]))
    assert r.status_code == 400 and r.json()["error"] == "empty_message"
    # an id is not altered (two must never become one): one Postgres cannot store is refused
    r = await client.post("/api/messages", json={"text": "hello", "client_message_id": "a\u0000b"},
                          headers=bearer(body["session"]))
    assert r.status_code == 400 and r.json()["error"] == "bad_request", r.text


async def test_a_visitor_continues_and_starts_conversations(client: httpx.AsyncClient) -> None:
    token = (await client.post("/api/session")).json()["session"]
    first = (await client.post("/api/messages", json={"text": "one"}, headers=bearer(token))).json()
    again = (await client.post("/api/messages", json={"text": "two", "conversation_id": first["conversation_id"]},
                               headers={"x-hilo-session": token})).json()
    fresh = (await client.post("/api/messages", json={"text": "three"}, headers=bearer(token))).json()
    assert again["conversation_id"] == first["conversation_id"] != fresh["conversation_id"]
    assert "session" not in again  # the same visitor: no new token
    convs = (await client.get("/api/conversations", headers=bearer(token))).json()["conversations"]
    assert {c["id"] for c in convs} == {first["conversation_id"], fresh["conversation_id"]}


async def test_a_visitor_cannot_read_or_write_another_visitors_conversation(client: httpx.AsyncClient) -> None:
    a = (await client.post("/api/session")).json()["session"]
    b = (await client.post("/api/session")).json()["session"]
    conv = (await client.post("/api/messages", json={"text": "my secret is tangerine"}, headers=bearer(a))).json()
    cid = conv["conversation_id"]
    assert (await client.get(f"/api/conversations/{cid}/messages", headers=bearer(b))).status_code == 404
    assert (await client.get(f"/api/conversations/{cid + 999}/messages", headers=bearer(b))).status_code == 404
    r = await client.post("/api/messages", json={"text": "hi", "conversation_id": cid}, headers=bearer(b))
    assert r.status_code == 404
    assert (await client.get("/api/conversations", headers=bearer(b))).json()["conversations"] == []
    # b's own turns never recall a's words
    r = await client.post("/api/messages", json={"text": "what is my secret tangerine?"}, headers=bearer(b))
    assert "my secret is tangerine" not in r.json()["reply"]


async def test_forged_or_missing_tokens_are_refused(client: httpx.AsyncClient) -> None:
    assert (await client.get("/api/conversations")).status_code == 401
    token = (await client.post("/api/session")).json()["session"]
    forged = token[:-2] + ("AA" if not token.endswith("AA") else "BB")
    assert (await client.get("/api/conversations", headers=bearer(forged))).status_code == 401
    r = await client.post("/api/messages", json={"text": "hi"}, headers=bearer(forged))
    assert r.status_code == 401 and r.json()["error"] == "unauthorized"


@pytest.mark.parametrize(
    ("body", "status", "error"),
    [
        (b"not json", 400, "bad_request"),
        (b'{"texto": "hi"}', 400, "bad_request"),
        (b'{"text": "hi", "conversation_id": "1"}', 400, "bad_request"),
        (b'{"text": "   "}', 400, "empty_message"),
        (b'{"text": "' + b"x" * 5000 + b'"}', 413, "message_too_long"),
        (b'{"text": "' + b"x" * 70000 + b'"}', 413, "payload_too_large"),
        # lone UTF-16 surrogates: valid JSON escapes, but no text encoding can store them
        (b'{"text": "hi \\ud800"}', 400, "invalid_characters"),
        (b'{"text": "hi", "client_message_id": "c-\\udfff"}', 400, "invalid_characters"),
        (b'{"text": "/link \\ud83d"}', 400, "invalid_characters"),
        (b'{"\\udc00": 1, "text": "hi"}', 400, "invalid_characters"),
        (b"[" * 20000 + b"]" * 20000, 400, "too_deeply_nested"),
        (b'{"text": "hi", "x": ' + b"[" * 40 + b"]" * 40 + b"}", 400, "too_deeply_nested"),
        (b'{"text": "hi", "conversation_id": ' + b"9" * 5000 + b"}", 400, "bad_request"),
        (b'{"text": "hi", "conversation_id": ' + b"9" * 4000 + b"}", 404, "not_found"),
        (b'{"text": "\\u0000\\u0000"}', 400, "empty_message"),
        (b'{"text": "\\u200b\\u200c\\u200d\\u2060\\ufeff \\u0000"}', 400, "empty_message"),
    ],
)
async def test_bad_input_gets_a_clear_error_and_stores_nothing(
    client: httpx.AsyncClient, body: bytes, status: int, error: str
) -> None:
    token = (await client.post("/api/session")).json()["session"]
    r = await client.post("/api/messages", content=body,
                          headers={**bearer(token), "content-type": "application/json"})
    assert r.status_code == status and r.json()["error"] == error and r.json()["message"]
    assert (await client.get("/api/conversations", headers=bearer(token))).json()["conversations"] == []


async def test_errors_are_localized(client: httpx.AsyncClient) -> None:
    r = await client.post("/api/messages", json={"text": ""}, headers={"accept-language": "es-ES,es;q=0.9"})
    assert r.status_code == 400 and "vacío" in r.json()["message"]


async def test_a_retried_post_with_the_same_client_id_is_one_turn(client: httpx.AsyncClient) -> None:
    token = (await client.post("/api/session")).json()["session"]
    body = {"text": "once please", "client_message_id": "c-1"}
    first = (await client.post("/api/messages", json=body, headers=bearer(token))).json()
    second = (await client.post("/api/messages", json=body, headers=bearer(token))).json()
    assert first["status"] == "ok" and second["status"] == "duplicate"
    msgs = (await client.get(f"/api/conversations/{first['conversation_id']}/messages",
                             headers=bearer(token))).json()["messages"]
    assert len(msgs) == 2
    # another visitor using the same client id is not a duplicate of the first
    client.cookies.clear()
    other = (await client.post("/api/messages", json=body)).json()
    assert other["status"] == "ok"


async def test_health(client: httpx.AsyncClient) -> None:
    assert (await client.get("/healthz")).json()["status"] == "ok"


# ---- streaming (POST /api/messages/stream) ---------------------------------------------------------------

@asynccontextmanager
async def daemon(tmp_path: Path, *, chain: Any = None, **overrides: Any) -> AsyncIterator[httpx.AsyncClient]:
    db = f"sqlite:///{tmp_path / 'hilo.db'}"
    settings = Settings(database_url=db, secret_key="test-secret", **overrides)
    async with running_daemon(settings, chain=chain) as c:
        yield c


async def sse_events(response: httpx.Response) -> AsyncIterator[tuple[str, dict[str, Any]]]:
    """Parse a text/event-stream body as it arrives: (event, data) pairs; comment lines are skipped."""
    kind, data = "message", list[str]()
    async for line in response.aiter_lines():
        if line == "":
            if data:
                yield kind, json.loads("\n".join(data))
            kind, data = "message", list[str]()
        elif line.startswith("event:"):
            kind = line[6:].strip()
        elif line.startswith("data:"):
            data.append(line[5:].strip())


async def stream(client: httpx.AsyncClient, body: dict[str, Any], **headers: str) -> list[tuple[str, Any]]:
    async with client.stream("POST", "/api/messages/stream", json=body, headers=headers) as r:
        assert r.status_code == 200, await r.aread()
        assert r.headers["content-type"].startswith("text/event-stream")
        return [event async for event in sse_events(r)]


async def test_stream_sends_meta_then_deltas_then_done(client: httpx.AsyncClient) -> None:
    events = await stream(client, {"text": "stream me a reply please"})
    kinds = [k for k, _ in events]
    assert kinds[0] == "meta" and kinds[-1] == "done" and set(kinds[1:-1]) == {"delta"}
    assert kinds.count("delta") >= 3  # the echo model streams in 3-word chunks
    meta, done = events[0][1], events[-1][1]
    assert meta["conversation_id"] and meta["message_id"] and meta["session"]  # a new visitor got a token
    text = "".join(d["text"] for k, d in events if k == "delta")
    assert done == {"conversation_id": meta["conversation_id"], "message_id": meta["message_id"],
                    "reply_id": done["reply_id"], "status": "ok", "reply": text}
    assert "You said: stream me a reply please" in text
    # stored like any turn, and the same visitor continues the conversation without a new token
    token = meta["session"]
    msgs = (await client.get(f"/api/conversations/{meta['conversation_id']}/messages",
                             headers=bearer(token))).json()["messages"]
    assert [(m["role"], m["id"]) for m in msgs] == [
        ("user", meta["message_id"]), ("assistant", done["reply_id"])]
    body = {"text": "and again", "conversation_id": meta["conversation_id"]}
    again = await stream(client, body, **bearer(token))
    assert again[0][1]["conversation_id"] == meta["conversation_id"] and "session" not in again[0][1]


async def test_stream_errors_before_the_message_is_stored_are_plain_json(client: httpx.AsyncClient) -> None:
    a = (await client.post("/api/session")).json()["session"]
    b = (await client.post("/api/session")).json()["session"]
    cid = (await stream(client, {"text": "mine"}, **bearer(a)))[0][1]["conversation_id"]
    r = await client.post("/api/messages/stream", json={"text": "hi", "conversation_id": cid},
                          headers=bearer(b))
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    r = await client.post("/api/messages/stream", json={"text": "x" * 5000}, headers=bearer(a))
    assert r.status_code == 413 and r.json()["error"] == "message_too_long"
    r = await client.post("/api/messages/stream", json={"text": "hi"}, headers=bearer(a[:-3] + "AAA"))
    assert r.status_code == 401


async def test_a_repeated_client_message_id_streams_a_duplicate(client: httpx.AsyncClient) -> None:
    token = (await client.post("/api/session")).json()["session"]
    body = {"text": "only once", "client_message_id": "retry-1"}
    assert (await stream(client, body, **bearer(token)))[-1][1]["status"] == "ok"
    assert await stream(client, body, **bearer(token)) == [
        ("done", {"conversation_id": None, "message_id": None, "reply_id": None, "status": "duplicate",
                  "reply": None})]


class FlakyEcho(EchoProvider):
    """Streams a few words, then the connection drops; the next attempt answers in full."""

    def __init__(self) -> None:
        self.attempts = 0

    async def stream(self, model: str, messages: Any, *, timeout: float) -> AsyncIterator[Any]:
        self.attempts += 1
        if self.attempts == 1:
            yield "half an answer "
            raise ConnectionFailed("cut")
        async for event in super().stream(model, messages, timeout=timeout):
            yield event


async def test_a_model_that_fails_mid_stream_sends_reset(tmp_path: Path) -> None:
    settings = Settings(secret_key="x")
    chain = build_chain(settings, providers={"echo": FlakyEcho()},
                        policy=RetryPolicy(attempts=2, sleep=lambda _: asyncio.sleep(0)))
    async with daemon(tmp_path, chain=chain) as client:
        events = await stream(client, {"text": "hello"})
    kinds = [k for k, _ in events]
    assert kinds[:3] == ["meta", "delta", "reset"] and kinds[-1] == "done"
    after = "".join(d["text"] for k, d in events[3:] if k == "delta")
    assert after == events[-1][1]["reply"] and "half an answer" not in after


async def test_the_turn_completes_and_is_stored_when_the_client_goes_away(tmp_path: Path) -> None:
    settings = Settings(secret_key="x")
    chain = build_chain(settings, providers={"echo": SlowEcho(0.05)})
    async with daemon(tmp_path, chain=chain) as client:
        token = (await client.post("/api/session")).json()["session"]
        async with client.stream("POST", "/api/messages/stream", json={"text": "hang up on me"},
                                 headers=bearer(token)) as r:
            async for kind, data in sse_events(r):
                assert kind == "meta"
                cid = data["conversation_id"]
                break  # leave before the first delta
        for _ in range(100):
            r = await client.get(f"/api/conversations/{cid}/messages", headers=bearer(token))
            msgs = r.json()["messages"]
            if len(msgs) == 2:
                break
            await asyncio.sleep(0.05)
        assert [m["role"] for m in msgs] == ["user", "assistant"] and "hang up on me" in msgs[1]["content"]


# ---- origins, CORS, rate limits ---------------------------------------------------------------------------

SHOP = "https://shop.example.com"


async def test_a_request_from_a_disallowed_origin_is_refused(tmp_path: Path) -> None:
    async with daemon(tmp_path, allowed_origins=(SHOP,)) as client:
        for origin in ("https://evil.example", "null", "http://shop.example.com", "https://shop.example.com.evil.io"):
            r = await client.post("/api/messages", json={"text": "hi"}, headers={"origin": origin})
            assert r.status_code == 403 and r.json()["error"] == "origin_not_allowed", origin
            assert "access-control-allow-origin" not in r.headers
            pre = await client.options("/api/messages/stream", headers={
                "origin": origin, "access-control-request-method": "POST"})
            assert pre.status_code == 403 and "access-control-allow-origin" not in pre.headers
        token = (await client.post("/api/session")).json()["session"]
        r = await client.get("/api/conversations", headers={**bearer(token), "origin": "https://evil.example"})
        assert r.status_code == 403  # a stolen token is no use from another page either
        # the daemon's own origin and requests without an Origin (curl, servers) are fine
        own = str(client.base_url).rstrip("/")
        r = await client.get("/api/conversations", headers={**bearer(token), "origin": own})
        assert r.status_code == 200
        assert (await client.get("/api/conversations", headers=bearer(token))).status_code == 200


async def test_cors_preflight_and_headers_for_an_allowed_origin(tmp_path: Path) -> None:
    async with daemon(tmp_path, allowed_origins=(SHOP, "https://*.example.org")) as client:
        for origin in (SHOP, "https://help.example.org"):
            pre = await client.options("/api/messages/stream", headers={
                "origin": origin, "access-control-request-method": "POST",
                "access-control-request-headers": "authorization, content-type"})
            assert pre.status_code == 204
            assert pre.headers["access-control-allow-origin"] == origin
            assert "POST" in pre.headers["access-control-allow-methods"]
            allowed = set(pre.headers["access-control-allow-headers"].split(", "))
            assert {"authorization", "content-type"} <= allowed
            assert "access-control-allow-credentials" not in pre.headers  # Bearer tokens only, never cookies
            assert "Origin" in pre.headers["vary"]
        r = await client.post("/api/messages", json={"text": "hi"}, headers={"origin": SHOP})
        assert r.status_code == 200 and r.headers["access-control-allow-origin"] == SHOP
        assert r.headers["cache-control"] == "no-store"


async def test_per_visitor_rate_limit_answers_429_with_retry_after(tmp_path: Path) -> None:
    async with daemon(tmp_path, rate_limit_visitor=2) as client:
        token = (await client.post("/api/session")).json()["session"]
        for _ in range(2):
            r = await client.post("/api/messages", json={"text": "hi"}, headers=bearer(token))
            assert r.status_code == 200
        r = await client.post("/api/messages/stream", json={"text": "hi"},
                              headers={**bearer(token), "accept-language": "es"})
        assert r.status_code == 429 and r.json()["error"] == "rate_limited"
        assert int(r.headers["retry-after"]) >= 1 and r.json()["retry_after"] == int(r.headers["retry-after"])
        assert "Espera" in r.json()["message"]
        other = (await client.post("/api/session")).json()["session"]  # another visitor is not held back
        r = await client.post("/api/messages", json={"text": "hi"}, headers=bearer(other))
        assert r.status_code == 200


async def test_per_ip_rate_limit_holds_back_new_visitors_too(tmp_path: Path) -> None:
    async with daemon(tmp_path, rate_limit_ip=3) as client:
        statuses = []
        for _ in range(4):
            client.cookies.clear()  # a new anonymous visitor each time
            statuses.append((await client.post("/api/messages", json={"text": "hi"})).status_code)
        assert statuses == [200, 200, 200, 429]


async def test_message_posts_and_refused_ones_count_in_the_ip_request_limit(tmp_path: Path) -> None:
    # a message's request counts in its IP's request limit in the transaction of its message limits, a post
    # refused before its sender is known (a bad token) on its own: both count, as every other request does
    async with daemon(tmp_path, rate_limit_ip=2, rate_limit_visitor=1000) as client:  # 2 messages, 10 requests
        token = (await client.post("/api/session")).json()["session"]  # request 1
        for _ in range(2):  # requests 2, 3: the two messages the IP may send
            assert (await client.post("/api/messages", json={"text": "hi"}, headers=bearer(token))).status_code == 200
        bad = [(await client.post("/api/messages", json={"text": "hi"}, headers=bearer("forged"))).status_code
               for _ in range(7)]  # requests 4 to 10
        assert bad == [401] * 7
        r = await client.get("/api")  # request 11: over the IP's ten
        assert r.status_code == 429 and r.json()["error"] == "rate_limited"
        r = await client.post("/api/messages", json={"text": "hi"}, headers=bearer("forged"))
        assert r.status_code == 429


async def test_a_refused_message_counts_in_the_rate_limits_as_a_sent_one(tmp_path: Path) -> None:
    async with daemon(tmp_path, rate_limit_visitor=3) as client:
        token = (await client.post("/api/session")).json()["session"]
        refused = [(await client.post("/api/messages", json=body, headers=bearer(token))).status_code
                   for body in ({"text": "   "}, {"text": "x" * 20_000}, {"nope": 1})]
        assert refused == [400, 413, 400]
        r = await client.post("/api/messages", json={"text": "hi"}, headers=bearer(token))
        assert r.status_code == 429 and r.json()["error"] == "rate_limited"
        r = await client.post("/api/messages", json={"text": "   "}, headers=bearer(token))
        assert r.status_code == 429  # over the limit, a refused one is refused for that first
        history = await client.get("/api/conversations", headers=bearer(token))
        assert history.status_code == 200 and history.json()["conversations"] == []  # nothing refused was stored


async def test_a_web_turn_counts_its_limits_with_its_message_in_two_hops(tmp_path: Path) -> None:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'hilo.db'}", secret_key="test-secret",
                        rate_limit_visitor=2)
    async with running_daemon(settings, jobs=JobRegistry()) as client:  # no job's store call in the count
        token = (await client.post("/api/session")).json()["session"]
        first = await client.post("/api/messages", json={"text": "first"}, headers=bearer(token))
        conversation = first.json()["conversation_id"]
        store = client.app.state.hilo["store"]  # type: ignore[attr-defined]
        before = dict(store.counters)
        r = await client.post("/api/messages", json={"text": "second", "conversation_id": conversation},
                              headers=bearer(token))
        assert r.status_code == 200 and "conversation 2" in r.json()["reply"]  # the first exchange
        # the limits, the message and its context in one hop to the SQLite worker and one transaction; the reply in
        # another
        assert store.counters["round_trips"] - before["round_trips"] == 2
        assert store.counters["transactions"] - before["transactions"] == 2
        r = await client.post("/api/messages/stream", json={"text": "third", "conversation_id": conversation},
                              headers=bearer(token))
        assert r.status_code == 429 and int(r.headers["retry-after"]) >= 1
        history = await client.get(f"/api/conversations/{conversation}/messages", headers=bearer(token))
        assert [m["content"] for m in history.json()["messages"] if m["role"] == "user"] == ["first", "second"]


def test_allowed_origins_setting() -> None:
    s = Settings.from_mapping({"HILO_ALLOWED_ORIGINS": " https://Shop.example.com/ , https://*.example.org,http://localhost:3000"})
    assert s.allowed_origins == ("https://shop.example.com", "https://*.example.org", "http://localhost:3000")
    assert Settings.from_mapping({}).allowed_origins == ()
    for bad in ("shop.example.com", "https://shop.example.com/path", "ftp://x.org"):
        with pytest.raises(ConfigError, match="HILO_ALLOWED_ORIGINS"):
            Settings.from_mapping({"HILO_ALLOWED_ORIGINS": bad})


# ---- site login: HMAC user tokens and HS256 JWTs (Supabase Auth) -------------------------------------------

SITE_SECRET = "site-secret-for-tests"
JWT_SECRET = "supabase-jwt-secret-for-tests-0123456789"


def supabase_jwt(sub: str, *, ttl: int = 3600, secret: str = JWT_SECRET, **claims: Any) -> str:
    now = int(time.time())
    payload = {"sub": sub, "aud": "authenticated", "role": "authenticated", "iat": now, "exp": now + ttl,
               **claims}
    return jwt.encode(payload, secret, algorithm="HS256")


@pytest.fixture
async def site_client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    async with daemon(tmp_path, site_secret=SITE_SECRET, jwt_secret=JWT_SECRET) as c:
        yield c


@pytest.mark.parametrize("kind", ["hmac", "jwt"])
async def test_a_site_user_is_the_same_hilo_user_on_every_device(
    site_client: httpx.AsyncClient, kind: str,
) -> None:
    def token(user: str) -> str:  # each call is a new token, as each device would get from the site
        return sign_site_token(SITE_SECRET, user) if kind == "hmac" else supabase_jwt(user)

    laptop = await site_client.post("/api/messages", json={"text": "my locker code is 4711"},
                                    headers=bearer(token("user-42")))
    assert laptop.status_code == 200 and "session" not in laptop.json()
    site_client.cookies.clear()
    phone = await site_client.get("/api/conversations", headers=bearer(token("user-42")))
    assert [c["id"] for c in phone.json()["conversations"]] == [laptop.json()["conversation_id"]]
    # another site user, and an anonymous visitor, see nothing of it
    visitor = (await site_client.post("/api/session")).json()["session"]
    for other in (token("user-43"), visitor):
        r = await site_client.get("/api/conversations", headers=bearer(other))
        assert r.json()["conversations"] == []
    store = site_client.app.state.hilo["runtime"].pipeline.store  # type: ignore[attr-defined]
    assert await store.identity_user("web", "site:user-42") is not None


async def test_hmac_and_jwt_logins_of_one_site_user_meet(site_client: httpx.AsyncClient) -> None:
    first = (await site_client.post("/api/messages", json={"text": "hi"},
                                    headers=bearer(sign_site_token(SITE_SECRET, "u-7")))).json()
    convs = (await site_client.get("/api/conversations", headers=bearer(supabase_jwt("u-7")))).json()
    assert [c["id"] for c in convs["conversations"]] == [first["conversation_id"]]


@pytest.mark.parametrize(
    ("make", "error"),
    [
        (lambda: sign_site_token(SITE_SECRET, "u", ttl_s=-5), "session_expired"),
        (lambda: sign_site_token("another-secret", "u"), "unauthorized"),
        # a later expiry under the same signature
        (lambda: sign_site_token(SITE_SECRET, "u").replace(".", ".9", 1), "unauthorized"),
        (lambda: "u." + sign_site_token(SITE_SECRET, "u"), "unauthorized"),
        (lambda: supabase_jwt("u", ttl=-60), "session_expired"),
        (lambda: supabase_jwt("u", secret="not-the-project-secret-0123456789"), "unauthorized"),
        (lambda: supabase_jwt("u", aud="something-else"), "unauthorized"),
        # Supabase's anon key: signed with the same secret, but no sub
        (lambda: jwt.encode({"role": "anon", "exp": int(time.time()) + 60, "aud": "authenticated"},
                            JWT_SECRET, algorithm="HS256"), "unauthorized"),
        # no expiry
        (lambda: jwt.encode({"sub": "u", "aud": "authenticated"}, JWT_SECRET, algorithm="HS256"),
         "unauthorized"),
        (lambda: jwt.encode({"sub": "u", "exp": int(time.time()) + 60, "aud": "authenticated"}, "",
                            algorithm="none"), "unauthorized"),
    ],
)
async def test_expired_or_forged_site_tokens_are_refused(
    site_client: httpx.AsyncClient, make: Callable[[], str], error: str,
) -> None:
    token = make()
    r = await site_client.post("/api/messages", json={"text": "hi"}, headers=bearer(token))
    assert r.status_code == 401 and r.json()["error"] == error, r.text
    assert (await site_client.get("/api/conversations", headers=bearer(token))).status_code == 401


async def test_site_tokens_are_refused_when_no_site_secret_is_configured(client: httpx.AsyncClient) -> None:
    for token in (sign_site_token(SITE_SECRET, "u"), supabase_jwt("u")):
        assert (await client.get("/api/conversations", headers=bearer(token))).status_code == 401


def test_site_token_format() -> None:
    token = sign_site_token("s3cret", "ana@example.com", 60, now=1_700_000_000)
    user, expiry, sig = token.rsplit(".", 2)
    assert (user, expiry) == ("ana@example.com", "1700000060")
    assert sig == hmac.new(b"s3cret", b"ana@example.com.1700000060", hashlib.sha256).hexdigest()
    assert verify_site_token("s3cret", token, now=1_700_000_000) == "ana@example.com"
    with pytest.raises(ValueError):
        sign_site_token("s3cret", "has space")


# ---- the widget's files ------------------------------------------------------------------------------------

async def test_widget_js_is_cacheable_and_versioned(client: httpx.AsyncClient) -> None:
    r = await client.get("/widget.js")
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/javascript")
    version = r.headers["x-hilo-widget-version"]
    assert f'var VERSION = "{version}"' in r.text and "attachShadow" in r.text
    assert r.headers["cache-control"] == "public, max-age=300" and r.headers["etag"]
    assert (await client.get("/widget.js", headers={"if-none-match": r.headers["etag"]})).status_code == 304
    pinned = await client.get(f"/widget.js?v={version}")
    assert pinned.headers["cache-control"] == "public, max-age=31536000, immutable" and pinned.text == r.text
    stale = await client.get("/widget.js?v=0.0.1")  # an old pinned URL never caches for long
    assert stale.headers["cache-control"] == "public, max-age=300"


async def test_the_demo_page_embeds_the_widget(client: httpx.AsyncClient) -> None:
    r = await client.get("/", headers={"host": 'evil"><script>x</script>'})
    assert r.status_code == 200 and r.headers["content-type"].startswith("text/html")
    assert '<script src="/widget.js?v=' in r.text and "<script>x</script>" not in r.text
    assert "script-src 'self'" in r.headers["content-security-policy"]
    assert '<html lang="es">' in (await client.get("/?lang=es")).text
    info = (await client.get("/api")).json()
    assert info["name"] == "hilo" and "POST /api/messages/stream" in info["api"]


# ---- hardening ------------------------------------------------------------------------------------------

async def test_the_cookie_counts_only_on_the_servers_own_origin(tmp_path: Path) -> None:
    async with daemon(tmp_path, allowed_origins=("https://*.example.org",)) as client:
        first = await client.post("/api/messages", json={"text": "my secret is tangerine"})
        assert first.status_code == 200 and client.cookies.get("hilo_session")
        own = str(client.base_url).rstrip("/")
        assert (await client.get("/api/conversations", headers={"origin": own})).json()["conversations"]
        # a sibling page of the same site is allowed to call the API, but not with the visitor's cookie
        sibling = {"origin": "https://blog.example.org"}
        assert (await client.get("/api/conversations", headers=sibling)).status_code == 401
        forget = await client.post("/api/messages", content=b'{"text": "/forget yes"}',
                                   headers={**sibling, "content-type": "text/plain"})
        assert forget.status_code == 200 and "session" in forget.json()  # a new, empty visitor: not the cookie's
        mine = bearer(first.json()["session"])
        assert (await client.get("/api/conversations", headers=mine)).json()["conversations"]  # intact


async def test_impossible_conversation_ids_are_not_found(client: httpx.AsyncClient) -> None:
    token = (await client.post("/api/session")).json()["session"]
    huge = 10**30
    assert (await client.get(f"/api/conversations/{huge}/messages", headers=bearer(token))).status_code == 404
    r = await client.get(f"/api/conversations/{'9' * 5000}/messages", headers=bearer(token))
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    r = await client.post("/api/messages", json={"text": "hi", "conversation_id": huge}, headers=bearer(token))
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    r = await client.post("/api/messages", json={"text": "hi", "conversation_id": -1}, headers=bearer(token))
    assert r.status_code == 404


def test_web_message_ids_cannot_collide_between_people() -> None:
    from surfaces.web import web_external_id

    assert web_external_id("site:alice", "x:1") != web_external_id("site:alice:x", "1")
    assert web_external_id("v1", "c-1") == web_external_id("v1", "c-1")
    assert web_external_id("v1", None) != web_external_id("v1", None)


async def test_a_full_disk_gets_a_503_and_keeps_nothing_half_stored(client: httpx.AsyncClient) -> None:
    """The real SQLite error: the store's own connection may not grow the file past its size now, so SQLite
    itself answers "database or disk is full" on the next write that needs a page."""
    token = (await client.post("/api/session")).json()["session"]
    store = client.app.state.hilo["runtime"].pipeline.store  # type: ignore[attr-defined]
    text = PAGE_SIZED_TEXT
    async with disk_full(store):
        for path in ("/api/messages", "/api/messages/stream"):
            r = await client.post(path, json={"text": text}, headers=bearer(token))
            assert r.status_code == 503, (path, r.status_code, r.text)
            assert r.headers["retry-after"] == str(RETRY_AFTER_S)
            assert r.json() == {"error": "store_unavailable", "message": catalog.t("store_unavailable", "en"),
                                "retry_after": RETRY_AFTER_S}
        # (/readyz's probe is a one-row write that still fits this file's pages; on a really full disk its WAL
        # frame cannot be written either)
        assert (await client.get("/api/conversations", headers=bearer(token))).json()["conversations"] == []
    r = await client.post("/api/messages", json={"text": text}, headers=bearer(token))
    assert r.status_code == 200 and r.json()["status"] == "ok"
    ready = (await client.get("/readyz")).json()
    assert ready["ready"] is True and ready["checks"]["database"] == {"ok": True}, ready


async def test_a_read_only_database_gets_a_503_with_retry_after_and_recovers(client: httpx.AsyncClient) -> None:
    """The real SQLite error of a read-only file (or mount): "attempt to write a readonly database"."""
    token = (await client.post("/api/session")).json()["session"]
    store = client.app.state.hilo["runtime"].pipeline.store  # type: ignore[attr-defined]
    async with read_only(store):
        for path in ("/api/messages", "/api/messages/stream"):
            r = await client.post(path, json={"text": "hello"}, headers=bearer(token))
            assert r.status_code == 503, (path, r.status_code, r.text)
            assert r.headers["retry-after"] == str(RETRY_AFTER_S)
            assert r.json()["error"] == "store_unavailable"
        ready = await client.get("/readyz")
        assert ready.status_code == 503 and ready.json()["checks"]["database"]["ok"] is False
        assert (await client.get("/healthz")).status_code == 200
    r = await client.post("/api/messages", json={"text": "hello"}, headers=bearer(token))
    assert r.status_code == 200 and r.json()["status"] == "ok"
    assert (await client.get("/readyz")).status_code == 200


async def test_the_widgets_memory_view_lists_and_forgets_only_the_callers_own(client: httpx.AsyncClient) -> None:
    ana = (await client.post("/api/messages", json={"text": "/remember I work at Acme"})).json()
    assert ana["status"] == "command" and "m1" in ana["reply"]
    token = ana["session"]
    await client.post("/api/messages", json={"text": "/remember my dog is Rex"}, headers=bearer(token))
    bob = (await client.post("/api/session")).json()["session"]
    await client.post("/api/messages", json={"text": "/remember bob's secret"}, headers=bearer(bob))
    r = await client.get("/api/memories", headers={**bearer(token), "accept-language": "es"})
    assert r.status_code == 200
    body = r.json()
    assert [(m["id"], m["content"], m["source"]) for m in body["memories"]] == [
        ("m2", "my dog is Rex", "stated"), ("m1", "I work at Acme", "stated")]
    assert body["total"] == 2 and body["texts"]["title"] == catalog.t("widget_memories_title", "es")
    assert body["texts"]["forget"] == catalog.t("widget_memories_forget", "es") and body["texts"]["more"] == ""
    # bob sees his own only, and cannot forget ana's
    assert [m["content"] for m in (await client.get("/api/memories", headers=bearer(bob))).json()["memories"]] == [
        "bob's secret"]
    r = await client.delete("/api/memories/m1", headers=bearer(bob))
    assert r.status_code == 404 and r.json()["error"] == "not_found"
    r = await client.delete("/api/memories/m1", headers=bearer(token))
    assert r.status_code == 200 and r.json()["forgotten"] == "m1"
    assert [m["id"] for m in (await client.get("/api/memories", headers=bearer(token))).json()["memories"]] == ["m2"]
    for bad in ("m1", "x", "m" + "9" * 30, "0", "-3"):
        r = await client.delete(f"/api/memories/{bad}", headers=bearer(token))
        assert r.status_code == 404 and r.json()["error"] == "not_found", bad
    client.cookies.clear()  # the cookie the first answer set: without it and a token, no one is calling
    assert (await client.get("/api/memories")).status_code == 401
    assert (await client.delete("/api/memories/m2")).status_code == 401
    fresh = (await client.post("/api/session")).json()["session"]
    empty = (await client.get("/api/memories", headers=bearer(fresh))).json()
    assert empty["memories"] == [] and empty["texts"]["empty"] == catalog.t("widget_memories_empty", "en")


def test_the_widgets_memory_button_says_what_the_catalogue_says() -> None:
    from importlib import resources

    script = (resources.files("surfaces") / "widget" / "widget.js").read_text(encoding="utf-8")
    for lang in ("en", "es"):
        assert f'memories: "{catalog.t("widget_memories_title", lang)}"' in script, lang
