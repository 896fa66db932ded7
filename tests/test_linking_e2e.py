"""Issue 6's end-to-end story, on the whole daemon: a person tells hilo on Telegram "my dog is called Rufo",
asks /link there, sends the code through the web API, and the web conversation then knows about the dog.
Real python-telegram-bot against the fake Bot API, the real web API, the real CLI against the same database."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from bot import catalog
from bot.config import Settings
from tests.fakes import telegram_api as fake_telegram
from tests.fakes.daemon import running_daemon
from tests.fakes.telegram_api import TOKEN, FakeBotApi

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api

REPO = Path(__file__).resolve().parent.parent


async def test_telegram_memory_reaches_the_web_after_link(tmp_path: Path, bot_api: FakeBotApi) -> None:
    db = f"sqlite:///{tmp_path / 'hilo.db'}"
    settings = Settings.from_mapping({"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": bot_api.base_url,
                                      "HILO_DATABASE_URL": db, "HILO_SECRET_KEY": "k"})
    async with running_daemon(settings) as web:
        bot_api.enqueue(bot_api.text_update("my dog is called Rufo", user_id=42))
        await bot_api.wait_sent(1, chat_id=42)
        bot_api.enqueue(bot_api.text_update("/link", user_id=42))
        sent = await bot_api.wait_sent(2, chat_id=42)
        code = re.search(r"\b[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}\b", sent[1].text).group(0)  # type: ignore[union-attr]

        # a web visitor who never said anything about a dog
        first = (await web.post("/api/messages", json={"text": "hello from the web"})).json()
        auth = {"authorization": f"Bearer {first['session']}"}
        linked = (await web.post("/api/messages", json={"text": f"/link {code}"}, headers=auth)).json()
        assert linked["status"] == "command" and linked["reply"] == catalog.t("link_done", "en")

        answer = (await web.post("/api/messages", headers=auth, json={
            "text": "what is my dog called?", "conversation_id": first["conversation_id"]})).json()
        assert answer["status"] == "ok" and "my dog is called Rufo" in answer["reply"]  # echo shows its recall

        # a second use of the code, from anyone, is refused
        web.cookies.clear()
        other = (await web.post("/api/messages", json={"text": f"/link {code}"})).json()
        assert other["reply"] == catalog.t("link_invalid", "en")

    env = {**os.environ, "PYTHONPATH": str(REPO), "HILO_DATABASE_URL": db}
    out = subprocess.run(
        [sys.executable, "-m", "bot.cli", "context", "--user", "telegram:42", "--surface", "web", "--json",
         "what is my dog called?"], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    ctx = json.loads(out.stdout)
    rufo = [i for i in ctx["items"] if i["surface"] == "telegram" and i["block"] in ("cross_surface", "memory")]
    assert rufo and any("my dog is called Rufo" in m["content"] for m in ctx["messages"])
    conversation = [i for i in ctx["items"] if i["block"] == "conversation"]
    assert conversation and all(i["surface"] == "web" for i in conversation)
    inspected = json.loads(subprocess.run(
        [sys.executable, "-m", "bot.cli", "inspect", "--user", "telegram:42", "--json"], cwd=tmp_path, env=env,
        capture_output=True, text=True, timeout=60).stdout)
    assert {i["surface"] for i in inspected["identities"]} == {"telegram", "web"}
    assert [a["action"] for a in inspected["identity_audit"]] == ["code_issued", "linked"]
