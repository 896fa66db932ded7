"""The surfaces hilo ships, registered under the `hilo.surfaces` entry points (pyproject.toml): each factory
gives its surface when the settings configure it, else None (bot/plugins.py calls them).

Each optional surface is imported only when configured, so a daemon without Telegram or WhatsApp never loads
python-telegram-bot or twilio (both are installed with hilo).
"""

from __future__ import annotations

from bot.config import Settings
from bot.runtime import Surface
from kernel.errors import ConfigError

#: An admin token shorter than this is refused at start: it guards every person's data.
ADMIN_TOKEN_MIN = 16


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


def admin(settings: Settings) -> Surface | None:
    """The admin page (issue 13): only with HILO_ADMIN_TOKEN; without it there is no /admin route at all."""
    if not settings.admin_token:
        return None
    if len(settings.admin_token) < ADMIN_TOKEN_MIN:
        raise ConfigError(f"HILO_ADMIN_TOKEN is {len(settings.admin_token)} characters: use at least "
                          f"{ADMIN_TOKEN_MIN} random ones (python -c 'import secrets; print(secrets.token_urlsafe())')")
    from surfaces.admin import AdminSurface

    return AdminSurface(settings)
