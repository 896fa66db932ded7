"""The Telegram surface: the real python-telegram-bot against the fake Bot API on 127.0.0.1, inside the whole
daemon (uvicorn, SQLite, echo model or the real openai SDK against the fake provider), polling and webhook."""

from __future__ import annotations

import asyncio
import gc
import json
import os
import signal
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from telegram import Bot, Message

from bot.app import create_app
from bot.config import Settings
from bot.runtime import Runtime
from bot.tasks import TaskSet
from kernel import catalog
from kernel.errors import ConfigError
from kernel.text_split import utf16_len
from surfaces.telegram import TelegramSurface, api_urls
from surfaces.telegram_inbound import Allowlist, BotIdentity, classify
from surfaces.telegram_outbound import (
    SendFailed,
    SendPolicy,
    send_with_retry,
    show_typing,
    split_reply,
)
from tests.fakes import telegram_api as fake_telegram
from tests.fakes.daemon import free_port, running_daemon
from tests.fakes.full_disk import PAGE_SIZED_TEXT, disk_full
from tests.fakes.model_server import FakeModelServer, ok, slow, status
from tests.fakes.telegram_api import BOT_ID, BOT_USERNAME, TOKEN, FakeBotApi

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api

REPO = Path(__file__).resolve().parent.parent
SECRET = "s3cret_webhook-token"
ME = BotIdentity(BOT_ID, BOT_USERNAME)


def tg_settings(tmp_path: Path, api: FakeBotApi, **env: str) -> Settings:
    return Settings.from_mapping({
        "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": api.base_url,
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "test-secret", **env,
    })


def webhook_env(public_url: str = "https://hilo.example.com") -> dict[str, str]:
    return {"HILO_TELEGRAM_MODE": "webhook", "TELEGRAM_WEBHOOK_SECRET": SECRET, "HILO_PUBLIC_URL": public_url}


def runtime(client: httpx.AsyncClient) -> Any:
    return client.app.state.hilo["runtime"]  # type: ignore[attr-defined]


async def inspect(client: httpx.AsyncClient, user_id: int = 42) -> dict[str, Any] | None:
    """Everything stored about the Telegram user `user_id` (None: nothing)."""
    store = runtime(client).pipeline.store
    handle = await store.identity_handle("telegram", str(user_id))
    data: dict[str, Any] | None = await store.inspect(handle) if handle else None
    return data


async def delivered(client: httpx.AsyncClient, count: int, user_id: int = 42) -> dict[str, Any]:
    """What is stored about the person once `count` deliveries are settled (queued parts are rows before they
    are sent: bot/outbox.py)."""
    for _ in range(500):
        data = await inspect(client, user_id)
        if data is not None and sum(d["status"] not in ("pending", "sending") for d in data["deliveries"]) >= count:
            return data
        await asyncio.sleep(0.01)
    raise AssertionError(f"expected {count} deliveries for telegram:{user_id}")


def messages(data: dict[str, Any] | None) -> list[tuple[str, str]]:
    assert data is not None
    return [(m["role"], m["content"]) for c in data["conversations"] for m in c["messages"]]


async def post_update(client: httpx.AsyncClient, update: dict[str, Any], secret: str | None = SECRET) -> int:
    headers = {"X-Telegram-Bot-Api-Secret-Token": secret} if secret is not None else {}
    r = await client.post("/webhooks/telegram", json=update, headers=headers)
    return r.status_code


# -- splitting --------------------------------------------------------------------------------------------

# The algorithm itself is tested in tests/test_text_split.py; here, Telegram's limit and count.

def test_split_counts_utf16_units_like_telegram() -> None:
    text = "😀" * 3000  # 6000 UTF-16 units
    parts = split_reply(text)
    assert len(parts) == 2 and all(utf16_len(p) <= 4096 for p in parts) and "".join(parts) == text


# -- configuration and classification --------------------------------------------------------------------

def test_api_urls() -> None:
    assert api_urls("") == ("https://api.telegram.org/bot", "https://api.telegram.org/file/bot")
    assert api_urls("http://127.0.0.1:8081/") == ("http://127.0.0.1:8081/bot", "http://127.0.0.1:8081/file/bot")
    assert api_urls("http://h/bot")[0] == "http://h/bot"


