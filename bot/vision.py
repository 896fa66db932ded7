"""Photos (issue 15): from the stored message to a model that sees it, and to a description later turns read.

A surface stores a photo like any message (before the webhook is acknowledged), with a placeholder text ("[photo]",
then the caption on the next line) and, in its metadata under "image", the platform's reference (Telegram's file_id,
Twilio's MediaUrl), MIME type, stated size and caption. A stated size over HILO_IMAGE_MAX_BYTES is refused at once,
before anything is downloaded (`refusal`). The rest runs inside the turn (bot/media.py's Listener, Pipeline.run's
`prepare`, under the conversation's turn lease):

- When the model image turns go to accepts images (`accepts`: HILO_VISION=on, or auto and a known vision model),
  the photo is downloaded (stopped past HILO_IMAGE_MAX_BYTES: MediaTooLarge, said to the person), kept under
  HILO_DATA_DIR/media like a voice note (its media row: kind "photo", status "seen"), and sent with the message's
  text on that turn only (`InboundMessage.images` -> the new message's `ChatMessage.images`; the providers write
  OpenAI's `image_url` data URL part or Anthropic's base64 `image` block). No extra call describes it: the same
  call is asked to start its answer with one line "[photo: what it shows]" (`seeing`); that line is taken off the
  reply (`split`) and becomes the stored message's content with the caption ("[photo: a red bicycle]\\ncaption",
  `described`), so later turns, search, episodes and vectors see the description (memory/sql_media.py
  `rewrite`). A model that does not write the line leaves the placeholder: its answer is sent as it came.
- Otherwise the message's content becomes the caption and a note ("[photo: not seen, this model reads text only]")
  before the turn runs on it, so the model answers sensibly; nothing is downloaded and nothing is refused.

An image route (HILO_MODEL_ROUTES `"images": true`, bot/config_routes.py) sends the turns that carry a photo to a
stronger model; `accepts` asks about that route's model. Logs carry ids and sizes, never the image, its URL or text.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from bot import assembly
from bot.media_store import drop_file, keep_file
from kernel import catalog, log
from kernel.errors import InputError
from kernel.text import size_text
from kernel.types import ChatMessage, ImagePart, InboundMessage, Ingested

if TYPE_CHECKING:
    from bot.config import ModelSpec, Settings
    from bot.media import Fetch
    from bot.media_store import MediaFiles
    from bot.models.base import Completion
    from bot.pipeline import Pipeline, Prepare
    from memory.context import AssembledContext
    from memory.store import Store

logger = log.get("hilo.vision")

PLACEHOLDER = "[photo]"
NOT_SEEN = "[photo: not seen, this model reads text only]"
_EXTENSIONS = {"image/jpeg": "jpg", "image/png": "png", "image/webp": "webp", "image/gif": "gif"}
#: Model names that take images, by family (HILO_VISION=auto); anything else is asked as text only. HILO_VISION=on
#: or off overrides it for a model this list does not know.
_VISION_MODELS = re.compile(
    r"gpt-4o|gpt-4\.1|gpt-4-turbo|gpt-4-vision|gpt-5|(^|[/:])o[134](-|$)|claude-3|claude-(sonnet|opus|haiku)-4|"
    r"claude-[a-z0-9.-]*4|gemini|llava|pixtral|vision|[-_]vl\b|-vl-|llama-4|gemma-?3|mistral-(small|medium)-3",
    re.IGNORECASE)
_ASK = ('(The person sent the photo above. Start your answer with one line "[photo: ...]" saying in a few words what '
        "it shows, in the person's language, then answer them.)")
_DESCRIBED = re.compile(r"\A\s*\[photo:\s*([^\]\n]{1,300})\]\s*")


@dataclass(frozen=True, slots=True)
class Photo:
    """What a surface knows of a photo before downloading it (metadata["image"]): its MIME type and stated size."""

    mime: str = "image/jpeg"
    bytes: int | None = None
    kind: str = "photo"

    def as_metadata(self, ref: str, caption: str | None) -> dict[str, Any]:
        """metadata["image"]: this, the reference to download it by, its caption and the placeholder text (a stored
        message whose text is still that was never seen nor noted)."""
        caption = caption.strip() if caption and caption.strip() else None
        return {"kind": self.kind, "mime": self.mime, "bytes": self.bytes, "ref": ref, "caption": caption,
                "placeholder": with_caption(PLACEHOLDER, caption)}

    @property
    def filename(self) -> str:
        return f"photo.{_EXTENSIONS.get(self.mime.split(';', 1)[0].strip().lower(), 'jpg')}"


def with_caption(line: str, caption: str | None) -> str:
    return f"{line}\n{caption}" if caption and caption.strip() else line


def photo_of(metadata: Mapping[str, Any]) -> tuple[Photo, str, dict[str, Any]] | None:
    """The photo a stored message's metadata names, with its reference and its metadata; None for other messages."""
    v = metadata.get("image")
    if not isinstance(v, dict) or not v.get("ref"):
        return None
    return Photo(str(v.get("mime") or "image/jpeg"), v.get("bytes")), str(v["ref"]), v


