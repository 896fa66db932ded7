"""A deleted SQLite file while `hilo serve` runs (issue 12 item 5): detected, reported, nothing answered.

A SQLite connection keeps its file open, so a daemon whose file was deleted went on answering every message and
storing it into the unlinked file: 224 of 224 answered and stored nowhere, /healthz 200, an empty database at the
next start. Now the store compares the file it opened with the path at every transaction (memory/sqlite_file.py):
the operator reads `store.file_missing` with the path, each web message gets 503 with Retry-After and the
catalogue's text (never a model call), /healthz says the database fails and /readyz answers 503. The same file
moved back to its path: the daemon goes on by itself."""

from __future__ import annotations

import json
import os
import sqlite3
from contextlib import closing
from pathlib import Path

import httpx

from kernel import catalog
from tests.fakes.model_server import FakeModelServer
from tests.fakes.serve_process import ServeProcess, model_env, serving

PEOPLE = 8
BEFORE, AFTER = 2, 3  # messages per person before and after the file is gone


def events(proc: ServeProcess, name: str) -> list[dict[str, object]]:
    return [e for e in (json.loads(line) for line in list(proc.out) if line.startswith("{")) if e["event"] == name]


async def test_a_deleted_sqlite_file_is_detected_reported_and_nothing_is_answered(
    tmp_path: Path, model_server: FakeModelServer,
) -> None:
    db = tmp_path / "hilo.db"
    env = model_env(f"sqlite:///{db}", model_server.base_url)
    with serving(tmp_path, env) as daemon:
        async with httpx.AsyncClient(base_url=daemon.url, timeout=30) as client:
            tokens = [(await client.post("/api/session")).json()["session"] for _ in range(PEOPLE)]
            auth = [{"Authorization": f"Bearer {t}"} for t in tokens]
            for i in range(PEOPLE * BEFORE):
                r = await client.post("/api/messages", json={"text": f"note number {i}"}, headers=auth[i % PEOPLE])
                assert r.status_code == 200 and r.json()["status"] == "ok", r.text
            calls = len(model_server.requests)
            assert calls == PEOPLE * BEFORE
            moved = tmp_path / "moved-away.db"
            os.rename(db, moved)  # as `rm hilo.db` would, keeping the file to put back later
            answered, refused = 0, 0
            for i in range(PEOPLE * AFTER):
                r = await client.post("/api/messages", json={"text": f"lost words {i}"}, headers=auth[i % PEOPLE])
                if r.status_code == 200:
                    answered += 1
                    continue
                assert r.status_code == 503, r.text
                assert r.headers["retry-after"].isdigit(), r.headers
                assert r.json()["error"] == "store_unavailable"
                assert r.json()["message"] == catalog.t("store_unavailable", "en")
                refused += 1
            streamed = await client.post("/api/messages/stream", json={"text": "lost too"}, headers=auth[0])
            health = await client.get("/healthz")
            ready = await client.get("/readyz")
            assert (answered, refused) == (0, PEOPLE * AFTER), f"{answered} of {PEOPLE * AFTER} answered"
            assert streamed.status_code == 503 and "retry-after" in streamed.headers, streamed.text
            assert len(model_server.requests) == calls, "a message was answered with its file gone"
            assert health.status_code == 200, health.text
            assert health.json()["database"] == {"ok": False, "error": "StoreUnavailable"}
            assert ready.status_code == 503 and ready.json()["ready"] is False, ready.text
            checks = ready.json()["checks"]  # named: the database, and the outbox it cannot read; the models are fine
            assert checks["database"] == checks["outbox"] == {"ok": False, "error": "StoreUnavailable"}, checks
            assert sorted(name for name, c in checks.items() if not c["ok"]) == ["database", "outbox"], checks
            assert not db.exists(), "the daemon created a new database file while it ran"
            missing = events(daemon, "store.file_missing")
            assert len(missing) == 1 and missing[0]["path"] == str(db), missing

            os.rename(moved, db)  # the file is back: the daemon goes on by itself
            r = await client.post("/api/messages", json={"text": "back again"}, headers=auth[0])
            assert r.status_code == 200 and r.json()["status"] == "ok", r.text
            back = await client.get("/readyz")
            assert back.status_code == 200 and all(c["ok"] for c in back.json()["checks"].values()), back.text
    assert not [line for line in daemon.lines if "lost words" in line or "note number" in line], "text in a log"
    with closing(sqlite3.connect(db)) as conn:
        kept = conn.execute("SELECT count(*) FROM messages WHERE content LIKE 'lost%'").fetchone()[0]
        total = conn.execute("SELECT count(*) FROM messages WHERE role = 'user'").fetchone()[0]
    assert (kept, total) == (0, PEOPLE * BEFORE + 1)
