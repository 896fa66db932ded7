"""Telegram's side of a reply: split to the 4,096 limit, "typing" while the model works, and the transport the
outbox sends replies and notices through (`TelegramTransport`: one part, classified errors), and `Say`: what is said
outside a turn (command answers, refusals, errors), queued in the outbox when the person is known to the
database, else sent directly by `send_text` (retried here) where no row can be stored.

Bot API calls are retried by bot.retry (the one retry module) under Telegram's numbers (SendPolicy); this
module only classifies:
- RetryAfter (429): wait what Telegram says (up to `retry_after_cap`; longer gives up at once), then try again;
- TimedOut, NetworkError (5xx, connection): exponential backoff with jitter;
- BadRequest, Forbidden (blocked by the user), ChatMigrated, InvalidToken...: permanent, never retried.
A read timeout may hide a message Telegram did send; retrying it risks a duplicate part, which is judged
better than a lost one (the Bot API has no idempotency key). asyncio.CancelledError always propagates.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, TypeVar

from telegram import Bot, ReplyParameters
from telegram.constants import ChatAction
from telegram.error import BadRequest, NetworkError, RetryAfter, TelegramError

from bot.notices import Notices
from bot.retry import GaveUp, RetryPolicy, call_with_retry
from kernel import log
from kernel.errors import SendError, ServiceUnavailable
from kernel.text_split import split_text, utf16_len

logger = log.get("hilo.telegram")

# Opt in now to python-telegram-bot's next-major behaviour (durations as timedelta): without it every
# RetryAfter (429) warns that its int `retry_after` is deprecated. The library reads it at each use.
os.environ.setdefault("PTB_TIMEDELTA", "true")

T = TypeVar("T")
#: Telegram refuses a text message over 4,096 characters (counted here in UTF-16 units, which is never less).
MAX_MESSAGE_CHARS = 4096
#: Telegram shows "typing..." for about 5 s after each sendChatAction.
TYPING_EVERY_S = 4.0


def split_reply(text: str, limit: int = MAX_MESSAGE_CHARS) -> list[str]:
    """`text` as parts of at most `limit` UTF-16 units (as Telegram counts), in order, cut on paragraph, then
    line, then sentence, then word boundaries (kernel.text_split). A blank text gives no part."""
    if limit < 2:
        raise ValueError("limit must be at least 2 (a character outside the BMP takes 2 units)")
    return split_text(text, limit, length=utf16_len)


@dataclass(frozen=True, slots=True)
class SendPolicy(RetryPolicy):
    """Telegram's numbers for bot.retry (a 429 may ask for up to a minute). `sleep` is injectable so tests need
    not wait."""

    attempts: int = 4
    retry_after_cap: float = 60.0


def _transient(error: BaseException) -> bool:
    # TimedOut is a NetworkError; BadRequest is one too in python-telegram-bot, and permanent.
    return isinstance(error, RetryAfter) or (isinstance(error, NetworkError) and not isinstance(error, BadRequest))


def _pause(error: BaseException) -> float | None:
    return _seconds(error.retry_after) if isinstance(error, RetryAfter) else None


def _log_retry(attempt: int, error: BaseException, wait: float) -> None:
    logger.warning("telegram.send_retry", attempt=attempt, error=type(error).__name__, wait_s=round(wait, 3))


class SendFailed(ServiceUnavailable):
    """A Bot API call given up after `attempts` attempts; `error` is the last TelegramError. When sending a
    split text, `sent` holds the parts that did go out before it, as (Message, attempts)."""

    def __init__(self, error: TelegramError, attempts: int, sent: list[tuple[Any, int]] | None = None) -> None:
        super().__init__(describe(error))
        self.error = error
        self.attempts = attempts
        self.sent = sent or []


def _seconds(value: float | timedelta) -> float:
    return value.total_seconds() if isinstance(value, timedelta) else float(value)


def describe(error: TelegramError) -> str:
    """What a delivery row keeps of an error: its class and Telegram's description (never message text)."""
    return f"{type(error).__name__}: {error.message}"[:300]


async def send_with_retry(call: Callable[[], Awaitable[T]], policy: SendPolicy) -> tuple[T, int]:
    """`call()`'s result and the attempts it took, retried per `policy`; SendFailed when given up."""
    try:
        return await call_with_retry(call, policy, transient=_transient, retry_after=_pause, on_retry=_log_retry,
                                     errors=(TelegramError,))
    except GaveUp as gave_up:
        assert isinstance(gave_up.error, TelegramError)
        raise SendFailed(gave_up.error, gave_up.attempts) from gave_up.error


