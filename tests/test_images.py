"""Photos end to end, with real parts (issue 15): python-telegram-bot against the fake Bot API (getFile and its file
URL), Twilio's signed form and MediaUrl against the fake Twilio API, the real openai and anthropic SDKs against the
fake provider, the real daemon on SQLite, `hilo context` as a real process, and the store on every backend.

A photo goes to a vision model as an image part in its provider's format, on its own turn only; the model's first
line describes it and that description (with the caption) becomes the stored message, found later; a model that reads
text only gets the caption and a note; a photo over the cap is refused before its download completes."""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import replace
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

from bot.config import Settings
from kernel import catalog
from kernel.errors import ConfigError
from kernel.types import ChatMessage, ImagePart
from memory.store import Store
from tests import test_voice as voice
from tests import test_whatsapp as wa
from tests.fakes import model_server as fake_model
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.daemon import running_daemon
from tests.fakes.model_server import FakeModelServer, ok
from tests.fakes.telegram_api import TOKEN, FakeBotApi

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
model_server_session = fake_model.model_server_session
model_server = fake_model.model_server
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api

#: A small real JPEG header and body (what is sent is compared byte for byte, not decoded).
JPEG = b"\xff\xd8\xff\xe0\x00\x10JFIF\x00\x01\x01\x00\x00\x01\x00\x01\x00\x00" + bytes(range(256)) * 4 + b"\xff\xd9"
ASK = ('(The person sent the photo above. Start your answer with one line "[photo: ...]" saying in a few words what '
       "it shows, in the person's language, then answer them.)")
ANSWER = "[photo: a red bicycle leaning on a blue wall]\nThat is a lovely red bicycle!"


def models(server: FakeModelServer, model: str) -> dict[str, str]:
    return {"HILO_MODEL": model, "OPENAI_API_KEY": "k", "ANTHROPIC_API_KEY": "k", "HILO_EMBEDDER": "none",
            "OPENAI_BASE_URL": server.base_url + "/v1", "ANTHROPIC_BASE_URL": server.base_url}


def tg_settings(tmp_path: Path, api: FakeBotApi, **env: str) -> Settings:
    return Settings.from_mapping({
        "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": api.base_url, "HILO_SECRET_KEY": "test-secret",
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", **env,
    })


def photo_update(api: FakeBotApi, sizes: list[tuple[str, int | None, int]], caption: str | None = None,
                 **kw: Any) -> dict[str, Any]:
    """A Telegram photo message: its PhotoSize list (file_id, file_size, side in pixels), smallest first."""
    photo = [{"file_id": f, "file_unique_id": f"u-{f}", "width": side, "height": side,
              **({"file_size": size} if size is not None else {})} for f, size, side in sizes]
    extra: dict[str, Any] = {"photo": photo, **({"caption": caption} if caption is not None else {})}
    return api.update(api.message(None, **kw, **extra))


def data_url(data: bytes, mime: str = "image/jpeg") -> str:
    return f"data:{mime};base64,{base64.b64encode(data).decode()}"


