"""Reminders (issue 15 item 5): scheduled by the model's `remind` call (through the real SDKs against the fake
provider), stored, and delivered exactly once at their time on the person's last-active surface through the
outbox: across a daemon restart and two processes sharing the database (real `hilo serve` processes, the fake
Telegram Bot API), inside WhatsApp's 24-hour window or as the configured template outside it (the fake Twilio API),
on the web as a stored message; listed and cancelled by the person; forgotten with them; never another's."""

from __future__ import annotations

import asyncio
import json
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from zoneinfo import ZoneInfo

import httpx
import pytest

from bot import reminders
from bot.config import Settings
from bot.outbox import Outbox, with_route
from bot.pipeline import Pipeline
from kernel import catalog
from kernel.types import InboundMessage
from memory.open import open_store
from tests.backends import TestClock
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.loopback import free_port
from tests.fakes.model_server import FakeModelServer, calls_tool, ok
from tests.fakes.postgres import SERVER
from tests.fakes.serve_process import ServeProcess
from tests.test_outbox import sending
from tests.test_tools import MODELS, tool_results
from tests.waiting import wait_until

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api
__all__ = ["sending"]  # the fixture: an Outbox with the real Telegram and Twilio transports to the fakes
TEMPLATE = "HX" + "0123456789abcdef" * 2

SECRET = "tg-secret_for-the-test"
PERSON = 4242


def serve_env(url: str, bot: fake_telegram.FakeBotApi, model: FakeModelServer) -> dict[str, str]:
    return {
        "HILO_DATABASE_URL": url, "HILO_SECRET_KEY": "k" * 43, "HILO_MODEL": "openai:m1", "OPENAI_API_KEY": "x",
        "OPENAI_BASE_URL": model.base_url + "/v1", "HILO_PUBLIC_URL": "https://bot.example.com",
        "TELEGRAM_BOT_TOKEN": fake_telegram.TOKEN, "TELEGRAM_API_BASE_URL": bot.base_url,
        "HILO_TELEGRAM_MODE": "webhook", "TELEGRAM_WEBHOOK_SECRET": SECRET, "HILO_TOOLS": "remind,list_reminders",
        "HILO_REMINDER_SECONDS": "1", "HILO_EMBEDDER": "none",
    }


def start(tmp_path: Path, env: dict[str, str]) -> tuple[ServeProcess, str]:
    port = free_port()
    daemon = ServeProcess(tmp_path, env, args=("--port", str(port)))
    daemon.wait_started()
    return daemon, f"http://127.0.0.1:{port}"


async def stop(*daemons: ServeProcess) -> None:
    """SIGTERM (as PM2 and systemd stop it); each must exit cleanly."""
    for d in daemons:
        d.terminate()
    statuses = [await asyncio.to_thread(d.wait, 60) for d in daemons]
    for d in daemons:
        d.kill()  # closes its pipes
    assert statuses == [0] * len(daemons)


def texts_to(bot: fake_telegram.FakeBotApi, chat_id: int) -> list[str]:
    return [s.text for s in bot.sent_to(chat_id)]


