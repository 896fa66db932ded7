"""Two real `hilo serve` processes on one Postgres (directly, and behind pgbouncer in transaction mode): the same
web message (the same client_message_id) posted to the second while the first runs its turn is answered once.

The fake provider holds its first answer until the test releases it (`held`). The test waits for that request to
arrive, posts the redelivery to the second process, waits for that process to take it in as a turn to resume
(its `turn.resumed` line: the first turn is still running, nothing is answered yet), and only then lets the model
answer: the second process's turn waits for the first one's lease, finds the message answered and hands back its
reply (one model call, one stored reply, the same answer in both responses)."""

from __future__ import annotations

import asyncio
import threading
from pathlib import Path

import httpx
import pytest

from tests.fakes.model_server import FakeModelServer, held
from tests.fakes.pgbouncer import BOUNCER, pgbouncer_session  # noqa: F401  (autouse fixture)
from tests.fakes.postgres import SERVER, db_name, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)
from tests.fakes.serve_process import serving
from tests.waiting import wait_until


@pytest.mark.parametrize("pooled", [False, True], ids=["postgres", "pgbouncer"])
async def test_two_serve_processes_answer_a_redelivered_web_message_once(
    pooled: bool, tmp_path: Path, model_server: FakeModelServer,
) -> None:
    url = SERVER.create_database()
    database = db_name(url)
    env = {"HILO_DATABASE_URL": BOUNCER.url(url) if pooled else url, "HILO_SECRET_KEY": "k" * 43,
           "HILO_MODEL": "openai:m1", "OPENAI_API_KEY": "x", "OPENAI_BASE_URL": model_server.base_url + "/v1"}
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    gate = threading.Event()
    model_server.enqueue(held(gate))  # the first turn's model answers only when the test says so
    with serving(tmp_path / "a", env) as one, serving(tmp_path / "b", env) as two:
        async with httpx.AsyncClient(timeout=60) as client:
            token = (await client.post(one.url + "/api/session")).json()["session"]
            auth = {"Authorization": f"Bearer {token}"}
            body = {"text": "what is on today", "client_message_id": "c-1"}
            first = asyncio.create_task(client.post(one.url + "/api/messages", json=body, headers=auth))
            await wait_until(lambda: model_server.requests or first.done(), "the first process's model call")
            assert len(model_server.requests) == 1, "the first process never called the model"
            again_task = asyncio.create_task(client.post(two.url + "/api/messages", json=body, headers=auth))
            try:
                await asyncio.to_thread(two.wait_for, lambda line: "turn.resumed" in line)
            finally:
                gate.set()  # the redelivery is in the second process's hands: now the first turn may finish
            again = await again_task
            answered = await first
    assert answered.status_code == again.status_code == 200
    assert answered.json()["status"] == "ok"
    # the redelivery's turn waited for the lease while the first process answered: it hands back that reply
    assert (again.json()["status"], again.json()["reply"], again.json()["reply_id"]) == (
        "ok", answered.json()["reply"], answered.json()["reply_id"]), again.json()
    assert len(model_server.requests) == 1, "the redelivery made a second model call"
    replies = SERVER.query(database, "SELECT count(*) FROM messages WHERE role = 'assistant'")[0][0]
    assert replies == 1
