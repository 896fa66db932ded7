"""`hilo serve` as a real process: starts on the defaults, answers, stops cleanly on SIGTERM, remembers."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from tests.fakes.daemon import free_port

REPO = Path(__file__).resolve().parent.parent


@contextmanager
def serve(cwd: Path, port: int, **settings: str) -> Iterator[subprocess.Popen[str]]:
    """`hilo serve --port port` in `cwd`, with only `settings` of the HILO_*-style environment."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HILO_", "OPENAI_", "ANTHROPIC_", "TELEGRAM_",
                                                                       "TWILIO_"))}
    env.pop("DATABASE_URL", None)
    env["PYTHONPATH"] = str(REPO)
    env.update(settings)
    proc = subprocess.Popen([sys.executable, "-m", "bot.cli", "serve", "--port", str(port)], cwd=cwd, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.1)
        else:
            raise AssertionError("hilo serve did not come up: " + (proc.stdout.read() if proc.stdout else ""))
        yield proc
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()


def test_serve_on_defaults_answers_stops_on_sigterm_and_remembers_after_restart(tmp_path: Path) -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with serve(tmp_path, port) as proc:
        r = httpx.post(f"{base}/api/messages", json={"text": "remember: my locker is 42"}, timeout=10)
        assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["reply"].startswith("[echo")
        token, conv = r.json()["session"], r.json()["conversation_id"]
        proc.send_signal(signal.SIGTERM)
        # uvicorn drains, then re-raises the signal it caught so the exit says why (systemd and PM2 count a
        # SIGTERM exit as clean); what matters is that the lifespan ran to its end
        assert proc.wait(timeout=20) in (0, -signal.SIGTERM)
        output = proc.stdout.read() if proc.stdout else ""
        assert "daemon.stopped" in output
        assert "my locker is 42" not in output  # logs carry ids and sizes, never message text
    # the default database and the generated secret key are kept in the working directory
    assert (tmp_path / "hilo.db").is_file() and (tmp_path / "hilo.secret").is_file()
    with serve(tmp_path, port):
        msgs = httpx.get(f"{base}/api/conversations/{conv}/messages",
                         headers={"authorization": f"Bearer {token}"}, timeout=10)
        assert msgs.status_code == 200  # the session token still works: the secret survived the restart
        assert msgs.json()["messages"][0]["content"] == "remember: my locker is 42"