@pytest.mark.parametrize("database", ["sqlite", "postgres"])
async def test_a_reminder_set_by_a_tool_call_is_delivered_once_after_a_restart(
    database: str, tmp_path: Path, bot_api: fake_telegram.FakeBotApi, model_server: FakeModelServer,
) -> None:
    url = SERVER.create_database() if database == "postgres" else f"sqlite:///{tmp_path / 'hilo.db'}"
    env = serve_env(url, bot_api, model_server)
    due = datetime.now(UTC) + timedelta(hours=1)
    model_server.script("m1", [calls_tool("remind", {"text": "call the dentist", "at": due.isoformat()}),
                               ok("I will remind you.")])
    first, base = start(tmp_path, env)
    try:
        async with httpx.AsyncClient(base_url=base, timeout=30) as client:
            r = await client.post("/webhooks/telegram", json=bot_api.text_update(
                "remind me to call the dentist in an hour", user_id=PERSON),
                headers={"X-Telegram-Bot-Api-Secret-Token": SECRET})
            assert r.status_code == 200
        await wait_until(lambda: texts_to(bot_api, PERSON) == ["I will remind you."], "the turn's answer")
    finally:
        await stop(first)
    [result] = tool_results(model_server.requests[1])
    assert result["content"].startswith("reminder r1 set for ")
    # the daemon was down when the reminder fell due: its time is moved into the past while nothing runs
    store = open_store(url)
    await store.open()
    try:
        uid = await store.identity_user("telegram", str(PERSON))
        assert uid is not None
        [pending] = await store.reminders(uid)
        assert (pending.text, abs((pending.due_at - due).total_seconds()) < 1) == ("call the dentist", True)
        await store._tx("write", lambda db: db.run("UPDATE reminders SET due_at = $1",
                                                   db.ts(db.clock() - timedelta(seconds=1))))
        # two processes share the database after the restart: one of them delivers it
        second, _ = start(tmp_path, env)
        third, _ = start(tmp_path, env)
        try:
            wanted = catalog.t("reminder", "en", text="call the dentist")
            await wait_until(lambda: wanted in texts_to(bot_api, PERSON), "the reminder delivered", seconds=60)
            # a second reminder, due now, delivered too: by then both processes looked for due ones again
            await store.add_reminder(uid, None, "water the plants", store.clock(), 50)
            later = catalog.t("reminder", "en", text="water the plants")
            await wait_until(lambda: later in texts_to(bot_api, PERSON), "the second reminder", seconds=60)
        finally:
            await stop(second, third)
        assert texts_to(bot_api, PERSON) == ["I will remind you.", wanted, later]
        assert await store.reminders(uid) == []
        # the reminder is hilo's message in the person's history, so later turns see it was delivered
        [conversation] = await store.conversations(uid)
        shown = [(m.role, m.content) for m in await store.messages(uid, conversation.id)]
        assert shown[-2:] == [("assistant", wanted), ("assistant", later)]
    finally:
        await store.close()


@pytest.mark.parametrize("model", MODELS)
async def test_the_tools_set_list_and_cancel_a_persons_own_reminders(
    store: Any, model_server: FakeModelServer, job_chain: Any, model: str,
) -> None:
    settings, chain = job_chain({"HILO_MODEL": model, "HILO_TOOLS": "all"})
    p = Pipeline(settings, store, chain)
    other = await store.identity_user("telegram", "7", create=True)
    theirs = await store.add_reminder(other, None, "the other person's secret", store.clock() + timedelta(days=1), 50)
    uid = await store.identity_user("telegram", "42", create=True)
    await store.set_person_zone(uid, "Europe/Madrid")
    tomorrow = (datetime.now(ZoneInfo("Europe/Madrid")) + timedelta(days=1)).replace(hour=9, minute=0, second=0,
                                                                                    microsecond=0)
    name = model.split(":", 1)[1]
    model_server.script(name, [
        calls_tool("remind", {"text": "too late", "at": "2020-01-01T10:00"}),
        calls_tool("remind", {"text": "call the dentist", "at": tomorrow.replace(tzinfo=None).isoformat()}),
        calls_tool("remind", {"text": "stretch", "in_minutes": 30}),
        calls_tool("remind", {"text": "neither"}),
        ok("Done."),
        calls_tool("list_reminders", {}), ok("Two."),
        calls_tool("cancel_reminder", {"reminder": "r3"}),
        calls_tool("cancel_reminder", {"reminder": theirs.short_id}), ok("Cancelled."),
    ])
    for i, text in enumerate(["remind me of things", "what reminders do I have?", "cancel the stretching"]):
        await p.handle(InboundMessage(surface="telegram", sender="42", external_id=f"t{i}", text=text))
    said = [r["content"] for request in model_server.requests for r in tool_results(request)]
    first = said[0]
    assert first.startswith("error: that time has passed: it is ") and first.endswith(" Europe/Madrid now")
    assert f"reminder r2 set for {tomorrow:%Y-%m-%d} 09:00 ({tomorrow:%A}) Europe/Madrid" in said
    assert any(s.startswith("reminder r3 set for ") for s in said)
    assert "error: give the time either as at or as in_minutes, one of them" in said
    listing = next(s for s in said if s.startswith("r3: ")).splitlines()  # soonest first
    assert len(listing) == 2 and listing[0].endswith(" Europe/Madrid: stretch")
    assert listing[1] == f"r2: {tomorrow:%Y-%m-%d} 09:00 ({tomorrow:%A}) Europe/Madrid: call the dentist"
    assert "cancelled r3: stretch" in said
    assert f"no pending reminder {theirs.short_id}" in said  # another person's id is nobody's here
    [left] = await store.reminders(uid)
    assert (left.text, left.due_at) == ("call the dentist", tomorrow.astimezone(UTC))
    assert [r.text for r in await store.reminders(other)] == ["the other person's secret"]
    assert "secret" not in json.dumps([r.body for r in model_server.requests])


