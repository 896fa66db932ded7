"""HILO_LOG_FORMAT=json: every line the daemon writes is one JSON object, also the lines of uvicorn and
python-telegram-bot, with exceptions as a structured field; and every line goes to stdout (PM2's out log).

`hilo serve` runs as a process under faults: the fake Bot API answers 500 to getUpdates, the fake model
provider answers 503, and a client sends bytes that are not HTTP.
"""

from __future__ import annotations

import json
import socket
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from tests.fakes import model_server as fake
from tests.fakes.serve_process import serving
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
    failed_polls = [r for r in telegram if "exception" in r]
    assert failed_polls, telegram
    frames = failed_polls[0]["exception"][0]["frames"]  # a structured traceback: a field, not loose lines
    assert frames and all("locals" not in frame for frame in frames)  # never local variables (message text)
    assert "uvicorn.error" in by_logger
    assert {"daemon.started", "daemon.stopped"} <= {r["event"] for r in records}
    assert not any("hello, are you there?" in line for line in daemon.lines)  # never message text
    assert not any(TOKEN in line for line in daemon.lines)  # never the bot token (Bot API URLs carry it)
