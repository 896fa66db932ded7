"""Voice notes end to end, with real parts: python-telegram-bot against the fake Bot API (getFile and its file URL),
the real openai SDK against the fake provider's /v1/audio/transcriptions, the real daemon on SQLite, and `hilo
context` as a real process. A voice note is stored before it is transcribed, its transcript becomes the message
(stored, answered, found later), and every way it cannot be heard is said to the person in their language."""

from __future__ import annotations

import json
import os
import sqlite3
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager, closing
from dataclasses import replace
from pathlib import Path
from typing import Any

from bot.config import Settings
from kernel import catalog
from tests import test_whatsapp as wa
from tests.fakes import model_server as fake_model
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.daemon import running_daemon
from tests.fakes.telegram_api import TOKEN, FakeBotApi
from tests.fakes.transcriptions_api import audio

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
model_server_session = fake_model.model_server_session
model_server = fake_model.model_server

REPO = Path(__file__).resolve().parent.parent


def settings(tmp_path: Path, api: FakeBotApi, server: fake_model.FakeModelServer | None, **env: str) -> Settings:
    transcribe = {"HILO_TRANSCRIBE_MODEL": "whisper-1", "HILO_TRANSCRIBE_URL": server.base_url + "/v1",
                  "HILO_TRANSCRIBE_API_KEY": "x"} if server is not None else {}
    return Settings.from_mapping({
        "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": api.base_url, "HILO_SECRET_KEY": "test-secret",
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", **transcribe, **env,
    })


def rows(tmp_path: Path, sql: str) -> list[tuple[Any, ...]]:
    with closing(sqlite3.connect(tmp_path / "hilo.db")) as db:
        return list(db.execute(sql))


def media_rows(tmp_path: Path) -> list[dict[str, Any]]:
    keys = ("message_id", "kind", "mime", "bytes", "duration_s", "path", "transcriber", "status")
    return [dict(zip(keys, r, strict=True)) for r in rows(tmp_path, f"SELECT {', '.join(keys)} FROM media ORDER BY id")]


def user_messages(tmp_path: Path) -> list[tuple[int, str, dict[str, Any]]]:
    return [(r[0], r[1], json.loads(r[2])) for r in
            rows(tmp_path, "SELECT id, content, metadata FROM messages WHERE role = 'user' ORDER BY id")]


def replies(tmp_path: Path) -> list[tuple[int, str]]:
    return [(r[0], r[1]) for r in
            rows(tmp_path, "SELECT reply_to, content FROM messages WHERE role = 'assistant' ORDER BY id")]