async def person_on(store: Any, surface: str, sender: str, lang: str | None = None) -> int:
    msg = InboundMessage(surface=surface, sender=sender, external_id=f"{surface}-{uuid.uuid4().hex}", text="hello",
                         language=lang, received_at=store.clock())
    if surface != "web":  # Telegram and WhatsApp messages name where their reply goes
        msg = with_route(msg, sender)
    turn = await store.ingest(msg, 1)
    assert turn is not None
    return int(turn.user_id)


def settings(template: str = "") -> Settings:
    return Settings.from_mapping({"HILO_WHATSAPP_REMINDER_TEMPLATE": template} if template else {})


async def test_whatsapp_inside_the_window_outside_it_the_template_else_another_surface_or_failed(
    store: Any, clock: TestClock, sending: Outbox, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    ben = await person_on(store, "whatsapp", "+34600000002")
    dan = await person_on(store, "web", "visitor-dan")
    dan_wa = await store.link_identity("web:visitor-dan", "whatsapp", "+34600000004", "test")  # one person
    await person_on(store, "whatsapp", "+34600000005")  # eve
    await store.ingest(with_route(InboundMessage(surface="whatsapp", sender="+34600000004", external_id="wa-dan",
                                                 text="hola", received_at=store.clock()), "+34600000004"), 1)
    clock.advance(25 * 3600)  # ben, dan and eve wrote on WhatsApp over 24 hours ago
    ana = await person_on(store, "whatsapp", "+34600000001", lang="es")
    for uid in (ana, ben):
        await store.add_reminder(uid, None, f"pay the rent, {uid}", clock(), 50)
    assert await reminders.deliver_due(store, sending, settings(TEMPLATE)) == 2
    await twilio_api.wait_for(2)
    by_to = {r.to: r.form for r in twilio_api.sent}
    assert by_to["whatsapp:+34600000001"]["Body"] == catalog.t("reminder", "es", text=f"pay the rent, {ana}")
    assert "ContentSid" not in by_to["whatsapp:+34600000001"]
    outside = by_to["whatsapp:+34600000002"]
    assert (outside["ContentSid"], json.loads(outside["ContentVariables"])) == (TEMPLATE, {"1": f"pay the rent, {ben}"})
    assert "Body" not in outside
    # without a template: dan's reminder goes to his web conversation (the widget shows it), eve's fails
    assert dan_wa == dan
    eve = await store.identity_user("whatsapp", "+34600000005")
    for uid in (dan, eve):
        await store.add_reminder(uid, None, "see the doctor", clock(), 50)
    assert await reminders.deliver_due(store, sending, settings()) == 2
    assert len(twilio_api.requests) == 2  # nothing more was sent
    web = next(c for c in await store.conversations(dan) if c.surface == "web")
    assert [m.content for m in await store.messages(dan, web.id)][-1] == catalog.t("reminder", "en",
                                                                                    text="see the doctor")
    exported = await store.export("whatsapp:+34600000005")
    assert exported is not None
    [failed] = exported["tables"]["reminders"]
    assert (failed["status"], failed["error"]) == (
        "failed", "whatsapp: outside the 24-hour window, and no HILO_WHATSAPP_REMINDER_TEMPLATE")
    assert await reminders.deliver_due(store, sending, settings()) == 0  # nothing is due twice
    counts = await store.erase("whatsapp:+34600000005")
    assert counts is not None and counts["reminders"] == 1


async def test_a_reminder_never_goes_to_a_group_the_person_wrote_in_last(
    store: Any, clock: TestClock, sending: Outbox, bot_api: fake_telegram.FakeBotApi,
) -> None:
    uid = await person_on(store, "telegram", "42")  # their private chat with hilo
    in_group = InboundMessage(surface="telegram", sender="42", external_id="tg-group-1", text="@hilo hi all",
                              conversation_ref="group:-100", metadata={"audience": "group"},
                              received_at=store.clock())
    await store.ingest(with_route(in_group, "-100"), 1)  # later, in a group: its route is the group's chat
    await store.add_reminder(uid, None, "my private appointment", clock(), 50)
    assert await reminders.deliver_due(store, sending, settings()) == 1
    [sent] = await bot_api.wait_sent(1)
    assert (sent.chat_id, sent.text) == (42, catalog.t("reminder", "en", text="my private appointment"))
