"""Sixty people over the web, Telegram (webhook) and WhatsApp, half of whose turns wait 45 s for the model and half
1 s, against a real `hilo serve` on SQLite with a short stop budget: the load of the SIGTERM tests
(tests/test_stop_slow_models.py: the stop; tests/test_stop_recovery.py: the next start answers the rest)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
from collections.abc import Iterator
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from twilio.request_validator import RequestValidator

from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.model_server import FakeModelServer, slow
from tests.fakes.serve_process import ServeProcess, model_env, serving, stop_within

PUBLIC = "https://bot.example.com"
SECRET = "s3cret-token"
NUMBER = "whatsapp:+14155238886"
#: The test's stop budget (s), and what the test gives hilo beyond it before it calls the stop failed (the
#: shipped files give 4 s more than their budget: tests/test_shutdown.py).
STOP, MARGIN = 6.0, 4.0
PER_SURFACE = 20  # people on each surface, half of them slow


def stop_env(tmp_path: Path, model_server: FakeModelServer, telegram: fake_telegram.FakeBotApi,
             twilio: fake_twilio.FakeTwilioApi) -> dict[str, str]:
    return model_env(
        f"sqlite:///{tmp_path}/hilo.db", model_server.base_url, HILO_MODEL_ATTEMPTS="1",
        HILO_STOP_TIMEOUT=str(STOP), HILO_PUBLIC_URL=PUBLIC, HILO_TELEGRAM_MODE="webhook",
        TELEGRAM_BOT_TOKEN=fake_telegram.TOKEN, TELEGRAM_API_BASE_URL=telegram.base_url,
        TELEGRAM_WEBHOOK_SECRET=SECRET, TWILIO_ACCOUNT_SID=twilio.account_sid, TWILIO_AUTH_TOKEN=twilio.auth_token,
        TWILIO_WHATSAPP_NUMBER=NUMBER, TWILIO_API_BASE_URL=twilio.base_url, HILO_RATE_LIMIT_VISITOR="10000")


def text_of(surface: str, i: int) -> str:
    """The person's message: "slow" ones wait 45 s for the model, the others 1 s."""
    return f"{'slow' if i % 2 else 'quick'} question {surface} {i}"


def whatsapp_form(i: int) -> dict[str, str]:
    sid = f"SM{i:032d}"
    sender = f"+3460000{i:04d}"
    return {"SmsMessageSid": sid, "NumMedia": "0", "ProfileName": "P", "SmsSid": sid, "WaId": sender[1:],
            "SmsStatus": "received", "Body": text_of("whatsapp", i), "To": NUMBER, "NumSegments": "1",
            "MessageSid": sid, "AccountSid": fake_twilio.ACCOUNT_SID, "From": f"whatsapp:{sender}",
            "ApiVersion": "2010-04-01"}


def sse_events(body: str) -> list[tuple[str, dict[str, Any]]]:
    found = []
    for block in body.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.splitlines() if ": " in line and not line.startswith(":"))
        if "event" in lines:
            found.append((lines["event"], json.loads(lines["data"])))
    return found


bot_api_session, bot_api = fake_telegram.bot_api_session, fake_telegram.bot_api
twilio_api_session, twilio_api = fake_twilio.twilio_api_session, fake_twilio.twilio_api


@dataclass
class Load:
    """The fakes of one test and the environment of its `hilo serve`."""

    tmp_path: Path
    env: dict[str, str]
    models: FakeModelServer
    telegram: fake_telegram.FakeBotApi
    twilio: fake_twilio.FakeTwilioApi


@pytest.fixture
def sixty(tmp_path: Path, model_server: FakeModelServer, bot_api: fake_telegram.FakeBotApi,
          twilio_api: fake_twilio.FakeTwilioApi) -> Iterator[Load]:
    """The fake model answers "slow" questions after 45 s and "quick" ones after 1 s."""
    model_server.when_text("slow question", slow(45.0))
    model_server.when_text("quick question", slow(1.0))
    yield Load(tmp_path, stop_env(tmp_path, model_server, bot_api, twilio_api), model_server, bot_api, twilio_api)


def unanswered(db: Path) -> tuple[set[str], set[str]]:
    """(texts of the people's messages with no reply, texts of those with one), read from the database."""
    with closing(sqlite3.connect(db)) as conn:
        rows = conn.execute(
            "SELECT m.content, EXISTS (SELECT 1 FROM messages r WHERE r.reply_to = m.id AND r.role = 'assistant') "
            "FROM messages m WHERE m.role = 'user'").fetchall()
    return {t for t, answered in rows if not answered}, {t for t, answered in rows if answered}


Sent = tuple[list[asyncio.Task[httpx.Response]], httpx.AsyncClient]


async def send_everything(daemon: ServeProcess, telegram: fake_telegram.FakeBotApi,
                          model_server: FakeModelServer) -> Sent:
    """Every person's message sent; the web's requests are still waiting for their answers."""
    client = httpx.AsyncClient(base_url=daemon.url, timeout=60)
    web: list[asyncio.Task[httpx.Response]] = []
    for i in range(PER_SURFACE):
        path = "/api/messages" if i < PER_SURFACE // 2 else "/api/messages/stream"
        web.append(asyncio.create_task(client.post(path, json={"text": text_of("web", i),
                                                               "client_message_id": f"c-{i}"})))
    for i in range(PER_SURFACE):
        update = telegram.text_update(text_of("telegram", i), user_id=1000 + i)
        r = await client.post("/webhooks/telegram", json=update,
                              headers={"x-telegram-bot-api-secret-token": SECRET})
        assert r.status_code == 200, r.text
    validator = RequestValidator(fake_twilio.AUTH_TOKEN)
    for i in range(PER_SURFACE):
        form = whatsapp_form(i)
        r = await client.post("/webhooks/whatsapp", content=urlencode(form), headers={
            "content-type": "application/x-www-form-urlencoded",
            "x-twilio-signature": validator.compute_signature(PUBLIC + "/webhooks/whatsapp", form)})
        assert r.status_code == 200, r.text
    await model_server.wait_requests(3 * PER_SURFACE, timeout=30)  # every turn waits for its model
    return web, client


Stopped = tuple[int, list[str], list[httpx.Response | BaseException]]


async def sigterm_under_load(load: Load) -> Stopped:
    """A `hilo serve` with `load.env` takes every person's message, gets SIGTERM once every turn waits for its
    model, and must end within STOP + MARGIN s: (its exit status, its stdout lines, each web request's answer or
    the exception that ended it, in PER_SURFACE order)."""
    with serving(load.tmp_path, load.env) as daemon:
        web, client = await send_everything(daemon, load.telegram, load.models)
        try:
            status = await stop_within(daemon, STOP + MARGIN)
            outcomes = await asyncio.gather(*web, return_exceptions=True)
        finally:
            await client.aclose()
    return status, list(daemon.out), list(outcomes)


#: What a test module assigns to have the fixtures `sixty` needs (pytest finds fixtures in the test's module):
#: `bot_api_session, bot_api, twilio_api_session, twilio_api, sixty = sixty_people.FIXTURES`
FIXTURES = (bot_api_session, bot_api, twilio_api_session, twilio_api, sixty)
