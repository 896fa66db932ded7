"""From one Telegram message to what hilo does with it: ignore it, refuse the sender, say it only reads text,
run a command, or run a turn on one normalized InboundMessage.

Pure (no I/O), so each rule is tested on its own:
- private chats: every message is for hilo;
- groups and supergroups: only a message that @mentions the bot, replies to one of its messages, or is a
  command not addressed to another bot ("/help", "/help@hilo_bot"); each sender is their own person, in
  their own conversation of that group (conversation_ref "group:<chat id>", metadata audience "group", so
  the pipeline keeps their private memory out of an answer others read);
- the allowlist (HILO_TELEGRAM_ALLOWED_USERS) is checked before anything is stored;
- text, or a caption (photo, video...) as the text; a location, venue, contact, document or sticker becomes
  short structured text (surfaces/media_text.py: "[location: 39.47, -0.38]"), followed by its caption; a voice
  note, audio or video note is a turn whose text is a placeholder ("[voice note: 12 s]") until its transcript
  replaces it (bot/media.py; metadata "voice" holds its file_id, size and duration); a photo (its largest size
  within HILO_IMAGE_MAX_BYTES) is a turn on "[photo]" and its caption until the model describes it (bot/vision.py;
  metadata "image" holds its file_id and size); other content (a bare video) gets a clear answer and no turn;
  service messages (someone joined, a pin) and other bots are ignored.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from telegram import Message, User
from telegram.constants import ChatType, MessageEntityType

from bot import commands
from bot.commands import Command
from bot.media import Voice
from bot.vision import PLACEHOLDER, Photo, with_caption
from kernel import catalog
from kernel.types import InboundMessage
from surfaces import media_text

Action = Literal["ignore", "refuse", "non_text", "command", "turn"]


@dataclass(frozen=True, slots=True)
class BotIdentity:
    """Who the bot is (from getMe): its user id and its @username, lowercase, without the "@"."""

    id: int
    username: str


class Allowlist:
    """HILO_TELEGRAM_ALLOWED_USERS: user ids ("12345") and usernames ("@alice" or "alice"). Empty: everyone.
    Ids are the safer choice: a username can be changed and later taken by someone else."""

    def __init__(self, entries: Iterable[str]) -> None:
        cleaned = [e.strip() for e in entries if e.strip()]
        self.ids = frozenset(e for e in cleaned if e.isdigit())
        self.usernames = frozenset(e.lstrip("@").lower() for e in cleaned if not e.isdigit())

    def __bool__(self) -> bool:
        return bool(self.ids or self.usernames)

    def allows(self, user: User) -> bool:
        if not self:
            return True
        return str(user.id) in self.ids or bool(user.username and user.username.lower() in self.usernames)


@dataclass(frozen=True, slots=True)
class Decision:
    """What to do with a message. `msg` is set for "command" and "turn"; `reply_to` (groups) is the message
    id to answer as a reply, so others see whom hilo is talking to."""

    action: Action
    lang: str = "en"
    msg: InboundMessage | None = None
    command: Command | None = None
    reply_to: int | None = None
    reason: str = ""


def classify(message: Message, me: BotIdentity, allow: Allowlist, *, default_language: str = "en",
             image_max_bytes: int = 5 * 1024 * 1024) -> Decision:
    user, chat = message.from_user, message.chat
    if user is None or user.is_bot or message.sender_chat is not None:
        return Decision("ignore", reason="not a person")  # channels, anonymous admins, other bots
    if chat.type not in (ChatType.PRIVATE, ChatType.GROUP, ChatType.SUPERGROUP):
        return Decision("ignore", reason="chat type")
    group = chat.type != ChatType.PRIVATE
    command = commands.parse(message.text) if message.text else None
    if group and command is not None and command.target not in (None, me.username):
        return Decision("ignore", reason="another bot's command")
    if group and command is None and not addressed(message, me):
        return Decision("ignore", reason="not addressed")
    lang = catalog.language(user.language_code, default_language)
    reply_to = message.message_id if group else None
    if not allow.allows(user):
        return Decision("refuse", lang, reply_to=reply_to)
    text = message.text if message.text is not None else message.caption
    attachment = _attachment_kind(message)
    described = structured(message)
    if described is not None:
        text = media_text.with_caption(described, message.caption)
    voice = voice_of(message)
    if voice is not None:  # its caption follows: kept after the transcript replaces the placeholder
        text = media_text.with_caption(media_text.voice(voice[0].duration_s), message.caption)
    # a command in a photo's caption is a command (the photo is not looked at)
    photo = None if message.caption and commands.parse(message.caption) else photo_of(message, image_max_bytes)
    if photo is not None:
        text = with_caption(PLACEHOLDER, message.caption)
    if text is None:
        if attachment is None:
            return Decision("ignore", lang, reason="service message")
        return Decision("non_text", lang, reply_to=reply_to)
    if group and command is None:
        text = strip_mention(text, me)
    metadata: dict[str, Any] = {"chat_id": chat.id, "chat_type": chat.type}
    if user.username:
        metadata["username"] = user.username
    if user.first_name:
        metadata["first_name"] = user.first_name
    if attachment is not None:
        metadata["attachment"] = attachment
    if voice is not None:
        metadata["voice"] = voice[0].as_metadata(voice[1], text, message.caption)
    if photo is not None:
        caption = strip_mention(message.caption, me) if group and message.caption else message.caption
        metadata["image"] = photo[0].as_metadata(photo[1], caption)
        text = metadata["image"]["placeholder"]
    if group:
        metadata["audience"] = "group"
    msg = InboundMessage(
        surface="telegram", sender=str(user.id), external_id=f"{chat.id}:{message.message_id}", text=text,
        received_at=message.date, conversation_ref=f"group:{chat.id}" if group else None, metadata=metadata,
        language=user.language_code,
    )
    if command is not None:
        return Decision("command", lang, msg, command, reply_to)
    return Decision("turn", lang, msg, reply_to=reply_to)


def addressed(message: Message, me: BotIdentity) -> bool:
    """Whether a group message is for the bot: it @mentions it, or replies to one of its messages."""
    reply = message.reply_to_message
    if reply is not None and reply.from_user is not None and reply.from_user.id == me.id:
        return True
    try:
        if message.text is not None:
            entities = message.parse_entities([MessageEntityType.MENTION, MessageEntityType.TEXT_MENTION])
        elif message.caption is not None:
            entities = message.parse_caption_entities([MessageEntityType.MENTION, MessageEntityType.TEXT_MENTION])
        else:
            return False
    except UnicodeDecodeError:  # an entity that splits a character (offsets count UTF-16 units): names no one
        return False
    for entity, value in entities.items():
        if entity.type == MessageEntityType.MENTION and value[1:].lower() == me.username:
            return True
        if entity.type == MessageEntityType.TEXT_MENTION and entity.user is not None and entity.user.id == me.id:
            return True
    return False


def strip_mention(text: str, me: BotIdentity) -> str:
    """The text without "@bot" (it addresses the bot, it is not part of the question)."""
    if not me.username:
        return text
    stripped = re.sub(rf"(?<!\w)@{re.escape(me.username)}(?!\w)", " ", text, flags=re.IGNORECASE)
    return re.sub(r"[ \t]{2,}", " ", stripped).strip()


def structured(message: Message) -> str | None:
    """A location, venue, contact, document or sticker as short structured text (None: none of these)."""
    if message.venue is not None:
        v = message.venue
        return media_text.location(v.location.latitude, v.location.longitude, v.title, v.address)
    if message.location is not None:
        return media_text.location(message.location.latitude, message.location.longitude)
    if message.contact is not None:
        c = message.contact
        return media_text.contact(" ".join(n for n in (c.first_name, c.last_name) if n), c.phone_number)
    if message.document is not None:
        d = message.document
        return media_text.document(d.file_name, d.mime_type, d.file_size)
    if message.sticker is not None:
        return media_text.sticker(message.sticker.emoji)
    return None


def voice_of(message: Message) -> tuple[Voice, str] | None:
    """A voice note, audio file or video note, and its file_id (None: none of these)."""
    if message.voice is not None:
        v = message.voice
        return Voice("voice", v.mime_type or "audio/ogg", v.file_size, _seconds(v.duration)), v.file_id
    if message.audio is not None:
        a = message.audio
        return Voice("audio", a.mime_type, a.file_size, _seconds(a.duration)), a.file_id
    if message.video_note is not None:
        n = message.video_note
        return Voice("video_note", "video/mp4", n.file_size, _seconds(n.duration)), n.file_id
    return None


def photo_of(message: Message, limit: int) -> tuple[Photo, str] | None:
    """A photo and the file_id of its largest size within `limit` bytes (of its smallest when none is: its stated
    size is then refused before any download); None for other messages. Telegram sends photos as JPEG."""
    if not message.photo:
        return None
    sizes = sorted(message.photo, key=lambda p: (p.file_size or 0, p.width * p.height))
    fitting = [p for p in sizes if p.file_size is None or p.file_size <= limit]
    chosen = max(fitting, key=lambda p: p.width * p.height) if fitting else sizes[0]
    return Photo("image/jpeg", chosen.file_size), chosen.file_id


def _seconds(duration: int | timedelta | None) -> int | None:
    """python-telegram-bot gives durations as int seconds, or as timedelta when PTB_TIMEDELTA is set."""
    return int(duration.total_seconds()) if isinstance(duration, timedelta) else duration


def _attachment_kind(message: Message) -> str | None:
    attachment = message.effective_attachment
    if attachment is None:
        return None
    if isinstance(attachment, (list, tuple)):  # photo: a list of sizes
        return "photo"
    return type(attachment).__name__.lower()
