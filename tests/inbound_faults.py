"""Helpers of the inbound fault-injection tests (tests/test_inbound_faults.py): a real `hilo serve` with the
Telegram webhook and WhatsApp on, deliveries built and posted as Telegram and Twilio post them, and the count
of what the fakes were sent."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
from twilio.request_validator import RequestValidator

from tests.fakes import twilio_api as fake_twilio
from tests.fakes.telegram_api import TOKEN, FakeBotApi

SECRET = "s3cret_webhook-token"
NUMBER = "whatsapp:+14155238886"


def serve_env(tmp_path: Path, port: int, bot_api: FakeBotApi, twilio: fake_twilio.FakeTwilioApi,
              **extra: str) -> dict[str, str]:
    return {
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "k" * 43,
        "HILO_PUBLIC_URL": f"http://127.0.0.1:{port}", "HILO_DATA_DIR": str(tmp_path / "data"),
        "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": bot_api.base_url, "HILO_TELEGRAM_MODE": "webhook",
        "TELEGRAM_WEBHOOK_SECRET": SECRET, "TWILIO_ACCOUNT_SID": twilio.account_sid,
        "TWILIO_AUTH_TOKEN": twilio.auth_token, "TWILIO_WHATSAPP_NUMBER": NUMBER,
        "TWILIO_API_BASE_URL": twilio.base_url, **extra,
    }


@dataclass(frozen=True)
class Delivery:
    """One webhook request as the platform sends it (and sends again)."""

    surface: str
    who: str  # Telegram chat id / WhatsApp number
    text: str
    body: Any

    async def post(self, client: httpx.AsyncClient, base: str, polling: FakeBotApi | None = None) -> int | None:
        """Its HTTP status, or None when the connection broke (the daemon died) before an answer. With
        `polling`, a Telegram update is queued on the fake Bot API instead (a new update_id: the old one is
        confirmed), and 200 means queued."""
        if polling is not None and self.surface == "telegram":
            polling.enqueue(polling.update(self.body["message"]))
            return 200
        try:
            if self.surface == "telegram":
                r = await client.post(base + "/webhooks/telegram", json=self.body,
                                      headers={"x-telegram-bot-api-secret-token": SECRET})
            else:
                path = "/webhooks/whatsapp"
                signature = RequestValidator(fake_twilio.AUTH_TOKEN).compute_signature(base + path, self.body)
                r = await client.post(base + path, content=urlencode(self.body), headers={
                    "content-type": "application/x-www-form-urlencoded", "x-twilio-signature": signature})
        except httpx.TransportError:
            return None
        return r.status_code


def telegram(bot_api: FakeBotApi, n: int, text: str, **kw: Any) -> Delivery:
    update = bot_api.text_update(text, user_id=1000 + n, **kw)
    return Delivery("telegram", str(1000 + n), text, update)


def telegram_update(update: dict[str, Any], text: str = "") -> Delivery:
    return Delivery("telegram", str(update["message"]["chat"]["id"]), text, update)


def whatsapp(n: int, text: str, sid: str | None = None, **extra: str) -> Delivery:
    sender = f"+3460000{n:04d}"
    sid = sid or f"SM{n:032x}"
    form = {"MessageSid": sid, "SmsMessageSid": sid, "AccountSid": fake_twilio.ACCOUNT_SID,
            "From": f"whatsapp:{sender}", "To": NUMBER, "Body": text, "NumMedia": "0", "ProfileName": "Ana",
            "WaId": sender[1:], **extra}
    return Delivery("whatsapp", sender, text, form)


def sent(bot_api: FakeBotApi, twilio: fake_twilio.FakeTwilioApi) -> list[tuple[str, str, str]]:
    """(surface, recipient, text) of everything the daemon sent, in order per fake."""
    return ([("telegram", str(s.chat_id), s.text) for s in bot_api.sent]
            + [("whatsapp", s.to.removeprefix("whatsapp:"), s.body) for s in twilio.sent])


def answers(bot_api: FakeBotApi, twilio: fake_twilio.FakeTwilioApi) -> Counter[tuple[str, str, str]]:
    """How often each (surface, recipient, text said) was answered by the echo model."""
    out: Counter[tuple[str, str, str]] = Counter()
    for surface, who, text in sent(bot_api, twilio):
        if "You said: " in text:
            said = text.split("You said: ", 1)[1].split("\nContext:", 1)[0]
            out[(surface, who, said)] += 1
    return out
