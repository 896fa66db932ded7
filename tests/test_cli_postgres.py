"""The CLI contract against Postgres: the same commands, `HILO_DATABASE_URL=postgresql://...` (embedded PG 18)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from tests.fakes.postgres import SERVER, postgres_databases, postgres_session  # noqa: F401  (autouse fixtures)

REPO = Path(__file__).resolve().parent.parent


def test_the_cli_story_on_postgres(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HILO_", "OPENAI_", "ANTHROPIC_"))}
    env.pop("DATABASE_URL", None)
    env.update(PYTHONPATH=str(REPO), HILO_DATABASE_URL=SERVER.create_database())

    def hilo(*args: str) -> str:
        proc = subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=60)
        assert proc.returncode == 0, proc.stderr
        return proc.stdout

    assert "applied 0001_core" in hilo("migrate")
    assert hilo("chat", "--user", "alice", "--surface", "telegram", "I live in Valencia").startswith("[echo")
    ctx = json.loads(hilo("context", "--user", "alice", "--surface", "whatsapp", "--json", "where do I live?"))
    assert [i["surface"] for i in ctx["items"] if i["block"] == "cross_surface"] == ["telegram", "telegram"]
    assert any("I live in Valencia" in m["content"] for m in ctx["messages"])

    lines = [{"user": "dana", "surface": "telegram", "role": "user", "content": f"message {i}",
              "created_at": f"2026-11-01T10:{i:02d}:00Z", "external_id": f"tg-{i}"} for i in range(30)]
    path = tmp_path / "history.jsonl"
    path.write_text("\n".join(json.dumps(x) for x in lines) + "\n")
    assert "imported 30 messages, skipped 0" in hilo("import", str(path))
    assert "imported 0 messages, skipped 30" in hilo("import", str(path))

    assert "deleted" in hilo("forget", "--user", "alice")
    assert json.loads(hilo("inspect", "--user", "alice", "--json")) is None
