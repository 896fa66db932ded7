"""Issue 13 item 7, `/export` on each surface: on Telegram the JSON itself arrives as a document (sendDocument,
multipart, through the real python-telegram-bot against the fake Bot API); on WhatsApp and in the web chat a
download link (HILO_PUBLIC_URL/api/export/<token>) that the web surface serves, signed, short-lived and for one
person only; `GET /api/export` gives the signed-in visitor theirs. On the whole daemon, on every backend."""

from __future__ import annotations

import json
import re
import time

import pytest

from bot.export import ExportLinks
from kernel import catalog
from tests.backends import Backend
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.daemon import running_daemon
from tests.fakes.telegram_api import TOKEN, FakeBotApi
from tests.test_whatsapp import PERSON, PUBLIC, incoming, post, settings_for

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api

LINK = re.compile(re.escape(PUBLIC) + r"(/api/export/[A-Za-z0-9_.\-]+)")


async def test_export_on_every_surface(tmp_path: object, bot_api: FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi,
                                       backend: Backend) -> None:
    settings = settings_for(tmp_path, twilio_api, HILO_DATABASE_URL=backend.url,  # type: ignore[arg-type]
                            TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_BASE_URL=bot_api.base_url)
    async with running_daemon(settings) as web:
        # Telegram: the file itself
        bot_api.enqueue(bot_api.text_update("my cat is called Mishka", user_id=55))
        await bot_api.wait_sent(1, chat_id=55)
        bot_api.enqueue(bot_api.text_update("/export", user_id=55))
        await bot_api.wait_for(lambda: bool(bot_api.documents))
        [doc] = bot_api.documents
        assert (doc.chat_id, doc.filename, doc.caption) == (55, "hilo-export.json",
                                                            catalog.t("cmd_export_document", "en"))
        data = json.loads(doc.data)
        assert data["user"]["handle"] == "telegram:55" and data["format"] == "hilo-export"
        [conv] = data["conversations"]
        assert conv["messages"][0]["content"] == "my cat is called Mishka"
        assert len(bot_api.sent_to(55)) == 1  # no text besides the file

        # WhatsApp: a link, served by the web surface, to that person's export only
        assert (await post(web, "/webhooks/whatsapp", incoming("SMe1", "I like tea"))).status_code == 200
        await twilio_api.wait_for(1)
        assert (await post(web, "/webhooks/whatsapp", incoming("SMe2", "/export"))).status_code == 200
        body = (await twilio_api.wait_for(2))[1].body
        path = LINK.search(body).group(1)  # type: ignore[union-attr]
        assert body == catalog.t("cmd_export_link", "en", url=PUBLIC + path, minutes=15)
        got = await web.get(path)
        assert got.status_code == 200
        assert got.headers["content-disposition"] == 'attachment; filename="hilo-export.json"'
        assert got.headers["cache-control"] == "no-store"
        exported = got.json()
        assert exported["user"]["handle"] == f"whatsapp:{PERSON}"
        assert "Mishka" not in got.text  # nobody else's data
        tampered = path[:-2] + ("AA" if not path.endswith("AA") else "BB")
        refused = await web.get(tampered)
        assert (refused.status_code, refused.json()["error"]) == (404, "export_link_invalid")

        # the web: /export in the chat gives a link; GET /api/export the visitor's own
        first = (await web.post("/api/messages", json={"text": "hello from the web"})).json()
        auth = {"authorization": f"Bearer {first['session']}"}
        answer = (await web.post("/api/messages", json={"text": "/export"}, headers=auth)).json()
        assert answer["status"] == "command"
        web_path = LINK.search(answer["reply"]).group(1)  # type: ignore[union-attr]
        mine = await web.get("/api/export", headers=auth)
        assert mine.status_code == 200 and (await web.get(web_path)).json()["user"] == mine.json()["user"]
        assert mine.json()["user"]["handle"] != exported["user"]["handle"]
        web.cookies.clear()
        assert (await web.get("/api/export")).status_code == 401

        # forgotten since: the link opens nothing, even once the handle is someone's again
        assert (await post(web, "/webhooks/whatsapp", incoming("SMe3", "/forget yes"))).status_code == 200
        await twilio_api.wait_for(3)
        assert (await post(web, "/webhooks/whatsapp", incoming("SMe4", "back again"))).status_code == 200
        await twilio_api.wait_for(4)
        assert (await web.get(path)).status_code == 404


def test_a_link_expires_and_belongs_to_its_key(monkeypatch: pytest.MonkeyPatch) -> None:
    links = ExportLinks("k", "https://bot.example.com", minutes=5)
    token = links.link(7, "alice").rsplit("/", 1)[1]
    assert links.read(token) == (7, "alice")
    assert ExportLinks("other key", "", 5).read(token) is None
    assert links.read(links.link(7, "alice").rsplit("/", 1)[1]) == (7, "alice")
    assert token != links.link(7, "alice").rsplit("/", 1)[1]  # a nonce each: never guessable from the person
    real = time.time
    monkeypatch.setattr(time, "time", lambda: real() + 5 * 60 + 2)
    assert links.read(token) is None