@pytest.mark.parametrize(("env", "names"), [
    ({"HILO_TELEGRAM_MODE": "webhook"}, ["TELEGRAM_WEBHOOK_SECRET", "HILO_PUBLIC_URL"]),
    ({"HILO_TELEGRAM_MODE": "webhook", "HILO_PUBLIC_URL": "https://x.example"}, ["TELEGRAM_WEBHOOK_SECRET"]),
    ({"HILO_TELEGRAM_MODE": "webhook", "TELEGRAM_WEBHOOK_SECRET": "abc"}, ["HILO_PUBLIC_URL"]),
    ({**webhook_env(), "TELEGRAM_WEBHOOK_SECRET": "has space"}, ["TELEGRAM_WEBHOOK_SECRET"]),
])
def test_webhook_mode_says_what_to_set(tmp_path: Path, env: dict[str, str], names: list[str]) -> None:
    settings = Settings.from_mapping({"TELEGRAM_BOT_TOKEN": TOKEN, **env})
    with pytest.raises(ConfigError) as err:
        create_app(settings.with_(secret_key="k"))
    assert all(name in str(err.value) for name in names)


def test_allowed_users_setting_and_matching() -> None:
    s = Settings.from_mapping({"HILO_TELEGRAM_ALLOWED_USERS": " 7, @Bob ,carol,, "})
    assert s.telegram_allowed_users == ("7", "@Bob", "carol")
    allow = Allowlist(s.telegram_allowed_users)
    user = Message.de_json(FakeBotApi().message("hi", user_id=8, username="BOB"), None).from_user
    assert user is not None and allow.allows(user)
    stranger = Message.de_json(FakeBotApi().message("hi", user_id=9, username="dave"), None).from_user
    assert stranger is not None and not allow.allows(stranger) and Allowlist([]).allows(stranger)


def decide(data: dict[str, Any], allow: Allowlist | None = None) -> Any:
    return classify(Message.de_json(data, None), ME, allow or Allowlist([]))


def test_classify_private_group_and_content_rules() -> None:
    api = FakeBotApi()
    d = decide(api.message("hello", user_id=5, language_code="es", message_id=77))
    assert d.action == "turn" and d.lang == "es" and d.reply_to is None
    assert d.msg.surface == "telegram" and d.msg.sender == "5" and d.msg.external_id == "5:77"
    assert d.msg.conversation_ref is None and d.msg.language == "es"
    assert d.msg.metadata == {"chat_id": 5, "chat_type": "private", "username": "alice", "first_name": "Alice"}

    group: dict[str, Any] = {"chat_id": -100, "chat_type": "supergroup"}
    assert decide(api.message("just chatting", **group)).action == "ignore"
    text, entities = api.mention("what time is it?")
    d = decide(api.message(text, entities=entities, message_id=9, **group))
    assert d.action == "turn" and d.msg.text == "what time is it?" and d.reply_to == 9
    assert d.msg.conversation_ref == "group:-100" and d.msg.metadata["audience"] == "group"
    assert d.msg.external_id == "-100:9"
    assert decide(api.message("yes, you", reply_to_bot=True, **group)).action == "turn"
    other = [{"type": "mention", "offset": 0, "length": 9}]
    assert decide(api.message("@otherbot hi", entities=other, **group)).action == "ignore"
    assert decide(api.message("/help@otherbot", **group)).action == "ignore"
    assert decide(api.message(f"/help@{BOT_USERNAME}", **group)).action == "command"
    assert decide(api.message("/help", **group)).action == "command"

    video = {"file_id": "vd", "file_unique_id": "vd", "width": 9, "height": 9, "duration": 2}
    assert decide(api.message(None, video=video)).action == "non_text"
    d = decide(api.photo_update(None)["message"])  # a photo is a turn, seen or noted in it (tests/test_images.py)
    assert d.action == "turn" and d.msg.text == "[photo]" and d.msg.metadata["image"]["ref"] == "AgAD"
    d = decide(api.photo_update("what is this?")["message"])
    assert d.action == "turn" and d.msg.text == "[photo]\nwhat is this?" and d.msg.metadata["attachment"] == "photo"
    d = decide(api.message(None, voice={"file_id": "v", "file_unique_id": "v", "duration": 3}))
    assert d.action == "turn" and d.msg.text == "[voice note: 3 s]"  # transcribed in its turn (tests/test_voice.py)
    assert d.msg.metadata["voice"] == {"kind": "voice", "mime": "audio/ogg", "bytes": None, "duration_s": 3,
                                       "ref": "v", "placeholder": "[voice note: 3 s]", "caption": None}
    assert decide(api.message(None, new_chat_title="renamed", **group)).action == "ignore"
    bot_sender = api.message("hi")
    bot_sender["from"]["is_bot"] = True
    assert decide(bot_sender).action == "ignore"
    # the allowlist is checked before anything else is looked at
    assert decide(api.photo_update(None, user_id=9)["message"], Allowlist(["7"])).action == "refuse"