async def test_a_telegram_photo_goes_to_an_openai_vision_model_as_an_image_part_and_its_description_is_kept(
    tmp_path: Path, bot_api: FakeBotApi, model_server: FakeModelServer,
) -> None:
    bot_api.add_file("small", b"thumb")
    bot_api.add_file("large", JPEG)
    model_server.script("gpt-4o-mini", [ok(ANSWER)])
    env = {**models(model_server, "openai:gpt-4o-mini"), "HILO_IMAGE_MAX_BYTES": "4096"}
    async with running_daemon(tg_settings(tmp_path, bot_api, **env)):
        # the largest size within the cap is taken; the one over it is never asked for
        bot_api.enqueue(photo_update(bot_api, [("small", 5, 90), ("large", len(JPEG), 800), ("huge", 900_000, 2560)],
                                     "is this bike mine?", message_id=7))
        [reply] = await bot_api.wait_sent(1)
    assert reply.text == "That is a lovely red bicycle!"  # the description line is not sent
    (request,) = model_server.requests
    assert request.path == "/v1/chat/completions" and request.model == "gpt-4o-mini"
    assert request.body["messages"][-1] == {"role": "user", "content": [
        {"type": "text", "text": f"[photo]\nis this bike mine?\n\n{ASK}"},
        {"type": "image_url", "image_url": {"url": data_url(JPEG)}},
    ]}
    assert [c.params["file_id"] for c in bot_api.calls_of("getFile")] == ["large"]
    [(message_id, content, metadata)] = voice.user_messages(tmp_path)
    assert content == "[photo: a red bicycle leaning on a blue wall]\nis this bike mine?"
    assert metadata["image"] == {"kind": "photo", "mime": "image/jpeg", "bytes": len(JPEG), "ref": "large",
                                 "caption": "is this bike mine?", "placeholder": "[photo]\nis this bike mine?"}
    [row] = voice.media_rows(tmp_path)
    assert (row["message_id"], row["kind"], row["status"], row["bytes"]) == (message_id, "photo", "seen", len(JPEG))
    assert Path(row["path"]).read_bytes() == JPEG and Path(row["path"]).name == f"{message_id}-photo.jpg"
    assert voice.replies(tmp_path) == [(message_id, reply.text)]
    # later turns see the description, not the image: found by search from another surface
    ctx = voice.hilo_context(tmp_path, "--user", "telegram:42", "--surface", "web", "what colour was my bicycle?")
    assert any(i.get("external_id") == "42:7" or "42:7" in (i.get("source_external_ids") or [])
               for i in ctx["items"]), ctx["items"]
    assert any("red bicycle leaning on a blue wall" in m["content"] for m in ctx["messages"])


def photo_form(sid: str, url: str, caption: str = "", mime: str = "image/jpeg") -> dict[str, str]:
    return wa.incoming(sid, caption, NumMedia="1", MediaUrl0=url, MediaContentType0=mime)


async def test_a_whatsapp_photo_goes_to_an_anthropic_vision_model_as_a_base64_image_block(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi, model_server: FakeModelServer,
) -> None:
    png = b"\x89PNG\r\n\x1a\n" + bytes(range(200))
    url = twilio_api.add_media("SMphoto1", "ME1", png, content_type="image/png")
    model_server.script("claude-sonnet-4-5", [ok("[photo: un recibo de la farmacia]\nSon 12,40 euros.")])
    async with running_daemon(wa.settings_for(tmp_path, twilio_api, **models(model_server,
                                                                             "anthropic:claude-sonnet-4-5"))) as client:
        r = await wa.post(client, "/webhooks/whatsapp", photo_form("SMphoto1", url, "¿cuánto pagué?", "image/png"))
        assert r.status_code == 200
        (answer,) = await twilio_api.wait_for(1)
        await wa.idle(client)
    assert answer.body == "Son 12,40 euros."
    assert twilio_api.media_fetches == [("ME1", True)]  # on Twilio's host, with the account's credentials
    (request,) = model_server.requests
    assert request.path == "/v1/messages" and request.model == "claude-sonnet-4-5"
    assert request.body["messages"][-1] == {"role": "user", "content": [
        {"type": "image", "source": {"type": "base64", "media_type": "image/png",
                                     "data": base64.b64encode(png).decode()}},
        {"type": "text", "text": f"[photo]\n¿cuánto pagué?\n\n{ASK}"},
    ]}
    [(message_id, content, metadata)] = voice.user_messages(tmp_path)
    assert content == "[photo: un recibo de la farmacia]\n¿cuánto pagué?" and metadata["image"]["ref"] == url
    [row] = voice.media_rows(tmp_path)
    assert (row["message_id"], row["status"], row["mime"], row["bytes"]) == (message_id, "seen", "image/png", len(png))
    ctx = voice.hilo_context(tmp_path, "--user", wa.HANDLE, "--surface", "telegram", "el recibo de la farmacia")
    assert any(i.get("external_id") == "SMphoto1" or "SMphoto1" in (i.get("source_external_ids") or [])
               for i in ctx["items"]), ctx["items"]


