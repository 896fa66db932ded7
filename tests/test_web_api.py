"""The web JSON API on a real uvicorn server on 127.0.0.1, with the real SQLite store and the echo model."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bot.config import Settings
from tests.fakes.daemon import running_daemon


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[httpx.AsyncClient]:
    settings = Settings(database_url=f"sqlite:///{tmp_path / 'hilo.db'}", secret_key="test-secret")
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
