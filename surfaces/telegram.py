"""The Telegram surface: a python-telegram-bot Application inside the daemon's lifecycle.

Polling (default): the Application's Updater long-polls getUpdates. Webhook (HILO_TELEGRAM_MODE=webhook):
`POST /webhooks/telegram` checks X-Telegram-Bot-Api-Secret-Token against TELEGRAM_WEBHOOK_SECRET in
constant time BEFORE reading the body (403 otherwise), puts the update on the Application's queue and answers
200 at once; setWebhook is called at start with HILO_PUBLIC_URL. Either way the Application processes
updates concurrently across chats and one at a time within a chat (`PerChatUpdates`), so a chat's replies
go out in the order its messages came; `stop()` drains the queue and the updates in flight.

Exactly once: a message's external_id is "<chat id>:<message id>"; the pipeline drops one already stored
(UNIQUE index: also across restarts), and this process drops a redelivered update before any work, so
commands and refusals are not answered twice either. Edited messages are not subscribed to nor answered.
What a message means (ignore, refuse, command, turn) is decided in `telegram_inbound`. A turn's reply goes
out through the outbox (bot/outbox.py: stored parts, in order per chat, retried, resumed after a restart) by
`telegram_outbound.TelegramTransport`; the chat's next update waits until it is sent. "typing" and what is said
outside a turn (refusals, command answers: `_say`) are `telegram_outbound` too.
"""

from __future__ import annotations

import hmac
import logging
import re
from datetime import timedelta
from typing import Any

from starlette.requests import ClientDisconnect, Request
from starlette.responses import Response
from starlette.routing import BaseRoute, Route
from telegram import Update
from telegram.error import InvalidToken, NetworkError, TelegramError
from telegram.ext import Application, MessageHandler, filters

from bot.config import Settings
from bot.keyed import RecentIds
from bot.outbox import with_route
from bot.runtime import Runtime
from kernel import catalog, log
from kernel.errors import ConfigError, HiloError, InputError, ServiceUnavailable, StoreError
from surfaces.http_body import BodyTooLarge, parse_json, read_body
from surfaces.telegram_inbound import Allowlist, BotIdentity, Decision, classify
from surfaces.telegram_outbound import SendFailed, SendPolicy, TelegramTransport, send_text, show_typing
from surfaces.telegram_updates import PerChatUpdates

logger = log.get("hilo.telegram")

WEBHOOK_PATH = "/webhooks/telegram"
DEFAULT_API = "https://api.telegram.org"
MAX_UPDATE_BYTES = 1024 * 1024
#: Seconds a chat's update waits for its reply's parts to be sent (the outbox goes on after: they stay queued).
SETTLE_S = 120.0
#: Seconds the stop gives the outbox to send what the drained updates queued (the rest waits for the next start).
FLUSH_S = 10.0
_SECRET = re.compile(r"^[A-Za-z0-9_-]{1,256}$")  # what Telegram accepts as secret_token


def api_urls(base: str) -> tuple[str, str]:
    """Bot API and file URLs for TELEGRAM_API_BASE_URL ("http://host:8081" or ".../bot"; default Telegram's)."""
    base = (base or DEFAULT_API).rstrip("/")
    base = base.removesuffix("/bot")
    return f"{base}/bot", f"{base}/file/bot"


