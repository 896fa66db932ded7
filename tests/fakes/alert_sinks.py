"""Where alerts go in tests (bot/alerts.py): a webhook receiver (Starlette under uvicorn) and a real SMTP server
(aiosmtpd), both on 127.0.0.1, each recording what arrived. `refuse_next(n)` makes the webhook answer 500.

    with WebhookReceiver() as hook, SmtpSink() as mail:
        env = {"HILO_ALERT_WEBHOOK_URL": hook.url, "HILO_ALERT_SMTP_URL": mail.url, "HILO_ALERT_EMAIL_TO": "ops@x.test"}
"""

from __future__ import annotations

import json
import threading
from email import message_from_bytes
from email.message import Message
from typing import Any

from aiosmtpd.controller import Controller
from aiosmtpd.smtp import SMTP, Envelope, Session
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from tests.fakes.loopback import ThreadedServer, free_port


class WebhookReceiver:
    """Records every JSON body POSTed to /alerts (`.alerts`), answering 200 (or 500 while refusing)."""

    def __init__(self) -> None:
        self.alerts: list[dict[str, Any]] = []
        self.refused = 0
        self._refuse = 0
        self._lock = threading.Lock()
        self._server = ThreadedServer(Starlette(routes=[Route("/alerts", self._receive, methods=["POST"])]),
                                      name="alert-webhook")

    @property
    def url(self) -> str:
        return self._server.base_url + "/alerts"

    def kinds(self) -> list[str]:
        with self._lock:
            return [a["kind"] for a in self.alerts]

    def refuse_next(self, n: int) -> None:
        with self._lock:
            self._refuse = n

    async def _receive(self, request: Request) -> JSONResponse:
        body = json.loads(await request.body())
        with self._lock:
            if self._refuse:
                self._refuse -= 1
                self.refused += 1
                return JSONResponse({"error": "refused"}, status_code=500)
            self.alerts.append(body)
        return JSONResponse({"ok": True})

    def __enter__(self) -> WebhookReceiver:
        self._server.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.stop()


class SmtpSink:
    """A real SMTP server (aiosmtpd) on 127.0.0.1; `.messages` are the parsed emails, `.envelopes` who to whom."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.envelopes: list[tuple[str, list[str]]] = []
        self._lock = threading.Lock()
        self.port = free_port()
        self._controller = Controller(self, hostname="127.0.0.1", port=self.port)

    @property
    def url(self) -> str:
        return f"smtp://127.0.0.1:{self.port}"

    def subjects(self) -> list[str]:
        with self._lock:
            return [str(m["Subject"]) for m in self.messages]

    async def handle_DATA(self, server: SMTP, session: Session, envelope: Envelope) -> str:
        content = envelope.content if isinstance(envelope.content, bytes) else str(envelope.content).encode()
        with self._lock:
            self.messages.append(message_from_bytes(content))
            self.envelopes.append((str(envelope.mail_from), list(envelope.rcpt_tos)))
        return "250 OK"

    def __enter__(self) -> SmtpSink:
        self._controller.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._controller.stop()