def test_a_group_mention_that_splits_a_character_names_no_one() -> None:
    # Telegram counts entity offsets in UTF-16 units: a length of 1 over U+10000 is half of its surrogate pair
    split = [{"type": "mention", "offset": 0, "length": 1}]
    message = FakeBotApi().message("\U00010000", entities=split, chat_id=-100, chat_type="group")
    assert decide(message).action == "ignore"


# -- sending, retried -------------------------------------------------------------------------------------

async def test_send_retries_transient_errors_and_gives_up_on_permanent_ones(bot_api: FakeBotApi) -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    policy = SendPolicy(attempts=3, sleep=record)
    api, files = api_urls(bot_api.base_url)
    async with Bot(TOKEN, base_url=api, base_file_url=files) as bot:
        bot_api.fail("sendMessage", 502)
        bot_api.fail("sendMessage", 429, retry_after=2)
        message, attempts = await send_with_retry(lambda: bot.send_message(1, "hi"), policy)
        assert attempts == 3 and message.text == "hi" and waits[1] == 2.0
        bot_api.fail("sendMessage", 403)
        with pytest.raises(SendFailed) as err:
            await send_with_retry(lambda: bot.send_message(1, "hi"), policy)
        assert err.value.attempts == 1 and "Forbidden" in str(err.value)
        bot_api.fail("sendMessage", 502, times=5)
        with pytest.raises(SendFailed) as err:
            await send_with_retry(lambda: bot.send_message(1, "hi"), policy)
        assert err.value.attempts == 3
    assert [s.text for s in bot_api.sent] == ["hi"]


async def test_a_retry_after_beyond_the_cap_gives_up_at_once(bot_api: FakeBotApi) -> None:
    waits: list[float] = []

    async def record(seconds: float) -> None:
        waits.append(seconds)

    api, files = api_urls(bot_api.base_url)
    async with Bot(TOKEN, base_url=api, base_file_url=files) as bot:
        bot_api.fail("sendMessage", 429, retry_after=61)  # the cap is 60 s: a person would wait too long
        with pytest.raises(SendFailed) as err:
            await send_with_retry(lambda: bot.send_message(1, "hi"), SendPolicy(sleep=record))
        assert err.value.attempts == 1 and "RetryAfter" in str(err.value)
        bot_api.fail("sendMessage", 429, retry_after=60)  # at the cap: waited
        _, attempts = await send_with_retry(lambda: bot.send_message(1, "hi"), SendPolicy(sleep=record))
    assert attempts == 2 and waits == [60.0] and [s.text for s in bot_api.sent] == ["hi"]


async def test_typing_is_repeated_until_the_reply_is_ready(bot_api: FakeBotApi) -> None:
    api, files = api_urls(bot_api.base_url)
    async with Bot(TOKEN, base_url=api, base_file_url=files) as bot:
        async with show_typing(bot, 5, every=0.05):
            await bot_api.wait_for(lambda: len(bot_api.calls_of("sendChatAction")) >= 3)
        count = len(bot_api.calls_of("sendChatAction"))
        await asyncio.sleep(0.15)
    assert len(bot_api.calls_of("sendChatAction")) == count  # stopped with the block
    assert {(c.params["chat_id"], c.params["action"]) for c in bot_api.calls_of("sendChatAction")} == {
        ("5", "typing")}


# -- the daemon, polling ----------------------------------------------------------------------------------

async def test_polling_one_update_one_reply_stored_with_its_delivery(tmp_path: Path, bot_api: FakeBotApi) -> None:
    async with running_daemon(tg_settings(tmp_path, bot_api)) as client:
        bot_api.enqueue(bot_api.text_update("hello hilo"))
        [reply] = await bot_api.wait_sent(1)
        assert reply.chat_id == 42 and "hello hilo" in reply.text and reply.reply_to is None
        data = await delivered(client, 1)
    assert messages(data) == [("user", "hello hilo"), ("assistant", reply.text)]
    assert data is not None and data["identities"][0]["external_user_id"] == "42"
    [delivery] = data["deliveries"]
    assert delivery["status"] == "sent" and delivery["provider_ref"] == str(reply.message_id)
    methods = [c.method for c in bot_api.calls]
    assert methods.index("sendChatAction") < methods.index("sendMessage")
    assert bot_api.calls_of("sendChatAction")[0].params["action"] == "typing"
    assert "deleteWebhook" in methods and not bot_api.webhook


