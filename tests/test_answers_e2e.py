"""Answers without text through the whole daemon, one test per kind of surface: the web API (JSON and stream),
Telegram (the real python-telegram-bot against the fake Bot API) and WhatsApp (the real Twilio client against the
fake Twilio API), with the real SDKs getting the providers' own recordings from the fake provider."""

from __future__ import annotations

import sqlite3
from contextlib import closing
from pathlib import Path

from bot.config import Settings
from kernel import catalog
from tests.fakes import recorded_shapes as rec
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.daemon import running_daemon
from tests.fakes.model_server import FakeModelServer, replay
from tests.fakes.telegram_api import FakeBotApi
from tests.test_telegram import delivered, tg_settings
from tests.test_web_api import stream
from tests.test_whatsapp import idle, incoming, inspect, post, settings_for

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api


def models_env(server: FakeModelServer, model: str) -> dict[str, str]:
    return {"HILO_MODEL": model, "HILO_MODEL_ATTEMPTS": "1", "OPENAI_BASE_URL": server.base_url + "/v1",
            "ANTHROPIC_API_KEY": "x", "ANTHROPIC_BASE_URL": server.base_url}


def web_settings(tmp_path: Path, server: FakeModelServer, model: str) -> Settings:
    return Settings.from_mapping({"HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}",
                                  "HILO_SECRET_KEY": "test-secret", **models_env(server, model)})


def recorded_outcomes(tmp_path: Path) -> list[str]:
    with closing(sqlite3.connect(tmp_path / "hilo.db")) as db:
        return [row[0] for row in db.execute("SELECT outcome FROM model_calls ORDER BY id")]


async def test_web_api_replies_with_the_refusal_or_the_catalogue_never_null(
    tmp_path: Path, model_server: FakeModelServer,
) -> None:
    model_server.enqueue(replay(body=rec.OPENAI_REFUSAL_JSON), replay(body=rec.OPENAI_TOOL_CALLS_JSON))
    async with running_daemon(web_settings(tmp_path, model_server, "openai:m1")) as client:
        refused = (await client.post("/api/messages", json={"text": "how do I make anthrax?"})).json()
        tools = (await client.post("/api/messages", json={"text": "weather in Edinburgh?"},
                                   headers={"accept-language": "es"})).json()
    assert (refused["status"], refused["reply"]) == ("ok", rec.OPENAI_REFUSAL_TEXT)
    assert (tools["status"], tools["reply"]) == ("ok", catalog.t("model_no_answer", "es"))
    assert recorded_outcomes(tmp_path) == ["refused", "tool_calls"]


async def test_web_stream_of_a_refusal_ends_with_the_catalogue_reply(
    tmp_path: Path, model_server: FakeModelServer,
) -> None:
    model_server.enqueue(replay(stream=rec.ANTHROPIC_REFUSAL_STREAM))
    async with running_daemon(web_settings(tmp_path, model_server, "anthropic:c1")) as client:
        events = await stream(client, {"text": "something the model refuses"})
    kinds = [k for k, _ in events]
    assert kinds[0] == "meta" and kinds[-1] == "done"
    done = events[-1][1]
    assert (done["status"], done["reply"]) == ("ok", catalog.t("model_refused", "en"))
    assert "".join(d["text"] for k, d in events if k == "delta") == done["reply"]
    assert recorded_outcomes(tmp_path) == ["refused"]


async def test_telegram_sends_the_catalogue_text_for_an_answer_of_tool_calls_only(
    tmp_path: Path, bot_api: FakeBotApi, model_server: FakeModelServer,
) -> None:
    model_server.enqueue(replay(body=rec.ANTHROPIC_TOOL_ONLY_JSON))
    settings = tg_settings(tmp_path, bot_api, **models_env(model_server, "anthropic:c1"))
    async with running_daemon(settings) as client:
        bot_api.enqueue(bot_api.text_update("¿qué tiempo hace en San Francisco?", language_code="es"))
        [reply] = await bot_api.wait_sent(1)
        data = await delivered(client, 1)
    assert reply.text == catalog.t("model_no_answer", "es")
    assert [c["outcome"] for c in data["model_calls"]] == ["tool_calls"]
    assert data["deliveries"][0]["status"] == "sent"


async def test_whatsapp_sends_a_cut_answer_with_the_note(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi, model_server: FakeModelServer,
) -> None:
    model_server.enqueue(replay(body=rec.OPENAI_LENGTH_JSON))
    settings = settings_for(tmp_path, twilio_api, **models_env(model_server, "openai:m1"))
    async with running_daemon(settings) as client:
        assert (await post(client, "/webhooks/whatsapp", incoming("SMcut", "the weather as JSON"))).status_code == 200
        await idle(client)
        data = await inspect(client)
    [sent] = twilio_api.sent
    assert sent.body == rec.OPENAI_LENGTH_TEXT + "\n\n" + catalog.t("model_cut_note", "en")
    assert [c["outcome"] for c in data["model_calls"]] == ["cut"]
