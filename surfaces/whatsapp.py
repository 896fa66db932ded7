"""WhatsApp through Twilio: signed webhooks in, replies out through the REST API, each message answered once.

POST /webhooks/whatsapp         a person's message: Twilio's form POST.
POST /webhooks/whatsapp/status  Twilio's later word on a part hilo sent (StatusCallback): sent, delivered, read,
                                undelivered, failed (+ ErrorCode), kept on the delivery row.

Both routes check X-Twilio-Signature with twilio's RequestValidator BEFORE anything is stored or handed on,
against the URL Twilio called: HILO_PUBLIC_URL + path (+ query string). The request's own Host is never
trusted, so signatures hold behind a proxy or a tunnel. Missing or forged: 403. Bodies over 64 KiB: 413.

What a message does (STOP / START, media, a turn) is surfaces.whatsapp_inbox: nothing is acknowledged that
is not durable (its inbound record, the opt-out state, the person's message, or the local journal when the
database cannot take it: bot/intake.py); when nothing could be kept Twilio gets 503 and the person is told once.
A turn's reply goes out through the outbox (bot/outbox.py: stored parts, in order per number, retried, resumed
after a restart) and Twilio's REST API (surfaces.whatsapp_send.TwilioTransport), split at 1,600 characters.
Exactly once: MessageSid is the external id, recorded for every delivery, so a redelivered webhook changes nothing, also
after a restart. ProfileName and WaId are kept in the message's metadata, never logged.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine
from typing import Any
from urllib.parse import parse_qsl

from starlette.requests import ClientDisconnect, Request
from starlette.responses import PlainTextResponse, Response
from starlette.routing import BaseRoute, Route
from twilio.request_validator import RequestValidator

from bot import metrics
from bot.config import Settings
from bot.media import Voice
from bot.runtime import Runtime
from bot.vision import Photo
from kernel import log
from kernel.errors import ConfigError, Draining, StoreError
from kernel.types import InboundMessage
from surfaces import media_text
from surfaces.http_body import BodyTooLarge, read_body
from surfaces.whatsapp_inbox import EMPTY_TWIML, SURFACE, Inbox, twiml
from surfaces.whatsapp_ready import AccountCheck
from surfaces.whatsapp_send import TwilioSender, TwilioTransport

logger = log.get("hilo.whatsapp")

__all__ = ["EMPTY_TWIML", "STATUS_PATH", "WEBHOOK_PATH", "Form", "WhatsAppSurface", "inbound"]
WEBHOOK_PATH = "/webhooks/whatsapp"
STATUS_PATH = "/webhooks/whatsapp/status"
MAX_BODY_BYTES = 64 * 1024
MAX_MEDIA = 10


class Form(dict[str, str]):
    """Form fields (the last value of a repeated name wins a lookup); `getall` keeps every value, as the
    signature covers them all."""

    def __init__(self, pairs: list[tuple[str, str]]) -> None:
        super().__init__(pairs)
        self._all: dict[str, list[str]] = {}
        for name, value in pairs:
            self._all.setdefault(name, []).append(value)

    def getall(self, name: str) -> list[str]:
        return self._all.get(name, [])


def inbound(form: Form) -> InboundMessage:
    """Normalize Twilio's form into one InboundMessage. ValueError when MessageSid or From is missing."""
    sid, sender = form.get("MessageSid", "").strip(), form.get("From", "").strip()
    sender = sender.removeprefix("whatsapp:")
    if not sid or not sender:
        raise ValueError("MessageSid and From are required")
    try:
        num_media = max(0, int(form.get("NumMedia", "0") or 0))
    except ValueError:
        num_media = 0
    metadata: dict[str, Any] = {"num_media": num_media}
    if form.get("ProfileName"):
        metadata["profile_name"] = form["ProfileName"]
    if form.get("WaId"):
        metadata["wa_id"] = form["WaId"]
    media = [
        {"url": form[f"MediaUrl{i}"], "content_type": form.get(f"MediaContentType{i}", "")}
        for i in range(min(num_media, MAX_MEDIA)) if form.get(f"MediaUrl{i}")
    ]
    if media:
        metadata["media"] = media
    body = form.get("Body", "")
    if form.get("Latitude") and form.get("Longitude"):
        metadata["location"] = {"latitude": form["Latitude"], "longitude": form["Longitude"]}
        place = media_text.location(form["Latitude"], form["Longitude"], form.get("Label"), form.get("Address"))
        body = "" if body in (form.get("Label"), form.get("Address")) else body  # Twilio repeats the place there
        body = media_text.with_caption(place, body)
    described = [line for m in media if (line := structured(m["content_type"])) is not None]
    if described:
        body = media_text.with_caption("\n".join(described), body)
    audio = next((m for m in media if m["content_type"].lower().startswith("audio/")), None)
    if audio is not None:  # a voice note: transcribed in the turn's task (bot/media.py), this text until then
        caption = body
        body = media_text.with_caption(media_text.voice(None), body)
        metadata["voice"] = Voice("audio", audio["content_type"]).as_metadata(audio["url"], body, caption)
    image = next((m for m in media if m["content_type"].lower().startswith("image/")), None)
    if image is not None and audio is None:  # a photo: seen (or noted) in the turn's task (bot/vision.py)
        caption = body
        metadata["image"] = Photo(image["content_type"].split(";", 1)[0].strip().lower()).as_metadata(
            image["url"], caption)
        body = metadata["image"]["placeholder"]
    return InboundMessage(surface=SURFACE, sender=sender, external_id=sid, text=body, metadata=metadata)