@pytest.mark.parametrize("provider", ["openai", "anthropic"])
async def test_the_streamed_request_carries_the_image_in_each_providers_wire_format(
    model_server: FakeModelServer, provider: str,
) -> None:
    from bot.models.anthropic_provider import AnthropicProvider
    from bot.models.base import Completion
    from bot.models.openai_provider import OpenAIProvider

    p: Any = (OpenAIProvider(api_key="k", base_url=model_server.base_url + "/v1") if provider == "openai"
              else AnthropicProvider(api_key="k", base_url=model_server.base_url))
    messages = [ChatMessage("system", "be brief", block="system"),
                ChatMessage("user", "[photo]\nwhat is it?", block="new_message",
                            images=(ImagePart("image/webp", b"RIFF0000WEBPVP8 "),))]
    try:
        got = [part async for part in p.stream("vision-model", messages, timeout=10)]
    finally:
        await p.aclose()
    assert isinstance(got[-1], Completion) and got[-1].outcome == "ok"
    (request,) = model_server.requests
    assert request.stream
    content = request.body["messages"][-1]["content"]
    if provider == "openai":
        assert content == [{"type": "text", "text": "[photo]\nwhat is it?"},
                           {"type": "image_url", "image_url": {"url": data_url(b"RIFF0000WEBPVP8 ", "image/webp")}}]
    else:
        assert content == [{"type": "image", "source": {"type": "base64", "media_type": "image/webp",
                                                        "data": base64.b64encode(b"RIFF0000WEBPVP8 ").decode()}},
                           {"type": "text", "text": "[photo]\nwhat is it?"}]


async def test_a_model_that_reads_text_only_gets_the_caption_and_a_note_and_nothing_is_downloaded(
    tmp_path: Path, bot_api: FakeBotApi, model_server: FakeModelServer,
) -> None:
    bot_api.add_file("p", JPEG)
    async with running_daemon(tg_settings(tmp_path, bot_api, **models(model_server, "openai:llama-3-8b-instruct"))):
        bot_api.enqueue(photo_update(bot_api, [("p", len(JPEG), 800)], "what do you think?"))
        [reply] = await bot_api.wait_sent(1)
    note = "[photo: not seen, this model reads text only]\nwhat do you think?"
    (request,) = model_server.requests
    assert request.body["messages"][-1] == {"role": "user", "content": note}
    assert reply.text == f"fake reply to: {note}"
    assert bot_api.calls_of("getFile") == [] and bot_api.downloads == []
    [(message_id, content, _)] = voice.user_messages(tmp_path)
    assert content == note
    assert [(r["message_id"], r["status"], r["path"]) for r in voice.media_rows(tmp_path)] == [
        (message_id, "not_seen", None)]


async def test_a_photo_over_the_stated_size_is_refused_before_any_download(
    tmp_path: Path, bot_api: FakeBotApi, model_server: FakeModelServer,
) -> None:
    bot_api.add_file("big", JPEG)
    env = {**models(model_server, "openai:gpt-4o"), "HILO_IMAGE_MAX_BYTES": "1024"}
    async with running_daemon(tg_settings(tmp_path, bot_api, **env)):
        bot_api.enqueue(photo_update(bot_api, [("big", 2048, 90)], language_code="es"))
        [notice] = await bot_api.wait_sent(1)
    assert notice.text == catalog.t("image_too_large", "es", limit="1 KB")
    assert bot_api.calls_of("getFile") == [] and bot_api.downloads == [] and model_server.requests == []
    assert voice.user_messages(tmp_path) == []  # refused: recorded against redelivery, nothing of it stored


