"""The Telegram surface: a python-telegram-bot Application (the Bot, its HTTP and lifecycle) inside the daemon's.

Stored, then acknowledged (bot/intake.py). Webhook (HILO_TELEGRAM_MODE=webhook): `POST /webhooks/telegram`
checks X-Telegram-Bot-Api-Secret-Token against TELEGRAM_WEBHOOK_SECRET in constant time BEFORE reading the body
(403 otherwise), makes the update durable (its message stored, its inbound record written, or the local journal
when the database cannot take it) and only then answers 200; when nothing could be kept it answers 503 and
Telegram retries. setWebhook is called at start with HILO_PUBLIC_URL. Polling (default): hilo's own getUpdates
loop (surfaces/telegram_polling.py) confirms an update's offset only once it is durable. Either way what follows
(the model, the reply) runs in a tracked task, concurrently across chats and one at a time within a chat, in
arrival order, so a chat's replies go out in the order its messages came; `stop()` lets them finish.

Exactly once: a message's external_id is "<chat id>:<message id>"; every delivery is recorded in the database
(a turn's message, or the inbound record of a command or refusal), so a redelivery, in this process or after a
restart, is never answered twice nor re-runs a command. Edited messages are not subscribed to nor answered.
What a message means (ignore, refuse, command, turn) is decided in `telegram_inbound`. A turn's reply goes
out through the outbox (bot/outbox.py: stored parts, in order per chat, retried, resumed after a restart) by
`telegram_outbound.TelegramTransport`; so is what is said outside a turn (`_say`: command answers, refusals,
errors) when the person is known to the database, else sent directly (`telegram_outbound.Say` says where).
"""

from __future__ import annotations

import asyncio
import hmac
import logging
from collections.abc import Coroutine
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from telegram import Update
from telegram.error import TelegramError
from telegram.ext import Application

from bot import export, media, metrics, vision
from bot.config import Settings
from bot.keyed import KeyedLocks
from bot.outbox import with_route
from bot.pipeline import Taken
from bot.readiness import cached
from bot.runtime import Runtime
from kernel import catalog, log
from kernel.errors import ConfigError, Draining, ServiceUnavailable, StoreError
from kernel.types import InboundMessage
from surfaces.http_body import BodyTooLarge, parse_json, read_body
from surfaces.media_fetch import download
from surfaces.telegram_inbound import Allowlist, BotIdentity, classify
from surfaces.telegram_outbound import Say, SendPolicy, TelegramTransport, show_typing
from surfaces.telegram_polling import Poller
from surfaces.telegram_setup import api_urls, check_webhook_settings, start_failed, webhook_state

logger = log.get("hilo.telegram")

WEBHOOK_PATH = "/webhooks/telegram"
MAX_UPDATE_BYTES = 1024 * 1024
#: Seconds the stop gives the outbox to send what the drained updates queued (the rest waits for the next start).
FLUSH_S = 10.0
#: How long /readyz keeps Telegram's word that the webhook is registered (getWebhookInfo).
WEBHOOK_CHECK_S = 30.0


