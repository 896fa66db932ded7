"""Fault injection against a real `hilo serve` (issue 12 items 3 and 4): SIGKILL mid-turn and SIGKILL mid-send,
with the loopback fakes of Telegram (webhook mode), Twilio and the model, on SQLite.

- mid-turn: 20 Telegram (webhook, or polling with every update confirmed) and 20 WhatsApp people each have a
  turn in flight (the fake model holds every answer), the daemon is killed, nothing is redelivered; after the
  restart recovery answers every one of them, once.
- mid-send: every reply is stored and its send is held by the fake platforms (they never answer), the daemon is
  killed; after the restart the outbox delivers each stored reply exactly once, and redelivering all 40
  messages then calls no model and sends nothing more (SQLite and Postgres).
Each waits for events (log lines, the fakes' counters, rows), never for a time; the figures are in the
assertion messages.
"""

from __future__ import annotations

import asyncio
import threading
from collections import Counter
from contextlib import suppress
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from twilio.request_validator import RequestValidator

from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.loopback import free_port
from tests.fakes.model_behaviours import held
from tests.fakes.model_server import FakeModelServer
from tests.fakes.postgres import SERVER
from tests.fakes.serve_process import ServeProcess
from tests.waiting import wait_until

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api

PUBLIC = "https://bot.example.com"
SECRET = "tg-secret_for-the-test"
PEOPLE = 20
TG_USERS = [7000 + i for i in range(PEOPLE)]
WA_USERS = [f"+3460000{i:04d}" for i in range(PEOPLE)]


def env_for(tmp_path: Path, bot: fake_telegram.FakeBotApi, twilio: fake_twilio.FakeTwilioApi,
            model: FakeModelServer, mode: str = "webhook") -> dict[str, str]:
    return {
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "k" * 43,
        "HILO_MODEL": "openai:m1", "OPENAI_API_KEY": "x", "OPENAI_BASE_URL": model.base_url + "/v1",
        "HILO_PUBLIC_URL": PUBLIC, "TELEGRAM_BOT_TOKEN": fake_telegram.TOKEN, "TELEGRAM_API_BASE_URL": bot.base_url,
        "HILO_TELEGRAM_MODE": mode, "TELEGRAM_WEBHOOK_SECRET": SECRET,
        "TWILIO_ACCOUNT_SID": twilio.account_sid, "TWILIO_AUTH_TOKEN": twilio.auth_token,
        "TWILIO_WHATSAPP_NUMBER": "whatsapp:+14155238886", "TWILIO_API_BASE_URL": twilio.base_url,
        # recovery answers at once and looks every second; a killed process's sends are taken over after 2 s
        "HILO_RECOVERY_GRACE": "0.01", "HILO_RECOVERY_SECONDS": "1", "HILO_OUTBOX_LEASE": "2",
    }


def wa_form(sid: str, sender: str, text: str) -> dict[str, str]:
    return {"MessageSid": sid, "SmsMessageSid": sid, "NumMedia": "0", "WaId": sender[1:], "Body": text,
            "To": "whatsapp:+14155238886", "From": f"whatsapp:{sender}", "AccountSid": fake_twilio.ACCOUNT_SID,
            "ApiVersion": "2010-04-01"}


class People:
    """The 40 messages (20 Telegram updates, 20 WhatsApp forms), sent to a daemon and sent again."""

    def __init__(self, bot: fake_telegram.FakeBotApi, mode: str = "webhook") -> None:
        self.bot, self.polling = bot, mode == "polling"
        self.updates = [bot.text_update(f"question from telegram {u}", user_id=u) for u in TG_USERS]
        self.forms = [wa_form(f"SM{i:032x}", p, f"question from whatsapp {i}") for i, p in enumerate(WA_USERS)]

    async def send(self, base: str) -> None:
        validator = RequestValidator(fake_twilio.AUTH_TOKEN)
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            async def telegram(update: dict[str, Any]) -> None:
                r = await client.post("/webhooks/telegram", json=update,
                                      headers={"X-Telegram-Bot-Api-Secret-Token": SECRET})
                assert r.status_code == 200, r.text

            async def whatsapp(form: dict[str, str]) -> None:
                signature = validator.compute_signature(PUBLIC + "/webhooks/whatsapp", form)
                r = await client.post("/webhooks/whatsapp", content=urlencode(form), headers={
                    "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": signature})
                assert r.status_code == 200, r.text

            if self.polling:  # getUpdates hands them out
                self.bot.enqueue(*self.updates)
                await asyncio.gather(*map(whatsapp, self.forms))
            else:
                await asyncio.gather(*map(telegram, self.updates), *map(whatsapp, self.forms))


