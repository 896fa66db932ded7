"""Issue 6's end-to-end story, on the whole daemon: a person tells hilo on Telegram "my dog is called Rufo",
asks /link there, sends the code through the web API, and the web conversation then knows about the dog.
Real python-telegram-bot against the fake Bot API, the real web API, the real CLI against the same database, on
every backend (the `backend` fixture of conftest.py)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

from bot.config import Settings
from kernel import catalog
from tests.backends import Backend
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.daemon import running_daemon
from tests.fakes.telegram_api import TOKEN, FakeBotApi

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api

REPO = Path(__file__).resolve().parent.parent
CODE = re.compile(r"\b[0-9A-Z]{4}-[0-9A-Z]{4}-[0-9A-Z]{4}\b")


async def test_telegram_memory_reaches_the_web_after_link(
    tmp_path: Path, bot_api: FakeBotApi, backend: Backend,
) -> None:
    db = backend.url
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
        # first whose account it is (the fake's Telegram user is Alice, @alice), then the confirm
        prompt = (await web.post("/api/messages", json={"text": f"/link {code}"}, headers=auth)).json()
        owner = catalog.t("link_who", "en", name="Alice (@alice)", surface="Telegram")
        assert prompt["status"] == "command"
        assert prompt["reply"] == catalog.t("link_confirm", "en", who=owner, code=code)
        assert len(bot_api.sent_to(42)) == 2  # nothing joined yet: the owner is told nothing
        linked = (await web.post("/api/messages", json={"text": f"/link {code} yes"}, headers=auth)).json()
        assert linked["status"] == "command" and linked["reply"] == catalog.t("link_done", "en")
        # the owner is told on Telegram, where they asked for the code, which identity joined
        notice = (await bot_api.wait_sent(3, chat_id=42))[2]
        visitor = catalog.t("link_who_unnamed", "en", surface=catalog.t("surface_web", "en"))
        assert notice.text == catalog.t("link_joined", "en", who=visitor)

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
    assert [a["action"] for a in inspected["identity_audit"]] == ["code_issued", "link_prompted", "linked"]
    # the notice is kept in the Telegram conversation and its delivery recorded like a reply's
    [tg] = [c for c in inspected["conversations"] if c["surface"] == "telegram"]
    kept = tg["messages"][-1]
    assert (kept["role"], kept["content"]) == ("assistant", notice.text)
    assert [(d["message_id"], d["status"], d["provider_ref"]) for d in inspected["deliveries"]][-1] == (
        kept["id"], "sent", str(notice.message_id))


async def test_a_whatsapp_owner_is_told_on_whatsapp_who_joined(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi, backend: Backend,
) -> None:
    from tests.test_whatsapp import PERSON, incoming, post, settings_for

    async with running_daemon(settings_for(tmp_path, twilio_api, HILO_DATABASE_URL=backend.url)) as web:
        assert (await post(web, "/webhooks/whatsapp", incoming("SM1", "/link"))).status_code == 200
        [code_message] = await twilio_api.wait_for(1)
        code = CODE.search(code_message.body).group(0)  # type: ignore[union-attr]
        first = (await web.post("/api/messages", json={"text": f"/link {code}"})).json()
        owner = catalog.t("link_who", "en", name="Ana (…1222)", surface="WhatsApp")  # ProfileName, the number's end
        assert first["reply"] == catalog.t("link_confirm", "en", who=owner, code=code)
        auth = {"authorization": f"Bearer {first['session']}"}
        done = (await web.post("/api/messages", json={"text": f"/link {code} yes"}, headers=auth)).json()
        assert done["reply"] == catalog.t("link_done", "en")
        notice = (await twilio_api.wait_for(2))[1]
        assert notice.to == f"whatsapp:{PERSON}"
        assert notice.body == catalog.t("link_joined", "en", who=catalog.t(
            "link_who_unnamed", "en", surface=catalog.t("surface_web", "en")))


async def test_a_web_owner_finds_who_joined_in_the_conversation_the_widget_shows(bot_api: FakeBotApi,
                                                                                  backend: Backend) -> None:
    settings = Settings.from_mapping({"TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": bot_api.base_url,
                                      "HILO_DATABASE_URL": backend.url, "HILO_SECRET_KEY": "k"})
    async with running_daemon(settings) as web:
        first = (await web.post("/api/messages", json={"text": "hola"}, headers={"accept-language": "es"})).json()
        auth = {"authorization": f"Bearer {first['session']}", "accept-language": "es"}
        conv = first["conversation_id"]
        asked = (await web.post("/api/messages", json={"text": "/link", "conversation_id": conv}, headers=auth)).json()
        code = CODE.search(asked["reply"]).group(0)  # type: ignore[union-attr]
        bot_api.enqueue(bot_api.text_update(f"/link {code}", user_id=77, first_name="Bob", username=None))
        [prompt] = await bot_api.wait_sent(1, chat_id=77)
        assert prompt.text == catalog.t("link_confirm", "en", who=catalog.t(
            "link_who_unnamed", "en", surface=catalog.t("surface_web", "en")), code=code)
        bot_api.enqueue(bot_api.text_update(f"/link {code} yes", user_id=77, first_name="Bob", username=None))
        [_, done] = await bot_api.wait_sent(2, chat_id=77)
        assert done.text == catalog.t("link_done", "en")
        # what the widget loads for that conversation: the owner's words, then who joined, in the owner's language
        messages = (await web.get(f"/api/conversations/{conv}/messages", headers=auth)).json()["messages"]
        joined = catalog.t("link_joined", "es", who=catalog.t("link_who", "es", name="Bob", surface="Telegram"))
        assert [(m["role"], m["content"]) for m in messages][-1] == ("assistant", joined)
        assert len(bot_api.sent) == 2  # nothing was pushed anywhere: the web has no sender