def refusal(settings: Settings, photo: Photo) -> InputError | None:
    """The catalogue's refusal of a photo whose stated size is over HILO_IMAGE_MAX_BYTES (nothing downloaded)."""
    if photo.bytes is not None and photo.bytes > settings.image_max_bytes:
        return InputError("image_too_large", limit=size_text(settings.image_max_bytes))
    return None


def model_sees(spec: ModelSpec) -> bool:
    """Whether a model is known to take images (by its name; echo, the dry run, does not)."""
    return spec.provider != "echo" and bool(_VISION_MODELS.search(spec.model))


def image_model(settings: Settings, caption: str) -> ModelSpec:
    """The model a turn with a photo goes to: the first route that takes it (bot/config_routes.py), else
    HILO_MODEL."""
    for route in settings.model_routes:
        if route.matches(caption, True):
            return route.models[0]
    return settings.model


def accepts(settings: Settings, caption: str) -> bool:
    """Whether photos go to the model as images (HILO_VISION)."""
    if settings.vision != "auto":
        return settings.vision == "on"
    return model_sees(image_model(settings, caption))


def sent_to(settings: Settings) -> Callable[[ModelSpec, Sequence[ChatMessage]], Sequence[ChatMessage]] | None:
    """What each model of a chain is sent of a turn's messages (bot/models/chain.py): with HILO_VISION=auto, a
    model not known to see images (a fallback after the vision model) gets the note instead of the photo and of the
    request to describe it. None (as they are) with HILO_VISION on or off."""
    if settings.vision != "auto":
        return None

    def messages_for(spec: ModelSpec, messages: Sequence[ChatMessage]) -> Sequence[ChatMessage]:
        if model_sees(spec) or not any(m.images for m in messages):
            return messages
        return [replace(m, images=(), content=m.content.replace(f"\n\n{_ASK}", "").replace(PLACEHOLDER, NOT_SEEN, 1))
                if m.images else m for m in messages]

    return messages_for


def seeing(ctx: AssembledContext, images: tuple[ImagePart, ...]) -> AssembledContext:
    """The context with the photo beside the new message's text, and the request to describe it first."""
    messages = [replace(m, content=f"{m.content}\n\n{_ASK}", images=images) if m.block == "new_message" else m
                for m in ctx.messages]
    return replace(ctx, messages=messages)


def split(completion: Completion) -> tuple[str | None, Completion]:
    """(the description the answer starts with, the answer without it); (None, as it came) when it has none."""
    found = _DESCRIBED.match(completion.text)
    if found is None or not completion.text[found.end():].strip():
        return None, completion
    return found.group(1).strip(), replace(completion, text=completion.text[found.end():])


async def described(store: Store, msg: InboundMessage, turn: Ingested, description: str) -> None:
    """The description (with the caption) becomes the stored message's content: what later turns and search see."""
    found = photo_of(msg.metadata)
    text = with_caption(f"[photo: {description}]", found[2].get("caption") if found else None)
    kept = await store.rewrite_message(turn.user_id, turn.message.id, text, await assembly.count_tokens(text))
    logger.info("vision.described", message_id=turn.message.id, chars=len(description), kept=kept)


