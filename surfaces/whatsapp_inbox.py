"""What a signed WhatsApp message does, and its answer: surfaces.whatsapp checks the webhook, this module acts.

Stored, then acknowledged (bot/intake.py). While Twilio waits (milliseconds; it gives up after 15 s) the
message's effect is made durable: the inbound record and opt-out state for STOP / START, the inbound record of
a refusal (media without text, empty, too long), the person's message for a turn, or, when the database cannot
take it, the local journal (the person is told once that it is kept and will be answered). Then Twilio gets
empty TwiML and the answer follows from a tracked task (`run`). Every MessageSid is recorded in the database, so
a redelivery, in this process or after a restart, is answered never twice, and a STOP redelivered after START
changes nothing. A StoreError that reaches `not_stored` (the journal is full, or STOP / START could not be
applied) means nothing was kept: Twilio gets 503 (it then calls the number's fallback URL) and the person is
told so (not after STOP: they asked for silence), logging `whatsapp.not_stored` with the MessageSid.

Decisions:
- STOP / UNSUBSCRIBE / BAJA / ... (whole message; the policy is bot/opt_out.py): the number is opted out; no
  turn and no reply (on numbers with Twilio's opt-out handling, Twilio sends the confirmation itself). While
  opted out, nothing new is stored and nothing is sent. START / ALTA / ... resumes, with a short confirmation.
- Media without text gets the catalogue's "text only" answer and no turn; a caption is the message text. A
  location, contact or document is structured text (surfaces/whatsapp.py), and a voice note (audio) is a turn
  on its transcript: stored with its MediaUrl before Twilio hears 200, downloaded with the account's credentials
  and transcribed in the turn's task (bot/media.py, `fetch`).

What hilo says goes out through the outbox (bot/outbox.py, surfaces.whatsapp_send.TwilioTransport): a turn's
reply queued with it, and what is said outside a turn (command answers, refusals, the START confirmation, errors:
`say`) queued too when the person is known to the database (bot/notices.py `say`). What follows a number's
messages runs one at a time per number, in arrival order, so their answers are queued (and sent) in that order.
Only where no row can be stored is it sent directly (`reply`: surfaces.whatsapp_send.deliver, retried there): a
number the database does not know (a first message that is media only), or the database failing ("store
unavailable", "message kept", a reply that could not be stored).
"""

from __future__ import annotations

from collections.abc import Callable, Coroutine
from typing import Any
from urllib.parse import urlsplit

from starlette.responses import PlainTextResponse, Response

from bot.config import Settings
from bot.keyed import KeyedLocks
from bot.media import Fetch
from bot.opt_out import keyword
from bot.outbox import with_route
from bot.pipeline import Taken
from bot.runtime import Runtime
from kernel import catalog, log
from kernel.errors import ServiceUnavailable, StoreError
from kernel.types import InboundMessage
from surfaces.media_fetch import download
from surfaces.whatsapp_send import TwilioSender, deliver

logger = log.get("hilo.whatsapp")

SURFACE = "whatsapp"
TWILIO_API = "https://api.twilio.com"
EMPTY_TWIML = '<?xml version="1.0" encoding="UTF-8"?><Response></Response>'
Spawn = Callable[[Coroutine[Any, Any, Any], str], bool]


def _origin(url: str) -> tuple[str, str]:
    parts = urlsplit(url)
    return parts.scheme.lower(), parts.netloc.lower()


def twiml() -> Response:
    return Response(EMPTY_TWIML, media_type="text/xml")


