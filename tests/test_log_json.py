"""HILO_LOG_FORMAT=json: every line the daemon writes is one JSON object, also the lines of uvicorn,
python-telegram-bot and asyncpg, with exceptions as a structured field; and every line goes to stdout (PM2's
out log).

`hilo serve` runs as a process under faults: the fake Bot API answers 500 to getUpdates, the fake model
provider answers 503, and a client sends bytes that are not HTTP. A second process emits the shapes the
daemon meets less often (a library's record with exc_info, a warning, uncaught exceptions).
"""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.fakes import model_server as fake
from tests.fakes.serve_process import clean_env, serving
from tests.fakes.telegram_api import TOKEN, FakeBotApi, bot_api, bot_api_session  # noqa: F401  (fixtures)


def _records(lines: list[str]) -> list[dict[str, Any]]:
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except ValueError:
            raise AssertionError(f"line {number} is not JSON: {line!r}\n" + "\n".join(lines)) from None
    return records


def test_every_line_is_json_and_on_stdout_under_faults(
    tmp_path: Path, bot_api: FakeBotApi, model_server: fake.FakeModelServer,  # noqa: F811
) -> None:
    bot_api.fail("getUpdates", 500, times=2, description="Internal Server Error")
    model_server.script("gpt-down", default=fake.status(503))
    env = {
        "HILO_LOG_FORMAT": "json", "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": bot_api.base_url,
        "HILO_MODEL": "openai:gpt-down", "OPENAI_API_KEY": "sk-test", "OPENAI_BASE_URL": f"{model_server.base_url}/v1",
        "HILO_MODEL_ATTEMPTS": "1",
    }
    with serving(tmp_path, env) as daemon:
        # a Telegram message after the failed polls, whose model call fails: the person is told to retry
        bot_api.enqueue(bot_api.text_update("hello, are you there?"))
        assert len(bot_api.wait_sent_sync(1)) == 1
        # a client that does not speak HTTP: uvicorn complains
        url = urlsplit(daemon.url)
        with socket.create_connection((url.hostname, url.port)) as sock:
            sock.sendall(b"\x16\x03\x01 this is not HTTP\r\n\r\n")
            sock.recv(1024)
        daemon.wait_for(lambda line: "uvicorn.error" in line)
        daemon.terminate()
        assert daemon.wait() == 0
    records = _records(daemon.lines)
    assert daemon.err == [], "stderr is PM2's error log: nothing normal goes there"
    by_logger = {r.get("logger", ""): r for r in records}
    telegram = [r for r in records if r.get("logger", "").startswith("telegram")]
    assert telegram, f"no python-telegram-bot line among {sorted(by_logger)}"
    # hilo polls with its own getUpdates loop (surfaces/telegram_polling.py): its failed polls carry the library's
    # exception as a field
    failed_polls = [r for r in records if "exception" in r and r.get("event") == "telegram.polling_failed"]
    assert failed_polls, telegram
    frames = failed_polls[0]["exception"][0]["frames"]  # a structured traceback: a field, not loose lines
    assert frames and all("locals" not in frame for frame in frames)  # never local variables (message text)
    assert "uvicorn.error" in by_logger
    assert {"daemon.started", "daemon.stopped"} <= {r["event"] for r in records}
    assert not any("hello, are you there?" in line for line in daemon.lines)  # never message text
    assert not any(TOKEN in line for line in daemon.lines)  # never the bot token (Bot API URLs carry it)


_LIBRARY_LINES = '''
import logging, sys, threading, warnings
from kernel import log
log.configure("info", "json", stream="stdout")
log.capture_uncaught()
try:
    raise ConnectionResetError("connection lost")
except ConnectionResetError:
    logging.getLogger("asyncpg.pool").warning("Failed to restore the pool connection", exc_info=True)
logging.getLogger("uvicorn.error").error("Exception in ASGI application\\n", exc_info=ValueError("boom"))
warnings.warn("a library deprecation", DeprecationWarning, stacklevel=1)
thread = threading.Thread(target=lambda: 1 / 0, name="worker")
thread.start()
thread.join()
raise RuntimeError("uncaught in main")
'''


def test_library_records_warnings_and_uncaught_exceptions_are_json_lines(tmp_path: Path) -> None:
    """The shapes a daemon meets outside hilo's own events: a library's record with exc_info (asyncpg's pool),
    a message with a newline (uvicorn's), a warning, an exception no one caught (a thread, the main thread)."""
    done = subprocess.run([sys.executable, "-W", "always", "-c", _LIBRARY_LINES], cwd=tmp_path, env=clean_env(),
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 1
    assert done.stderr == ""
    records = _records(done.stdout.splitlines())
    by_logger = {r["logger"]: r for r in records}
    assert set(by_logger) == {"asyncpg.pool", "uvicorn.error", "py.warnings", "hilo.uncaught"}
    assert by_logger["asyncpg.pool"]["exception"][0]["exc_type"] == "ConnectionResetError"
    assert by_logger["uvicorn.error"]["exception"][0]["exc_type"] == "ValueError"
    uncaught = [r for r in records if r["logger"] == "hilo.uncaught"]
    assert [(r["thread"], r["exception"][0]["exc_type"]) for r in uncaught] == [
        ("worker", "ZeroDivisionError"), ("main", "RuntimeError")]
