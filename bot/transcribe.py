"""Transcribers: a voice note's bytes in, its text out (issue 15). Behind a Protocol, so another backend (a local
offline Whisper, if a package ever ships its weights) plugs in beside the one shipped:

- `OpenAITranscriber`: any OpenAI-compatible `/audio/transcriptions` endpoint (OpenAI, Groq, a local Whisper
  server such as faster-whisper-server or whisper.cpp's) through the real `openai` SDK
  (`AsyncOpenAI.audio.transcriptions.create`: multipart in, JSON `{"text": ...}` out), SDK retries off and
  bot.retry retrying 429 / 5xx / timeouts as for the chat models. Configured by HILO_TRANSCRIBE_MODEL,
  HILO_TRANSCRIBE_URL and HILO_TRANSCRIBE_API_KEY (bot/config_media.py).

`from_settings` gives None when transcription is not configured: the caller tells the person so.
TranscriptionFailed (a HiloError) is what every backend raises when it gives up; its message names the status
and what to check, never the audio or its text.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Protocol

from bot.retry import GaveUp, RetryPolicy, call_with_retry
from kernel import log
from kernel.errors import HiloError

if TYPE_CHECKING:
    from bot.config import Settings

logger = log.get("hilo.transcribe")


class TranscriptionFailed(HiloError):
    """A transcription was given up (or answered no text). `status`: the HTTP status, when there was one."""

    def __init__(self, detail: str, status: int | None = None) -> None:
        super().__init__(detail)
        self.status = status


class Transcriber(Protocol):
    """What turns audio into text. `name` is stored with each transcript ("openai:whisper-1")."""

    name: str

    async def transcribe(self, audio: bytes, *, filename: str, language: str | None) -> str:
        """The text spoken in `audio` (`filename`'s extension tells the format); `language` an ISO-639-1 hint or
        None. TranscriptionFailed when it cannot."""
        ...

    async def aclose(self) -> None: ...


class OpenAITranscriber:
    """Transcriptions through `openai.AsyncOpenAI` (SDK retries off; bot.retry retries)."""

    def __init__(self, *, model: str, api_key: str = "", base_url: str = "", timeout: float = 120.0,
                 policy: RetryPolicy | None = None, client: Any = None) -> None:
        from bot.models.openai_provider import new_client

        self._client = client if client is not None else new_client(api_key=api_key, base_url=base_url,
                                                                    timeout=timeout)
        self._model = model
        self._timeout = timeout
        self._policy = policy or RetryPolicy()
        self.name = f"openai:{model}"

    async def transcribe(self, audio: bytes, *, filename: str, language: str | None) -> str:
        from bot.models.base import ModelError
        from bot.models.openai_provider import classify
        from bot.models.retry import pause, transient

        extra = {"language": language} if language else {}

        async def call() -> Any:
            try:
                return await self._client.audio.transcriptions.create(
                    model=self._model, file=(filename, audio), response_format="json", timeout=self._timeout,
                    **extra)
            except Exception as exc:
                raise classify(self.name, exc) from exc

        try:
            answer, _attempts = await call_with_retry(call, self._policy, transient=transient, retry_after=pause,
                                                      on_retry=self._log_retry, errors=(ModelError,))
        except GaveUp as exc:
            status = getattr(exc.error, "status", None)
            raise TranscriptionFailed(f"{self.name}: {exc.error} (after {exc.attempts} attempt(s)); check "
                                      "HILO_TRANSCRIBE_URL, HILO_TRANSCRIBE_MODEL and the key", status) from exc
        text = getattr(answer, "text", None)
        if not isinstance(text, str):
            raise TranscriptionFailed(f"{self.name}: the answer has no text (check HILO_TRANSCRIBE_MODEL)")
        return text.strip()

    def _log_retry(self, attempt: int, error: BaseException, wait: float) -> None:
        logger.warning("transcribe.retry", transcriber=self.name, attempt=attempt, error=type(error).__name__,
                       status=getattr(error, "status", None), wait_s=round(wait, 3))

    async def aclose(self) -> None:
        await self._client.close()


def from_settings(settings: Settings) -> Transcriber | None:
    """The configured transcriber, or None (HILO_TRANSCRIBE_MODEL unset: not configured)."""
    if not settings.transcribe_model:
        return None
    return OpenAITranscriber(model=settings.transcribe_model, api_key=settings.transcribe_api_key,
                             base_url=settings.transcribe_url, timeout=settings.transcribe_timeout)