async def test_polling_redelivery_after_restart_gets_no_second_reply(tmp_path: Path, bot_api: FakeBotApi) -> None:
    first = bot_api.text_update("only once please")
    async with running_daemon(tg_settings(tmp_path, bot_api)):
        bot_api.enqueue(first, first)  # the same update twice in one batch
        bot_api.enqueue(bot_api.text_update("barrier"))
        await bot_api.wait_sent(2)
    bot_api.enqueue(first)  # Telegram hands it out again (its confirmation was lost)
    async with running_daemon(tg_settings(tmp_path, bot_api)) as client:
        bot_api.enqueue(bot_api.text_update("after restart"))
        sent = await bot_api.wait_sent(3)
        data = await delivered(client, 3)
    assert len(bot_api.sent) == 3 and "after restart" in sent[2].text
    assert [c for r, c in messages(data) if r == "user"] == ["only once please", "barrier", "after restart"]


async def test_a_long_reply_arrives_as_ordered_parts(
    tmp_path: Path, bot_api: FakeBotApi, model_server: FakeModelServer,
) -> None:
    paragraphs = [f"Paragraph {i}. " + ("lorem ipsum dolor sit amet " * 40).strip() + "." for i in range(10)]
    long_text = "\n\n".join(paragraphs)
    assert len(long_text) >= 10_000
    model_server.enqueue(ok(long_text))
    settings = tg_settings(tmp_path, bot_api, HILO_MODEL="openai:m1", OPENAI_BASE_URL=model_server.base_url + "/v1")
    async with running_daemon(settings) as client:
        bot_api.enqueue(bot_api.text_update("tell me a lot"))
        data = await delivered(client, 4)
    sent = bot_api.sent
    assert len(sent) == 4 and all(len(s.text) <= 4096 for s in sent)
    assert "\n\n".join(s.text for s in sent) == long_text  # cut on paragraph breaks, in order
    assert [s.text.split(".")[0] for s in sent] == ["Paragraph 0", "Paragraph 3", "Paragraph 6", "Paragraph 9"]
    assert [(d["part"], d["parts"], d["status"], d["provider_ref"]) for d in data["deliveries"]] == [
        (i, 4, "sent", str(s.message_id)) for i, s in enumerate(sent, 1)]


async def test_a_429_from_telegram_is_honoured_and_the_reply_delivered(tmp_path: Path, bot_api: FakeBotApi) -> None:
    bot_api.fail("sendMessage", 429, retry_after=1)
    async with running_daemon(tg_settings(tmp_path, bot_api)) as client:
        bot_api.enqueue(bot_api.text_update("are you there?"))
        [reply] = await bot_api.wait_sent(1)
        data = await delivered(client, 1)
    send_calls = bot_api.calls_of("sendMessage")
    assert len(send_calls) == 2 and send_calls[1].at - send_calls[0].at >= 0.9
    assert "are you there?" in reply.text
    assert data is not None and data["deliveries"][0]["attempts"] == 2


async def test_a_send_that_finally_fails_is_recorded(tmp_path: Path, bot_api: FakeBotApi) -> None:
    bot_api.fail("sendMessage", 403)  # the person blocked the bot
    async with running_daemon(tg_settings(tmp_path, bot_api)) as client:
        bot_api.enqueue(bot_api.text_update("hi"))
        data = await delivered(client, 1)
    assert not bot_api.sent
    [delivery] = data["deliveries"]
    assert delivery["status"] == "failed" and "Forbidden" in delivery["error"] and delivery["provider_ref"] is None


async def test_five_quick_messages_of_one_chat_are_answered_in_order(
    tmp_path: Path, bot_api: FakeBotApi, model_server: FakeModelServer,
) -> None:
    # the first turn's model call is slow: later messages of the chat wait for it, another chat does not
    model_server.enqueue(slow(1.0))  # then "fake reply to: <message>" for every request
    settings = tg_settings(tmp_path, bot_api, HILO_MODEL="openai:m1", OPENAI_BASE_URL=model_server.base_url + "/v1")
    async with running_daemon(settings):
        bot_api.enqueue(*[bot_api.text_update(f"message {i}", user_id=42) for i in range(5)])
        await bot_api.wait_for(lambda: len(model_server.requests) >= 1)
        bot_api.enqueue(bot_api.text_update("other chat", user_id=43))
        await bot_api.wait_sent(6)
    order = [(s.chat_id, s.text) for s in bot_api.sent]
    assert [t for c, t in order if c == 42] == [f"fake reply to: message {i}" for i in range(5)]
    assert order[0] == (43, "fake reply to: other chat")  # another chat is not held up by a slow one


