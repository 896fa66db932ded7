"""Voice notes and audio (issue 15): from the stored message to the transcript its turn runs on.

A surface stores a voice note like any message (bot/intake.py: before the webhook is acknowledged), with a
placeholder text ("[voice note: 12 s]") and, in its metadata under "voice", the platform's reference (Telegram's
file_id, Twilio's MediaUrl), size, duration and type. Sizes and durations the platform states are refused at once,
before anything is downloaded (`refusal`). The rest happens in the turn's tracked task (`Listener.run`), never
while the platform waits: the surface's `fetch` downloads the audio (stopping past HILO_MEDIA_MAX_BYTES: a
MediaTooLarge), the file is kept (bot/media_store.py: HILO_DATA_DIR/media or Supabase Storage, for
HILO_MEDIA_RETENTION_DAYS; a place that cannot keep it loses the file, not the message), the transcriber turns
it into text, and that text becomes the stored message's content in one transaction (its search terms, episode
and vector follow: memory/sql_media.py) before the turn runs on it, so memory, context and search treat it like
typed text. A media row (migration 0035) records what became of it.

When transcription is not configured, the download fails, the audio is too large, or the transcriber fails or hears
nothing, the person is told so in their language, and that notice is stored as hilo's answer to the message (so
recovery does not answer the placeholder later); the message, its media reference and the media row stay. All of it
runs inside the turn (Pipeline.run's `prepare`), under the conversation's turn lease.
Logs carry ids, sizes and durations, never the transcript nor a media URL (a Bot API file URL holds the token).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from bot import assembly
from bot.media_store import MediaFiles, MediaStoreError, drop_file, keep_file, media_files
from bot.vision import Seer
from kernel import catalog, log
from kernel.errors import HiloError, InputError
from kernel.text import size_text
from kernel.types import InboundMessage, Ingested, OutboundMessage

if TYPE_CHECKING:
    from bot.config import Settings
    from bot.erasures import Erasures
    from bot.pipeline import Pipeline, Prepare, Taken
    from bot.transcribe import Transcriber
    from memory.store import Store

logger = log.get("hilo.media")

#: Downloads the audio, reading at most the given number of bytes: MediaTooLarge past it; any other exception is
#: a failed download.
Fetch = Callable[[int], Awaitable[bytes]]
_EXTENSIONS = {"audio/ogg": "ogg", "audio/opus": "ogg", "audio/mpeg": "mp3", "audio/mp4": "m4a", "audio/aac": "aac",
               "audio/amr": "amr", "audio/wav": "wav", "audio/x-wav": "wav", "audio/webm": "webm", "video/mp4": "mp4"}


class MediaTooLarge(HiloError):
    """A download passed HILO_MEDIA_MAX_BYTES (`size`: the bytes stated or read so far); it was stopped there."""

    def __init__(self, size: int) -> None:
        super().__init__(f"media over the size cap ({size} bytes)")
        self.size = size


@dataclass(frozen=True, slots=True)
class Voice:
    """What a surface knows of a voice note before downloading it (metadata["voice"]): kind voice | audio |
    video_note, its MIME type, size in bytes and duration in seconds when the platform says."""

    kind: str
    mime: str | None = None
    bytes: int | None = None
    duration_s: int | None = None

    def as_metadata(self, ref: str, placeholder: str, caption: str | None = None) -> dict[str, Any]:
        """metadata["voice"]: this, the platform's reference to download it by, the message's text until its
        transcript replaces it (a stored message whose text is still that was never heard), and the caption sent
        with it (kept after the transcript)."""
        caption = caption.strip() if caption and caption.strip() else None
        return {"kind": self.kind, "mime": self.mime, "bytes": self.bytes, "duration_s": self.duration_s, "ref": ref,
                "placeholder": placeholder, "caption": caption}

    @property
    def filename(self) -> str:
        """A name whose extension tells the transcriber the format (Telegram voice notes are Ogg Opus)."""
        mime = (self.mime or "").split(";", 1)[0].strip().lower()
        return f"{self.kind}.{_EXTENSIONS.get(mime, 'ogg')}"


def voice_of(metadata: Mapping[str, Any]) -> tuple[Voice, str, str | None] | None:
    """The voice note a stored message's metadata names, with its platform reference and placeholder text; None for
    other messages."""
    v = metadata.get("voice")
    if not isinstance(v, dict) or not v.get("ref"):
        return None
    voice = Voice(str(v.get("kind") or "audio"), v.get("mime"), v.get("bytes"), v.get("duration_s"))
    return voice, str(v["ref"]), v.get("placeholder")


def refusal(settings: Settings, voice: Voice) -> InputError | None:
    """The catalogue's refusal of a voice note whose stated size or duration is over the caps (nothing downloaded)."""
    if voice.bytes is not None and voice.bytes > settings.media_max_bytes:
        return InputError("voice_too_large", limit=size_text(settings.media_max_bytes))
    if voice.duration_s is not None and voice.duration_s > settings.media_max_seconds:
        return InputError("voice_too_long", seconds=voice.duration_s, limit=settings.media_max_seconds)
    return None