async def test_a_photo_download_without_a_length_is_stopped_at_the_cap_and_said(
    tmp_path: Path, bot_api: FakeBotApi, model_server: FakeModelServer,
) -> None:
    big = JPEG * 200  # ~210 KB, served chunked with no Content-Length; getFile states no size either
    bot_api.add_file("liar", big, state_size=False)
    env = {**models(model_server, "openai:gpt-4o"), "HILO_IMAGE_MAX_BYTES": "65536"}
    async with running_daemon(tg_settings(tmp_path, bot_api, **env)):
        bot_api.enqueue(photo_update(bot_api, [("liar", 1000, 800)]))
        [notice] = await bot_api.wait_sent(1)
    assert notice.text == catalog.t("image_too_large", "en", limit="64 KB")
    assert model_server.requests == [] and len(bot_api.downloads) == 1
    [(message_id, content, metadata)] = voice.user_messages(tmp_path)
    assert content == "[photo]" and metadata["image"]["ref"] == "liar"
    [row] = voice.media_rows(tmp_path)
    assert (row["message_id"], row["status"], row["path"]) == (message_id, "too_large", None)
    assert row["bytes"] is not None and 65536 < row["bytes"] < len(big)  # stopped past the cap, not read whole
    assert voice.replies(tmp_path) == [(message_id, notice.text)]  # answered: recovery leaves it


async def test_a_whatsapp_photo_over_the_cap_is_refused_on_its_content_length(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi, model_server: FakeModelServer,
) -> None:
    url = twilio_api.add_media("SMbig", "ME2", JPEG * 8, content_type="image/jpeg")
    env = {**models(model_server, "openai:gpt-4o"), "HILO_IMAGE_MAX_BYTES": "4096"}
    async with running_daemon(wa.settings_for(tmp_path, twilio_api, **env)) as client:
        await wa.post(client, "/webhooks/whatsapp", photo_form("SMbig", url))
        (notice,) = await twilio_api.wait_for(1)
        await wa.idle(client)
    assert notice.body == catalog.t("image_too_large", "en", limit="4 KB")
    assert model_server.requests == []
    [row] = voice.media_rows(tmp_path)
    assert (row["status"], row["bytes"], row["path"]) == ("too_large", len(JPEG * 8), None)


async def test_an_image_route_sends_photo_turns_to_its_model_and_records_it(
    tmp_path: Path, bot_api: FakeBotApi, model_server: FakeModelServer,
) -> None:
    bot_api.add_file("p", JPEG)
    routes = json.dumps([{"name": "photos", "model": "openai:gpt-4o", "images": True}])
    model_server.script("gpt-4o", [ok("[photo: a cat on a sofa]\nCute cat.")])
    env = {**models(model_server, "openai:small-text-model"), "HILO_MODEL_ROUTES": routes}
    async with running_daemon(tg_settings(tmp_path, bot_api, **env)):
        bot_api.enqueue(photo_update(bot_api, [("p", len(JPEG), 800)]))
        bot_api.enqueue(bot_api.text_update("and what about dogs?"))
        first, _ = await bot_api.wait_sent(2)
    assert first.text == "Cute cat."
    photo_call, text_call = model_server.requests
    assert photo_call.model == "gpt-4o" and photo_call.body["messages"][-1]["content"][1]["type"] == "image_url"
    # the next turn goes to HILO_MODEL, with the description as text: the image is sent on its own turn only
    assert text_call.model == "small-text-model"
    assert not any(isinstance(m["content"], list) for m in text_call.body["messages"])
    assert any("[photo: a cat on a sofa]" in m["content"] for m in text_call.body["messages"])
    assert voice.rows(tmp_path, "SELECT model, route FROM model_calls ORDER BY id") == [
        ("openai:gpt-4o", "photos"), ("openai:small-text-model", None)]


def test_the_images_condition_is_checked() -> None:
    from bot.config_routes import Route

    settings = Settings.from_mapping({"OPENAI_API_KEY": "k", "HILO_MODEL": "openai:small",
                                      "HILO_MODEL_ROUTES": '[{"model": "openai:gpt-4o", "images": true}]'})
    [route] = settings.model_routes
    assert route.matches("anything", True) and not route.matches("anything", False)
    assert Route("t", (settings.model,), images=False).matches("x") is True
    with pytest.raises(ConfigError, match='"images" must be true'):
        Settings.from_mapping({"OPENAI_API_KEY": "k", "HILO_MODEL_ROUTES": '[{"model": "openai:x", "images": "yes"}]'})
    with pytest.raises(ConfigError, match="HILO_VISION"):
        Settings.from_mapping({"HILO_VISION": "maybe"})