async def test_groups_answer_mentions_and_replies_each_sender_their_own(
    tmp_path: Path, bot_api: FakeBotApi,
) -> None:
    group: dict[str, Any] = {"chat_id": -1001, "chat_type": "supergroup"}
    async with running_daemon(tg_settings(tmp_path, bot_api)) as client:
        bot_api.enqueue(bot_api.text_update("hi, in private"))
        await bot_api.wait_sent(1)
        store = runtime(client).pipeline.store
        await store.remember(await store.identity_user("telegram", "42"), "private fact: my locker is 42", 5)
        text, entities = bot_api.mention("what do you know about lockers?")
        bot_api.enqueue(
            bot_api.text_update("nobody asked the bot", **group),
            bot_api.text_update(text, entities=entities, message_id=11, **group),
            bot_api.text_update("thanks!", user_id=43, username="bob", reply_to_bot=True, **group),
            bot_api.text_update("/memory", **group),
        )
        sent = (await bot_api.wait_sent(3, chat_id=-1001))  # /memory's answer is last: a chat's updates run in order
        alice, bob = await inspect(client, 42), await inspect(client, 43)
    assert len(bot_api.sent) == 4 and len(sent) == 3
    assert sent[0].reply_to == 11 and "what do you know about lockers?" in sent[0].text
    assert "locker is 42" not in sent[0].text  # private memory stays out of a group answer
    assert sent[2].text == catalog.t("cmd_private_only", "en", name="memory")
    assert [c for r, c in messages(alice) if r == "user"] == ["hi, in private", "what do you know about lockers?"]
    assert [c for r, c in messages(bob) if r == "user"] == ["thanks!"]
    assert alice is not None and [c["external_ref"] for c in alice["conversations"]] == [None, "group:-1001"]


async def test_allowlist_refuses_others_and_keeps_nothing(tmp_path: Path, bot_api: FakeBotApi) -> None:
    settings = tg_settings(tmp_path, bot_api, HILO_TELEGRAM_ALLOWED_USERS="42,@Bob")
    async with running_daemon(settings) as client:
        bot_api.enqueue(bot_api.text_update("let me in", user_id=7, username="mallory", language_code="es"))
        bot_api.enqueue(bot_api.text_update("/start", user_id=8, username="eve"))
        bot_api.enqueue(bot_api.text_update("hi", user_id=9, username="bob"))
        bot_api.enqueue(bot_api.text_update("hi", user_id=42, username=None))
        sent = await bot_api.wait_sent(4)
        assert await inspect(client, 7) is None and await inspect(client, 8) is None
        assert await inspect(client, 9) is not None and await inspect(client, 42) is not None
    by_chat = {s.chat_id: s.text for s in sent}
    assert by_chat[7] == catalog.t("telegram_not_allowed", "es")
    assert by_chat[8] == catalog.t("telegram_not_allowed", "en")
    assert by_chat[9].startswith("[echo") and by_chat[42].startswith("[echo")


async def test_non_text_edited_and_too_long_messages(tmp_path: Path, bot_api: FakeBotApi) -> None:
    async with running_daemon(tg_settings(tmp_path, bot_api, HILO_MAX_MESSAGE_CHARS="50")) as client:
        edited = bot_api.message("edited text")
        video = {"file_id": "vd", "file_unique_id": "vd", "width": 9, "height": 9, "duration": 2}
        bot_api.enqueue(
            bot_api.update(bot_api.message(None, video=video)),
            bot_api.update(edited, kind="edited_message"),
            bot_api.photo_update("what is in this photo?"),
            bot_api.text_update("x" * 60, language_code="es"),
        )
        sent = await bot_api.wait_sent(3)
        data = await delivered(client, 1)
    assert len(bot_api.sent) == 3
    assert sent[0].text == catalog.t("telegram_non_text", "en")
    assert "what is in this photo?" in sent[1].text
    assert sent[2].text == catalog.t("message_too_long", "es", length=60, limit=50)
    # the echo model reads text only: the caption and a note (tests/test_images.py)
    assert [c for r, c in messages(data) if r == "user"] == [
        "[photo: not seen, this model reads text only]\nwhat is in this photo?"]