class Listener:
    """Runs a taken voice note's turn on its transcript (`run`); other messages go straight to the pipeline."""

    def __init__(self, settings: Settings, pipeline: Pipeline, transcriber: Transcriber | None) -> None:
        self.settings = settings
        self.pipeline = pipeline
        self.transcriber = transcriber
        self.files: MediaFiles = media_files(settings)
        self.seer = Seer(settings, pipeline, self.files)  # photos (bot/vision.py)
        self._fetchers: dict[str, Callable[[str], Fetch]] = {}

    def register(self, surface: str, fetch: Callable[[str], Fetch]) -> None:
        """How `surface` downloads its media (by reference), for the messages recovery answers: from now on a
        recovered voice note is heard before it is answered."""
        self._fetchers[surface] = fetch
        self.pipeline.recovering = self.preparer

    def unregister(self, surface: str) -> None:
        self._fetchers.pop(surface, None)

    async def aclose(self) -> None:
        if self.transcriber is not None:
            await self.transcriber.aclose()

    async def run(self, msg: InboundMessage, taken: Taken, fetch: Callable[[str], Fetch]) -> OutboundMessage:
        """The turn of `msg`: on its transcript when it is a voice note (`fetch(ref)` downloads it), else as is.
        The download and transcription run inside the turn (Pipeline.run's `prepare`), under the conversation's
        turn lease, renewed meanwhile: no other process's recovery answers the placeholder while it is heard."""
        return await self.pipeline.run(msg, taken, prepare=self.preparer(msg, fetch))

    def preparer(self, msg: InboundMessage, fetch: Callable[[str], Fetch] | None = None) -> Prepare | None:
        """What hears `msg` inside its turn (None: not a voice note, or no way to download it). A voice note heard
        already (its stored text is no longer the placeholder: a resumed redelivery, a recovery after the
        transcript was kept) is not heard again. A photo is the Seer's (bot/vision.py)."""
        found = voice_of(msg.metadata)
        fetch = fetch if fetch is not None else self._fetchers.get(msg.surface)
        if fetch is not None and found is None:
            return self.seer.preparer(msg, fetch)
        if found is None or fetch is None:
            return None
        voice, ref, placeholder = found

        async def hear(m: InboundMessage, turn: Ingested) -> tuple[InboundMessage, Ingested] | str | None:
            if placeholder is not None and turn.message.content != placeholder:
                return replace(m, text=turn.message.content), turn
            return await self._hear(m, turn, voice, fetch(ref))

        return hear

    async def _hear(self, msg: InboundMessage, turn: Ingested, voice: Voice, fetch: Fetch,
                    ) -> tuple[InboundMessage, Ingested] | str | None:
        """The message and turn on the transcript; or what to tell the person instead (not heard: the media row
        kept); or None (the person was forgotten meanwhile: nothing kept)."""
        from bot.transcribe import TranscriptionFailed  # (with the transcriber: only when one is configured)

        user_id, message_id = turn.user_id, turn.message.id
        lang = catalog.language(msg.language, self.settings.language)
        row: dict[str, Any] = {"surface": msg.surface, "kind": voice.kind, "mime": voice.mime, "bytes": voice.bytes,
                               "duration_s": voice.duration_s}
        if self.transcriber is None:
            return await self._not_heard(turn, row, "not_configured", "voice_not_configured", lang)
        try:
            data = await fetch(self.settings.media_max_bytes)
        except MediaTooLarge as exc:
            logger.info("media.too_large", message_id=message_id, bytes=exc.size, limit=self.settings.media_max_bytes)
            return await self._not_heard(turn, {**row, "bytes": exc.size}, "too_large", "voice_too_large", lang,
                                         limit=size_text(self.settings.media_max_bytes))
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            logger.error("media.download_failed", surface=msg.surface, message_id=message_id,
                         error=type(exc).__name__)
            return await self._not_heard(turn, row, "failed", "voice_failed", lang)
        row["bytes"] = len(data)
        row["path"] = await keep_file(self.files, user_id, message_id, voice, data)
        transcriber = self.transcriber
        row["transcriber"] = transcriber.name
        try:
            text = await transcriber.transcribe(data, filename=voice.filename, language=_hint(msg))
        except TranscriptionFailed as exc:
            logger.error("media.transcription_failed", message_id=message_id, transcriber=transcriber.name,
                         bytes=len(data), status=exc.status)
            return await self._not_heard(turn, row, "failed", "voice_failed", lang)
        if not text:
            return await self._not_heard(turn, row, "empty", "voice_empty", lang)
        heard_chars = len(text)
        caption = msg.metadata.get("voice", {}).get("caption")
        if caption:  # what the person typed with the voice note follows what they said
            text = f"{text}\n{caption}"
        tokens = await assembly.count_tokens(text)
        if self.settings.media_retention_days == 0 and row["path"]:  # kept only until transcribed
            row["path"] = None if await drop_file(self.files, message_id, row["path"]) else row["path"]
        kept = await self.pipeline.store.keep_transcript(user_id, message_id, text, tokens,
                                                         {**row, "status": "transcribed"})
        if kept is None:  # the person was forgotten meanwhile: nothing to answer, nothing to keep
            if row.get("path"):
                await drop_file(self.files, message_id, row["path"])
            logger.info("media.forgotten_meanwhile", message_id=message_id)
            return None
        logger.info("media.transcribed", message_id=message_id, media_id=kept, transcriber=transcriber.name,
                    bytes=len(data), duration_s=voice.duration_s, chars=heard_chars)
        heard = replace(turn, message=replace(turn.message, content=text, token_count=tokens))
        return replace(msg, text=text), heard

    async def _not_heard(self, turn: Ingested, row: dict[str, Any], status: str, key: str, lang: str,
                         **params: object) -> str:
        """Not transcribed: the media row kept, and what to tell the person (stored as hilo's answer)."""
        media_id = await self.pipeline.store.keep_media(turn.user_id, turn.message.id, {**row, "status": status})
        logger.info("media.not_transcribed", message_id=turn.message.id, media_id=media_id, status=status)
        return catalog.t(key, lang, **params)