def test_which_models_see_images() -> None:
    from bot import vision
    from bot.config import ModelSpec

    for seen in ("openai:gpt-4o-mini", "openai:gpt-4.1", "anthropic:claude-sonnet-4-5", "anthropic:claude-3-5-haiku",
                 "openai:meta-llama/llama-4-scout", "openai:qwen2.5-vl-7b", "openai:o4-mini"):
        assert vision.model_sees(ModelSpec.parse(seen)), seen
    for blind in ("echo", "openai:gpt-3.5-turbo", "openai:llama-3-8b-instruct", "anthropic:claude-2.1"):
        assert not vision.model_sees(ModelSpec.parse(blind)), blind
    base = {"OPENAI_API_KEY": "k", "HILO_MODEL": "openai:gpt-3.5-turbo"}
    assert not vision.accepts(Settings.from_mapping(base), "")
    assert vision.accepts(Settings.from_mapping({**base, "HILO_VISION": "on"}), "")
    assert not vision.accepts(Settings.from_mapping({**base, "HILO_MODEL": "openai:gpt-4o", "HILO_VISION": "off"}), "")


async def test_a_description_becomes_the_persons_message_found_by_recall(store: Store) -> None:
    from tests.test_store_contract import T0, msg, put, query

    photo = {"kind": "photo", "ref": "file-1", "placeholder": "[photo]\nmy new lamp"}
    seen = await put(store, msg("telegram", "1", "p1", "[photo]\nmy new lamp", handle="ana", image=photo))
    other = await put(store, msg("telegram", "2", "b1", "[photo]", handle="bob"))
    current = await put(store, msg("cli", "ana", "c1", "anything", T0 + timedelta(hours=3), handle="ana"))
    probe = {"search_text": "brass lamp", "current_message_id": current.message.id, "conversation_id": None,
             "cross_since": T0 + timedelta(hours=2)}
    text = "[photo: a brass desk lamp with a green shade]\nmy new lamp"
    assert await store.rewrite_message(seen.user_id, seen.message.id, text, 11) is True
    assert await store.rewrite_message(seen.user_id, other.message.id, "hijacked", 1) is False  # not ana's
    recalled = (await store.load_context(query(current, **probe))).recalled
    assert [(m.external_id, m.content, m.token_count) for m in recalled][:1] == [("p1", text, 11)]
    assert recalled[0].metadata["image"]["ref"] == "file-1"
    assert [m.content for m in await store.messages(other.user_id, other.conversation_id)] == ["[photo]"]


@asynccontextmanager
async def seeing(s: Settings) -> AsyncIterator[tuple[Any, Any]]:
    """A pipeline on these settings and its Listener (no transcriber): (pipeline, listener), closed afterwards."""
    from bot.media import Listener
    from bot.models.factory import build_chain
    from bot.pipeline import Pipeline
    from memory.open import open_store

    store = open_store(s.database_url)
    await store.open()
    chain = build_chain(s)
    try:
        yield (pipeline := Pipeline(s, store, chain)), Listener(s, pipeline, None)
    finally:
        await chain.aclose()
        await store.close()


