"""bench/web_load_gen.py's seed endpoint, the baseline beside hilo in bench/web_load.py: it speaks hilo's web API
(a session, then messages naming their conversation, plain and streamed) so the same load generator drives both,
and each turn does the seed pattern's work: the person's message and the reply stored in the one conversation
of theirs, a stranger refused. No timings asserted."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

import httpx

from bench.web_load_gen import seed_app


async def test_the_seed_endpoint_stores_each_turn_and_answers_as_hilos_web_api(tmp_path: Path) -> None:
    db = tmp_path / "seed.db"
    app = seed_app(str(db))
    transport = httpx.ASGITransport(app=app)
    async with (app.router.lifespan_context(app),  # its shutdown closes its connection
                httpx.AsyncClient(transport=transport, base_url="http://seed") as client):
        token = (await client.post("/api/session")).json()["session"]
        auth = {"authorization": f"Bearer {token}"}
        first = (await client.post("/api/messages", json={"text": "hola", "conversation_id": None},
                                   headers=auth)).json()
        assert first["status"] == "ok" and first["reply"] == "You said: hola"
        second = (await client.post("/api/messages", json={"text": "and again", "conversation_id":
                                                            first["conversation_id"]}, headers=auth)).json()
        assert second["conversation_id"] == first["conversation_id"]
        streamed = await client.post("/api/messages/stream", json={"text": "streamed", "conversation_id":
                                                                   first["conversation_id"]}, headers=auth)
        assert streamed.status_code == 200
        assert streamed.text.index("event: delta") < streamed.text.index("event: done")
        assert "You said: streamed" in streamed.text
        stranger = await client.post("/api/messages", json={"text": "hi"},
                                     headers={"authorization": "Bearer nobody"})
        assert stranger.status_code == 401
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute("SELECT role, content, conversation_id FROM messages ORDER BY id").fetchall()
        assert rows == [
            ("user", "hola", first["conversation_id"]), ("assistant", "You said: hola", first["conversation_id"]),
            ("user", "and again", first["conversation_id"]),
            ("assistant", "You said: and again", first["conversation_id"]),
            ("user", "streamed", first["conversation_id"]),
            ("assistant", "You said: streamed", first["conversation_id"]),
        ]
        assert conn.execute("SELECT count(*) FROM conversations").fetchone() == (1,)