async def test_all_models_down_sends_the_apology(
    tmp_path: Path, bot_api: FakeBotApi, model_server: FakeModelServer,
) -> None:
    model_server.script("m1", default=status(503))
    settings = tg_settings(tmp_path, bot_api, HILO_MODEL="openai:m1", HILO_MODEL_ATTEMPTS="1",
                           OPENAI_BASE_URL=model_server.base_url + "/v1")
    async with running_daemon(settings) as client:
        bot_api.enqueue(bot_api.text_update("hola", language_code="es"))
        [reply] = await bot_api.wait_sent(1)
        data = await delivered(client, 1)
    assert reply.text == catalog.t("model_unavailable", "es")
    assert messages(data) == [("user", "hola")]  # the person's message is kept
    assert data is not None and data["deliveries"][0]["status"] == "sent"


async def test_commands_start_memory_and_forget_with_confirmation(tmp_path: Path, bot_api: FakeBotApi) -> None:
    async with running_daemon(tg_settings(tmp_path, bot_api)) as client:
        bot_api.enqueue(bot_api.text_update("/start", language_code="es"), bot_api.text_update("remember me"),
                        bot_api.text_update("/memory"), bot_api.text_update("/forget"))
        sent = await bot_api.wait_sent(4)
        assert sent[0].text == catalog.t("cmd_start", "es")
        assert "messages 2" in sent[2].text and sent[3].text == catalog.t("cmd_forget_confirm", "en")
        assert await inspect(client) is not None
        bot_api.enqueue(bot_api.text_update("/forget yes"))
        sent = await bot_api.wait_sent(5)
        assert sent[4].text == catalog.t("cmd_forget_done", "en")
        assert await inspect(client) is None


async def test_remember_memory_and_forget_one_item_through_the_bot_api(tmp_path: Path, bot_api: FakeBotApi) -> None:
    async with running_daemon(tg_settings(tmp_path, bot_api)) as client:
        bot_api.enqueue(bot_api.text_update("/remember I work at Acme"),
                        bot_api.text_update("/remember mi perro se llama Rex", language_code="es"),
                        bot_api.text_update("/memory"))
        sent = await bot_api.wait_sent(3)
        store = runtime(client).pipeline.store
        uid = await store.identity_user("telegram", "42")
        rex, acme = await store.memories(uid)
        assert sent[0].text == catalog.t("cmd_remember_added", "en", id=acme.short_id)
        assert sent[1].text == catalog.t("cmd_remember_added", "es", id=rex.short_id)
        listed = [line for line in sent[2].text.splitlines() if line.startswith("- ")]
        assert listed == [f"- {rex.short_id}: mi perro se llama Rex", f"- {acme.short_id}: I work at Acme"]
        bot_api.enqueue(bot_api.text_update(f"/forget {acme.short_id}"))
        sent = await bot_api.wait_sent(4)
        assert sent[3].text == catalog.t("cmd_forget_one_done", "en", id=acme.short_id, content="I work at Acme")
        assert [m.id for m in await store.memories(uid)] == [rex.id]
        data = await inspect(client)
        assert data is not None and [m["content"] for m in data["memories"]] == ["mi perro se llama Rex"]


async def test_an_unexpected_error_gets_an_apology_not_silence(tmp_path: Path, bot_api: FakeBotApi) -> None:
    async with running_daemon(tg_settings(tmp_path, bot_api)) as client:
        async def broken(*args: Any, **kwargs: Any) -> Any:
            raise RuntimeError("a bug")

        runtime(client).pipeline.run = broken  # after the message is stored
        bot_api.enqueue(bot_api.text_update("hi", language_code="es"))
        [reply] = await bot_api.wait_sent(1)
    assert reply.text == catalog.t("internal_error", "es")


async def test_a_full_disk_keeps_the_message_in_the_journal_and_answers_it_when_the_disk_has_room(
    tmp_path: Path, bot_api: FakeBotApi,
) -> None:
    """SQLite really answering "database or disk is full" (a StoreError, not StoreUnavailable) on ingest: the
    update is journaled (and confirmed), the person told once that it is kept; once there is room it is stored
    and answered, before the message that came after it."""
    async with running_daemon(tg_settings(tmp_path, bot_api)) as client:
        async with disk_full(runtime(client).pipeline.store):
            bot_api.enqueue(bot_api.text_update(PAGE_SIZED_TEXT, language_code="es"))
            [kept] = await bot_api.wait_sent(1)
            assert kept.text == catalog.t("message_kept", "es")
            assert await inspect(client) is None  # nothing half-stored: no person, no message
        bot_api.enqueue(bot_api.text_update("and now?"))
        await bot_api.wait_for(lambda: any("You said: and now?" in m.text for m in bot_api.sent), timeout=30)
        data = await inspect(client)
    assert [text for role, text in messages(data) if role == "user"] == [PAGE_SIZED_TEXT, "and now?"]
    assert [role for role, _ in messages(data)].count("assistant") == 2
    texts = [m.text for m in bot_api.sent]
    assert texts[0] == catalog.t("message_kept", "es") and texts.count(texts[0]) == 1  # told once
    assert "You said: " + PAGE_SIZED_TEXT[:30] in texts[1] and "You said: and now?" in texts[-1]  # in order


