"""Which surfaces run: the web API always; the others when their settings are present.

Each optional surface is imported only when configured, so a daemon without Telegram or WhatsApp never loads
python-telegram-bot or twilio (both are installed with hilo).
"""

from __future__ import annotations

from bot.config import Settings
from surfaces.base import Surface


def enabled(settings: Settings) -> list[Surface]:
    from surfaces.web import WebSurface

    surfaces: list[Surface] = [WebSurface(settings)]
    if settings.telegram_bot_token:
        from surfaces.telegram import TelegramSurface  # type: ignore[import-not-found,unused-ignore]

        surfaces.append(TelegramSurface(settings))
    if settings.twilio_account_sid and settings.twilio_auth_token:
        from surfaces.whatsapp import WhatsAppSurface  # type: ignore[import-not-found,unused-ignore]

        surfaces.append(WhatsAppSurface(settings))
    return surfaces