class TelegramSurface:
    name = "telegram"

    def __init__(
        self, settings: Settings, *, poll_interval: float = 0.0, poll_timeout: float = 10.0,
        send_policy: SendPolicy | None = None,
    ) -> None:
        if not settings.telegram_bot_token:
            raise ConfigError("the Telegram surface needs TELEGRAM_BOT_TOKEN (ask @BotFather for one)")
        if settings.telegram_mode == "webhook":
            check_webhook_settings(settings)
        self.settings = settings
        self.mode = settings.telegram_mode
        self.allowlist = Allowlist(settings.telegram_allowed_users)
        self.poll_interval = poll_interval
        self.poll_timeout = poll_timeout
        self.policy = send_policy or SendPolicy()
        self._app: Application[Any, Any, Any, Any, Any, Any] | None = None
        self._runtime: Runtime | None = None
        self._me: BotIdentity | None = None
        self._speaker: Say | None = None
        self._accepting = False
        self._chats: KeyedLocks[int] = KeyedLocks()  # what follows an update: one at a time per chat, in order
        self._taking: KeyedLocks[int] = KeyedLocks()  # taking an update in: one at a time per chat
        self._inflight: set[asyncio.Task[Any]] = set()
        self._poller: Poller | None = None
        self._webhook_state = cached(lambda: webhook_state(self.application.bot, self.settings, WEBHOOK_PATH),
                                     ok_s=WEBHOOK_CHECK_S, failed_s=5.0)

    def routes(self) -> list[BaseRoute]:
        if self.mode != "webhook":
            return []
        return [Route(WEBHOOK_PATH, self.webhook, methods=["POST"])]

    @property
    def application(self) -> Application[Any, Any, Any, Any, Any, Any]:
        if self._app is None:
            raise RuntimeError("the Telegram surface has not started")
        return self._app

    async def start(self, runtime: Runtime) -> None:
        # httpx logs each request's URL at INFO, and a Bot API URL carries the bot token.
        logging.getLogger("httpx").setLevel(logging.WARNING)
        self._runtime = runtime
        api, files = api_urls(self.settings.telegram_api_base_url)
        # No Updater: PTB's confirms offsets when it fetches the next batch, before hilo stored anything.
        app = (
            Application.builder().token(self.settings.telegram_bot_token).base_url(api).base_file_url(files)
            .updater(None).job_queue(None).build()
        )
        try:
            await app.initialize()  # getMe
        except BaseException as exc:
            await app.bot.shutdown()  # a half-done initialize leaves its HTTP connections open
            if isinstance(exc, TelegramError):
                raise start_failed(self.settings, exc) from None
            raise
        self._app = app
        self._speaker = Say(app.bot, runtime.pipeline.notices, self.policy)
        try:
            self._me = BotIdentity(app.bot.id, (app.bot.username or "").lower())
            await app.start()
            if self.mode == "webhook":
                await app.bot.set_webhook(
                    url=self.settings.public_url + WEBHOOK_PATH, secret_token=self.settings.telegram_webhook_secret,
                    allowed_updates=[Update.MESSAGE],
                )
            else:
                await app.bot.delete_webhook()  # getUpdates answers 409 while a webhook is set
                self._poller = Poller(app.bot, self._take_update, lease=runtime.intake.poll_lease(),
                                      interval=self.poll_interval, timeout=self.poll_timeout)
                self._poller.start()
        except BaseException as exc:
            await self.stop()
            if isinstance(exc, TelegramError):
                raise start_failed(self.settings, exc) from None
            raise
        self._accepting = True
        runtime.pipeline.outbox.register(TelegramTransport(app.bot))  # replies and notices go out through it
        runtime.intake.register(self.name, self._run, self._spawn)
        runtime.listener.register(self.name, self._fetch)  # a recovered voice note is downloaded here too
        logger.info("telegram.started", mode=self.mode, bot_id=app.bot.id, allowlist=bool(self.allowlist))

    async def ready(self) -> dict[str, Any]:
        """/readyz (bot/readiness.py): the polling loop runs, or the webhook is registered at HILO_PUBLIC_URL."""
        if self._app is None or not self._accepting:
            return {"ok": False, "mode": self.mode, "error": "not started"}
        if self._poller is not None:
            return self._poller.state()
        return await self._webhook_state()

    async def stop(self) -> None:
        """Stop receiving, then let the Application finish the updates it has (queued and in flight)."""
        was_started = self._accepting
        self._accepting = False
        app = self._app
        if app is None:
            return
        if self._runtime is not None:  # the updates in flight stop waiting for their replies' sends
            self._runtime.pipeline.outbox.closing(self.name)
        # The webhook stays registered: another process (or this one, restarted) takes the updates; Telegram
        # keeps them meanwhile. Polling's stop confirms the updates stored so far.
        try:
            if self._poller is not None:
                await self._poller.stop()
                self._poller = None
            if self._inflight:  # what follows updates already taken in (turns, replies) finishes first
                await asyncio.wait(set(self._inflight), timeout=self.settings.stop_timeout)
            if app.running:
                await app.stop()
        finally:
            if self._runtime is not None:  # what the drained updates queued goes out before the bot closes
                self._runtime.intake.unregister(self.name)
                self._runtime.listener.unregister(self.name)
                outbox = self._runtime.pipeline.outbox
                await outbox.flush(self.name, timeout=FLUSH_S)
                outbox.unregister(self.name)  # later parts stay queued for the next start
            await app.shutdown()
            self._app = None  # only now: the updates drained above still send their replies
        if was_started:  # a start that failed says so once, where it is caught
            logger.info("telegram.stopped", mode=self.mode)

    async def webhook(self, request: Request) -> Response:
        app = self._app
        if app is None or not self._accepting:
            return Response("not ready", status_code=503)
        given = request.headers.get("x-telegram-bot-api-secret-token", "").encode()
        if not hmac.compare_digest(given, self.settings.telegram_webhook_secret.encode()):
            logger.warning("telegram.webhook_refused", reason="secret token")
            metrics.refused(self.name, "bad_signature")
            return Response(status_code=403)
        try:
            body = await read_body(request, MAX_UPDATE_BYTES)
        except BodyTooLarge:
            metrics.refused(self.name, "too_large")
            return Response(status_code=413)
        except ClientDisconnect:
            return Response(status_code=400)
        try:
            update = Update.de_json(parse_json(body), app.bot)
        except Exception as exc:
            logger.warning("telegram.webhook_unreadable", error=type(exc).__name__)
            return Response(status_code=400)
        try:
            await self._take_update(update)
        except StoreError:  # nothing could be kept (the journal is full): Telegram retries it later
            return Response("store unavailable", status_code=503)
        return Response(status_code=200)

    # -- one update: taken in (durable) before it is acknowledged, then answered in a tracked task ------------

    async def _take_update(self, update: Update) -> None:
        """Make `update` durable: its message stored (or journaled), or its inbound record written; then
        start what follows. StoreError: nothing was kept (do not acknowledge it)."""
        try:
            await self._take_message(update)
        except StoreError:
            raise
        except Exception as exc:  # a bug must not stop the other updates, nor leave the person in silence
            logger.error("telegram.update_failed", update_id=update.update_id, error=type(exc).__name__)
            message = update.message
            if message is not None:
                lang = catalog.language(message.from_user.language_code if message.from_user else None,
                                        self.settings.language)
                sender = str(message.from_user.id) if message.from_user else None
                self._spawn(self._say(message.chat_id, catalog.t("internal_error", lang), None, sender=sender),
                            "telegram.say")

    async def _take_message(self, update: Update) -> None:
        message, rt, me = update.message, self._runtime, self._me
        if message is None or rt is None or me is None:
            return
        d = classify(message, me, self.allowlist, default_language=rt.settings.language,
                     image_max_bytes=rt.settings.image_max_bytes)
        logger.debug("telegram.update", update_id=update.update_id, chat_type=message.chat.type, action=d.action,
                     reason=d.reason)
        if d.action == "ignore":
            return
        chat_id = message.chat_id
        async with self._taking.hold(chat_id):
            if d.action in ("refuse", "non_text", "command"):
                external_id = f"{chat_id}:{message.message_id}"
                kind = "command" if d.action == "command" else "refused"
                sender = str(message.from_user.id) if message.from_user else None
                if not await rt.intake.record(self.name, external_id, kind, sender):
                    logger.info("telegram.redelivery_dropped", update_id=update.update_id)
                    return
                if d.action == "command":
                    assert d.command is not None and d.msg is not None
                    self._spawn(self._command(chat_id, d.command, d.msg, d.lang, d.reply_to), "telegram.command")
                    return
                logger.info("telegram.refused", update_id=update.update_id, reason=d.action)
                if d.action == "refuse":  # off the allowlist: nothing is stored for them, not even a part
                    assert self._speaker is not None
                    say = self._speaker.direct(chat_id, catalog.t("telegram_not_allowed", d.lang), d.reply_to)
                else:
                    assert message.from_user is not None
                    say = self._say(chat_id, catalog.t("telegram_non_text", d.lang), d.reply_to,
                                    sender=str(message.from_user.id))
                self._spawn(self._in_order(chat_id, say), "telegram.say")
                return
            assert d.msg is not None
            if await self._refused_media(update, d.msg, d.lang, d.reply_to):
                return
            # the reply goes out through the outbox, to this chat (kept with the message: recovery too)
            msg = with_route(d.msg, str(chat_id), d.reply_to)
            taken = await rt.intake.take(msg)
            if taken.status == "duplicate":
                logger.info("telegram.redelivery_dropped", update_id=update.update_id)
                return
            rt.intake.spawn(msg, taken)

    async def _refused_media(self, update: Update, msg: InboundMessage, lang: str, reply_to: int | None) -> bool:
        """A voice note or photo whose stated size (or duration) is over the caps: refused (recorded, told) before
        anything is downloaded or stored. False for everything else."""
        found = media.voice_of(msg.metadata)
        photo = vision.photo_of(msg.metadata)
        refusal = (media.refusal(self.settings, found[0]) if found is not None
                   else vision.refusal(self.settings, photo[0]) if photo is not None else None)
        if refusal is None or self._runtime is None:
            return False
        if await self._runtime.intake.record(self.name, msg.external_id, "refused", msg.sender):
            logger.info("telegram.refused", update_id=update.update_id, reason=refusal.key,
                        bytes=found[0].bytes if found else photo[0].bytes if photo else None,
                        duration_s=found[0].duration_s if found else None)
            say = self._say(int(msg.metadata["chat_id"]), catalog.t(refusal.key, lang, **refusal.params), reply_to,
                            sender=msg.sender)
            self._spawn(self._in_order(int(msg.metadata["chat_id"]), say), "telegram.say")
        return True

    def _fetch(self, file_id: str) -> media.Fetch:
        """Downloads a file of the Bot API (getFile, then its URL), within the size cap."""
        async def fetch(limit: int) -> bytes:
            file = await self.application.bot.get_file(file_id)
            if file.file_size is not None and file.file_size > limit:
                raise media.MediaTooLarge(file.file_size)
            if not file.file_path:
                raise ServiceUnavailable("the Bot API gave no file path (a file over 20 MB?)")
            return await download(file.file_path, limit)

        return fetch

    def _track(self, task: asyncio.Task[Any]) -> None:
        self._inflight.add(task)
        task.add_done_callback(self._inflight.discard)

    def _spawn(self, coro: Coroutine[Any, Any, Any], name: str) -> bool:
        """Start what follows an update in a tracked task (False: the daemon is draining)."""
        if self._runtime is None:
            coro.close()
            return False
        try:
            self._track(self._runtime.tasks.spawn(coro, name=name))
        except Draining:
            return False
        return True

    async def _in_order(self, chat_id: int, work: Coroutine[Any, Any, Any]) -> None:
        """`work` after what the chat's earlier updates do (asyncio.Lock wakes its waiters first come, first served)."""
        async with self._chats.hold(chat_id):
            await work

    async def _command(self, chat_id: int, command: Any, msg: InboundMessage, lang: str, reply_to: int | None) -> None:
        assert self._runtime is not None
        async with self._chats.hold(chat_id):
            try:
                if command.name == "export" and await self._export(chat_id, msg, lang):
                    return  # sent as a file; else the answer below (nothing stored, or a link)
                text = await self._runtime.pipeline.command(command, msg)
            except StoreError as exc:  # down, locked, full or broken: said directly
                logger.error("telegram.store_failed", error=type(exc).__name__)
                await self._say(chat_id, catalog.t("store_unavailable", lang), reply_to)
                return
            # queued (the person is known) after the chat's replies before it; a crash between the command's
            # inbound record and this loses the answer (docs/architecture.md, "The outbox")
            await self._say(chat_id, text, reply_to, sender=msg.sender)

    async def _export(self, chat_id: int, msg: InboundMessage, lang: str) -> bool:
        """/export in a private chat: the person's export as a JSON document (bot/export.py); False if not sent."""
        assert self._runtime is not None and self._speaker is not None
        exports = self._runtime.pipeline.exports
        data = None if msg.metadata.get("audience") == "group" else await exports.of_identity(msg.surface, msg.sender,
                                                                                             msg.handle)
        if data is None:
            return False
        return await self._speaker.document(chat_id, export.document(data), export.FILENAME,
                                            catalog.t("cmd_export_document", lang))

    async def _run(self, msg: InboundMessage, taken: Taken) -> None:
        """bot.intake's runner: what follows a taken message (also one replayed from the journal)."""
        rt = self._runtime
        assert rt is not None
        chat_id = int(msg.metadata["chat_id"])
        lang = catalog.language(msg.language, rt.settings.language)
        reply_to = int(msg.external_id.rsplit(":", 1)[1]) if msg.metadata.get("audience") == "group" else None
        async with self._chats.hold(chat_id):
            try:
                await self._answer(chat_id, msg, taken, lang, reply_to, rt)
            except Exception as exc:  # a bug must not leave the person waiting for an answer that never comes
                logger.error("telegram.update_failed", error=type(exc).__name__)
                await self._say(chat_id, catalog.t("internal_error", lang), None, sender=msg.sender,
                                user_id=taken.turn.user_id if taken.turn is not None else None)
                raise

    async def _answer(self, chat_id: int, msg: InboundMessage, taken: Taken, lang: str, reply_to: int | None,
                      rt: Runtime) -> None:
        if taken.status == "journaled":  # the database cannot take it: said directly
            if taken.tell:
                await self._say(chat_id, catalog.t("message_kept", lang), reply_to)
            return
        if taken.refusal is not None:
            await self._say(chat_id, catalog.t(taken.refusal.key, lang, **taken.refusal.params), reply_to,
                            sender=msg.sender)
            return
        try:
            async with show_typing(self.application.bot, chat_id):
                out = await rt.listener.run(msg, taken, self._fetch)  # a voice note: on its transcript
        except StoreError as exc:  # the message is stored; its context or reply could not be had
            logger.error("telegram.store_failed", error=type(exc).__name__, chars=len(msg.text))
            await self._say(chat_id, catalog.t("store_unavailable", lang), reply_to)
            return
        if out.status == "duplicate":
            return
        if out.status == "command":  # e.g. "@bot /help" in a group, or a photo captioned "/memory"
            await self._say(chat_id, out.text, reply_to, sender=msg.sender)
            return
        # "ok", or "failed" (every model down: the catalogue's apology): queued in the outbox with the reply,
        # and what the chat's next update says is queued after it
        if not out.metadata.get("queued"):  # the reply could not be stored: said directly, not lost
            await self._say(chat_id, out.text, reply_to)

    async def _say(self, chat_id: int, text: str, reply_to: int | None, *, sender: str | None = None,
                   user_id: int | None = None) -> None:
        """What hilo says outside a turn (telegram_outbound.Say: queued when the person is known)."""
        assert self._speaker is not None
        await self._speaker.say(chat_id, text, reply_to, sender=sender, user_id=user_id)
