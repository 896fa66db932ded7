"""The costs area's settings (issue 13 items 3 and 4), read from HILO_* names into Settings' costs block.

The price table (HILO_PRICES, bot/prices.py), the caps in USD (0 or unset: no cap) and where alerts go
(bot/alerts.py). Every malformed value is a ConfigError naming its setting, at start.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any
from urllib.parse import urlsplit

from bot.prices import PriceTable
from kernel.errors import ConfigError

CAPS = ("HILO_CAP_PERSON_DAILY_USD", "HILO_CAP_PERSON_MONTHLY_USD", "HILO_CAP_DAILY_USD", "HILO_CAP_MONTHLY_USD")


def usd(env: Mapping[str, str], name: str) -> float:
    raw = env.get(name, "").strip()
    try:
        value = float(raw) if raw else 0.0
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number: set it to a cap in USD, e.g. 5, or 0 for none") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{name}={raw!r}: set it to a cap in USD of 0 or more (0: no cap)")
    return value


def whole(env: Mapping[str, str], name: str, default: int, minimum: int) -> int:
    """A setting that counts something (number's checks, then its whole part)."""
    return int(number(env, name, default, minimum))


def number(env: Mapping[str, str], name: str, default: float, minimum: float) -> float:
    raw = env.get(name, "").strip()
    try:
        value = float(raw) if raw else default
    except ValueError:
        raise ConfigError(f"{name}={raw!r} is not a number: set it to e.g. {default:g}") from None
    if not math.isfinite(value) or value < minimum:
        raise ConfigError(f"{name}={raw!r}: set it to at least {minimum:g}")
    return value


def _smtp(raw: str) -> str:
    if not raw:
        return ""
    parts = urlsplit(raw)
    try:
        parts.port  # noqa: B018  (raises ValueError for a port that is not a number)
    except ValueError:
        parts = urlsplit("")
    if parts.scheme not in ("smtp", "smtps") or not parts.hostname:
        raise ConfigError("HILO_ALERT_SMTP_URL is not an SMTP URL: write smtp://user:pass@host:587 (STARTTLS when "
                          "the server offers it), smtps://user:pass@host:465 (TLS) or smtp://host:25")
    return raw


def costs_from(env: Mapping[str, str]) -> dict[str, Any]:
    """Settings' costs fields from the environment."""
    webhook = env.get("HILO_ALERT_WEBHOOK_URL", "").strip()
    if webhook and not webhook.startswith(("https://", "http://")):
        # not echoed: a Slack or Discord webhook's URL is its credential
        raise ConfigError("HILO_ALERT_WEBHOOK_URL is not an http(s) URL: set it to e.g. https://hooks.example.com/hilo")
    smtp = _smtp(env.get("HILO_ALERT_SMTP_URL", "").strip())
    to = tuple(a.strip() for a in env.get("HILO_ALERT_EMAIL_TO", "").split(",") if a.strip())
    sender = env.get("HILO_ALERT_EMAIL_FROM", "").strip()
    if smtp and not to:
        raise ConfigError("HILO_ALERT_SMTP_URL is set but HILO_ALERT_EMAIL_TO is not: set the address(es) alerts go to")
    if to and not smtp:
        raise ConfigError("HILO_ALERT_EMAIL_TO is set but HILO_ALERT_SMTP_URL is not: set the SMTP server to send by")
    if any("@" not in a for a in (*to, *([sender] if sender else []))):
        raise ConfigError("HILO_ALERT_EMAIL_TO / HILO_ALERT_EMAIL_FROM: write email addresses, e.g. ops@example.com")
    prices = PriceTable.parse(env.get("HILO_PRICES", ""))
    person_daily, person_monthly, daily, monthly = (usd(env, name) for name in CAPS)
    return {
        "prices": prices, "cap_person_daily_usd": person_daily, "cap_person_monthly_usd": person_monthly,
        "cap_daily_usd": daily, "cap_monthly_usd": monthly,
        "alert_webhook_url": webhook, "alert_smtp_url": smtp, "alert_email_to": to,
        "alert_email_from": sender or (f"hilo@{urlsplit(smtp).hostname}" if smtp else ""),
        "alert_min_interval": number(env, "HILO_ALERT_MIN_INTERVAL", 300.0, 0.0),
        "alert_delivery_failures": whole(env, "HILO_ALERT_DELIVERY_FAILURES", 5, 1),
    }