def hilo(tmp_path: Path, *args: str) -> str:
    """`hilo ARGS` as a real process on the test's SQLite file (its data directory: tmp_path)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HILO_", "OPENAI_", "ANTHROPIC_"))}
    env.update({"HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "PYTHONPATH": str(REPO)})
    proc = subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=tmp_path, env=env, capture_output=True,
                          text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def hilo_context(tmp_path: Path, *args: str) -> dict[str, Any]:
    result: dict[str, Any] = json.loads(hilo(tmp_path, "context", *args, "--json"))
    return result


async def test_a_telegram_voice_note_is_transcribed_stored_answered_and_found_later(
    tmp_path: Path, bot_api: FakeBotApi, model_server: fake_model.FakeModelServer,
) -> None:
    spoken = audio("remind me that the plumber Ramiro comes on Thursday")
    bot_api.add_file("voice-1", spoken)
    async with running_daemon(settings(tmp_path, bot_api, model_server)):
        bot_api.enqueue(bot_api.voice_update("voice-1", spoken, duration=4, language_code="es-ES", message_id=7))
        [reply] = await bot_api.wait_sent(1)
    # the echo model answered the transcript, not the placeholder
    assert "plumber Ramiro comes on Thursday" in reply.text and "[voice note" not in reply.text
    (request,) = model_server.requests
    assert request.path == "/v1/audio/transcriptions" and request.model == "whisper-1"
    assert request.body["language"] == "es"  # the person's Telegram language, as the hint
    assert request.body["file"] == {"filename": "voice.ogg", "bytes": len(spoken)}
    [(message_id, content, metadata)] = user_messages(tmp_path)
    assert content == "remind me that the plumber Ramiro comes on Thursday"
    assert metadata["voice"]["ref"] == "voice-1" and metadata["voice"]["duration_s"] == 4
    [row] = media_rows(tmp_path)
    assert row["message_id"] == message_id and row["transcriber"] == "openai:whisper-1"
    assert (row["status"], row["bytes"], row["duration_s"], row["kind"]) == ("transcribed", len(spoken), 4, "voice")
    assert Path(row["path"]).read_bytes() == spoken and Path(row["path"]).is_relative_to(tmp_path / "media")
    assert replies(tmp_path) == [(message_id, reply.text)]
    # later, from another surface: the transcript is recalled like typed text
    ctx = hilo_context(tmp_path, "--user", "telegram:42", "--surface", "web", "when does the plumber come?")
    found = [i for i in ctx["items"]
             if i.get("external_id") == "42:7" or "42:7" in (i.get("source_external_ids") or [])]
    assert found, ctx["items"]
    assert any("plumber Ramiro" in m["content"] for m in ctx["messages"])


async def test_a_voice_note_over_the_stated_size_or_duration_is_refused_before_any_download(
    tmp_path: Path, bot_api: FakeBotApi, model_server: fake_model.FakeModelServer,
) -> None:
    big = audio("too much", padding=4096)
    bot_api.add_file("big", big)
    env = {"HILO_MEDIA_MAX_BYTES": "2048", "HILO_MEDIA_MAX_SECONDS": "60"}
    async with running_daemon(settings(tmp_path, bot_api, model_server, **env)):
        bot_api.enqueue(bot_api.voice_update("big", big, duration=5, language_code="es"))
        bot_api.enqueue(bot_api.voice_update("big", audio("x"), duration=61, size=10, language_code="en"))
        first, second = await bot_api.wait_sent(2)
    assert first.text == catalog.t("voice_too_large", "es", limit="2 KB")
    assert second.text == catalog.t("voice_too_long", "en", seconds=61, limit=60)
    assert bot_api.calls_of("getFile") == [] and bot_api.downloads == [] and model_server.requests == []
    assert user_messages(tmp_path) == []  # refused: recorded against redelivery, nothing of it stored


async def test_a_download_that_passes_the_cap_is_stopped_and_the_message_kept_with_its_reference(
    tmp_path: Path, bot_api: FakeBotApi, model_server: fake_model.FakeModelServer,
) -> None:
    big = audio("lies about its size", padding=512 * 1024)
    bot_api.add_file("liar", big, state_size=False)  # getFile states no size; the download is chunked
    async with running_daemon(settings(tmp_path, bot_api, model_server, HILO_MEDIA_MAX_BYTES="65536")):
        bot_api.enqueue(bot_api.voice_update("liar", big, duration=3, size=1000))
        [notice] = await bot_api.wait_sent(1)
    assert notice.text == catalog.t("voice_too_large", "en", limit="64 KB")
    assert model_server.requests == [] and bot_api.downloads == ["voice/file_0.oga"]
    [(message_id, content, metadata)] = user_messages(tmp_path)
    assert content == "[voice note: 3 s]" and metadata["voice"]["ref"] == "liar"
    [row] = media_rows(tmp_path)
    assert (row["message_id"], row["status"], row["path"]) == (message_id, "too_large", None)
    assert row["bytes"] is not None and 65536 < row["bytes"] < len(big)  # stopped past the cap, not read whole
    assert not (tmp_path / "media").exists()
    assert replies(tmp_path) == [(message_id, notice.text)]  # answered: recovery leaves it


async def test_transcription_not_configured_or_failing_is_said_and_the_media_reference_kept(
    tmp_path: Path, bot_api: FakeBotApi, model_server: fake_model.FakeModelServer,
) -> None:
    spoken = audio("hola")
    bot_api.add_file("v", spoken)
    async with running_daemon(settings(tmp_path, bot_api, None)):  # no HILO_TRANSCRIBE_MODEL
        bot_api.enqueue(bot_api.voice_update("v", spoken, duration=2, language_code="es"))
        [notice] = await bot_api.wait_sent(1)
    assert notice.text == catalog.t("voice_not_configured", "es")
    assert bot_api.downloads == []
    [(message_id, content, metadata)] = user_messages(tmp_path)
    assert content == "[voice note: 2 s]" and metadata["voice"]["ref"] == "v"
    assert [(r["message_id"], r["status"]) for r in media_rows(tmp_path)] == [(message_id, "not_configured")]

    model_server.enqueue(*[fake_model.status(503)] * 3)  # every attempt fails
    async with running_daemon(settings(tmp_path, bot_api, model_server, HILO_MODEL_ATTEMPTS="1")):
        bot_api.enqueue(bot_api.voice_update("v", spoken, duration=2, language_code="en"))
        await bot_api.wait_sent(2)
    assert bot_api.sent[1].text == catalog.t("voice_failed", "en")
    failed = media_rows(tmp_path)[1]
    assert failed["status"] == "failed" and failed["transcriber"] == "openai:whisper-1"
    assert Path(failed["path"]).read_bytes() == spoken  # the audio is kept (retention deletes it)
    assert user_messages(tmp_path)[1][1] == "[voice note: 2 s]"


# -- WhatsApp: Twilio's MediaUrl, fetched with the account's credentials -----------------------------------------
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api


def voice_form(sid: str, url: str) -> dict[str, str]:
    return wa.incoming(sid, "", NumMedia="1", MediaUrl0=url, MediaContentType0="audio/ogg")


async def test_a_whatsapp_voice_note_is_fetched_with_the_account_credentials_transcribed_and_found_later(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi, model_server: fake_model.FakeModelServer,
) -> None:
    spoken = audio("buy bread and olive oil for Sunday")
    url = twilio_api.add_media("SMvoice1", "ME1", spoken)
    transcribe = {"HILO_TRANSCRIBE_MODEL": "whisper-large-v3", "HILO_TRANSCRIBE_URL": model_server.base_url + "/v1",
                  "HILO_TRANSCRIBE_API_KEY": "gsk"}
    async with running_daemon(wa.settings_for(tmp_path, twilio_api, **transcribe)) as client:
        r = await wa.post(client, "/webhooks/whatsapp", voice_form("SMvoice1", url))
        assert r.status_code == 200
        (answer,) = await twilio_api.wait_for(1)
        await wa.idle(client)
    assert "buy bread and olive oil for Sunday" in answer.body and "[voice note" not in answer.body
    assert twilio_api.media_fetches == [("ME1", True)]  # Basic auth: account SID and auth token
    (request,) = model_server.requests
    assert request.model == "whisper-large-v3" and "language" not in request.body  # nothing known: detected
    assert request.body["file"] == {"filename": "audio.ogg", "bytes": len(spoken)}
    [(message_id, content, metadata)] = user_messages(tmp_path)
    assert content == "buy bread and olive oil for Sunday" and metadata["voice"]["ref"] == url
    [row] = media_rows(tmp_path)
    assert (row["message_id"], row["status"], row["transcriber"]) == (message_id, "transcribed",
                                                                       "openai:whisper-large-v3")
    ctx = hilo_context(tmp_path, "--user", wa.HANDLE, "--surface", "telegram", "what do I need for Sunday?")
    assert any(i.get("external_id") == "SMvoice1" or "SMvoice1" in (i.get("source_external_ids") or [])
               for i in ctx["items"]), ctx["items"]


async def test_a_whatsapp_voice_note_over_the_cap_is_refused_on_its_content_length(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi, model_server: fake_model.FakeModelServer,
) -> None:
    url = twilio_api.add_media("SMbig", "ME2", audio("long", padding=8192))
    env = {"HILO_TRANSCRIBE_MODEL": "whisper-1", "HILO_TRANSCRIBE_URL": model_server.base_url + "/v1",
           "HILO_MEDIA_MAX_BYTES": "4096"}
    async with running_daemon(wa.settings_for(tmp_path, twilio_api, **env)) as client:
        await wa.post(client, "/webhooks/whatsapp", voice_form("SMbig", url))
        (notice,) = await twilio_api.wait_for(1)
        await wa.idle(client)
    assert notice.body == catalog.t("voice_too_large", "en", limit="4 KB")
    assert model_server.requests == []
    [row] = media_rows(tmp_path)
    assert row["status"] == "too_large" and row["bytes"] == len(audio("long", padding=8192)) and row["path"] is None
    assert user_messages(tmp_path)[0][1] == "[voice note]"


# -- where media lives: HILO_DATA_DIR/media, for HILO_MEDIA_RETENTION_DAYS; `hilo export` and `hilo forget` ---------
async def test_media_files_are_exported_deleted_by_retention_and_by_forget(
    tmp_path: Path, bot_api: FakeBotApi, model_server: fake_model.FakeModelServer,
) -> None:
    from bot import retention
    from bot.media_store import LocalFiles
    from memory.open import open_store

    for n, words in enumerate(["first note about the garden", "second note about the garage"]):
        bot_api.add_file(f"f{n}", audio(words))
    async with running_daemon(settings(tmp_path, bot_api, model_server)):
        bot_api.enqueue(bot_api.voice_update("f0", audio("first note about the garden"), duration=2))
        await bot_api.wait_sent(1)
    first = media_rows(tmp_path)[0]["path"]
    exported = json.loads(hilo(tmp_path, "export", "--user", "telegram:42"))
    [row] = exported["tables"]["media"]
    assert (row["path"], row["status"], row["transcriber"]) == (first, "transcribed", "openai:whisper-1")
    hilo(tmp_path, "export", "--user", "telegram:42", "--output", "out.json", "--media", "copies")
    [copy] = (tmp_path / "copies").iterdir()  # the file itself, named by its media row and message
    assert copy.read_bytes() == Path(first).read_bytes() and copy.name == f"{row['id']}-{Path(first).name}"

    store = open_store(f"sqlite:///{tmp_path / 'hilo.db'}")
    await store.open()
    try:
        files = LocalFiles(tmp_path)
        assert await retention.run_media(store, files, 1, "r1") == 0  # kept for a day: nothing old enough
        assert Path(first).exists()
        assert await retention.run_media(store, files, 0, "r2") == 1
    finally:
        await store.close()
    assert not Path(first).exists() and media_rows(tmp_path)[0]["path"] is None
    assert user_messages(tmp_path)[0][1] == "first note about the garden"  # the transcript stays

    async with running_daemon(settings(tmp_path, bot_api, model_server)):
        bot_api.enqueue(bot_api.voice_update("f1", audio("second note about the garage"), duration=2))
        await bot_api.wait_sent(2)
    second = media_rows(tmp_path)[1]["path"]
    assert Path(second).exists()
    out = hilo(tmp_path, "forget", "--user", "telegram:42")
    assert "media 2" in out and "media_files 1" in out
    assert not Path(second).exists() and rows(tmp_path, "SELECT count(*) FROM media") == [(0,)]


async def test_forget_yes_on_telegram_deletes_the_persons_media_files_too(
    tmp_path: Path, bot_api: FakeBotApi, model_server: fake_model.FakeModelServer,
) -> None:
    bot_api.add_file("f", audio("a note to forget"))
    async with running_daemon(settings(tmp_path, bot_api, model_server)):
        bot_api.enqueue(bot_api.voice_update("f", audio("a note to forget"), duration=2))
        await bot_api.wait_sent(1)
        path = Path(media_rows(tmp_path)[0]["path"])
        assert path.exists()
        bot_api.enqueue(bot_api.text_update("/forget yes"))
        await bot_api.wait_sent(2)
    assert bot_api.sent[1].text == catalog.t("cmd_forget_done", "en")
    assert not path.exists() and rows(tmp_path, "SELECT count(*) FROM media") == [(0,)]


@asynccontextmanager
async def listening(tmp_path: Path, server: fake_model.FakeModelServer) -> AsyncIterator[tuple[Any, Any, Any]]:
    """A pipeline on the test's SQLite file (the echo model) and its Listener, transcribing through the fake
    provider: (store, pipeline, listener), closed afterwards."""
    from bot.media import Listener
    from bot.models.factory import build_chain
    from bot.pipeline import Pipeline
    from bot.transcribe import OpenAITranscriber
    from memory.open import open_store

    s = Settings.from_mapping({"HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_EMBEDDER": "none"})
    store = open_store(s.database_url)
    await store.open()
    chain = build_chain(s)
    pipeline = Pipeline(s, store, chain)
    transcriber = OpenAITranscriber(model="whisper-1", api_key="x", base_url=server.base_url + "/v1")
    listener = Listener(s, pipeline, transcriber)
    try:
        yield store, pipeline, listener
    finally:
        await listener.aclose()
        await chain.aclose()
        await store.close()


async def test_a_person_forgotten_while_their_voice_note_was_transcribed_gets_no_turn_and_no_file_kept(
    tmp_path: Path, model_server: fake_model.FakeModelServer,
) -> None:
    from bot.media import Voice
    from kernel.types import InboundMessage

    async with listening(tmp_path, model_server) as (store, pipeline, listener):
        voice = Voice("voice", "audio/ogg", 100, 2).as_metadata("f", "[voice note: 2 s]")
        msg = InboundMessage(surface="telegram", sender="42", external_id="42:1", text="[voice note: 2 s]",
                             metadata={"voice": voice})
        taken = await pipeline.take(msg)
        assert taken.turn is not None

        def fetch(ref: str) -> Any:
            async def download(limit: int) -> bytes:
                assert await store.forget(taken.turn.handle)  # type: ignore[union-attr]  # while it downloads
                return audio("too late")
            return download

        out = await listener.run(msg, taken, fetch)
    assert out.status == "duplicate" and len(model_server.requests) == 1  # transcribed, then nothing more
    assert rows(tmp_path, "SELECT count(*) FROM messages") == [(0,)]
    assert not any((tmp_path / "media").rglob("*.ogg"))


async def test_a_media_url_off_twilios_host_is_never_fetched_with_the_account_credentials(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    import pytest

    from kernel.errors import ServiceUnavailable
    from surfaces.whatsapp_inbox import Inbox

    inbox = Inbox(wa.settings_for(tmp_path, twilio_api), sender=None, spawn=lambda coro, name: False)  # type: ignore[arg-type]
    with pytest.raises(ServiceUnavailable):
        await inbox.fetch("https://collector.example.net/2010-04-01/Accounts/AC1/Messages/MM1/Media/ME1")(1024)
    url = twilio_api.add_media("MM2", "ME9", audio("fine"))
    assert await inbox.fetch(url)(1024) == audio("fine")
    assert twilio_api.media_fetches == [("ME9", True)]


async def test_recovery_hears_a_voice_note_a_crash_left_unheard_and_never_hears_one_twice(
    tmp_path: Path, model_server: fake_model.FakeModelServer,
) -> None:
    from bot.media import Voice
    from kernel.types import InboundMessage

    fetched: list[str] = []

    def fetch(ref: str) -> Any:
        async def download(limit: int) -> bytes:
            fetched.append(ref)
            return audio("the boiler makes a noise")
        return download

    async with listening(tmp_path, model_server) as (_, pipeline, listener):
        listener.register("telegram", fetch)
        placeholder = "[voice note: 2 s]"
        msg = InboundMessage(surface="telegram", sender="42", external_id="42:1", text=placeholder,
                             metadata={"voice": Voice("voice", "audio/ogg", 100, 2).as_metadata("f1", placeholder)})
        taken = await pipeline.take(msg)  # stored, then the process "died": its turn never ran
        assert taken.turn is not None
        pipeline.release(taken)
        out = await pipeline.answer_stored(taken.turn)  # the recover job's call
        assert out.status == "ok" and "the boiler makes a noise" in out.text
        assert fetched == ["f1"]
        # heard, then a crash before the reply: the stored text is the transcript, so it is not heard again
        assert user_messages(tmp_path)[0][1] == "the boiler makes a noise"
        turn = taken.turn
        stored = replace(turn, message=replace(turn.message, content="the boiler makes a noise"))
        again = await listener.preparer(msg)(msg, stored)  # type: ignore[misc]
        assert again is not None and not isinstance(again, str) and again[0].text == "the boiler makes a noise"
        assert fetched == ["f1"] and len(model_server.requests) == 1


async def test_the_caption_sent_with_a_voice_note_is_kept_after_its_transcript(
    tmp_path: Path, bot_api: FakeBotApi, twilio_api: fake_twilio.FakeTwilioApi,
    model_server: fake_model.FakeModelServer,
) -> None:
    spoken = audio("the meeting moved to Friday")
    bot_api.add_file("voice-c", spoken)
    async with running_daemon(settings(tmp_path, bot_api, model_server)):
        bot_api.enqueue(bot_api.voice_update("voice-c", spoken, duration=3, caption="for Ana", message_id=9))
        [reply] = await bot_api.wait_sent(1)
    assert "the meeting moved to Friday\nfor Ana" in reply.text
    assert user_messages(tmp_path)[0][1] == "the meeting moved to Friday\nfor Ana"
    # WhatsApp: the Body sent with the audio is its caption
    url = twilio_api.add_media("SMvoice2", "ME2", spoken)
    transcribe = {"HILO_TRANSCRIBE_MODEL": "whisper-1", "HILO_TRANSCRIBE_URL": model_server.base_url + "/v1",
                  "HILO_TRANSCRIBE_API_KEY": "k", "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'wa.db'}"}
    async with running_daemon(wa.settings_for(tmp_path, twilio_api, **transcribe)) as client:
        form = wa.incoming("SMvoice2", "para Ana", NumMedia="1", MediaUrl0=url, MediaContentType0="audio/ogg")
        assert (await wa.post(client, "/webhooks/whatsapp", form)).status_code == 200
        (answer,) = await twilio_api.wait_for(1)
        await wa.idle(client)
    assert "the meeting moved to Friday\npara Ana" in answer.body