async def test_recovery_sees_a_photo_a_crash_left_unseen_and_never_fetches_one_twice(
    tmp_path: Path, model_server: FakeModelServer,
) -> None:
    from bot import vision
    from kernel.types import InboundMessage

    fetched: list[str] = []

    def fetch(ref: str) -> Any:
        async def download(limit: int) -> bytes:
            fetched.append(ref)
            return JPEG
        return download

    model_server.script("gpt-4o", [ok("[photo: a boiler with a red light]\nCall the technician.")])
    s = Settings.from_mapping({**models(model_server, "openai:gpt-4o"), "HILO_MEDIA_RETENTION_DAYS": "0",
                               "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}"})
    async with seeing(s) as (pipeline, listener):
        listener.register("telegram", fetch)
        meta = vision.Photo("image/jpeg", len(JPEG)).as_metadata("f1", "why is it blinking?")
        msg = InboundMessage(surface="telegram", sender="42", external_id="42:1", text=meta["placeholder"],
                             metadata={"image": meta})
        taken = await pipeline.take(msg)  # stored, then the process "died": its turn never ran
        assert taken.turn is not None
        pipeline.release(taken)
        out = await pipeline.answer_stored(taken.turn)  # the recover job's call
        assert out.status == "ok" and out.text == "Call the technician."
        assert fetched == ["f1"]
        (request,) = model_server.requests
        assert request.body["messages"][-1]["content"][1] == {"type": "image_url",
                                                              "image_url": {"url": data_url(JPEG)}}
        described = "[photo: a boiler with a red light]\nwhy is it blinking?"
        assert voice.user_messages(tmp_path)[0][1] == described
        # described, then a crash before the reply: on its stored text, not fetched again
        stored = replace(taken.turn, message=replace(taken.turn.message, content=described))
        again = await listener.preparer(msg)(msg, stored)  # type: ignore[misc]
        assert again is not None and not isinstance(again, str)
        assert again[0].text == described and again[0].images == ()
        assert fetched == ["f1"] and len(model_server.requests) == 1
    [row] = voice.media_rows(tmp_path)
    assert (row["status"], row["path"]) == ("seen", None)  # HILO_MEDIA_RETENTION_DAYS=0: no file kept
    assert not (tmp_path / "media").exists()


async def test_a_fallback_that_reads_text_only_gets_the_note_instead_of_the_photo(
    tmp_path: Path, bot_api: FakeBotApi, model_server: FakeModelServer,
) -> None:
    bot_api.add_file("p", JPEG)
    model_server.script("gpt-4o", default=fake_model.status(503))
    env = {**models(model_server, "openai:gpt-4o"), "HILO_FALLBACK_MODELS": "openai:text-only-model",
           "HILO_MODEL_ATTEMPTS": "1"}
    async with running_daemon(tg_settings(tmp_path, bot_api, **env)):
        bot_api.enqueue(photo_update(bot_api, [("p", len(JPEG), 800)], "what is this?"))
        [reply] = await bot_api.wait_sent(1)
    vision_call, text_call = model_server.requests
    assert vision_call.model == "gpt-4o" and vision_call.body["messages"][-1]["content"][1]["type"] == "image_url"
    note = "[photo: not seen, this model reads text only]\nwhat is this?"
    assert text_call.model == "text-only-model" and text_call.body["messages"][-1] == {"role": "user",
                                                                                        "content": note}
    assert reply.text == f"fake reply to: {note}"
    assert voice.user_messages(tmp_path)[0][1] == "[photo]\nwhat is this?"  # no description came: the placeholder


async def test_a_person_forgotten_while_their_photo_downloaded_gets_no_turn_and_no_file_kept(
    tmp_path: Path, model_server: FakeModelServer,
) -> None:
    from bot import vision
    from kernel.types import InboundMessage

    s = Settings.from_mapping({**models(model_server, "openai:gpt-4o"), "HILO_DATA_DIR": str(tmp_path),
                               "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}"})
    async with seeing(s) as (pipeline, listener):
        meta = vision.Photo("image/jpeg", len(JPEG)).as_metadata("f", None)
        msg = InboundMessage(surface="telegram", sender="42", external_id="42:1", text="[photo]",
                             metadata={"image": meta})
        taken = await pipeline.take(msg)
        assert taken.turn is not None

        def fetch(ref: str) -> Any:
            async def download(limit: int) -> bytes:
                assert await pipeline.store.forget(taken.turn.handle)  # type: ignore[union-attr]  # meanwhile
                return JPEG
            return download

        out = await listener.run(msg, taken, fetch)
    assert out.status == "duplicate" and model_server.requests == []
    assert voice.rows(tmp_path, "SELECT count(*) FROM messages") == [(0,)]
    assert voice.rows(tmp_path, "SELECT count(*) FROM media") == [(0,)]
    assert not any((tmp_path / "media").rglob("*.jpg"))
