"""Bad input that costs too much: bodies streamed past the cap, and full-length Telegram messages.

The real daemon under uvicorn on 127.0.0.1 with every surface that reads a body: the web API, the Telegram
webhook (python-telegram-bot against the fake Bot API) and the Twilio webhooks (the fake Twilio API).
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest

from bot.config import Settings
from kernel import catalog
from surfaces.telegram import WEBHOOK_PATH as TELEGRAM_PATH
from surfaces.whatsapp import STATUS_PATH, WEBHOOK_PATH
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.chunked import chunked_upload
from tests.fakes.daemon import running_daemon
from tests.fakes.telegram_api import TOKEN, FakeBotApi

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api

SECRET = "s3cret_webhook-token"
STREAMED = 64 * 1024 * 1024  # what each chunked upload would send in all
#: What may be in flight past the cap when the answer comes: socket buffers on both sides. Reading the whole
#: body first (the defect) answers only after all STREAMED bytes.
IN_FLIGHT = 16 * 1024 * 1024


def all_surfaces(tmp_path: Path, api: FakeBotApi, twilio: fake_twilio.FakeTwilioApi, **env: str) -> Settings:
    return Settings.from_mapping({
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "test-secret",
        "HILO_PUBLIC_URL": "https://bot.example.com",
        "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": api.base_url, "HILO_TELEGRAM_MODE": "webhook",
        "TELEGRAM_WEBHOOK_SECRET": SECRET,
        "TWILIO_ACCOUNT_SID": twilio.account_sid, "TWILIO_AUTH_TOKEN": twilio.auth_token,
        "TWILIO_WHATSAPP_NUMBER": "whatsapp:+14155238886", "TWILIO_API_BASE_URL": twilio.base_url, **env,
    })


@pytest.fixture
async def daemon(tmp_path: Path, bot_api: FakeBotApi,
                 twilio_api: fake_twilio.FakeTwilioApi) -> AsyncIterator[httpx.AsyncClient]:
    async with running_daemon(all_surfaces(tmp_path, bot_api, twilio_api)) as client:
        yield client


@pytest.mark.parametrize(("path", "headers"), [
    ("/api/messages", {}),
    ("/api/messages/stream", {}),
    (TELEGRAM_PATH, {"x-telegram-bot-api-secret-token": SECRET}),
    (WEBHOOK_PATH, {"x-twilio-signature": "c2lnbmVk"}),
    (STATUS_PATH, {"x-twilio-signature": "c2lnbmVk"}),
])
async def test_a_streamed_body_is_refused_as_soon_as_it_passes_the_cap(
    daemon: httpx.AsyncClient, path: str, headers: dict[str, str],
) -> None:
    url = httpx.URL(str(daemon.base_url))
    assert url.host and url.port
    upload = await chunked_upload(url.host, url.port, path, STREAMED, headers=headers)
    assert upload.status == 413, upload
    assert upload.sent_at_answer < IN_FLIGHT, (
        f"the 413 came after {upload.sent_at_answer:,} of {upload.total:,} bytes: the body was read past the cap")
    assert (await daemon.get("/healthz")).status_code == 200  # and the daemon is fine


async def test_a_full_length_telegram_message_is_answered(tmp_path: Path, bot_api: FakeBotApi) -> None:
    text = ("All work and no play makes Jack a dull boy. " * 100)[:4096]
    assert len(text) == 4096  # Telegram's own maximum
    settings = Settings.from_mapping({
        "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": bot_api.base_url,
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "test-secret",
    })
    async with running_daemon(settings):
        bot_api.enqueue(bot_api.text_update(text))
        sent = await bot_api.wait_sent(1, timeout=20)
    too_long = catalog.t("message_too_long", "en", length=4096, limit=settings.max_message_chars)
    assert sent[0].text != too_long, sent[0].text
    assert sent[0].text.startswith("[echo"), sent[0].text