# -- the daemon, webhook ----------------------------------------------------------------------------------

async def test_webhook_checks_the_secret_before_anything(tmp_path: Path, bot_api: FakeBotApi) -> None:
    async with running_daemon(tg_settings(tmp_path, bot_api, **webhook_env())) as client:
        assert bot_api.webhook["url"] == "https://hilo.example.com/webhooks/telegram"
        assert bot_api.webhook["secret_token"] == SECRET and bot_api.webhook["allowed_updates"] == ["message"]
        update = bot_api.text_update("let me in")
        assert await post_update(client, update, secret="wrong") == 403
        assert await post_update(client, update, secret=None) == 403
        assert await post_update(client, update, secret=SECRET + "x") == 403
        r = await client.post("/webhooks/telegram", content=b"not json", headers={
            "X-Telegram-Bot-Api-Secret-Token": "wrong"})
        assert r.status_code == 403
        assert await post_update(client, bot_api.text_update("barrier", user_id=99)) == 200
        [reply] = await bot_api.wait_sent(1)
        assert reply.chat_id == 99 and await inspect(client) is None  # nothing of the refused updates kept
        r = await client.post("/webhooks/telegram", content=b"not json", headers={
            "X-Telegram-Bot-Api-Secret-Token": SECRET})
        assert r.status_code == 400
    assert not bot_api.calls_of("getUpdates")


async def test_webhook_one_reply_per_update_also_across_restart(tmp_path: Path, bot_api: FakeBotApi) -> None:
    update = bot_api.text_update("webhook hello")
    async with running_daemon(tg_settings(tmp_path, bot_api, **webhook_env())) as client:
        assert await post_update(client, update) == 200
        assert await post_update(client, update) == 200  # Telegram redelivers
        [reply] = await bot_api.wait_sent(1)
        assert "webhook hello" in reply.text
    async with running_daemon(tg_settings(tmp_path, bot_api, **webhook_env())) as client:
        assert await post_update(client, update) == 200
        assert await post_update(client, bot_api.text_update("barrier")) == 200
        await bot_api.wait_sent(2)
        data = await delivered(client, 2)
    assert len(bot_api.sent) == 2
    assert [c for r, c in messages(data) if r == "user"] == ["webhook hello", "barrier"]


async def test_webhook_acknowledges_before_the_turn_keeps_order_and_drains_on_stop(
    tmp_path: Path, bot_api: FakeBotApi, model_server: FakeModelServer,
) -> None:
    model_server.enqueue(slow(0.5, ok("first")), ok("second"), ok("third"))
    settings = tg_settings(tmp_path, bot_api, HILO_MODEL="openai:m1", OPENAI_BASE_URL=model_server.base_url + "/v1",
                           **webhook_env())
    async with running_daemon(settings) as client:
        assert await post_update(client, bot_api.text_update("m0")) == 200
        assert not bot_api.sent  # acknowledged while its turn still waits for the (slow) model
        for i in (1, 2):
            assert await post_update(client, bot_api.text_update(f"m{i}")) == 200
    # the daemon stopped at once: its stop drained the acknowledged updates, in order
    assert [s.text for s in bot_api.sent] == ["first", "second", "third"]


# -- the "must show": `hilo serve` against the fake, then `hilo inspect` ------------------------------------

def _env(tmp_path: Path, api: FakeBotApi) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HILO_", "OPENAI_", "ANTHROPIC_", "TELEGRAM_", "TWILIO_"))}
    env.pop("DATABASE_URL", None)
    env.update(PYTHONPATH=str(REPO), TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_BASE_URL=api.base_url,
               HILO_DATABASE_URL=f"sqlite:///{tmp_path / 'hilo.db'}")
    return env


