"""`hilo serve` as a real process: starts on the defaults, answers, stops cleanly on SIGTERM, remembers."""

from __future__ import annotations

import signal
from pathlib import Path

import httpx

from tests.fakes.serve_process import serving


def test_serve_on_defaults_answers_stops_on_sigterm_and_remembers_after_restart(tmp_path: Path) -> None:
    with serving(tmp_path) as daemon:
        r = httpx.post(f"{daemon.url}/api/messages", json={"text": "remember: my locker is 42"}, timeout=10)
        assert r.status_code == 200 and r.json()["status"] == "ok" and r.json()["reply"].startswith("[echo")
        token, conv = r.json()["session"], r.json()["conversation_id"]
        daemon.proc.send_signal(signal.SIGTERM)
        # uvicorn stops accepting and drains, then the lifespan stops everything: a clean exit
        assert daemon.wait() == 0
        assert "daemon.stopped" in daemon.out[-1]
        assert daemon.err == []  # PM2 keeps stderr as the error log: normal lines go to stdout
        assert not any("my locker is 42" in line for line in daemon.lines)  # logs carry ids, never text
    # the default database and the generated secret key are kept in the working directory
    assert (tmp_path / "hilo.db").is_file() and (tmp_path / "hilo.secret").is_file()
    with serving(tmp_path) as again:
        msgs = httpx.get(f"{again.url}/api/conversations/{conv}/messages",
                         headers={"authorization": f"Bearer {token}"}, timeout=10)
        assert msgs.status_code == 200  # the session token still works: the secret survived the restart
        assert msgs.json()["messages"][0]["content"] == "remember: my locker is 42"