def answered(bot: fake_telegram.FakeBotApi, twilio: fake_twilio.FakeTwilioApi) -> tuple[Counter[str], int]:
    """Replies each person got, and how many of the 40 got at least one."""
    got: Counter[str] = Counter(str(s.chat_id) for s in bot.sent)
    got.update(r.to.removeprefix("whatsapp:") for r in twilio.sent)
    people = [str(u) for u in TG_USERS] + WA_USERS
    return got, sum(got[p] > 0 for p in people)


def start(tmp_path: Path, env: dict[str, str]) -> tuple[ServeProcess, str]:
    port = free_port()
    daemon = ServeProcess(tmp_path, env, args=("--port", str(port)))
    daemon.wait_started()
    return daemon, f"http://127.0.0.1:{port}"


async def stop(daemon: ServeProcess) -> None:
    daemon.terminate()
    await asyncio.to_thread(daemon.wait, 60)
    daemon.kill()


@pytest.mark.parametrize("mode", ["webhook", "polling"])
async def test_sigkill_mid_turn_every_person_is_answered_once_after_restart(
    mode: str, tmp_path: Path, bot_api: fake_telegram.FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi,
    model_server: FakeModelServer,
) -> None:
    env = env_for(tmp_path, bot_api, twilio_api, model_server, mode)
    gate = threading.Event()  # never set while the first process lives: every turn is in flight
    model_server.enqueue(*[held(gate) for _ in range(2 * PEOPLE)])
    people = People(bot_api, mode)
    first, base = start(tmp_path, env)
    try:
        await people.send(base)
        await wait_until(lambda: len(model_server.requests) >= 2 * PEOPLE, "40 turns calling the model")
        if people.polling:  # polling confirmed every update it took (Telegram hands none out again)
            await wait_until(lambda: bot_api.confirmed >= max(u["update_id"] for u in people.updates),
                             "every update confirmed")
    finally:
        first.kill()  # SIGKILL: 40 turns in flight, their messages stored, no reply
        gate.set()
    assert not bot_api.sent and not twilio_api.sent
    second, _ = start(tmp_path, env)  # nothing is redelivered: recovery must find the 40 messages
    try:  # the killed turns' leases lapse 30 s after their last renewal: then recovery takes them
        with suppress(AssertionError):  # the figure is asserted below
            await wait_until(lambda: answered(bot_api, twilio_api)[1] == 2 * PEOPLE,
                             "every person answered after the restart", seconds=120)
    finally:
        got, people_answered = answered(bot_api, twilio_api)
        await stop(second)
    got, _ = answered(bot_api, twilio_api)
    assert people_answered == 2 * PEOPLE, f"{people_answered} of {2 * PEOPLE} people answered after the restart"
    assert sorted(set(got.values())) == [1], f"replies per person: {got}"


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
async def test_sigkill_during_sends_every_stored_reply_is_delivered_exactly_once(
    database: str, tmp_path: Path, bot_api: fake_telegram.FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi,
    model_server: FakeModelServer,
) -> None:
    env = env_for(tmp_path, bot_api, twilio_api, model_server)
    if database == "postgres":  # the claims' FOR UPDATE SKIP LOCKED, the jsonb route look-up
        env["HILO_DATABASE_URL"] = SERVER.create_database()
    gate = threading.Event()  # never set: the platforms never answer the first process's sends
    bot_api.hold(gate)
    twilio_api.hold(gate)
    people = People(bot_api)
    first, base = start(tmp_path, env)
    try:
        await people.send(base)
        await wait_until(lambda: bot_api.held + twilio_api.held >= 2 * PEOPLE, "40 replies being sent")
    finally:
        first.kill()  # SIGKILL with 40 stored replies on the wire
    await wait_until(lambda: bot_api.held + twilio_api.held == 0, "the killed sends dropped by the fakes")
    bot_api.hold(None)
    twilio_api.hold(None)
    assert len(model_server.requests) == 2 * PEOPLE and not bot_api.sent and not twilio_api.sent
    second, base = start(tmp_path, env)
    try:
        with suppress(AssertionError):  # the figure is asserted below
            await wait_until(lambda: answered(bot_api, twilio_api)[1] == 2 * PEOPLE,
                             "every stored reply delivered after the restart", seconds=120)
        await people.send(base)  # all 40 redelivered: their replies are stored and delivered
    finally:
        got, people_answered = answered(bot_api, twilio_api)
        await stop(second)  # the stop drains the redeliveries' handling
    got, _ = answered(bot_api, twilio_api)
    assert people_answered == 2 * PEOPLE, f"{people_answered} of {2 * PEOPLE} stored replies delivered"
    assert sorted(set(got.values())) == [1], f"replies per person: {got}"
    assert len(model_server.requests) == 2 * PEOPLE, "a redelivery called the model again"