def structured(content_type: str) -> str | None:
    """A shared contact (a vCard) or a document as structured text; None for what is not text (a photo)."""
    mime = content_type.split(";", 1)[0].strip().lower()
    if mime in ("text/vcard", "text/x-vcard"):
        return media_text.contact(None, None)
    if mime.startswith(("application/", "text/")):
        return media_text.document(None, mime, None)
    return None


class WhatsAppSurface:
    """The WhatsApp surface. Refuses to be built without HILO_PUBLIC_URL and TWILIO_WHATSAPP_NUMBER."""

    name = SURFACE

    def __init__(self, settings: Settings, *, sender: TwilioSender | None = None, drain_timeout: float = 25.0) -> None:
        missing = [name for name, value in (
            ("HILO_PUBLIC_URL", settings.public_url), ("TWILIO_WHATSAPP_NUMBER", settings.twilio_whatsapp_number),
            ("TWILIO_ACCOUNT_SID", settings.twilio_account_sid), ("TWILIO_AUTH_TOKEN", settings.twilio_auth_token),
        ) if not value]
        if missing:
            raise ConfigError(
                f"WhatsApp (Twilio) needs {' and '.join(missing)}: set HILO_PUBLIC_URL to the public https URL "
                "Twilio calls (e.g. https://bot.example.com) and TWILIO_WHATSAPP_NUMBER to your WhatsApp sender "
                "(e.g. whatsapp:+14155238886)"
            )
        if not settings.public_url.startswith(("https://", "http://")):
            raise ConfigError(f"HILO_PUBLIC_URL={settings.public_url!r}: set it to a URL like https://bot.example.com")
        self.settings = settings
        self.sender = sender or TwilioSender(settings)
        self.drain_timeout = drain_timeout
        self._validator = RequestValidator(settings.twilio_auth_token)
        self._runtime: Runtime | None = None
        self._stopping = False
        self._inflight: set[asyncio.Task[Any]] = set()
        self.inbox = Inbox(settings, self.sender, self._spawn)
        self.account = AccountCheck(self.sender)

    def routes(self) -> list[BaseRoute]:
        return [
            Route(WEBHOOK_PATH, self.webhook, methods=["POST"]),
            Route(STATUS_PATH, self.status_callback, methods=["POST"]),
        ]

    async def start(self, runtime: Runtime) -> None:
        await self.sender.start()
        await self.account.check()  # Twilio's word on the credentials, for /readyz (not a reason not to start)
        self._runtime = self.inbox.runtime = runtime
        runtime.pipeline.outbox.register(TwilioTransport(self.sender))  # replies and notices go out through it
        runtime.intake.register(SURFACE, self.inbox.run, self._spawn)
        runtime.listener.register(SURFACE, self.inbox.fetch)  # a recovered voice note is downloaded here too
        logger.info("whatsapp.started", webhook=self.settings.public_url + WEBHOOK_PATH)

    async def stop(self) -> None:
        """Stop taking webhooks, let replies in flight go out (up to `drain_timeout`), then close the client."""
        self._stopping = True
        if self._runtime is not None:  # the turns in flight stop waiting for their replies' sends
            self._runtime.pipeline.outbox.closing(SURFACE)
            self._runtime.intake.unregister(SURFACE)
            self._runtime.listener.unregister(SURFACE)
        for task in self._inflight:
            if task.get_name().startswith("whatsapp-status:"):
                task.cancel()  # a late status for a part never recorded: not worth holding the shutdown
        if self._inflight:
            _, pending = await asyncio.wait(set(self._inflight), timeout=self.drain_timeout)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.gather(*pending, return_exceptions=True)
                logger.warning("whatsapp.cancelled_in_flight", count=len(pending))
        if self._runtime is not None:  # what the drained turns queued goes out before the client closes
            await self._runtime.pipeline.outbox.flush(SURFACE, timeout=self.drain_timeout)
            self._runtime.pipeline.outbox.unregister(SURFACE)  # later parts stay queued for the next start
        await self.sender.aclose()

    async def ready(self) -> dict[str, Any]:
        """/readyz (bot/readiness.py): Twilio accepted the credentials (surfaces/whatsapp_ready.py)."""
        return await self.account.ready()

    # -- HTTP ---------------------------------------------------------------------------------------------
    async def _verified(self, request: Request, path: str) -> Form | Response:
        """The signed form, or the response refusing it. Nothing is looked at before the signature holds."""
        try:
            body = await read_body(request, MAX_BODY_BYTES)
        except ClientDisconnect:
            return Response(status_code=400)
        except BodyTooLarge:
            metrics.refused(SURFACE, "too_large")
            return PlainTextResponse("payload too large", status_code=413)
        signature = request.headers.get("x-twilio-signature", "")
        try:
            form = Form(parse_qsl(body.decode("utf-8"), keep_blank_values=True, max_num_fields=500))
        except (UnicodeDecodeError, ValueError):
            form = None
        query = request.scope.get("query_string", b"").decode("latin-1")
        url = self.settings.public_url + path + (f"?{query}" if query else "")
        if not signature or form is None or not self._validator.validate(url, form, signature):
            logger.warning("whatsapp.bad_signature", path=path, signed=bool(signature))
            metrics.refused(SURFACE, "bad_signature")
            return PlainTextResponse("invalid signature", status_code=403)
        return form

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> bool:
        assert self._runtime is not None
        try:
            task = self._runtime.tasks.spawn(coro, name=name)
        except Draining:
            return False
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)
        return True

    async def webhook(self, request: Request) -> Response:
        if self._runtime is None or self._stopping:
            return PlainTextResponse("not ready", status_code=503)
        form = await self._verified(request, WEBHOOK_PATH)
        if isinstance(form, Response):
            return form
        try:
            msg = inbound(form)
        except ValueError:
            return PlainTextResponse("MessageSid and From are required", status_code=400)
        try:
            return await self.inbox.accept(msg)
        except StoreError as exc:
            return self.inbox.not_stored(msg, exc)

    async def status_callback(self, request: Request) -> Response:
        if self._runtime is None:
            return PlainTextResponse("not ready", status_code=503)
        form = await self._verified(request, STATUS_PATH)
        if isinstance(form, Response):
            return form
        sid, status = form.get("MessageSid", ""), form.get("MessageStatus") or form.get("SmsStatus", "")
        if not sid or not status:
            return PlainTextResponse("MessageSid and MessageStatus are required", status_code=400)
        error = form.get("ErrorCode") or None
        if error and form.get("ErrorMessage"):
            error = f"{error}: {form['ErrorMessage']}"[:500]
        try:
            known = await self._runtime.pipeline.deliveries.update_delivery(SURFACE, sid, status, error)
        except StoreError:
            return PlainTextResponse("store unavailable", status_code=503)  # Twilio retries callbacks
        if not known and not self._stopping:
            # The callback can overtake the recording of the part it is about: try again shortly.
            self._spawn(self._late_status(sid, status, error), name=f"whatsapp-status:{sid}")
        logger.info("whatsapp.status", sid=sid, status=status, error_code=form.get("ErrorCode") or None, known=known)
        return twiml()

    async def _late_status(self, sid: str, status: str, error: str | None) -> None:
        assert self._runtime is not None
        for wait in (0.2, 1.0, 3.0):
            await asyncio.sleep(wait)
            if await self._runtime.pipeline.deliveries.update_delivery(SURFACE, sid, status, error):
                return
        logger.info("whatsapp.status_unknown_sid", sid=sid, status=status)