async def forget(store: Store, files: MediaFiles | None, handle: str,
                 erasures: Erasures | None = None) -> dict[str, int] | None:
    """Forget the person `handle`: noted in `erasures` first (bot/erasures.py: a restored backup does not bring
    them back), then their media files deleted, then every row (Store.erase, counted): the counts, with
    "media_files" when some were deleted; None when nobody has that handle. `hilo forget` and `/forget yes`
    (`erasures` None: a start forgetting again whom the record lists). ErasureNotKept when the note cannot be
    written, MediaStoreError when a file's place cannot delete it: then nothing is forgotten yet (the rows still
    name the files, so trying again finds them; no object is left behind unrecorded)."""
    if erasures is not None:
        identities = await store.identities_of(handle)
        if identities is None:
            return None
        await erasures.note(handle, identities)
    paths = await store.media_paths(handle) if files is not None else []
    try:
        deleted = await files.delete(paths) if paths and files is not None else 0
    except MediaStoreError as exc:
        logger.error("media.forget_failed", files=len(paths), status=exc.status, error=str(exc))
        raise
    counts = await store.erase(handle)
    if counts is not None:
        # the operator's note of it: a backup taken before brings the person back (docs/deploy.md, "Backups")
        logger.info("person.forgotten", handle=handle, rows=sum(counts.values()), media_files=deleted)
        if paths:
            counts["media_files"] = deleted
    return counts


async def forget_again(erasures: Erasures, store: Store, files: MediaFiles | None) -> int:
    """The record of erasures applied again after a restore (bot/erasures.py), each person through `forget`
    above (their media files too, not noted again): `hilo serve` at its start, `hilo migrate`."""
    return await erasures.reapply(store, lambda handle: forget(store, files, handle))


def _hint(msg: InboundMessage) -> str | None:
    """The language the person is known to use (Telegram's language_code: "es-AR" -> "es"), else None: the
    transcriber detects it (a wrong hint garbles the transcript)."""
    if not msg.language:
        return None
    primary = msg.language.split("-", 1)[0].lower()
    return primary if len(primary) == 2 and primary.isalpha() else None
