"""Downloaded media in Supabase Storage (HILO_MEDIA_STORE=supabase, bot/media_store.py), with real parts: the
supabase package's storage client (storage3) against the fake Storage API (tests/fakes/supabase_storage.py), the
real daemon with python-telegram-bot against the fake Bot API, the openai SDK against the fake transcriber, and
`hilo export` / `hilo forget` as real processes. A voice note's file lands in the private bucket under the
person's id, its media row names it, and retention, forget and export reach it; a storage that refuses the key or
is down loses the file, never the message."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import pytest

from bot.config import Settings
from kernel.errors import ConfigError
from tests import test_voice as voice
from tests.backends import Backend
from tests.fakes import model_server as fake_model
from tests.fakes import supabase_storage as fake_storage
from tests.fakes import telegram_api as fake_telegram
from tests.fakes.daemon import running_daemon
from tests.fakes.loopback import free_port
from tests.fakes.supabase_storage import KEY, FakeStorage
from tests.fakes.telegram_api import FakeBotApi
from tests.fakes.transcriptions_api import audio

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
model_server_session = fake_model.model_server_session
model_server = fake_model.model_server
storage = fake_storage.storage

REPO = Path(__file__).resolve().parent.parent


def supabase_env(url: str, key: str = KEY) -> dict[str, str]:
    return {"HILO_MEDIA_STORE": "supabase", "SUPABASE_URL": url, "SUPABASE_SERVICE_ROLE_KEY": key}


def hilo(tmp_path: Path, env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    """`hilo ARGS` as a real process on the test's SQLite file, with `env` set."""
    full = {k: v for k, v in os.environ.items() if not k.startswith(("HILO_", "OPENAI_", "ANTHROPIC_", "SUPABASE_"))}
    full.update({"HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "PYTHONPATH": str(REPO), **env})
    return subprocess.run([sys.executable, "-m", "bot.cli", *args], cwd=tmp_path, env=full, capture_output=True,
                          text=True, timeout=60)


def test_the_settings_name_what_is_wrong() -> None:
    assert Settings.from_mapping({}).media_store == "local"
    s = Settings.from_mapping(supabase_env("https://p.supabase.co/") | {"HILO_MEDIA_BUCKET": "voice.notes"})
    assert (s.media_store, s.supabase_url, s.media_bucket) == ("supabase", "https://p.supabase.co", "voice.notes")
    assert KEY not in repr(s)
    for env, name in [({"HILO_MEDIA_STORE": "s3"}, "HILO_MEDIA_STORE"),
                      ({"HILO_MEDIA_STORE": "supabase"}, "SUPABASE_SERVICE_ROLE_KEY"),
                      ({"HILO_MEDIA_STORE": "supabase", "SUPABASE_URL": "https://p.supabase.co"}, "SUPABASE_URL"),
                      (supabase_env("p.supabase.co"), "SUPABASE_URL"),
                      ({"HILO_MEDIA_BUCKET": "Voice Notes"}, "HILO_MEDIA_BUCKET")]:
        with pytest.raises(ConfigError, match=name):
            Settings.from_mapping(env)


async def test_a_voice_note_lands_in_the_bucket_and_export_retention_and_forget_reach_it(
    tmp_path: Path, bot_api: FakeBotApi, model_server: fake_model.FakeModelServer, storage: FakeStorage,
) -> None:
    from bot import retention
    from bot.media_store import media_files
    from memory.open import open_store

    env = supabase_env(storage.base_url)
    spoken = audio("the boiler code is in the blue folder")
    bot_api.add_file("v1", spoken)
    async with running_daemon(voice.settings(tmp_path, bot_api, model_server, **env)):
        bot_api.enqueue(bot_api.voice_update("v1", spoken, duration=3, message_id=7))
        [reply] = await bot_api.wait_sent(1)
    assert "boiler code is in the blue folder" in reply.text
    [(message_id, _, _)] = voice.user_messages(tmp_path)
    [(user_id,)] = voice.rows(tmp_path, "SELECT id FROM users")
    key = f"{user_id}/{message_id}-voice.ogg"  # ids only: no name, no text of the person's
    assert storage.keys() == [key] and storage.objects[("hilo-media", key)] == (spoken, "audio/ogg")
    [row] = voice.media_rows(tmp_path)
    assert (row["path"], row["status"]) == (f"supabase://hilo-media/{key}", "transcribed")
    assert not (tmp_path / "media").exists()  # nothing in the data directory

    # `hilo export` lists it; with --media it copies the object's bytes
    listed = hilo(tmp_path, env, "export", "--user", "telegram:42")
    assert listed.returncode == 0 and f'"path": "supabase://hilo-media/{key}"' in listed.stdout
    assert "1 media files are listed" in listed.stderr
    copied = hilo(tmp_path, env, "export", "--user", "telegram:42", "--output", "out.json", "--media", "files")
    assert copied.returncode == 0, copied.stderr
    [file] = (tmp_path / "files").iterdir()
    assert file.read_bytes() == spoken and file.name.endswith(f"-{message_id}-voice.ogg")
    assert oct(file.stat().st_mode & 0o777) == "0o600"

    # retention deletes the object and clears the row's path; the transcript stays
    store = open_store(f"sqlite:///{tmp_path / 'hilo.db'}")
    await store.open()
    try:
        files = media_files(voice.settings(tmp_path, bot_api, model_server, **env))
        assert await retention.run_media(store, files, 1, "r1") == 0 and storage.keys() == [key]
        assert await retention.run_media(store, files, 0, "r2") == 1
    finally:
        await store.close()
    assert storage.keys() == [] and voice.media_rows(tmp_path)[0]["path"] is None
    assert ("DELETE", "/storage/v1/object/hilo-media") in storage.requests

    # a second note, then `hilo forget`: the object goes with the rows, even with the setting back on local
    bot_api.add_file("v2", audio("second note"))
    async with running_daemon(voice.settings(tmp_path, bot_api, model_server, **env)):
        bot_api.enqueue(bot_api.voice_update("v2", audio("second note"), duration=2, message_id=8))
        await bot_api.wait_sent(2)
    assert len(storage.keys()) == 1
    local = {**env, "HILO_MEDIA_STORE": "local"}
    refused = hilo(tmp_path, {**local, "SUPABASE_SERVICE_ROLE_KEY": "not-the-key"}, "forget", "--user", "telegram:42")
    assert refused.returncode == 1 and "nothing was forgotten" in refused.stderr and len(storage.keys()) == 1
    out = hilo(tmp_path, local, "forget", "--user", "telegram:42")
    assert out.returncode == 0 and "media_files 1" in out.stdout, out.stderr
    assert storage.keys() == [] and voice.rows(tmp_path, "SELECT count(*) FROM media") == [(0,)]


@pytest.mark.parametrize("how", ["wrong key", "storage down"])
async def test_a_storage_that_refuses_or_is_down_loses_the_file_not_the_message(
    tmp_path: Path, bot_api: FakeBotApi, model_server: fake_model.FakeModelServer, storage: FakeStorage, how: str,
) -> None:
    env = (supabase_env(storage.base_url, "sb_secret_not-the-project-key") if how == "wrong key"
           else supabase_env(f"http://127.0.0.1:{free_port()}"))
    spoken = audio("call the dentist on monday")
    bot_api.add_file("v", spoken)
    async with running_daemon(voice.settings(tmp_path, bot_api, model_server, **env)):
        bot_api.enqueue(bot_api.voice_update("v", spoken, duration=2))
        [reply] = await bot_api.wait_sent(1)
    assert "call the dentist on monday" in reply.text  # heard and answered
    [(message_id, content, _)] = voice.user_messages(tmp_path)
    assert content == "call the dentist on monday"
    [row] = voice.media_rows(tmp_path)
    assert (row["status"], row["path"], row["bytes"]) == ("transcribed", None, len(spoken))
    assert storage.objects == {}
    if how == "wrong key":
        assert storage.requests == [("POST", f"/storage/v1/object/hilo-media/{row_user(tmp_path)}/"
                                             f"{message_id}-voice.ogg")]


def row_user(tmp_path: Path) -> int:
    [(user_id,)] = voice.rows(tmp_path, "SELECT id FROM users")
    return int(user_id)


@asynccontextmanager
async def listening(backend: Backend, server: fake_model.FakeModelServer, env: dict[str, str],
                    ) -> AsyncIterator[tuple[Any, Any]]:
    """A pipeline on the backend's store (the echo model) and its Listener with `env`'s media store."""
    from bot.media import Listener
    from bot.models.factory import build_chain
    from bot.pipeline import Pipeline
    from bot.transcribe import OpenAITranscriber

    s = Settings.from_mapping({"HILO_DATABASE_URL": backend.url, "HILO_EMBEDDER": "none", **env})
    store = backend.make()
    await store.open()
    chain = build_chain(s)
    transcriber = OpenAITranscriber(model="whisper-1", api_key="x", base_url=server.base_url + "/v1")
    listener = Listener(s, Pipeline(s, store, chain), transcriber)
    try:
        yield store, listener
    finally:
        await listener.aclose()
        await chain.aclose()
        await store.close()


async def hear(listener: Any, store: Any, n: int, words: str) -> int:
    """A Telegram voice note of person 42 saying `words`, heard through the listener: its message id."""
    from bot.media import Voice
    from kernel.types import InboundMessage

    meta = Voice("voice", "audio/ogg", 100, 2).as_metadata(f"f{n}", "[voice note: 2 s]")
    msg = InboundMessage(surface="telegram", sender="42", external_id=f"42:{n}", text="[voice note: 2 s]",
                         metadata={"voice": meta})
    taken = await listener.pipeline.take(msg)
    assert taken.turn is not None

    def fetch(ref: str) -> Any:
        async def download(limit: int) -> bytes:
            return audio(words)
        return download

    out = await listener.run(msg, taken, fetch)
    assert out.status == "ok", out
    return int(taken.turn.message.id)


async def test_retention_and_forget_reach_the_bucket_on_every_backend(
    backend: Backend, model_server: fake_model.FakeModelServer, storage: FakeStorage,
) -> None:
    from bot import retention
    from bot.media import forget
    from bot.media_store import MediaStoreError

    env = supabase_env(storage.base_url)
    async with listening(backend, model_server, env) as (store, listener):
        first = await hear(listener, store, 1, "first note")
        [(user_id, path)] = backend.select(f"SELECT user_id, path FROM media WHERE message_id = {first}")
        assert path == f"supabase://hilo-media/{user_id}/{first}-voice.ogg"
        assert storage.objects[("hilo-media", f"{user_id}/{first}-voice.ogg")][0] == audio("first note")
        assert await listener.files.read(path) == audio("first note")
        assert await retention.run_media(store, listener.files, 0, "r") == 1
        assert storage.keys() == [] and backend.select("SELECT path FROM media") == [(None,)]

        second = await hear(listener, store, 2, "second note")
        assert storage.keys() == [f"{user_id}/{second}-voice.ogg"]
        storage.key = "rotated"  # the storage refuses the key: nothing is forgotten, nothing left unrecorded
        with pytest.raises(MediaStoreError):
            await forget(store, listener.files, "telegram:42")
        assert backend.count("media") == 2 and len(storage.keys()) == 1
        storage.key = KEY
        counts = await forget(store, listener.files, "telegram:42")
        assert counts is not None and counts["media_files"] == 1
        assert storage.keys() == [] and backend.count("media") == 0


async def test_forget_yes_while_the_storage_refuses_forgets_nothing_and_says_to_try_again(
    tmp_path: Path, bot_api: FakeBotApi, model_server: fake_model.FakeModelServer, storage: FakeStorage,
) -> None:
    from kernel import catalog

    bot_api.add_file("v", audio("a note to forget"))
    async with running_daemon(voice.settings(tmp_path, bot_api, model_server, **supabase_env(storage.base_url))):
        bot_api.enqueue(bot_api.voice_update("v", audio("a note to forget"), duration=2))
        await bot_api.wait_sent(1)
        assert len(storage.keys()) == 1
        storage.key = "rotated"
        bot_api.enqueue(bot_api.text_update("/forget yes"))
        await bot_api.wait_sent(2)
        assert bot_api.sent[1].text == catalog.t("cmd_forget_failed", "en")
        assert len(storage.keys()) == 1 and voice.rows(tmp_path, "SELECT count(*) FROM media") == [(1,)]
        storage.key = KEY
        bot_api.enqueue(bot_api.text_update("/forget yes"))
        await bot_api.wait_sent(3)
    assert bot_api.sent[2].text == catalog.t("cmd_forget_done", "en")
    assert storage.keys() == [] and voice.rows(tmp_path, "SELECT count(*) FROM media") == [(0,)]
