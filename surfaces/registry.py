"""The surfaces hilo ships, registered under the `hilo.surfaces` entry points (pyproject.toml): each factory
gives its surface when the settings configure it, else None (bot/plugins.py calls them).

Each optional surface is imported only when configured, so a daemon without Telegram or WhatsApp never loads
python-telegram-bot or twilio (both are installed with hilo).
"""

from __future__ import annotations

from bot.config import Settings
from bot.runtime import Surface


def web(settings: Settings) -> Surface:
    """The web API and widget: always on."""
    from surfaces.web import WebSurface

    return WebSurface(settings)


def telegram(settings: Settings) -> Surface | None:
    if not settings.telegram_bot_token:
        return None
    from surfaces.telegram import TelegramSurface  # type: ignore[import-not-found,unused-ignore]

    return TelegramSurface(settings)


def whatsapp(settings: Settings) -> Surface | None:
    if not (settings.twilio_account_sid and settings.twilio_auth_token):
        return None
    from surfaces.whatsapp import WhatsAppSurface  # type: ignore[import-not-found,unused-ignore]

    return WhatsAppSurface(settings)
