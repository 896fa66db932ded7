"""Alerts to the operator (issue 13 item 4; docs/costs.md): one entry point, `Alerts.send(kind, **fields)`.

    alerts.send("cap_reached", scope="global_daily", cap_usd=5.0, spent_usd=4.99, user_id=12)

Kinds: fallback_answered (a fallback model answered a turn), all_models_failed (no model answered one),
cap_reached (a spend cap refused a call, bot/spend.py) and delivery_failing (a surface's parts failed finally
HILO_ALERT_DELIVERY_FAILURES times in a row, bot/outbox.py). An alert goes to HILO_ALERT_WEBHOOK_URL (a POST of
JSON: {"kind", "at", "host", ...fields}) and/or by email (HILO_ALERT_SMTP_URL to HILO_ALERT_EMAIL_TO, through the
standard library's smtplib on a thread). It carries ids, counts, model names and the caps' figures: never a
message's text or a secret (fields are checked: numbers, booleans and short strings only).

At most one alert per kind per HILO_ALERT_MIN_INTERVAL seconds, across every process on the database (a mark in
alert_marks, memory/sql_alerts.py, taken in one upsert); when the database cannot be reached, the process's own
last time decides. `send` never blocks and never raises into a turn: the sending runs in a tracked task (drained
at stop), and what fails is logged (`alert.failed`, the error's class only).
"""

from __future__ import annotations

import asyncio
import json
import socket
import time
from collections.abc import Mapping, Sequence
from datetime import timedelta
from typing import Any
from urllib.parse import unquote, urlsplit

from bot.config import Settings
from bot.models.base import AllModelsFailed, CapReached
from bot.tasks import TaskSet
from kernel import log
from kernel.errors import Draining, StoreError
from kernel.types import ModelCallRecord, utcnow
from memory.store import Store

logger = log.get("hilo.alerts")

KINDS = frozenset({"fallback_answered", "all_models_failed", "cap_reached", "delivery_failing"})
#: a string field longer than this is not an id or a model name: refused (a message's text must never leave)
MAX_FIELD_CHARS = 120
SEND_TIMEOUT_S = 10.0


class Alerts:
    """The operator's alerts. `send` is synchronous and returns at once; `drain` at stop."""

    def __init__(self, settings: Settings, store: Store) -> None:
        self.settings = settings
        self.store = store
        self.interval = settings.alert_min_interval
        self.tasks = TaskSet()
        #: kind -> when this process last sent one (monotonic): the bound when the database is away
        self._last: dict[str, float] = {}

    @property
    def enabled(self) -> bool:
        return bool(self.settings.alert_webhook_url or self.settings.alert_smtp_url)

    def send(self, kind: str, **fields: Any) -> None:
        """Send an alert of `kind` in the background (rate limited per kind). Never raises: an unknown kind, or a
        field that could carry text (anything but numbers, booleans and short one-line strings), is logged as
        `alert.invalid` and not sent."""
        bad = [name for name, value in fields.items() if not _plain(value)]
        if kind not in KINDS or bad:
            logger.error("alert.invalid", kind=kind if kind in KINDS else "unknown", fields=",".join(bad))
            return
        logger.warning("alert", kind=kind, **fields)
        if not self.enabled:
            return
        try:
            self.tasks.spawn(self._deliver(kind, dict(fields)), name=f"alert.{kind}")
        except Draining:
            logger.warning("alert.dropped", kind=kind, why="stopping")

    def after_turn(self, calls: Sequence[ModelCallRecord], failure: AllModelsFailed | None, **ids: Any) -> None:
        """A turn's alerts: a fallback answered (its call is the last, with `fallback_from`), or no model did
        (a cap's refusal is not: bot/spend.py alerts it). `ids`: surface, user_id, message_id."""
        if failure is None and calls and calls[-1].fallback_from is not None:
            self.send("fallback_answered", model=calls[-1].model, primary=calls[-1].fallback_from,
                      calls=len(calls), **ids)
        elif failure is not None and not isinstance(failure, CapReached):
            tried = ",".join(dict.fromkeys(c.model for c in calls))
            self.send("all_models_failed", models=tried[:MAX_FIELD_CHARS], calls=len(calls), **ids)

    async def drain(self, timeout: float) -> None:
        await self.tasks.drain(timeout=timeout)

    async def _turn(self, kind: str) -> bool:
        """Whether this alert goes out now: the process's own mark first (no round trip within the interval),
        then the database's, shared by every process."""
        now = time.monotonic()
        last = self._last.get(kind)
        if last is not None and now - last < self.interval:
            return False
        try:
            allowed = await self.store.take_alert(kind, timedelta(seconds=self.interval))
        except StoreError as exc:
            logger.warning("alert.mark_unavailable", kind=kind, error=type(exc).__name__)
            allowed = True
        if allowed:
            self._last[kind] = now
        return allowed

    async def _deliver(self, kind: str, fields: dict[str, Any]) -> None:
        try:
            if not await self._turn(kind):
                logger.info("alert.suppressed", kind=kind, interval_s=self.interval)
                return
            payload = {"kind": kind, "at": utcnow().isoformat(), "host": socket.gethostname(), **fields}
            via = []
            if self.settings.alert_webhook_url:
                await self._post(payload)
                via.append("webhook")
            if self.settings.alert_smtp_url:
                await asyncio.to_thread(_mail, self.settings, payload)
                via.append("email")
            logger.info("alert.sent", kind=kind, via=",".join(via))
        except Exception as exc:  # an alert that cannot go out is logged: it never reaches the turn
            logger.error("alert.failed", kind=kind, error=type(exc).__name__)

    async def _post(self, payload: Mapping[str, Any]) -> None:
        import httpx  # loads with the first webhook alert: most daemons never send one

        async with httpx.AsyncClient(timeout=SEND_TIMEOUT_S) as client:
            response = await client.post(self.settings.alert_webhook_url, json=payload)
            response.raise_for_status()


def _plain(value: object) -> bool:
    """What an alert may carry: ids, counts, figures, model names; never a text that could be a message."""
    if value is None or isinstance(value, bool | int | float):
        return True
    return isinstance(value, str) and len(value) <= MAX_FIELD_CHARS and "\n" not in value


def _mail(settings: Settings, payload: Mapping[str, Any]) -> None:
    """One email through smtplib (blocking: called on a thread). smtps:// is TLS from the start; smtp:// uses
    STARTTLS when the server offers it; user:pass in the URL logs in."""
    url = urlsplit(settings.alert_smtp_url)
    import smtplib  # with the first email: most daemons never send one
    import ssl
    from email.message import EmailMessage

    message = EmailMessage()
    message["Subject"] = f"hilo alert: {payload['kind']}"
    message["From"] = settings.alert_email_from
    message["To"] = ", ".join(settings.alert_email_to)
    message.set_content(json.dumps(payload, indent=2, sort_keys=True) + "\n")
    host = url.hostname or "localhost"
    if url.scheme == "smtps":
        smtp: smtplib.SMTP = smtplib.SMTP_SSL(host, url.port or 465, timeout=SEND_TIMEOUT_S,
                                              context=ssl.create_default_context())
    else:
        smtp = smtplib.SMTP(host, url.port or 25, timeout=SEND_TIMEOUT_S)
    with smtp:
        smtp.ehlo()
        if url.scheme == "smtp" and smtp.has_extn("starttls"):
            smtp.starttls(context=ssl.create_default_context())
            smtp.ehlo()
        if url.username:
            smtp.login(unquote(url.username), unquote(url.password or ""))
        smtp.send_message(message)
