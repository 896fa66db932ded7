"""/readyz beyond the database (issue 13 item 1): each enabled surface alive (Telegram's polling loop or its webhook
registered, Twilio's credentials accepted), each model's circuit, the outbox's backlog; 503 naming what fails, and
/healthz stays 200 whatever they say. The database going and coming back: tests/test_store_file_serve.py (a deleted
SQLite file) and tests/test_store_down_serve.py (Postgres stopped)."""

from __future__ import annotations

import asyncio
import sqlite3
from contextlib import closing
from pathlib import Path
from typing import Any

import httpx

from bot.config import Settings
from bot.models.factory import build_chain
from bot.retry import RetryPolicy
from kernel.types import Outgoing
from memory.open import open_store
from surfaces.telegram import TelegramSurface
from surfaces.whatsapp import WhatsAppSurface
from tests.backends import TestClock
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.daemon import running_daemon
from tests.fakes.model_server import FakeModelServer, ok, status
from tests.fakes.telegram_api import TOKEN, FakeBotApi

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api


def settings_for(tmp_path: Path, **env: str) -> Settings:
    return Settings.from_mapping({"HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}",
                                  "HILO_SECRET_KEY": "test-secret", **env})


async def ready(client: httpx.AsyncClient) -> tuple[int, dict[str, Any]]:
    r = await client.get("/readyz")
    assert (await client.get("/healthz")).status_code == 200  # a failing check never fails /healthz
    if r.status_code == 503:
        assert r.headers["retry-after"].isdigit()
    return r.status_code, r.json()


def failing(body: dict[str, Any]) -> list[str]:
    return sorted(name for name, check in body["checks"].items() if not check["ok"])


async def test_every_check_is_there_and_ready_on_a_fresh_daemon(tmp_path: Path) -> None:
    async with running_daemon(settings_for(tmp_path)) as client:
        code, body = await ready(client)
    assert code == 200 and body["ready"] is True, body
    assert body["checks"] == {
        "database": {"ok": True}, "models": {"ok": True, "circuits": {"echo": "closed"}},
        "outbox": {"ok": True, "pending": 0, "oldest_s": 0.0, "max_age_s": 900.0},
    }


async def test_telegram_polling_loop_down_is_not_ready(tmp_path: Path, bot_api: FakeBotApi) -> None:
    settings = settings_for(tmp_path, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_BASE_URL=bot_api.base_url)
    telegram = TelegramSurface(settings, poll_timeout=0)
    async with running_daemon(settings, surfaces=[telegram]) as client:
        code, body = await ready(client)
        assert code == 200 and body["checks"]["telegram"] == {"ok": True, "mode": "polling", "polling": "polling"}
        assert telegram._poller is not None and telegram._poller._task is not None
        task = telegram._poller._task
        task.cancel()  # the loop ends (as a bug escaping it would end it)
        await asyncio.gather(task, return_exceptions=True)
        code, body = await ready(client)
    assert code == 503 and failing(body) == ["telegram"], body
    assert body["checks"]["telegram"] == {"ok": False, "mode": "polling", "error": "the polling loop is not running"}


async def test_telegram_webhook_not_registered_is_not_ready(tmp_path: Path, bot_api: FakeBotApi) -> None:
    settings = settings_for(tmp_path, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_BASE_URL=bot_api.base_url,
                            HILO_TELEGRAM_MODE="webhook", TELEGRAM_WEBHOOK_SECRET="s3cret",
                            HILO_PUBLIC_URL="https://hilo.example.com")
    async with running_daemon(settings) as client:
        assert bot_api.webhook["url"] == "https://hilo.example.com/webhooks/telegram"
        # another deployment of the same bot, started in polling mode, deletes the webhook
        async with httpx.AsyncClient() as other:
            await other.post(f"{bot_api.base_url}/bot{TOKEN}/deleteWebhook")
        code, body = await ready(client)
        assert bot_api.calls_of("getWebhookInfo"), "the webhook was not asked about"
    assert code == 503 and failing(body) == ["telegram"], body
    assert body["checks"]["telegram"]["error"] == "the webhook is not registered at HILO_PUBLIC_URL"


async def test_telegram_webhook_registered_is_ready(tmp_path: Path, bot_api: FakeBotApi) -> None:
    settings = settings_for(tmp_path, TELEGRAM_BOT_TOKEN=TOKEN, TELEGRAM_API_BASE_URL=bot_api.base_url,
                            HILO_TELEGRAM_MODE="webhook", TELEGRAM_WEBHOOK_SECRET="s3cret",
                            HILO_PUBLIC_URL="https://hilo.example.com")
    async with running_daemon(settings) as client:
        code, body = await ready(client)
        code_again, _ = await ready(client)
        asked = len(bot_api.calls_of("getWebhookInfo"))
    assert (code, code_again) == (200, 200), body
    assert body["checks"]["telegram"] == {"ok": True, "mode": "webhook", "pending_updates": 0}
    assert asked == 1, "the second /readyz asked Telegram again instead of using the kept answer"


