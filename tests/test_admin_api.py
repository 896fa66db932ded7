"""The admin page's JSON API (surfaces/admin.py) against the real daemon under uvicorn on SQLite, with httpx, for
people built through real web turns on the fake model provider (priced, so their calls cost something): off by
default (404), 401 without a session, 403 for a wrong token and for a write without the CSRF proof, failed
sign-ins rate limited in the database, each view showing the person's own data only, a memory edited and deleted
and gone from the person's context."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from starlette.requests import Request
from starlette.responses import Response

from bot.config import Settings
from kernel import catalog
from kernel.errors import ConfigError
from surfaces import registry
from surfaces.admin_auth import AdminSessions
from surfaces.web_auth import Sessions
from tests.fakes.daemon import running_daemon
from tests.fakes.model_server import FakeModelServer, ok

TOKEN = "admin-token-for-the-tests-0123456789"
#: m1 costs 1,000 USD per million tokens out: each reply below (4 words) costs about 0.004
PRICES = '{"m1": {"in": 0, "out": 1000}}'


def settings(tmp_path: Path, model_server: FakeModelServer, **env: str) -> Settings:
    return Settings.from_mapping({
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "s" * 43,
        "HILO_MODEL": "openai:m1", "OPENAI_API_KEY": "x", "OPENAI_BASE_URL": model_server.base_url + "/v1",
        "HILO_MODEL_ATTEMPTS": "1", "HILO_PRICES": PRICES, "HILO_RATE_LIMIT_IP": "10000", **env})


@pytest.fixture
async def daemon(tmp_path: Path, model_server: FakeModelServer) -> AsyncIterator[httpx.AsyncClient]:
    model_server.script("m1", [], default=ok("a short fake reply"))
    async with running_daemon(settings(tmp_path, model_server, HILO_ADMIN_TOKEN=TOKEN)) as client:
        yield client


async def sign_in(client: httpx.AsyncClient) -> dict[str, str]:
    """Sign in with the token; the headers a write needs (the CSRF proof)."""
    response = await client.post("/admin/api/session", json={"token": TOKEN})
    assert response.status_code == 200, response.text
    return {"x-hilo-csrf": response.json()["csrf"]}


async def say(client: httpx.AsyncClient, texts: list[str]) -> tuple[str, int]:
    """A new web visitor says `texts` in one conversation: (their visitor id, the conversation id)."""
    session, conversation = None, None
    client.cookies.clear()  # a new visitor: not the last one's hilo_session cookie
    for text in texts:
        headers = {"authorization": f"Bearer {session}"} if session else {}
        body: dict[str, Any] = {"text": text, **({"conversation_id": conversation} if conversation else {})}
        response = await client.post("/api/messages", json=body, headers=headers)
        assert response.status_code == 200, response.text
        session = session or response.json()["session"]
        conversation = response.json()["conversation_id"] or conversation  # a command answers in none
    assert session is not None and conversation is not None
    checked = Sessions("s" * 43).check(session)
    assert checked is not None
    return checked.visitor, conversation


async def test_without_a_token_there_are_no_admin_routes(tmp_path: Path, model_server: FakeModelServer) -> None:
    async with running_daemon(settings(tmp_path, model_server)) as client:
        for method, path in [("GET", "/admin"), ("GET", "/admin/admin.js"), ("GET", "/admin/api/people"),
                             ("POST", "/admin/api/session")]:
            response = await client.request(method, path, json={"token": ""} if method == "POST" else None)
            assert response.status_code == 404, (method, path)


async def test_sign_in_session_and_csrf(daemon: httpx.AsyncClient, capsys: pytest.CaptureFixture[str]) -> None:
    response = await daemon.get("/admin/api/people")
    assert response.status_code == 401 and response.json()["error"] == "admin_sign_in_needed"
    wrong = await daemon.post("/admin/api/session", json={"token": TOKEN + "x"},
                              headers={"accept-language": "es"})
    assert wrong.status_code == 403
    assert wrong.json() == {"error": "admin_token_wrong", "message": catalog.t("admin_token_wrong", "es")}
    assert "hilo_admin" not in daemon.cookies
    bad = await daemon.post("/admin/api/session", content=b"not json")
    assert bad.status_code == 400
    page = await daemon.get("/admin")  # the page itself shows nothing of anyone's: it asks the API
    assert page.status_code == 200 and "content-security-policy" in page.headers
    response = await daemon.post("/admin/api/session", json={"token": TOKEN})
    assert response.status_code == 200
    cookie = response.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie and "path=/admin" in cookie
    assert "max-age=1800" in cookie and "secure" not in cookie  # plain http here: Secure only on https
    csrf = {"x-hilo-csrf": response.json()["csrf"]}
    assert (await daemon.get("/admin/api/people")).status_code == 200
    assert (await daemon.get("/admin/api/session")).json()["csrf"] == csrf["x-hilo-csrf"]  # after a reload
    # writes: the CSRF proof, and never from another page's origin
    no_proof = await daemon.delete("/admin/api/people/1/memories/m1")
    assert no_proof.status_code == 403 and no_proof.json()["error"] == "admin_csrf"
    forged = await daemon.delete("/admin/api/people/1/memories/m1", headers={"x-hilo-csrf": "0" * 64})
    assert forged.status_code == 403
    elsewhere = await daemon.delete("/admin/api/people/1/memories/m1",
                                    headers={**csrf, "origin": "https://evil.example"})
    assert elsewhere.status_code == 403 and elsewhere.json()["error"] == "admin_csrf"
    assert (await daemon.delete("/admin/api/people/1/memories/m1", headers=csrf)).status_code == 404
    # a session signed with another key, or an old one, is no session
    daemon.cookies.set("hilo_admin", "e30.Zz.forged", path="/admin")
    assert (await daemon.get("/admin/api/people")).status_code == 401
    daemon.cookies.clear()
    await sign_in(daemon)
    out = await daemon.delete("/admin/api/session", headers=csrf)
    assert out.status_code == 403  # the proof belongs to the session it was given with
    csrf = await sign_in(daemon)
    assert (await daemon.delete("/admin/api/session", headers=csrf)).status_code == 200
    assert (await daemon.get("/admin/api/people")).status_code == 401
    logged = capsys.readouterr().out
    assert TOKEN not in logged and "admin.sign_in" in logged and "outcome=wrong_token" in logged


async def test_failed_sign_ins_are_rate_limited(tmp_path: Path, model_server: FakeModelServer) -> None:
    async with running_daemon(settings(tmp_path, model_server, HILO_ADMIN_TOKEN=TOKEN,
                                       HILO_ADMIN_SIGN_INS_PER_MINUTE="3")) as client:
        for _ in range(3):
            assert (await client.post("/admin/api/session", json={"token": "guess"})).status_code == 403
        limited = await client.post("/admin/api/session", json={"token": TOKEN})  # even the right one, now
        assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
        assert limited.json()["error"] == "rate_limited"
        store = client.app.state.hilo["store"]  # type: ignore[attr-defined]
        [(hits, before)] = await store._tx("read", lambda db: db.all(  # counted in the database: shared by processes
            "SELECT hits, prev_hits FROM rate_counters WHERE key LIKE 'admin-sign-in:%'"))
        assert hits + before == 4  # a minute's window may have begun between the sign-ins (the window before's)


async def context_of(client: httpx.AsyncClient, user_id: int) -> str:
    """What the person's next turn's context would hold (the pipeline's dry run, as `hilo context` shows it)."""
    pipeline = client.app.state.hilo["runtime"].pipeline  # type: ignore[attr-defined]
    ctx = await pipeline.assemble_context(user_id=user_id, surface="web", conversation_id=None,
                                          current_message_id=None, text="what do I drink?")
    return "\n".join(m.content for m in ctx.messages)


async def test_a_persons_views_edit_and_delete_and_nobody_elses(daemon: httpx.AsyncClient) -> None:
    ana, ana_conv = await say(daemon, ["hello there", "/remember I drink green tea", "how are you?"])
    bob, bob_conv = await say(daemon, ["bob says hi", "/remember my dog is called Rex"])
    csrf = await sign_in(daemon)
    people = (await daemon.get("/admin/api/people")).json()
    assert people["total"] == 2 and all(p["handle"] for p in people["people"])
    assert [p["identities"][0]["external_user_id"] for p in people["people"]] == [bob, ana]  # last seen first
    by_visitor = {p["identities"][0]["external_user_id"]: p for p in people["people"]}
    a, b = by_visitor[ana], by_visitor[bob]
    assert a["identities"] == [{"surface": "web", "external_user_id": ana, "created_at": a["identities"][0][
        "created_at"], "opted_out": False}]
    assert a["last_seen"] is not None and a["messages"] == 4 and a["memories"] == 1
    assert a["cost_usd"] > 0 and b["cost_usd"] > 0
    paged = (await daemon.get("/admin/api/people?limit=1&offset=1")).json()
    assert paged["limit"] == 1 and len(paged["people"]) == 1 and paged["people"][0]["id"] == a["id"]  # bob: newer
    assert (await daemon.get("/admin/api/people?limit=100000")).json()["limit"] == 100
    assert (await daemon.get("/admin/api/people?limit=-1")).status_code == 400

    person = (await daemon.get(f"/admin/api/people/{a['id']}")).json()
    assert [c["id"] for c in person["conversations"]] == [ana_conv]
    assert person["costs"]["all"]["calls"] == 2 and person["costs"]["all"]["cost_usd"] == a["cost_usd"]
    messages = (await daemon.get(f"/admin/api/people/{a['id']}/conversations/{ana_conv}/messages")).json()
    texts = [m["content"] for m in messages["messages"]]
    assert texts[0] == "hello there" and "how are you?" in texts and messages["before"] is None
    assert not any("bob" in t or "Rex" in t for t in texts)
    page = (await daemon.get(f"/admin/api/people/{a['id']}/conversations/{ana_conv}/messages?limit=2")).json()
    assert [m["content"] for m in page["messages"]] == texts[-2:] and page["before"] is not None
    older = (await daemon.get(f"/admin/api/people/{a['id']}/conversations/{ana_conv}/messages"
                              f"?limit=2&before={page['before']}")).json()
    assert [m["content"] for m in older["messages"]] == texts[-4:-2]
    # bob's conversation through ana: as if it did not exist
    assert (await daemon.get(f"/admin/api/people/{a['id']}/conversations/{bob_conv}/messages")).status_code == 404

    [tea] = (await daemon.get(f"/admin/api/people/{a['id']}/memories")).json()["memories"]
    [rex] = (await daemon.get(f"/admin/api/people/{b['id']}/memories")).json()["memories"]
    assert tea["content"] == "I drink green tea" and rex["content"] == "my dog is called Rex"
    assert "green tea" in await context_of(daemon, a["id"])
    # another's memory through this person: 404, and it stays
    assert (await daemon.patch(f"/admin/api/people/{a['id']}/memories/{rex['id']}", json={"content": "x"},
                               headers=csrf)).status_code == 404
    assert (await daemon.delete(f"/admin/api/people/{a['id']}/memories/{rex['id']}",
                                headers=csrf)).status_code == 404
    empty = await daemon.patch(f"/admin/api/people/{a['id']}/memories/{tea['id']}", json={"content": " "},
                               headers=csrf)
    assert empty.status_code == 400 and empty.json()["error"] == "bad_request"

    edited = await daemon.patch(f"/admin/api/people/{a['id']}/memories/{tea['id']}",
                                json={"content": "I drink black coffee"}, headers=csrf)
    assert edited.status_code == 200 and edited.json()["outcome"] == "superseded"
    assert edited.json()["previous"] == tea["id"]
    context = await context_of(daemon, a["id"])
    assert "black coffee" in context and "green tea" not in context
    again = await daemon.patch(f"/admin/api/people/{a['id']}/memories/{tea['id']}", json={"content": "tea"},
                               headers=csrf)
    assert again.status_code == 409 and again.json()["error"] == "admin_memory_ended"
    listed = (await daemon.get(f"/admin/api/people/{a['id']}/memories")).json()["memories"]
    assert [(m["content"], m["ended_at"] is None) for m in listed] == [("I drink black coffee", True),
                                                                        ("I drink green tea", False)]
    new_id = edited.json()["memory"]["id"]
    assert (await daemon.delete(f"/admin/api/people/{a['id']}/memories/{new_id}", headers=csrf)).json() == {
        "forgotten": new_id}
    assert "black coffee" not in await context_of(daemon, a["id"])
    assert (await daemon.delete(f"/admin/api/people/{a['id']}/memories/{new_id}", headers=csrf)).status_code == 404
    [still] = (await daemon.get(f"/admin/api/people/{b['id']}/memories")).json()["memories"]
    assert still == rex  # bob's untouched throughout

    costs = (await daemon.get("/admin/api/costs")).json()
    assert costs["everyone"]["all"]["calls"] == 3  # commands call no model
    assert costs["everyone"]["all"]["cost_usd"] == pytest.approx(a["cost_usd"] + b["cost_usd"])
    assert {p["id"]: p["cost_usd"] for p in costs["top"]} == {a["id"]: a["cost_usd"], b["id"]: b["cost_usd"]}
    assert (await daemon.get("/admin/api/people/999999")).status_code == 404


def test_a_short_admin_token_stops_the_start() -> None:
    with pytest.raises(ConfigError, match="HILO_ADMIN_TOKEN is 5 characters"):
        registry.admin(Settings(admin_token="short"))
    assert registry.admin(Settings()) is None


def test_sessions_expire_and_a_new_token_signs_everyone_out(monkeypatch: pytest.MonkeyPatch) -> None:
    sessions = AdminSessions("k" * 43, TOKEN, minutes=30)
    now = time.time()
    monkeypatch.setattr(time, "time", lambda: now - 31 * 60)  # issued 31 minutes ago
    old = sessions.issue()
    monkeypatch.setattr(time, "time", lambda: now)
    fresh = sessions.issue()
    assert sessions.valid(fresh) and not sessions.valid(old)
    assert not AdminSessions("k" * 43, TOKEN + "-rotated", minutes=30).valid(fresh)
    assert not AdminSessions("another key" * 4, TOKEN, minutes=30).valid(fresh)
    assert sessions.csrf(fresh) != sessions.csrf(sessions.issue())  # each session its own proof
    response = Response()
    https = Request({"type": "http", "scheme": "https", "method": "POST", "path": "/admin/api/session",
                     "headers": [], "query_string": b"", "server": ("bot.example.com", 443)})
    sessions.set_cookie(https, response, fresh)
    cookie = response.headers["set-cookie"].lower()
    assert "secure" in cookie and "httponly" in cookie and "samesite=strict" in cookie
