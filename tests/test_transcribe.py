"""The OpenAI-compatible transcriber through the real openai SDK against the fake provider's
/v1/audio/transcriptions (multipart in, JSON {"text"} out): what it sends, what it returns, how it fails."""

from __future__ import annotations

import pytest

from bot import transcribe
from bot.config import Settings
from bot.retry import RetryPolicy
from kernel.errors import ConfigError
from tests.fakes import model_server as fake
from tests.fakes.transcriptions_api import audio

model_server_session = fake.model_server_session
model_server = fake.model_server

QUICK = RetryPolicy(attempts=2, backoff_base=0.0, backoff_max=0.0)


def transcriber(server: fake.FakeModelServer) -> transcribe.OpenAITranscriber:
    return transcribe.OpenAITranscriber(model="whisper-1", api_key="x", base_url=server.base_url + "/v1",
                                        timeout=5, policy=QUICK)


async def test_sends_the_audio_model_and_language_hint_and_returns_the_text(
    model_server: fake.FakeModelServer,
) -> None:
    t = transcriber(model_server)
    try:
        text = await t.transcribe(audio("  buy oranges on friday  "), filename="voice.ogg", language="es")
    finally:
        await t.aclose()
    assert text == "buy oranges on friday"
    (request,) = model_server.requests
    assert request.path == "/v1/audio/transcriptions" and request.model == "whisper-1"
    assert request.body["language"] == "es" and request.body["response_format"] == "json"
    assert request.body["file"] == {"filename": "voice.ogg", "bytes": len(audio("  buy oranges on friday  "))}
    assert request.headers["authorization"] == "Bearer x"
    assert t.name == "openai:whisper-1"


async def test_retries_a_503_then_gives_up_with_transcription_failed(model_server: fake.FakeModelServer) -> None:
    t = transcriber(model_server)
    model_server.enqueue(fake.status(503), fake.ok("second time lucky"))
    try:
        assert await t.transcribe(audio("x"), filename="a.ogg", language=None) == "second time lucky"
        assert "language" not in model_server.requests[-1].body
        model_server.enqueue(fake.status(503), fake.status(503))
        with pytest.raises(transcribe.TranscriptionFailed) as failed:
            await t.transcribe(audio("x"), filename="a.ogg", language=None)
        assert failed.value.status == 503 and "HILO_TRANSCRIBE_URL" in str(failed.value)
        model_server.enqueue(fake.status(401))
        with pytest.raises(transcribe.TranscriptionFailed):
            await t.transcribe(audio("x"), filename="a.ogg", language=None)
    finally:
        await t.aclose()
    assert len(model_server.requests) == 5  # 2 + 2 + 1: a 401 is not retried


def test_configuration() -> None:
    assert transcribe.from_settings(Settings.from_mapping({})) is None  # not configured
    s = Settings.from_mapping({"HILO_TRANSCRIBE_MODEL": "whisper-large-v3", "OPENAI_API_KEY": "sk-openai",
                               "HILO_TRANSCRIBE_URL": "https://api.groq.com/openai/v1/",
                               "HILO_TRANSCRIBE_API_KEY": "gsk"})
    assert (s.transcribe_model, s.transcribe_url, s.transcribe_api_key) == \
        ("whisper-large-v3", "https://api.groq.com/openai/v1", "gsk")
    # the OpenAI key never goes to another server
    s = Settings.from_mapping({"HILO_TRANSCRIBE_MODEL": "m", "OPENAI_API_KEY": "sk-openai",
                               "HILO_TRANSCRIBE_URL": "http://127.0.0.1:8000/v1"})
    assert s.transcribe_api_key == ""
    s = Settings.from_mapping({"HILO_TRANSCRIBE_MODEL": "whisper-1", "OPENAI_API_KEY": "sk-openai"})
    assert (s.transcribe_url, s.transcribe_api_key) == ("", "sk-openai")
    with pytest.raises(ConfigError, match="HILO_TRANSCRIBE_MODEL"):
        Settings.from_mapping({"HILO_TRANSCRIBE_MODEL": "whisper-1"})
    with pytest.raises(ConfigError, match="HILO_MEDIA_MAX_BYTES"):
        Settings.from_mapping({"HILO_MEDIA_MAX_BYTES": "lots"})
