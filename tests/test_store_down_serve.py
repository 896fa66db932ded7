"""Postgres down under a running `hilo serve` (issue 12 item 5): the web API answers 503 with Retry-After and the
catalogue's text, never a 500; /healthz says the database fails and /readyz answers 503; when Postgres is back the
daemon goes on by itself (the asyncpg pool connects again), with no restart."""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx

from kernel import catalog
from tests.fakes.model_server import FakeModelServer
from tests.fakes.postgres import StoppablePostgres
from tests.fakes.serve_process import model_env, serving

PEOPLE = 6


async def test_postgres_down_gets_503_with_retry_after_and_the_daemon_recovers_when_it_returns(
    tmp_path: Path, model_server: FakeModelServer,
) -> None:
    pg = StoppablePostgres()
    uri = await asyncio.to_thread(pg.start)
    try:
        env = model_env(uri, model_server.base_url)
        with serving(tmp_path, env) as daemon:
            async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as client:
                tokens = [(await client.post("/api/session")).json()["session"] for _ in range(PEOPLE)]
                auth = [{"Authorization": f"Bearer {t}"} for t in tokens]
                for h in auth:
                    r = await client.post("/api/messages", json={"text": "before"}, headers=h)
                    assert r.status_code == 200 and r.json()["status"] == "ok", r.text
                await asyncio.to_thread(pg.stop)
                statuses: list[int] = []
                for i, h in enumerate(auth):
                    for path in ("/api/messages", "/api/messages/stream", "/api/conversations"):
                        r = await client.post(path, json={"text": f"while down {i}"}, headers=h) \
                            if path != "/api/conversations" else await client.get(path, headers=h)
                        statuses.append(r.status_code)
                        assert r.status_code == 503, (path, r.status_code, r.text)
                        assert r.headers["retry-after"].isdigit(), r.headers
                        assert r.json()["message"] == catalog.t("store_unavailable", "en")
                health, ready = await client.get("/healthz"), await client.get("/readyz")
                assert health.status_code == 200 and health.json()["database"]["ok"] is False, health.text
                assert ready.status_code == 503 and "retry-after" in ready.headers, ready.text
                assert ready.json()["checks"]["database"]["ok"] is False, ready.text

                await asyncio.to_thread(pg.start)  # back: no restart of hilo
                for i, h in enumerate(auth):
                    r = await client.post("/api/messages", json={"text": f"after {i}"}, headers=h)
                    assert r.status_code == 200 and r.json()["status"] == "ok", r.text
                back = await client.get("/readyz")
                assert back.status_code == 200 and back.json()["checks"]["database"] == {"ok": True}, back.text
                assert (await client.get("/healthz")).json()["database"] == {"ok": True}
        assert statuses == [503] * (3 * PEOPLE)
    finally:
        await asyncio.to_thread(pg.remove)