@asynccontextmanager
async def serve(tmp_path: Path, api: FakeBotApi) -> AsyncIterator[subprocess.Popen[str]]:
    port = free_port()
    proc = await asyncio.to_thread(
        subprocess.Popen, [sys.executable, "-m", "bot.cli", "serve", "--port", str(port)], cwd=tmp_path,
        env=_env(tmp_path, api), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    try:
        async with httpx.AsyncClient() as client:
            for _ in range(300):
                try:
                    if (await client.get(f"http://127.0.0.1:{port}/healthz", timeout=1)).status_code == 200:
                        break
                except httpx.TransportError:
                    await asyncio.sleep(0.05)
            else:
                raise AssertionError("hilo serve did not come up")
        yield proc
        proc.send_signal(signal.SIGTERM)
        assert await asyncio.to_thread(proc.wait, 20) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.wait(timeout=10)
        if proc.stdout:
            output = proc.stdout.read()
            proc.stdout.close()
            assert TOKEN not in output  # the bot token never reaches the logs


async def test_hilo_serve_then_hilo_inspect_shows_the_message_and_reply_once(
    tmp_path: Path, bot_api: FakeBotApi,
) -> None:
    update = bot_api.text_update("hello from telegram", user_id=777, username="zoe")
    async with serve(tmp_path, bot_api):
        bot_api.enqueue(update)
        [reply] = await bot_api.wait_sent(1, timeout=20)
    bot_api.enqueue(update)  # redelivered to the next process
    async with serve(tmp_path, bot_api):
        bot_api.enqueue(bot_api.text_update("/help", user_id=777))
        await bot_api.wait_sent(2, timeout=20)
    out = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-m", "bot.cli", "inspect", "--user", "telegram:777", "--json"],
        cwd=tmp_path, env=_env(tmp_path, bot_api), capture_output=True, text=True, timeout=30,
    )
    assert out.returncode == 0, out.stderr
    data = json.loads(out.stdout)
    assert messages(data) == [("user", "hello from telegram"), ("assistant", reply.text)]
    assert len(bot_api.sent) == 2 and bot_api.sent[1].text == catalog.t("cmd_help", "en")
    # the reply, and the answer to /help (a command's answer to a known person goes through the outbox too)
    assert [(d["status"], d["provider_ref"], d["message_id"]) for d in data["deliveries"]] == [
        ("sent", str(reply.message_id), data["conversations"][0]["messages"][1]["id"]),
        ("sent", str(bot_api.sent[1].message_id), None)]


async def test_a_refused_token_stops_the_start_saying_what_to_check(tmp_path: Path, bot_api: FakeBotApi) -> None:
    settings = tg_settings(tmp_path, bot_api, TELEGRAM_BOT_TOKEN="999:not-the-token")
    surface = TelegramSurface(settings)
    with pytest.raises(ConfigError, match="TELEGRAM_BOT_TOKEN") as err:
        await surface.start(Runtime(settings, None, None, TaskSet()))  # type: ignore[arg-type]
    assert "not-the-token" not in str(err.value) and err.value.__suppress_context__  # no traceback shows it
    await surface.stop()
    gc.collect()


async def test_a_command_in_a_photo_caption_is_answered_as_a_command(tmp_path: Path, bot_api: FakeBotApi) -> None:
    async with running_daemon(tg_settings(tmp_path, bot_api)) as client:
        bot_api.enqueue(bot_api.photo_update("/help"))
        [reply] = await bot_api.wait_sent(1)
        assert reply.text == catalog.t("cmd_help", "en")
        assert await inspect(client) is None  # a command is not a turn: nothing stored


async def test_the_webhook_answers_503_when_neither_the_database_nor_the_full_journal_can_keep_the_update(
    tmp_path: Path, bot_api: FakeBotApi, capsys: pytest.CaptureFixture[str],
) -> None:
    """Telegram retries a non-2xx: nothing is acknowledged that nothing keeps."""
    settings = tg_settings(tmp_path, bot_api, HILO_JOURNAL_MAX_BYTES="4096", **webhook_env())
    async with running_daemon(settings) as client:
        update = bot_api.text_update(PAGE_SIZED_TEXT)  # a journal line over 4,096 bytes
        async with disk_full(runtime(client).pipeline.store):
            assert await post_update(client, update) == 503
            assert "journal.full" in "".join(capsys.readouterr())
        assert await post_update(client, update) == 200  # Telegram's retry, once there is room
        await bot_api.wait_sent(1)
        data = await delivered(client, 1)
    assert messages(data)[0] == ("user", PAGE_SIZED_TEXT)
    assert not (tmp_path / "inbound.journal").exists()