def _whatsapp_settings(tmp_path: Path, twilio: fake_twilio.FakeTwilioApi, token: str) -> Settings:
    return settings_for(tmp_path, HILO_PUBLIC_URL="https://bot.example.com", TWILIO_ACCOUNT_SID=twilio.account_sid,
                        TWILIO_AUTH_TOKEN=token, TWILIO_WHATSAPP_NUMBER="whatsapp:+14155238886",
                        TWILIO_API_BASE_URL=twilio.base_url)


async def test_twilio_credentials_refused_are_not_ready(tmp_path: Path,
                                                        twilio_api: fake_twilio.FakeTwilioApi) -> None:
    async with running_daemon(_whatsapp_settings(tmp_path, twilio_api, "not-the-token")) as client:
        code, body = await ready(client)
        await ready(client)
    assert code == 503 and failing(body) == ["whatsapp"], body
    assert body["checks"]["whatsapp"] == {"ok": False, "error": "Twilio refused the credentials (HTTP 401)"}
    assert twilio_api.account_fetches == 1, "asked once at start, kept"
    assert "not-the-token" not in str(body)


async def test_twilio_credentials_accepted_are_ready_and_a_suspended_account_is_not(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    settings = _whatsapp_settings(tmp_path, twilio_api, twilio_api.auth_token)
    surface = WhatsAppSurface(settings)
    async with running_daemon(settings, surfaces=[surface]) as client:
        code, body = await ready(client)
        assert code == 200 and body["checks"]["whatsapp"] == {"ok": True, "account": "active"}, body
        twilio_api.account_status = "suspended"
        await surface.account.check()  # what the next start would find
        code, body = await ready(client)
    assert code == 503 and body["checks"]["whatsapp"]["error"] == "the Twilio account is suspended"


async def test_an_open_circuit_on_a_fallback_is_reported_and_every_circuit_open_is_not_ready(
    tmp_path: Path, model_server: FakeModelServer,
) -> None:
    settings = settings_for(tmp_path, OPENAI_API_KEY="sk-test", OPENAI_BASE_URL=model_server.base_url + "/v1",
                            HILO_MODEL="openai:model-a", HILO_FALLBACK_MODELS="openai:model-b")
    chain = build_chain(settings, failure_threshold=1, policy=RetryPolicy(attempts=1))
    model_server.script("model-a", [status(503)])
    model_server.script("model-b", [ok("from b"), status(503)])
    try:
        async with running_daemon(settings, chain=chain) as client:
            r = await client.post("/api/messages", json={"text": "first"})
            assert r.json()["reply"] == "from b"  # the fallback answered; the primary's circuit opened
            code, body = await ready(client)
            assert code == 200, body
            assert body["checks"]["models"] == {"ok": True, "circuits": {"openai:model-a": "open",
                                                                         "openai:model-b": "closed"}}
            r = await client.post("/api/messages", json={"text": "second"}, headers={
                "authorization": f"Bearer {r.json()['session']}"})
            assert r.json()["status"] == "failed"  # the primary skipped, the fallback failed: both open
            code, body = await ready(client)
    finally:
        await chain.aclose()
    assert code == 503 and failing(body) == ["models"], body
    assert body["checks"]["models"] == {"ok": False, "error": "every model's circuit is open",
                                        "circuits": {"openai:model-a": "open", "openai:model-b": "open"}}


async def test_an_outbox_part_older_than_the_bound_is_not_ready(tmp_path: Path) -> None:
    clock = TestClock()
    settings = settings_for(tmp_path, HILO_READY_OUTBOX_AGE="120")
    store = open_store(settings.database_url, clock=clock)
    try:
        async with running_daemon(settings, store=store) as client:
            assert (await client.post("/api/messages", json={"text": "hello"})).status_code == 200
            with closing(sqlite3.connect(tmp_path / "hilo.db")) as db:
                [(user_id,)] = db.execute("SELECT id FROM users").fetchall()
            # a part for a surface that does not run here: nothing sends it
            await store.enqueue(user_id, None, Outgoing("telegram", "42", ("queued",), None))
            code, body = await ready(client)
            assert code == 200 and body["checks"]["outbox"]["pending"] == 1, body
            clock.advance(121)  # the store's clock: the part's age, and what the check's kept answer is timed by
            code, body = await ready(client)
    finally:
        await store.close()
    assert code == 503 and failing(body) == ["outbox"], body
    outbox = body["checks"]["outbox"]
    assert outbox["pending"] == 1 and outbox["oldest_s"] > 120 and outbox["max_age_s"] == 120.0
