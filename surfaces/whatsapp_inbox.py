"""What a signed WhatsApp message does, and its answer: surfaces.whatsapp checks the webhook, this module acts.

Nothing is acknowledged that is not stored. While Twilio waits (milliseconds; it gives up after 15 s) the
message's effect is written: the opt-out state for STOP / START, the person's message for a turn (the
pipeline's `on_ingested`). Then Twilio gets empty TwiML and the answer follows from a tracked task. A
StoreError on the way means nothing of it was stored: `not_stored` answers 503 (Twilio then calls the
number's fallback URL, or retries where its connection overrides say so) and tells the person, once per
MessageSid, that hilo cannot take messages right now (not after STOP: they asked for silence), logging
`whatsapp.not_stored` with the MessageSid. A redelivery once the database is back is answered once.

Decisions:
- STOP / UNSUBSCRIBE / BAJA / ... (whole message; the policy is bot/opt_out.py): the number is opted out; no
  turn and no reply (on numbers with Twilio's opt-out handling, Twilio sends the confirmation itself). While
  opted out, nothing new is stored and nothing is sent. START / ALTA / ... resumes, with a short confirmation.
- Media without text gets the catalogue's "text only" answer and no turn; a caption is the message text.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

from starlette.responses import PlainTextResponse, Response

from bot.config import Settings
from bot.keyed import RecentIds
from bot.opt_out import keyword
from bot.outbox import with_route
from bot.runtime import Runtime
from kernel import catalog, log
from kernel.errors import InputError, StoreError
from kernel.types import InboundMessage
from surfaces.whatsapp_send import TwilioSender, deliver

logger = log.get("hilo.whatsapp")

SURFACE = "whatsapp"
EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'
#: Seconds a turn's task waits for its reply's parts to be sent (the outbox goes on after: they stay queued).
SETTLE_S = 120.0
Spawn = Callable[[Coroutine[Any, Any, Any], str], bool]


def twiml() -> Response:
    return Response(EMPTY_TWIML, media_type="text/xml")


class Inbox:
    """Acts on signed messages. `spawn(coro, name)` runs a tracked task (False: the daemon is draining)."""

    def __init__(self, settings: Settings, sender: TwilioSender, spawn: Spawn) -> None:
        self.settings = settings
        self.sender = sender
        self.spawn = spawn
        self.runtime: Runtime | None = None
        # MessageSids answered without a turn (keywords, media, opted out): the store's UNIQUE index only
        # dedups turns, so these are remembered here (per process) against Twilio's redeliveries.
        self._seen = RecentIds()
        self._apologized = RecentIds()  # MessageSids the database could not take, and the person was told so

    async def reply(self, recipient: str, text: str, user_id: int | None, message_id: int | None) -> None:
        """Send `text` to `recipient` part by part, recording each part (when the person is known)."""
        assert self.runtime is not None
        await deliver(self.sender, self.runtime.pipeline.deliveries, recipient=recipient, text=text, user_id=user_id,
                      message_id=message_id)

    async def _user_id(self, sender: str) -> int | None:
        """The person's user id for delivery rows; None when unknown or the database cannot say."""
        assert self.runtime is not None
        try:
            return await self.runtime.pipeline.history.identity_user(SURFACE, sender)
        except StoreError:
            return None

    async def _notice(self, recipient: str, text: str) -> None:
        await self.reply(recipient, text, await self._user_id(recipient), None)

    def _answer(self, coro: Coroutine[Any, Any, Any], sid: str) -> Response:
        """Empty TwiML, the reply going out in the background."""
        if not self.spawn(coro, f"whatsapp:{sid}"):
            coro.close()
        return twiml()

    async def accept(self, msg: InboundMessage) -> Response:
        """Store what `msg` changes (the opt-out state, the person's message) before Twilio hears 200; the
        answer follows from a tracked task. StoreError: nothing of it was stored."""
        assert self.runtime is not None
        lang, sid = self.settings.language, msg.external_id
        if keyword(msg.text)[0] is not None and sid in self._seen:
            return twiml()  # a redelivered keyword: handled already
        step = await self.runtime.pipeline.opt_out.check(SURFACE, msg.sender, msg.text)
        if step.action == "opted_out":
            self._seen.first_time(sid)
            logger.info("whatsapp.opted_out", user_id=step.user_id, message_sid=sid)
            return twiml()
        if step.action == "silenced":
            logger.info("whatsapp.dropped_opted_out", message_sid=sid)
            return twiml()
        if step.action == "opted_in":
            self._seen.first_time(sid)
            logger.info("whatsapp.opted_in", user_id=step.user_id, message_sid=sid)
            return self._answer(self.reply(msg.sender, catalog.t("whatsapp_resumed", step.lang or lang),
                                           step.user_id, None), sid)
        if not msg.text.strip() and (msg.metadata.get("num_media") or msg.metadata.get("location")):
            if not self._seen.first_time(sid):
                return twiml()
            return self._answer(self._notice(msg.sender, catalog.t("whatsapp_media_only", lang)), sid)
        # A turn: Twilio is answered once the person's message is stored (or the turn ended without storing
        # it: a command, a refusal, a redelivery). The future holds the StoreError that kept it out.
        stored: asyncio.Future[StoreError | None] = asyncio.get_running_loop().create_future()
        if not self.spawn(self._turn(msg, stored), f"whatsapp:{sid}"):
            return PlainTextResponse("shutting down", status_code=503)
        failure = await asyncio.shield(stored)
        if failure is not None:
            raise failure
        return twiml()

    def not_stored(self, msg: InboundMessage, exc: StoreError) -> Response:
        """The database could not take `msg`: 503 for Twilio, and (once per message) a word to the person."""
        sid = msg.external_id
        told = keyword(msg.text)[0] != "stop" and self._apologized.first_time(sid)
        logger.error("whatsapp.not_stored", message_sid=sid, error=type(exc).__name__, chars=len(msg.text),
                     person_told=told,
                     fix="the database refused it (down, locked or full): Twilio got 503; check HILO_DATABASE_URL")
        if told:
            self._answer(self.reply(msg.sender, catalog.t("store_unavailable", self.settings.language), None, None),
                         sid)
        return PlainTextResponse("store unavailable", status_code=503)

    async def _turn(self, msg: InboundMessage, stored: asyncio.Future[StoreError | None]) -> None:
        assert self.runtime is not None
        lang, sid = self.settings.language, msg.external_id

        async def on_ingested(_: object) -> None:
            if not stored.done():
                stored.set_result(None)

        try:
            # the reply goes out through the outbox, to the sender (kept with the message: recovery too)
            out = await self.runtime.pipeline.handle(with_route(msg, msg.sender), on_ingested=on_ingested)
        except InputError as exc:
            logger.info("whatsapp.refused", message_sid=sid, reason=exc.key)
            await self._notice(msg.sender, catalog.t(exc.key, lang, **exc.params))
            return
        except StoreError as exc:
            if not stored.done():  # not stored: the webhook answers 503 and says so
                stored.set_result(exc)
                return
            logger.error("whatsapp.store_unavailable", message_sid=sid, error=type(exc).__name__)
            await self.reply(msg.sender, catalog.t("store_unavailable", lang), None, None)
            return
        except Exception as exc:  # a bug must not leave the person waiting for an answer that never comes
            logger.error("whatsapp.turn_crashed", message_sid=sid, error=type(exc).__name__)
            await self.reply(msg.sender, catalog.t("internal_error", lang), None, None)
            raise
        finally:
            if not stored.done():
                stored.set_result(None)
        if out.status == "duplicate":
            return
        if out.metadata.get("queued"):  # a turn's reply (or apology), queued in the outbox with it
            await self.runtime.pipeline.outbox.settled(SURFACE, msg.sender, timeout=SETTLE_S)
            return
        await self.reply(msg.sender, out.text, out.user_id, out.reply_id or out.message_id)