class TelegramSurface:
    name = "telegram"

    def __init__(
        self, settings: Settings, *, poll_interval: float = 0.0, poll_timeout: float = 10.0,
        send_policy: SendPolicy | None = None,
    ) -> None:
        if not settings.telegram_bot_token:
            raise ConfigError("the Telegram surface needs TELEGRAM_BOT_TOKEN (ask @BotFather for one)")
        if settings.telegram_mode == "webhook":
            _check_webhook_settings(settings)
        self.settings = settings
        self.mode = settings.telegram_mode
        self.allowlist = Allowlist(settings.telegram_allowed_users)
        self.poll_interval = poll_interval
        self.poll_timeout = poll_timeout
        self.policy = send_policy or SendPolicy()
        self._app: Application[Any, Any, Any, Any, Any, Any] | None = None
        self._runtime: Runtime | None = None
        self._me: BotIdentity | None = None
        self._accepting = False
        self._recent = RecentIds()

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
        builder = (
            Application.builder().token(self.settings.telegram_bot_token).base_url(api).base_file_url(files)
            .concurrent_updates(PerChatUpdates()).job_queue(None)
        )
        if self.mode == "webhook":
            builder = builder.updater(None)
        app = builder.build()
        app.add_handler(MessageHandler(filters.UpdateType.MESSAGE, self._on_message))
        app.add_error_handler(self._on_error)
        try:
            await app.initialize()  # getMe
        except BaseException as exc:
            await app.bot.shutdown()  # a half-done initialize leaves its HTTP connections open
            if isinstance(exc, TelegramError):
                raise self._start_failed(exc) from None
            raise
        self._app = app
        try:
            self._me = BotIdentity(app.bot.id, (app.bot.username or "").lower())
            await app.start()
            if self.mode == "webhook":
                await app.bot.set_webhook(
                    url=self.settings.public_url + WEBHOOK_PATH, secret_token=self.settings.telegram_webhook_secret,
                    allowed_updates=[Update.MESSAGE],
                )
            else:
                assert app.updater is not None
                await app.updater.start_polling(
                    poll_interval=self.poll_interval, timeout=timedelta(seconds=self.poll_timeout),
                    allowed_updates=[Update.MESSAGE],
                )
        except BaseException as exc:
            await self.stop()
            if isinstance(exc, TelegramError):
                raise self._start_failed(exc) from None
            raise
        self._accepting = True
        runtime.pipeline.outbox.register(TelegramTransport(app.bot))  # replies and notices go out through it
        logger.info("telegram.started", mode=self.mode, bot_id=app.bot.id, allowlist=bool(self.allowlist))

    def _start_failed(self, exc: TelegramError) -> HiloError:
        """What a Bot API error at start means for the operator (`from None` where raised: the library's
        messages and tracebacks may quote the token)."""
        if isinstance(exc, InvalidToken):
            return ConfigError(
                "Telegram refused TELEGRAM_BOT_TOKEN (or TELEGRAM_API_BASE_URL is not a Bot API server): "
                "check the token with @BotFather"
            )
        api = (self.settings.telegram_api_base_url or DEFAULT_API).rstrip("/")
        detail = str(exc).replace(self.settings.telegram_bot_token, "<TELEGRAM_BOT_TOKEN>")
        if isinstance(exc, NetworkError):  # connection refused, DNS, timeouts, 5xx
            return ServiceUnavailable(
                f"cannot reach the Telegram Bot API at {api} ({detail}): check the network, or "
                "TELEGRAM_API_BASE_URL"
            )
        return ServiceUnavailable(f"the Telegram Bot API at {api} refused to start the bot ({detail})")

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
        # keeps them meanwhile. Polling's stop confirms the updates fetched so far.
        try:
            if app.updater is not None and app.updater.running:
                await app.updater.stop()
            if app.running:
                await app.stop()
        finally:
            if self._runtime is not None:  # what the drained updates queued goes out before the bot closes
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
            return Response(status_code=403)
        try:
            body = await read_body(request, MAX_UPDATE_BYTES)
        except BodyTooLarge:
            return Response(status_code=413)
        except ClientDisconnect:
            return Response(status_code=400)
        try:
            update = Update.de_json(parse_json(body), app.bot)
        except Exception as exc:
            logger.warning("telegram.webhook_unreadable", error=type(exc).__name__)
            return Response(status_code=400)
        await app.update_queue.put(update)
        return Response(status_code=200)

    # -- one update ---------------------------------------------------------------------------------------

    async def _on_message(self, update: Update, context: Any) -> None:
        message, rt, me = update.message, self._runtime, self._me
        if message is None or rt is None or me is None:
            return
        if not self._recent.first_time(f"{message.chat_id}:{message.message_id}"):
            logger.info("telegram.redelivery_dropped", update_id=update.update_id)
            return
        d = classify(message, me, self.allowlist, default_language=rt.settings.language)
        logger.debug("telegram.update", update_id=update.update_id, chat_type=message.chat.type, action=d.action,
                     reason=d.reason)
        if d.action == "ignore":
            return
        if d.action == "refuse":
            logger.info("telegram.refused", update_id=update.update_id)
            await self._say(message.chat_id, catalog.t("telegram_not_allowed", d.lang), d.reply_to)
        elif d.action == "non_text":
            await self._say(message.chat_id, catalog.t("telegram_non_text", d.lang), d.reply_to)
        elif d.action == "command":
            assert d.command is not None and d.msg is not None
            try:
                text = await rt.pipeline.command(d.command, d.msg)
            except StoreError as exc:  # down, locked, full or broken
                logger.error("telegram.store_failed", update_id=update.update_id, error=type(exc).__name__)
                text = catalog.t("store_unavailable", d.lang)
            await self._say(message.chat_id, text, d.reply_to)
        else:
            await self._turn(message.chat_id, d, rt)

    async def _turn(self, chat_id: int, d: Decision, rt: Runtime) -> None:
        assert d.msg is not None
        try:
            rt.pipeline.validate(d.msg)  # refuse before showing "typing"
            async with show_typing(self.application.bot, chat_id):
                # the reply goes out through the outbox, to this chat (kept with the message: recovery too)
                out = await rt.pipeline.handle(with_route(d.msg, str(chat_id), d.reply_to))
        except InputError as exc:
            await self._say(chat_id, catalog.t(exc.key, d.lang, **exc.params), d.reply_to)
            return
        except StoreError as exc:  # down, locked, full or broken: ingest is one transaction, nothing was kept
            logger.error("telegram.not_stored", error=type(exc).__name__, chars=len(d.msg.text))
            await self._say(chat_id, catalog.t("store_unavailable", d.lang), d.reply_to)
            return
        if out.status == "duplicate":
            return
        if out.status == "command":  # e.g. "@bot /help" in a group, or a photo captioned "/memory"
            await self._say(chat_id, out.text, d.reply_to)
            return
        # "ok", or "failed" (every model down: the catalogue's apology): queued in the outbox with the reply
        if not out.metadata.get("queued"):  # the reply could not be stored: said directly, not lost
            await self._say(chat_id, out.text, d.reply_to)
            return
        # the chat's next update waits for this reply to go out: what is said next comes after it
        await rt.pipeline.outbox.settled(self.name, str(chat_id), timeout=SETTLE_S)

    async def _say(self, chat_id: int, text: str, reply_to: int | None) -> None:
        """A reply that is not a turn's (commands, refusals, errors): sent, retried, not recorded."""
        try:
            await send_text(self.application.bot, chat_id, text, reply_to=reply_to, policy=self.policy)
        except SendFailed as exc:
            logger.error("telegram.send_failed", error=type(exc.error).__name__, attempts=exc.attempts)

    async def _on_error(self, update: object, context: Any) -> None:
        error = context.error
        logger.error("telegram.update_failed", error=type(error).__name__,
                     update_id=update.update_id if isinstance(update, Update) else None)
        message = update.message if isinstance(update, Update) else None
        if message is not None and self._app is not None:
            lang = catalog.language(message.from_user.language_code if message.from_user else None,
                                    self.settings.language)
            await self._say(message.chat_id, catalog.t("internal_error", lang), None)


def _check_webhook_settings(settings: Settings) -> None:
    missing = [name for name, value in (("TELEGRAM_WEBHOOK_SECRET", settings.telegram_webhook_secret),
                                        ("HILO_PUBLIC_URL", settings.public_url)) if not value]
    if missing:
        raise ConfigError(
            f"HILO_TELEGRAM_MODE=webhook needs {' and '.join(missing)}: set TELEGRAM_WEBHOOK_SECRET to a random "
            "string of letters, digits, _ and - (e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))') "
            "and HILO_PUBLIC_URL to the https URL at which Telegram reaches this daemon; "
            "or set HILO_TELEGRAM_MODE=polling"
        )
    if not _SECRET.match(settings.telegram_webhook_secret):
        raise ConfigError(
            "TELEGRAM_WEBHOOK_SECRET may only hold A-Z, a-z, 0-9, _ and - (1 to 256 characters), as Telegram "
            "requires: e.g. python3 -c 'import secrets; print(secrets.token_urlsafe(32))'"
        )
    if not settings.public_url.startswith(("https://", "http://")):
        raise ConfigError(f"HILO_PUBLIC_URL={settings.public_url!r} must be a URL like https://bot.example.com")