@contextlib.asynccontextmanager
async def show_typing(bot: Bot, chat_id: int, every: float = TYPING_EVERY_S) -> AsyncIterator[None]:
    """Show "typing..." in the chat until the block ends (repeated every `every` s; failures only logged)."""

    async def keep_typing() -> None:
        while True:
            try:
                await bot.send_chat_action(chat_id, ChatAction.TYPING)
            except TelegramError as exc:
                logger.debug("telegram.typing_failed", error=type(exc).__name__)
            await asyncio.sleep(every)

    task = asyncio.create_task(keep_typing(), name="telegram.typing")
    try:
        yield
    finally:
        task.cancel()
        await asyncio.wait([task])  # unlike `await task`, never swallows a cancellation of our own


async def send_text(
    bot: Bot, chat_id: int, text: str, *, reply_to: int | None, policy: SendPolicy,
) -> list[tuple[Any, int]]:
    """Send `text` (split) in order, as (Message, attempts) per part; the first part answers `reply_to`
    (groups). A part given up raises SendFailed carrying the parts already sent; later parts are not sent."""
    sent: list[tuple[Any, int]] = []
    for i, part in enumerate(split_reply(text)):
        params = ReplyParameters(reply_to, allow_sending_without_reply=True) if reply_to and i == 0 else None

        async def call(part: str = part, params: ReplyParameters | None = params) -> Any:
            return await bot.send_message(chat_id, part, reply_parameters=params)

        try:
            sent.append(await send_with_retry(call, policy))
        except SendFailed as exc:
            raise SendFailed(exc.error, exc.attempts, sent) from exc.error
    return sent


class TelegramTransport:
    """The outbox's transport (bot/ports.py Transport) for Telegram: one sendMessage per part, never retried
    here; Telegram's errors classified into SendError (the outbox retries with bot/retry.py's policy)."""

    name = "telegram"
    max_part_chars = MAX_MESSAGE_CHARS

    def __init__(self, bot: Bot) -> None:
        self.bot = bot

    async def send(self, recipient: str, text: str, reply_to: str | None) -> str:
        params = ReplyParameters(int(reply_to), allow_sending_without_reply=True) if reply_to else None
        try:
            message = await self.bot.send_message(int(recipient), text, reply_parameters=params)
        except TelegramError as exc:
            raise SendError(describe(exc), transient=_transient(exc), code=type(exc).__name__,
                            retry_after=_pause(exc)) from exc
        return str(message.message_id)


class Say:
    """What the Telegram surface says outside a turn: queued in the outbox when the person is known to the
    database (bot/notices.py `say`: `user_id`, or the user of the identity `sender`), so it goes out in the
    chat's order with the replies, retried, recorded. Else sent directly, where no row can be stored: a person
    the database does not know (after what the chat has queued), or, with neither `sender` nor `user_id`, the
    database failing (at once)."""

    def __init__(self, bot: Bot, notices: Notices, policy: SendPolicy) -> None:
        self.bot = bot
        self.notices = notices
        self.policy = policy

    async def say(self, chat_id: int, text: str, reply_to: int | None, *, sender: str | None = None,
                  user_id: int | None = None) -> None:
        if (sender is not None or user_id is not None) and await self.notices.say(
                "telegram", str(chat_id), text, user_id=user_id, sender=sender,
                reply_to=None if reply_to is None else str(reply_to)):
            return
        await self.send_now(chat_id, text, reply_to)

    async def direct(self, chat_id: int, text: str, reply_to: int | None) -> None:
        """Never queued (a sender off the allowlist: hilo keeps nothing about them), but after what the chat has
        queued (a group's replies to others)."""
        await self.notices.after_queued("telegram", str(chat_id))
        await self.send_now(chat_id, text, reply_to)

    async def document(self, chat_id: int, data: bytes, filename: str, caption: str) -> bool:
        """A file (`/export`'s JSON) through sendDocument, after what the chat has queued: retried here, not
        recorded (the outbox carries text). False when given up."""
        await self.notices.after_queued("telegram", str(chat_id))

        async def call() -> Any:
            return await self.bot.send_document(chat_id, document=data, filename=filename, caption=caption)

        try:
            await send_with_retry(call, self.policy)
        except SendFailed as exc:
            logger.error("telegram.send_failed", kind="document", error=type(exc.error).__name__,
                         attempts=exc.attempts)
            return False
        logger.info("telegram.document_sent", bytes=len(data))
        return True

    async def send_now(self, chat_id: int, text: str, reply_to: int | None) -> None:
        """The direct send: retried here, not recorded."""
        try:
            await send_text(self.bot, chat_id, text, reply_to=reply_to, policy=self.policy)
        except SendFailed as exc:
            logger.error("telegram.send_failed", error=type(exc.error).__name__, attempts=exc.attempts)
