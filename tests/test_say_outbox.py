"""What hilo says outside a turn (a command's answer, a refusal) goes through the outbox like a turn's reply, when
the person is known to the database (issue 12 item 3: one sending path): a `deliveries` row with the provider's
id, retried after a 429, and in order per chat or number with the replies before it. The real daemon (uvicorn,
each backend) with the real python-telegram-bot and twilio clients against the loopback fakes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from bot.notices import Notices
from bot.outbox import Outbox, with_route
from kernel import catalog
from kernel.types import InboundMessage
from tests.backends import Backend
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.daemon import running_daemon
from tests.fakes.model_server import FakeModelServer, slow
from tests.fakes.telegram_api import FakeBotApi
from tests.test_outbox import _Silent
from tests.test_telegram import delivered, tg_settings
from tests.test_whatsapp import HANDLE, idle, incoming, inspect, post, settings_for

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api

HELP_EN = catalog.t("cmd_help", "en")


def rows(data: dict[str, Any]) -> list[tuple[Any, ...]]:
    return [(d["status"], d["provider_ref"], d["message_id"], d["attempts"]) for d in data["deliveries"]]


# -- Notices.say on the store (both backends) -------------------------------------------------------------------

async def test_say_queues_for_a_known_person_and_leaves_the_others_to_a_direct_send(store: Any) -> None:
    turn = await store.ingest(with_route(InboundMessage(surface="telegram", sender="42", external_id="42:1",
                                                        text="hi", received_at=store.clock()), "42"), 1)
    assert turn is not None
    outbox = Outbox(store)
    notices = Notices(store, outbox)
    assert not await notices.say("telegram", "42", "no transport here yet", sender="42")
    outbox.register(_Silent())
    assert await notices.say("telegram", "42", "for a known person", sender="42", reply_to="7")
    assert not await notices.say("telegram", "99", "for a stranger", sender="99")  # nothing queued for chat 99
    [part] = await store.outbox_pending(turn.user_id)
    assert (part["recipient"], part["status"]) == ("42", "pending")
    [claimed] = await store.claim_outbox("telegram", "p", 60)
    assert (claimed.text, claimed.reply_to, claimed.message_id) == ("for a known person", "7", None)


# -- Telegram -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("throttled", [False, True], ids=["sent", "429_once"])
async def test_telegram_a_command_answer_is_a_delivery_row_with_the_provider_id_retried_after_a_429(
    tmp_path: Path, bot_api: FakeBotApi, backend: Backend, throttled: bool,
) -> None:
    async with running_daemon(tg_settings(tmp_path, bot_api, HILO_DATABASE_URL=backend.url)) as client:
        bot_api.enqueue(bot_api.text_update("hi"))
        await bot_api.wait_sent(1)
        if throttled:
            bot_api.fail("sendMessage", 429, retry_after=1)
        bot_api.enqueue(bot_api.text_update("/help"))
        sent = await bot_api.wait_sent(2)
        data = await delivered(client, 2)
    assert [s.text for s in bot_api.sent] == [sent[0].text, HELP_EN]  # sent once
    assert len(bot_api.calls_of("sendMessage")) == 2 + throttled  # the reply, (the 429,) the answer
    assert rows(data)[1] == ("sent", str(sent[1].message_id), None, 1 + throttled)


async def test_telegram_a_reply_then_the_answer_to_help_sent_right_after_arrive_in_that_order(
    tmp_path: Path, bot_api: FakeBotApi, model_server: FakeModelServer, backend: Backend,
) -> None:
    model_server.enqueue(slow(1.0))  # then "fake reply to: <message>"
    settings = tg_settings(tmp_path, bot_api, HILO_MODEL="openai:m1", OPENAI_BASE_URL=model_server.base_url + "/v1",
                           HILO_DATABASE_URL=backend.url)
    async with running_daemon(settings) as client:
        bot_api.enqueue(bot_api.text_update("message 1"), bot_api.text_update("/help"))
        await bot_api.wait_sent(2)
        data = await delivered(client, 2)
    assert [s.text for s in bot_api.sent_to(42)] == ["fake reply to: message 1", HELP_EN]
    assert [d["provider_ref"] for d in data["deliveries"]] == [str(s.message_id) for s in bot_api.sent_to(42)]


# -- WhatsApp -----------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("throttled", [False, True], ids=["sent", "429_once"])
async def test_whatsapp_a_command_answer_is_a_delivery_row_with_the_provider_id_retried_after_a_429(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi, backend: Backend, throttled: bool,
) -> None:
    async with running_daemon(settings_for(tmp_path, twilio_api, HILO_DATABASE_URL=backend.url)) as client:
        await post(client, "/webhooks/whatsapp", incoming("SMhi", "hi"))
        await twilio_api.wait_for(1)
        await idle(client)
        if throttled:
            twilio_api.enqueue(fake_twilio.rate_limited(1), fake_twilio.created())
        await post(client, "/webhooks/whatsapp", incoming("SMhelp", "/help"))
        sent = await twilio_api.wait_for(2)
        await idle(client)
        data = await inspect(client, HANDLE)
    assert [s.body for s in twilio_api.sent] == [sent[0].body, HELP_EN]  # sent once
    assert [r.status for r in twilio_api.requests][1:] == ([429, 201] if throttled else [201])
    assert rows(data)[1] == ("sent", sent[1].sid, None, 1 + throttled)


async def test_whatsapp_a_reply_then_the_answer_to_help_sent_right_after_arrive_in_that_order(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi, model_server: FakeModelServer, backend: Backend,
) -> None:
    model_server.enqueue(slow(1.0))  # then "fake reply to: <message>"
    settings = settings_for(tmp_path, twilio_api, HILO_MODEL="openai:m1",
                            OPENAI_BASE_URL=model_server.base_url + "/v1", HILO_DATABASE_URL=backend.url)
    async with running_daemon(settings) as client:
        await post(client, "/webhooks/whatsapp", incoming("SM1", "message 1"))
        await post(client, "/webhooks/whatsapp", incoming("SM2", "/help"))  # while message 1 waits for the model
        await twilio_api.wait_for(2)
        await idle(client)
        data = await inspect(client, HANDLE)
    assert [s.body for s in twilio_api.sent] == ["fake reply to: message 1", HELP_EN]
    assert [d["provider_ref"] for d in data["deliveries"]] == [s.sid for s in twilio_api.sent]