class Inbox:
    """Acts on signed messages. `spawn(coro, name)` runs a tracked task (False: the daemon is draining)."""

    def __init__(self, settings: Settings, sender: TwilioSender, spawn: Spawn) -> None:
        self.settings = settings
        self.sender = sender
        self.spawn = spawn
        self.runtime: Runtime | None = None
        self._numbers: KeyedLocks[str] = KeyedLocks()  # what follows a number's messages: one at a time, in order

    async def reply(self, recipient: str, text: str, user_id: int | None, message_id: int | None) -> None:
        """The direct send, where no row can be stored: `text` part by part, retried, each part recorded when
        the person is known."""
        assert self.runtime is not None
        await deliver(self.sender, self.runtime.pipeline.deliveries, recipient=recipient, text=text, user_id=user_id,
                      message_id=message_id)

    async def say(self, recipient: str, text: str, user_id: int | None = None) -> None:
        """What hilo says outside a turn (command answers, refusals, START, errors): queued in the outbox when the
        person is known to the database (`user_id`, or the user of the number's identity), else sent directly
        after what is queued for the number."""
        assert self.runtime is not None
        if not await self.runtime.pipeline.notices.say(SURFACE, recipient, text, user_id=user_id, sender=recipient):
            await self.reply(recipient, text, None, None)

    def fetch(self, url: str) -> Fetch:
        """Downloads a MediaUrl with the account's credentials (HTTP Basic: account SID and auth token), within
        the size cap; only from Twilio's API host (or TWILIO_API_BASE_URL's), so the credentials go nowhere else."""
        async def fetch(limit: int) -> bytes:
            if _origin(url) != _origin(self.settings.twilio_api_base_url or TWILIO_API):
                raise ServiceUnavailable("a MediaUrl not on Twilio's API host: not fetched with the credentials")
            return await download(url, limit, auth=(self.settings.twilio_account_sid,
                                                    self.settings.twilio_auth_token))

        return fetch

    async def _in_order(self, sender: str, work: Coroutine[Any, Any, Any]) -> None:
        """`work` after what the number's earlier messages do (asyncio.Lock: first come, first served)."""
        async with self._numbers.hold(sender):
            await work

    def _answer(self, coro: Coroutine[Any, Any, Any], msg: InboundMessage) -> Response:
        """Empty TwiML, the answer going out in the background, after the number's earlier answers."""
        work = self._in_order(msg.sender, coro)
        if not self.spawn(work, f"whatsapp:{msg.external_id}"):
            work.close()
            coro.close()
        return twiml()

    async def accept(self, msg: InboundMessage) -> Response:
        """Make what `msg` changes durable (its record, the opt-out state, the message) before Twilio hears
        200; the answer follows from a tracked task. StoreError: nothing of it was kept."""
        assert self.runtime is not None
        msg = with_route(msg, msg.sender)  # the reply goes to the sender, through the outbox (recovery too)
        rt, lang, sid = self.runtime, self.settings.language, msg.external_id
        is_keyword = keyword(msg.text)[0] is not None
        if is_keyword and not await rt.intake.record(SURFACE, sid, "opt", msg.sender):
            logger.info("whatsapp.redelivery_dropped", message_sid=sid)
            return twiml()  # a redelivered STOP / START: done already (a STOP after START must not opt out again)
        try:
            step = await rt.pipeline.opt_out.check(SURFACE, msg.sender, msg.text)
        except StoreError:
            if is_keyword:
                raise
            step = None  # the database is away: the message is journaled below (opt-out is checked at replay)
        if step is not None and step.action == "opted_out":
            logger.info("whatsapp.opted_out", user_id=step.user_id, message_sid=sid)
            return twiml()
        if step is not None and step.action == "silenced":
            logger.info("whatsapp.dropped_opted_out", message_sid=sid)
            return twiml()
        if step is not None and step.action == "opted_in":
            logger.info("whatsapp.opted_in", user_id=step.user_id, message_sid=sid)
            return self._answer(self.say(msg.sender, catalog.t("whatsapp_resumed", step.lang or lang),
                                         step.user_id), msg)
        if not msg.text.strip() and (msg.metadata.get("num_media") or msg.metadata.get("location")):
            if not await rt.intake.record(SURFACE, sid, "refused", msg.sender):
                logger.info("whatsapp.redelivery_dropped", message_sid=sid)
                return twiml()
            return self._answer(self.say(msg.sender, catalog.t("whatsapp_media_only", lang)), msg)
        taken = await rt.intake.take(msg)  # stored, recorded or journaled: durable from here on
        if taken.status == "duplicate":
            logger.info("whatsapp.redelivery_dropped", message_sid=sid)
        else:
            rt.intake.spawn(msg, taken)
        return twiml()

    def not_stored(self, msg: InboundMessage, exc: StoreError) -> Response:
        """Nothing of `msg` could be kept: 503 for Twilio, and (once while it lasts) a word to the person."""
        assert self.runtime is not None
        sid = msg.external_id
        told = keyword(msg.text)[0] != "stop" and self.runtime.intake.tell_once(SURFACE, msg.sender)
        logger.error("whatsapp.not_stored", message_sid=sid, error=type(exc).__name__, chars=len(msg.text),
                     person_told=told,
                     fix="the database refused it and the journal could not keep it: Twilio got 503; check "
                         "HILO_DATABASE_URL and HILO_DATA_DIR / HILO_JOURNAL_MAX_BYTES")
        if told:  # the database is failing: said directly, at once
            coro = self.reply(msg.sender, catalog.t("store_unavailable", self.settings.language), None, None)
            if not self.spawn(coro, f"whatsapp:{sid}"):
                coro.close()
        return PlainTextResponse("store unavailable", status_code=503)

    async def run(self, msg: InboundMessage, taken: Taken) -> None:
        """bot.intake's runner: what follows a taken message, in a tracked task, after the number's earlier ones."""
        async with self._numbers.hold(msg.sender):
            await self._run(msg, taken)

    async def _run(self, msg: InboundMessage, taken: Taken) -> None:
        assert self.runtime is not None
        lang, sid = self.settings.language, msg.external_id
        if taken.status == "journaled":  # the database cannot take it: said directly
            if taken.tell:
                await self.reply(msg.sender, catalog.t("message_kept", lang), None, None)
            return
        if taken.refusal is not None:
            logger.info("whatsapp.refused", message_sid=sid, reason=taken.refusal.key)
            await self.say(msg.sender, catalog.t(taken.refusal.key, lang, **taken.refusal.params))
            return
        try:
            if taken.replayed and (await self.runtime.pipeline.opt_out.check(SURFACE, msg.sender, msg.text)
                                   ).action == "silenced":  # opted out before the database came back
                self.runtime.pipeline.release(taken)
                logger.info("whatsapp.dropped_opted_out", message_sid=sid)
                return
            out = await self.runtime.listener.run(msg, taken, self.fetch)  # a voice note: on its transcript
        except StoreError as exc:
            logger.error("whatsapp.store_unavailable", message_sid=sid, error=type(exc).__name__)
            await self.reply(msg.sender, catalog.t("store_unavailable", lang), None, None)  # said directly
            return
        except Exception as exc:  # a bug must not leave the person waiting for an answer that never comes
            logger.error("whatsapp.turn_crashed", message_sid=sid, error=type(exc).__name__)
            await self.say(msg.sender, catalog.t("internal_error", lang),
                           taken.turn.user_id if taken.turn is not None else None)
            raise
        if out.status == "duplicate" or out.metadata.get("queued"):  # a turn's reply: queued with it
            return
        if out.status == "command":  # queued after the number's replies before it (a crash between the
            await self.say(msg.sender, out.text)  # command's inbound record and this loses it: docs/architecture.md)
            return
        # the reply could not be stored: said directly, not lost
        await self.reply(msg.sender, out.text, out.user_id, out.reply_id or out.message_id)