class Seer:
    """What a photo's turn runs first (bot/media.py's Listener hands it the message): the photo downloaded for a
    model that sees, or the note for one that does not."""

    def __init__(self, settings: Settings, pipeline: Pipeline, files: MediaFiles) -> None:
        self.settings = settings
        self.pipeline = pipeline  # (its store: a runtime may hold no pipeline yet when this is built)
        self.files = files

    @property
    def store(self) -> Store:
        return self.pipeline.store

    def preparer(self, msg: InboundMessage, fetch: Callable[[str], Fetch]) -> Prepare | None:
        """What sees `msg` inside its turn (`fetch(ref)` downloads it); None: not a photo."""
        found = photo_of(msg.metadata)
        if found is None:
            return None
        photo, ref, meta = found

        async def see(m: InboundMessage, turn: Ingested) -> tuple[InboundMessage, Ingested] | str | None:
            if meta.get("placeholder") is not None and turn.message.content != meta["placeholder"]:
                return replace(m, text=turn.message.content), turn  # seen or noted already: on its stored text
            return await self._see(m, turn, photo, meta.get("caption"), fetch(ref))

        return see

    async def _see(self, msg: InboundMessage, turn: Ingested, photo: Photo, caption: str | None, fetch: Fetch,
                   ) -> tuple[InboundMessage, Ingested] | str | None:
        from bot.media import MediaTooLarge

        user_id, message_id = turn.user_id, turn.message.id
        row: dict[str, Any] = {"surface": msg.surface, "kind": photo.kind, "mime": photo.mime, "bytes": photo.bytes}
        if not accepts(self.settings, caption or ""):
            text = with_caption(NOT_SEEN, caption)
            tokens = await assembly.count_tokens(text)
            if await self.store.keep_transcript(user_id, message_id, text, tokens, {**row, "status": "not_seen"}) \
                    is None:
                return None  # the person was forgotten meanwhile
            logger.info("vision.not_seen", message_id=message_id)
            return replace(msg, text=text), replace(turn, message=replace(turn.message, content=text,
                                                                           token_count=tokens))
        lang = catalog.language(msg.language, self.settings.language)
        limit = self.settings.image_max_bytes
        try:
            data = await fetch(limit)
        except MediaTooLarge as exc:
            logger.info("media.too_large", message_id=message_id, bytes=exc.size, limit=limit)
            await self.store.keep_media(user_id, message_id, {**row, "bytes": exc.size, "status": "too_large"})
            return catalog.t("image_too_large", lang, limit=size_text(limit))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.error("media.download_failed", surface=msg.surface, message_id=message_id,
                         error=type(exc).__name__)
            await self.store.keep_media(user_id, message_id, {**row, "status": "failed"})
            return catalog.t("image_failed", lang)
        path = (await keep_file(self.files, user_id, message_id, photo, data)
                if self.settings.media_retention_days > 0 else None)  # 0: kept only while its turn runs
        media_id = await self.store.keep_media(user_id, message_id,
                                               {**row, "bytes": len(data), "path": path, "status": "seen"})
        if media_id is None:  # the person was forgotten meanwhile: nothing to answer, nothing to keep
            if path is not None:
                await drop_file(self.files, message_id, path)
            logger.info("media.forgotten_meanwhile", message_id=message_id)
            return None
        logger.info("vision.seen", message_id=message_id, media_id=media_id, bytes=len(data))
        return replace(msg, images=(ImagePart(sniffed(data) or photo.mime, data),)), turn


def sniffed(data: bytes) -> str | None:
    """The image type its first bytes say (a provider refuses an image whose stated type is not its own)."""
    if data.startswith(b"\xff\xd8\xff"):
        return "image/jpeg"
    if data.startswith(b"\x89PNG\r\n\x1a\n"):
        return "image/png"
    if data.startswith((b"GIF87a", b"GIF89a")):
        return "image/gif"
    if data[:4] == b"RIFF" and data[8:12] == b"WEBP":
        return "image/webp"
    return None

