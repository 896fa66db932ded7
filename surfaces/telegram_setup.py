"""The Telegram surface's setup: the Bot API's URLs, what webhook mode needs, and what an error at start means
for the operator (the messages never quote the bot token)."""

from __future__ import annotations

import asyncio
import re
from typing import Any

from telegram import Bot
from telegram.error import InvalidToken, NetworkError, TelegramError

from bot.config import Settings
from kernel.errors import ConfigError, HiloError, ServiceUnavailable

__all__ = ["DEFAULT_API", "api_urls", "check_webhook_settings", "start_failed", "webhook_state"]

DEFAULT_API = "https://api.telegram.org"
_SECRET = re.compile(r"^[A-Za-z0-9_-]{1,256}$")  # what Telegram accepts as secret_token


def api_urls(base: str) -> tuple[str, str]:
    """Bot API and file URLs for TELEGRAM_API_BASE_URL ("http://host:8081" or ".../bot"; default Telegram's)."""
    base = (base or DEFAULT_API).rstrip("/")
    base = base.removesuffix("/bot")
    return f"{base}/bot", f"{base}/file/bot"


def start_failed(settings: Settings, exc: TelegramError) -> HiloError:
    """What a Bot API error at start means for the operator (`from None` where raised: the library's
    messages and tracebacks may quote the token)."""
    if isinstance(exc, InvalidToken):
        return ConfigError(
            "Telegram refused TELEGRAM_BOT_TOKEN (or TELEGRAM_API_BASE_URL is not a Bot API server): "
            "check the token with @BotFather"
        )
    api = (settings.telegram_api_base_url or DEFAULT_API).rstrip("/")
    detail = str(exc).replace(settings.telegram_bot_token, "<TELEGRAM_BOT_TOKEN>")
    if isinstance(exc, NetworkError):  # connection refused, DNS, timeouts, 5xx
        return ServiceUnavailable(
            f"cannot reach the Telegram Bot API at {api} ({detail}): check the network, or "
            "TELEGRAM_API_BASE_URL"
        )
    return ServiceUnavailable(f"the Telegram Bot API at {api} refused to start the bot ({detail})")


def check_webhook_settings(settings: Settings) -> None:
    missing = [name for name, value in (("TELEGRAM_WEBHOOK_SECRET", settings.telegram_webhook_secret),
                                        ("HILO_PUBLIC_URL", settings.public_url)) if not value]
    if missing:
        raise ConfigError(
            f"HILO_TELEGRAM_MODE=webhook needs {' and '.join(missing)}: set TELEGRAM_WEBHOOK_SECRET to a random "
            "string of letters, digits, _ and - (e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))') "
            "and HILO_PUBLIC_URL to the https URL at which Telegram reaches this daemon; "
            "or set HILO_TELEGRAM_MODE=polling"
        )
    if not _SECRET.match(settings.telegram_webhook_secret):
        raise ConfigError(
            "TELEGRAM_WEBHOOK_SECRET may only hold A-Z, a-z, 0-9, _ and - (1 to 256 characters), as Telegram "
            "requires: e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    if not settings.public_url.startswith(("https://", "http://")):
        raise ConfigError(f"HILO_PUBLIC_URL={settings.public_url!r} must be a URL like https://bot.example.com")


async def webhook_state(bot: Bot, settings: Settings, path: str) -> dict[str, Any]:
    """For /readyz: Telegram's getWebhookInfo names this daemon's webhook URL (another deploy's deleteWebhook or
    setWebhook would leave it receiving nothing)."""
    try:
        info = await asyncio.wait_for(bot.get_webhook_info(), 5)
    except (TelegramError, TimeoutError) as exc:
        return {"ok": False, "mode": "webhook", "error": f"getWebhookInfo failed ({type(exc).__name__})"}
    if info.url != settings.public_url + path:
        return {"ok": False, "mode": "webhook", "error": "the webhook is not registered at HILO_PUBLIC_URL",
                "pending_updates": info.pending_update_count}
    return {"ok": True, "mode": "webhook", "pending_updates": info.pending_update_count}
