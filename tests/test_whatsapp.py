"""WhatsApp through Twilio: the real RequestValidator signs, the real twilio REST client sends to a fake Twilio
API on 127.0.0.1, the real daemon (uvicorn, SQLite) runs in between; the public URL is https://bot.example.com
while requests go to 127.0.0.1, as behind a proxy."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path
from typing import Any
from urllib.parse import urlencode

import httpx
import pytest
from hypothesis import given
from hypothesis import settings as hyp_settings
from hypothesis import strategies as st
from twilio.request_validator import RequestValidator  # type: ignore[import-untyped]

from bot.app import create_app
from bot.config import Settings
from bot.opt_out import keyword
from kernel import catalog
from kernel.errors import ConfigError, StoreError
from kernel.text_split import utf16_len
from memory.store import Delivery
from surfaces.web import WebSurface
from surfaces.whatsapp import EMPTY_TWIML, Form, WhatsAppSurface, inbound
from surfaces.whatsapp_send import TwilioSender, deliver
from surfaces.whatsapp_text import split_message
from tests.fakes import model_server as fake_model
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.daemon import free_port, running_daemon
from tests.fakes.full_disk import PAGE_SIZED_TEXT, disk_full
from tests.fakes.postgres import StoppablePostgres
from tests.waiting import wait_until

twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api

PUBLIC = "https://bot.example.com"
NUMBER = "whatsapp:+14155238886"
PERSON = "+34600111222"
HANDLE = f"whatsapp:{PERSON}"
REPO = Path(__file__).resolve().parent.parent


def env_for(tmp_path: Path, twilio: fake_twilio.FakeTwilioApi, **extra: str) -> dict[str, str]:
    return {
        "HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "test-secret",
        "HILO_DATA_DIR": str(tmp_path),  # SQLite's default; on Postgres too (whose default is ./data, in the checkout)
        "HILO_PUBLIC_URL": PUBLIC, "TWILIO_ACCOUNT_SID": twilio.account_sid, "TWILIO_AUTH_TOKEN": twilio.auth_token,
        "TWILIO_WHATSAPP_NUMBER": NUMBER, "TWILIO_API_BASE_URL": twilio.base_url, **extra,
    }


def settings_for(tmp_path: Path, twilio: fake_twilio.FakeTwilioApi, **extra: str) -> Settings:
    return Settings.from_mapping(env_for(tmp_path, twilio, **extra))


def incoming(sid: str, text: str, sender: str = PERSON, **extra: str) -> dict[str, str]:
    return {"SmsMessageSid": sid, "NumMedia": "0", "ProfileName": "Ana", "SmsSid": sid, "WaId": sender[1:],
            "SmsStatus": "received", "Body": text, "To": NUMBER, "NumSegments": "1", "MessageSid": sid,
            "AccountSid": fake_twilio.ACCOUNT_SID, "From": f"whatsapp:{sender}", "ApiVersion": "2010-04-01", **extra}


def sign(path: str, params: dict[str, str], token: str = fake_twilio.AUTH_TOKEN, base: str = PUBLIC) -> str:
    return str(RequestValidator(token).compute_signature(base + path, params))


async def post(client: httpx.AsyncClient, path: str, params: dict[str, str], signature: str | None = "sign",
               ) -> httpx.Response:
    headers = {"content-type": "application/x-www-form-urlencoded"}
    if signature == "sign":
        signature = sign(path, params)
    if signature is not None:
        headers["x-twilio-signature"] = signature
    return await client.post(path, content=urlencode(params), headers=headers)


def surface_of(client: httpx.AsyncClient) -> WhatsAppSurface:
    for route in client.app.router.routes:  # type: ignore[attr-defined]
        owner = getattr(getattr(route, "endpoint", None), "__self__", None)
        if isinstance(owner, WhatsAppSurface):
            return owner
    raise AssertionError("no WhatsApp surface mounted")


async def idle(client: httpx.AsyncClient, timeout: float = 10.0) -> None:
    """Wait until every WhatsApp task (turn, command, late status) has finished and every part they queued in
    the outbox is sent or finally failed (a task ends once its answer is queued)."""
    surface = surface_of(client)
    store = client.app.state.hilo["runtime"].pipeline.store  # type: ignore[attr-defined]
    deadline = time.monotonic() + timeout

    async def queued() -> bool:
        try:
            return await store.outbox_next_due("whatsapp") is not None
        except StoreError:  # the database is down: nothing queued can go out meanwhile
            return False

    while surface._inflight or await queued():
        assert time.monotonic() < deadline, "WhatsApp tasks or their parts still running"
        await asyncio.sleep(0.01)


async def inspect(client: httpx.AsyncClient, handle: str = HANDLE) -> Any:
    return await client.app.state.hilo["runtime"].pipeline.store.inspect(handle)  # type: ignore[attr-defined]


@pytest.fixture
async def daemon(tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi) -> AsyncIterator[httpx.AsyncClient]:
    async with running_daemon(settings_for(tmp_path, twilio_api)) as client:
        yield client


# -- pure parts ------------------------------------------------------------------------------------------------
def test_split_keeps_short_text_whole_and_drops_nothing() -> None:
    assert split_message("hola") == ["hola"]
    assert split_message("   ") == []
    paragraphs = [f"Paragraph {i}. " + "word " * 150 for i in range(6)]
    text = "\n\n".join(p.strip() for p in paragraphs)
    parts = split_message(text)
    assert len(parts) > 1 and all(utf16_len(p) <= 1600 for p in parts)
    assert all(p.startswith("Paragraph") for p in parts)  # cut at paragraph breaks
    assert "".join(parts).replace(" ", "").replace("\n", "") == text.replace(" ", "").replace("\n", "")


def test_split_prefers_sentences_then_words_then_a_hard_cut() -> None:
    sentences = " ".join(f"Sentence number {i} ends here." for i in range(120))
    parts = split_message(sentences, 400)
    assert all(p.endswith(".") and len(p) <= 400 for p in parts)
    words = "palabra " * 200
    assert all(len(p) <= 100 and not p.endswith(" ") for p in split_message(words, 100))
    assert split_message("x" * 250, 100) == ["x" * 100, "x" * 100, "x" * 50]
    emoji = "😀" * 1000  # 2 UTF-16 units each, as Twilio counts
    assert [len(p) for p in split_message(emoji)] == [800, 200]


@hyp_settings(max_examples=200, deadline=None)
@given(st.text(alphabet=st.sampled_from(list("ab .!?\n😀é")), max_size=400), st.integers(min_value=2, max_value=60))
def test_split_property_bounded_ordered_lossless(text: str, limit: int) -> None:
    parts = split_message(text, limit)
    assert all(p and utf16_len(p) <= limit for p in parts)
    squash = "".join(text.split())
    assert "".join("".join(p.split()) for p in parts) == squash


def test_keywords() -> None:
    for text in ("STOP", " stop! ", "Unsubscribe", "BAJA", "Darme de baja.", "cancelar", "PARAR"):
        assert keyword(text)[0] == "stop", text
    assert keyword("ALTA") == ("start", "es") and keyword("Start") == ("start", "en")
    for text in ("stop the music", "please stop talking about football", "para mañana", ""):
        assert keyword(text) == (None, None), text


def test_normalization_keeps_profile_media_and_caption_in_metadata() -> None:
    form = Form(list(incoming("SM1", "look at this", NumMedia="1", MediaUrl0="https://api.twilio.com/m/ME1",
                              MediaContentType0="image/jpeg").items()))
    msg = inbound(form)
    assert (msg.surface, msg.sender, msg.external_id, msg.text) == ("whatsapp", PERSON, "SM1", "[photo]\nlook at this")
    assert msg.metadata["image"] == {"kind": "photo", "mime": "image/jpeg", "bytes": None, "caption": "look at this",
                                     "ref": "https://api.twilio.com/m/ME1", "placeholder": "[photo]\nlook at this"}
    assert msg.metadata["profile_name"] == "Ana" and msg.metadata["wa_id"] == PERSON[1:]
    assert msg.metadata["media"] == [{"url": "https://api.twilio.com/m/ME1", "content_type": "image/jpeg"}]
    with pytest.raises(ValueError):
        inbound(Form([("Body", "no sid")]))


def test_refuses_to_start_without_public_url_or_number(tmp_path: Path) -> None:
    twilio = fake_twilio.FakeTwilioApi()
    for missing in ("HILO_PUBLIC_URL", "TWILIO_WHATSAPP_NUMBER"):
        settings = Settings.from_mapping({**env_for(tmp_path, twilio), missing: ""})
        with pytest.raises(ConfigError, match=missing):
            WhatsAppSurface(settings)
        with pytest.raises(ConfigError, match=missing):
            create_app(settings)


# -- the sender against the fake Twilio API ----------------------------------------------------------------------
async def test_sender_retries_transient_errors_and_gives_up_on_permanent_ones(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    sender = TwilioSender(settings_for(tmp_path, twilio_api), sleep=sleep, attempts=3, backoff_base=0.1)
    await sender.start()
    try:
        twilio_api.enqueue(fake_twilio.server_error(500), fake_twilio.rate_limited(7), fake_twilio.created())
        result = await sender.send(HANDLE, "hi")
        assert result.ok and result.attempts == 3 and result.sid == twilio_api.sent[-1].sid
        assert 0.1 <= waits[0] < 0.2 and waits[1] == 7  # backoff, then the server's Retry-After

        in_20_s = format_datetime(datetime.now(UTC) + timedelta(seconds=20), usegmt=True)
        twilio_api.enqueue(fake_twilio.rate_limited(in_20_s), fake_twilio.created())
        waits.clear()
        result = await sender.send(HANDLE, "hi")
        assert result.ok and result.attempts == 2
        assert len(waits) == 1 and 10 < waits[0] <= 20, waits  # an HTTP-date's pause (whole seconds), no backoff

        twilio_api.enqueue(*[fake_twilio.server_error(503)] * 3)
        result = await sender.send(HANDLE, "hi")
        assert not result.ok and result.attempts == 3 and "503" in (result.error or "")

        twilio_api.enqueue(fake_twilio.rate_limited(3600))  # a pause longer than the cap: give up at once
        result = await sender.send(HANDLE, "hi")
        assert not result.ok and result.attempts == 1 and "too long" in (result.error or "")

        twilio_api.enqueue(fake_twilio.window_closed())
        result = await sender.send(HANDLE, "hi")
        assert not result.ok and result.attempts == 1 and result.code == 63016
        assert "24-hour" in (result.error or "")
    finally:
        await sender.aclose()
    wrong = TwilioSender(settings_for(tmp_path, twilio_api, TWILIO_AUTH_TOKEN="wrong"), sleep=sleep)
    await wrong.start()
    try:
        result = await wrong.send(HANDLE, "hi")
        assert not result.ok and result.code == 20003 and result.attempts == 1
    finally:
        await wrong.aclose()


async def test_parts_of_two_replies_to_one_person_never_interleave(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    sender = TwilioSender(settings_for(tmp_path, twilio_api))
    await sender.start()
    try:
        first, second = ("A " * 1000).strip(), ("B " * 1000).strip()
        no_store: Any = None  # user_id=None: nothing is recorded
        await asyncio.gather(*(deliver(sender, no_store, recipient=PERSON, text=t, user_id=None, message_id=None)
                               for t in (first, second)))
    finally:
        await sender.aclose()
    assert [s.body[0] for s in twilio_api.sent] == ["A", "A", "B", "B"] and len(sender.recipients) == 0


# -- the daemon ------------------------------------------------------------------------------------------------
async def test_forged_or_missing_signature_is_403_and_stores_nothing(
    daemon: httpx.AsyncClient, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    params = incoming("SMforged", "hello")
    assert (await post(daemon, "/webhooks/whatsapp", params, signature=None)).status_code == 403
    assert (await post(daemon, "/webhooks/whatsapp", params, signature="bm90IGEgc2lnbmF0dXJl")).status_code == 403
    wrong_key = sign("/webhooks/whatsapp", params, token="another-token")
    assert (await post(daemon, "/webhooks/whatsapp", params, signature=wrong_key)).status_code == 403
    # signed for the URL the request reached (its Host), not the public one: refused
    local = sign("/webhooks/whatsapp", params, base=str(daemon.base_url).rstrip("/"))
    assert (await post(daemon, "/webhooks/whatsapp", params, signature=local)).status_code == 403
    # a signed body with one field changed
    tampered = {**params, "Body": "hello!"}
    assert (await post(daemon, "/webhooks/whatsapp", tampered, signature=sign("/webhooks/whatsapp", params))
            ).status_code == 403
    status = {"MessageSid": "SMx", "MessageStatus": "read"}
    assert (await post(daemon, "/webhooks/whatsapp/status", status, signature=None)).status_code == 403
    big = {**params, "Body": "x" * 70_000}
    assert (await post(daemon, "/webhooks/whatsapp", big)).status_code == 413
    await idle(daemon)
    assert await inspect(daemon) is None and twilio_api.requests == []


async def test_one_message_one_reply_once_even_when_redelivered(
    daemon: httpx.AsyncClient, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    params = incoming("SM" + "a" * 32, "hello hilo")
    r = await post(daemon, "/webhooks/whatsapp", params)
    assert r.status_code == 200 and r.text == EMPTY_TWIML and r.headers["content-type"].startswith("text/xml")
    (sent,) = await twilio_api.wait_for(1)
    assert (sent.to, sent.from_) == (HANDLE, NUMBER) and "You said: hello hilo" in sent.body
    assert sent.status_callback == PUBLIC + "/webhooks/whatsapp/status"
    assert (await post(daemon, "/webhooks/whatsapp", params)).status_code == 200  # Twilio redelivers
    await idle(daemon)
    assert len(twilio_api.requests) == 1
    data = await inspect(daemon)
    (conv,) = data["conversations"]
    assert [m["role"] for m in conv["messages"]] == ["user", "assistant"]
    assert conv["messages"][0]["external_id"] == params["MessageSid"]
    assert conv["messages"][0]["metadata"]["profile_name"] == "Ana"
    (delivery,) = data["deliveries"]
    assert (delivery["status"], delivery["provider_ref"]) == ("sent", sent.sid)
    assert delivery["message_id"] == conv["messages"][1]["id"]

    # Twilio's StatusCallback updates the delivery (signed; an unsigned one changes nothing)
    status = {"MessageSid": str(sent.sid), "MessageStatus": "delivered", "AccountSid": fake_twilio.ACCOUNT_SID}
    assert (await post(daemon, "/webhooks/whatsapp/status", status)).status_code == 200
    forged = {**status, "MessageStatus": "failed"}
    assert (await post(daemon, "/webhooks/whatsapp/status", forged, signature=None)).status_code == 403
    assert (await inspect(daemon))["deliveries"][0]["status"] == "delivered"
    undelivered = {**status, "MessageStatus": "undelivered", "ErrorCode": "63024"}
    assert (await post(daemon, "/webhooks/whatsapp/status", undelivered)).status_code == 200
    delivery = (await inspect(daemon))["deliveries"][0]
    assert (delivery["status"], delivery["error"]) == ("undelivered", "63024")

    # a callback that overtakes the recording of its part is applied once the part is recorded
    early = {**status, "MessageSid": "SM" + "e" * 32, "MessageStatus": "read"}
    assert (await post(daemon, "/webhooks/whatsapp/status", early)).status_code == 200
    store = daemon.app.state.hilo["runtime"].pipeline.store  # type: ignore[attr-defined]
    await store.record_delivery(Delivery(user_id=data["user"]["id"], message_id=None, surface="whatsapp",
                                         recipient=PERSON, status="sent", provider_ref=early["MessageSid"]))
    await idle(daemon)
    assert (await inspect(daemon))["deliveries"][-1]["status"] == "read"


async def test_a_long_reply_arrives_as_ordered_parts(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi, model_server: fake_model.FakeModelServer,
) -> None:
    paragraphs = [f"Part {i}: " + " ".join(f"w{i}-{j}." for j in range(60)) for i in range(10)]
    reply = "\n\n".join(paragraphs)
    assert len(reply) > 4000
    model_server.enqueue(fake_model.ok(reply))
    settings = settings_for(tmp_path, twilio_api, HILO_MODEL="openai:m1",
                            OPENAI_BASE_URL=model_server.base_url + "/v1")
    async with running_daemon(settings) as client:
        assert (await post(client, "/webhooks/whatsapp", incoming("SMlong", "tell me a lot"))).status_code == 200
        await idle(client)
        sent = twilio_api.sent
        assert len(sent) >= 3 and all(len(s.body) <= 1600 for s in sent)
        assert [s.body for s in sent] == split_message(reply)  # in order, cut at paragraph breaks
        assert all(s.body.startswith("Part ") and s.body.endswith(".") for s in sent)
        assert "\n\n".join(s.body for s in sent) == reply  # nothing lost
        deliveries = (await inspect(client))["deliveries"]
        assert [(d["part"], d["parts"], d["provider_ref"]) for d in deliveries] == [
            (i + 1, len(sent), s.sid) for i, s in enumerate(sent)]


async def test_twilio_429_then_201_is_delivered_and_63016_is_a_recorded_failure(
    daemon: httpx.AsyncClient, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    twilio_api.enqueue(fake_twilio.rate_limited(1), fake_twilio.created())
    started = time.monotonic()
    await post(daemon, "/webhooks/whatsapp", incoming("SM429", "first"))
    await twilio_api.wait_for(1)
    assert time.monotonic() - started >= 0.9  # Retry-After was honoured
    await idle(daemon)
    (delivery,) = (await inspect(daemon))["deliveries"]
    assert (delivery["status"], delivery["attempts"]) == ("sent", 2)

    twilio_api.enqueue(fake_twilio.window_closed())
    await post(daemon, "/webhooks/whatsapp", incoming("SM63016", "second"))
    await idle(daemon)
    failed = (await inspect(daemon))["deliveries"][-1]
    assert failed["status"] == "failed" and failed["provider_ref"] is None and failed["attempts"] == 1
    assert failed["error"].startswith("63016") and "24-hour" in failed["error"]
    assert [r.status for r in twilio_api.requests] == [429, 201, 400]  # no retry after 63016

    await post(daemon, "/webhooks/whatsapp", incoming("SMthird", "still there?"))  # the daemon keeps working
    await twilio_api.wait_for(2)
    assert "still there?" in twilio_api.sent[-1].body


async def test_stop_silences_the_number_until_start(
    daemon: httpx.AsyncClient, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    await post(daemon, "/webhooks/whatsapp", incoming("SM1", "hi"))
    await idle(daemon)
    await post(daemon, "/webhooks/whatsapp", incoming("SM2", "STOP"))
    await idle(daemon)
    await post(daemon, "/webhooks/whatsapp", incoming("SM3", "are you there?"))
    await idle(daemon)
    assert len(twilio_api.requests) == 1  # only the answer to "hi"
    messages = (await inspect(daemon))["conversations"][0]["messages"]
    assert [m["content"] for m in messages if m["role"] == "user"] == ["hi"]  # nothing new stored

    await post(daemon, "/webhooks/whatsapp", incoming("SM4", "Alta"))
    (_, confirmation) = await twilio_api.wait_for(2)
    assert "BAJA" in confirmation.body  # Spanish keyword, Spanish confirmation
    await idle(daemon)
    for sid in ("SM2", "SM4"):  # redelivered keywords are not handled twice (nor taken for a turn)
        await post(daemon, "/webhooks/whatsapp", incoming(sid, "STOP" if sid == "SM2" else "Alta"))
        await idle(daemon)
    assert len(twilio_api.requests) == 2
    await post(daemon, "/webhooks/whatsapp", incoming("SM5", "back again"))
    await twilio_api.wait_for(3)
    assert "back again" in twilio_api.sent[-1].body


async def test_media_input_errors_and_failed_turns_get_catalogue_answers(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi, model_server: fake_model.FakeModelServer,
) -> None:
    settings = settings_for(tmp_path, twilio_api, HILO_MODEL="openai:m1", HILO_MODEL_ATTEMPTS="1",
                            OPENAI_BASE_URL=model_server.base_url + "/v1")
    media = {"NumMedia": "1", "MediaUrl0": "https://api.twilio.com/m/ME1", "MediaContentType0": "video/mp4"}
    async with running_daemon(settings) as client:  # (a photo is a turn: tests/test_images.py)
        await post(client, "/webhooks/whatsapp", incoming("SMm1", "", **media))
        (notice,) = await twilio_api.wait_for(1)
        assert notice.body == catalog.t("whatsapp_media_only", "en")
        await idle(client)
        assert await inspect(client) is None  # no turn: nothing stored about the person

        await post(client, "/webhooks/whatsapp", incoming("SMm2", "my cat", **media))  # a caption is text
        await twilio_api.wait_for(2)
        await idle(client)
        (user_msg, _) = (await inspect(client))["conversations"][0]["messages"]
        assert user_msg["content"] == "my cat" and user_msg["metadata"]["media"][0]["content_type"] == "video/mp4"

        await post(client, "/webhooks/whatsapp", incoming("SMm3", "x" * 5000))
        await twilio_api.wait_for(3)
        assert "too long" in twilio_api.sent[-1].body

        model_server.enqueue(fake_model.status(503))
        await post(client, "/webhooks/whatsapp", incoming("SMm4", "are you up?"))
        await twilio_api.wait_for(4)
        assert "try again shortly" in twilio_api.sent[-1].body
        await idle(client)
        data = await inspect(client)
        assert data["conversations"][0]["messages"][-1]["content"] == "are you up?"  # kept for later


async def test_a_location_is_a_turn_stored_as_structured_text_never_a_refusal(
    daemon: httpx.AsyncClient, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    await post(daemon, "/webhooks/whatsapp", incoming("SMloc", "", Latitude="39.47", Longitude="-0.38"))
    (answer,) = await twilio_api.wait_for(1)
    assert "[location: 39.47, -0.38]" in answer.body  # the echo model saw it
    await idle(daemon)
    (user_msg, reply) = (await inspect(daemon))["conversations"][0]["messages"]
    assert user_msg["content"] == "[location: 39.47, -0.38]" and reply["role"] == "assistant"


async def test_the_webhook_answers_at_once_while_the_model_is_slow(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi, model_server: fake_model.FakeModelServer,
) -> None:
    settings = settings_for(tmp_path, twilio_api, HILO_MODEL="openai:m1",
                            OPENAI_BASE_URL=model_server.base_url + "/v1")
    model_server.enqueue(fake_model.slow(20))
    surface = WhatsAppSurface(settings, drain_timeout=0.5)  # shutdown cancels the turn instead of waiting 20 s
    async with running_daemon(settings, surfaces=[WebSurface(settings), surface]) as client:
        r = await post(client, "/webhooks/whatsapp", incoming("SMslow", "take your time"))
        assert r.status_code == 200 and r.text == EMPTY_TWIML
        deadline = time.monotonic() + 5
        while not model_server.requests:  # the turn reached the model ...
            assert time.monotonic() < deadline
            await asyncio.sleep(0.01)
        assert len(surface._inflight) == 1 and twilio_api.requests == []  # ... and is still waiting on it
        stopping = time.monotonic()
    assert time.monotonic() - stopping < 5  # shutdown did not wait for the model
    assert twilio_api.requests == [] and not surface._inflight


# -- `hilo serve` as a real process ------------------------------------------------------------------------------
def test_hilo_serve_signed_webhook_one_send_one_turn_unsigned_403(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi,
) -> None:
    port = free_port()
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("HILO_", "OPENAI_", "ANTHROPIC_", "TELEGRAM_", "TWILIO_", "DATABASE_URL"))}
    env.update(env_for(tmp_path, twilio_api, HILO_DATABASE_URL="sqlite:///hilo.db"), PYTHONPATH=str(REPO))
    cli = [sys.executable, "-m", "bot.cli"]
    proc = subprocess.Popen([*cli, "serve", "--port", str(port)], cwd=tmp_path, env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 30
        while True:
            try:
                if httpx.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                assert proc.poll() is None and time.monotonic() < deadline, "hilo serve did not start"
                time.sleep(0.05)
        params = incoming("SM" + "c" * 32, "hola desde WhatsApp")
        headers = {"content-type": "application/x-www-form-urlencoded"}
        r = httpx.post(f"{base}/webhooks/whatsapp", content=urlencode(params), timeout=5,
                       headers={**headers, "x-twilio-signature": sign("/webhooks/whatsapp", params)})
        assert r.status_code == 200 and r.text == EMPTY_TWIML
        unsigned = incoming("SM" + "d" * 32, "unsigned")
        assert httpx.post(f"{base}/webhooks/whatsapp", content=urlencode(unsigned), headers=headers,
                          timeout=5).status_code == 403
        while not twilio_api.sent:
            assert time.monotonic() < deadline + 10, "no reply reached the fake Twilio API"
            time.sleep(0.02)
        proc.send_signal(signal.SIGTERM)  # drains the turn in flight
        assert proc.wait(timeout=20) in (0, -signal.SIGTERM)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=10)
        if proc.stdout:
            proc.stdout.close()
    (sent,) = twilio_api.requests
    assert sent.status == 201 and sent.to == HANDLE and "hola desde WhatsApp" in sent.body
    out = subprocess.run([*cli, "inspect", "--user", HANDLE, "--json"], cwd=tmp_path, env=env,
                         capture_output=True, text=True, timeout=30, check=True)
    data = json.loads(out.stdout)
    (conv,) = data["conversations"]
    assert [(m["role"], m["external_id"]) for m in conv["messages"]] == [
        ("user", params["MessageSid"]), ("assistant", None)]
    assert "unsigned" not in out.stdout
    assert [(d["status"], d["provider_ref"]) for d in data["deliveries"]] == [("sent", sent.sid)]


async def hold_every_job(store: Any) -> None:
    """Every job's lease taken by another process for an hour (as a process of the same database would hold
    one while it runs it): this process's scheduler runs none of them meanwhile."""
    names = [job.name for job in await store.job_states()]
    assert names, "the daemon registered its jobs"

    async def held() -> bool:
        for name in names:
            await store.claim_job(name, "another-process", 3600, force=True)
        return all(job.owner == "another-process" for job in await store.job_states())

    await wait_until(held, "every job's lease held by another process")


@pytest.mark.parametrize("leases", ["free", "held by another process"])
async def test_a_full_disk_keeps_the_message_in_the_journal_and_answers_it_once_the_disk_has_room(
    daemon: httpx.AsyncClient, twilio_api: fake_twilio.FakeTwilioApi, tmp_path: Path, leases: str,
) -> None:
    """SQLite really answering "database or disk is full" (a StoreError) on ingest: the message goes to the
    journal (fsync'd, 0600), Twilio gets 200, the person is told once it is kept; once the database has room
    again this process replays its journal, and the message is answered, once. Also while another process of
    the database holds every background job's lease: the journal is this process's file, so this process
    replays it (a shared job would leave it to whichever process claimed the run)."""
    store = daemon.app.state.hilo["runtime"].pipeline.store  # type: ignore[attr-defined]
    if leases != "free":
        await hold_every_job(store)
    params = incoming("SM" + "f" * 32, PAGE_SIZED_TEXT)
    async with disk_full(store):
        assert (await post(daemon, "/webhooks/whatsapp", params)).status_code == 200
        (kept,) = await twilio_api.wait_for(1)
        assert (kept.to, kept.body) == (HANDLE, catalog.t("message_kept", "en"))
        assert (await post(daemon, "/webhooks/whatsapp", params)).status_code == 200  # a redelivery meanwhile
        await idle(daemon)
        assert await inspect(daemon) is None  # nothing half-stored
        journal = tmp_path / "inbound.journal"
        assert journal.stat().st_mode & 0o777 == 0o600
    answer = (await twilio_api.wait_for(2, timeout=30))[1]
    assert answer.body.startswith("[echo")
    await wait_until(lambda: not journal.exists(), "the replayed journal is deleted")
    await idle(daemon)
    sent = len(twilio_api.requests)  # the notice, then the answer's parts
    assert (await post(daemon, "/webhooks/whatsapp", params)).status_code == 200  # Twilio's retry changes nothing
    await idle(daemon)
    assert len(twilio_api.requests) == sent
    (conv,) = (await inspect(daemon))["conversations"]
    assert [m["role"] for m in conv["messages"]] == ["user", "assistant"]


async def test_a_message_that_arrives_while_the_database_is_down_is_journaled_acknowledged_and_answered_later(
    tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi, capsys: pytest.CaptureFixture[str],
) -> None:
    # A real Postgres of this test's own, stopped under the running daemon and started again.
    pg = StoppablePostgres()
    uri = await asyncio.to_thread(pg.start)
    try:
        async with running_daemon(settings_for(tmp_path, twilio_api, HILO_DATABASE_URL=uri,
                                               HILO_DATA_DIR=str(tmp_path / "data"))) as client:
            await asyncio.to_thread(pg.stop)
            params = incoming("SM" + "d" * 32, "are you there?")
            r = await post(client, "/webhooks/whatsapp", params)
            # kept in the journal, so acknowledged
            assert r.status_code == 200 and r.text == EMPTY_TWIML, r.text
            # and the person is told, once, that it is kept and will be answered
            (kept,) = await twilio_api.wait_for(1)
            assert (kept.to, kept.body) == (HANDLE, catalog.t("message_kept", "en"))
            logged = "".join(capsys.readouterr())
            assert "intake.not_stored" in logged and "journal.kept" in logged
            assert "are you there" not in logged  # ids and sizes, never the text
            assert (await post(client, "/webhooks/whatsapp", params)).status_code == 200  # Twilio again
            stop = incoming("SM" + "s" * 32, "STOP")
            assert (await post(client, "/webhooks/whatsapp", stop)).status_code == 503  # STOP is not lost either
            await idle(client)
            assert len(twilio_api.requests) == 1  # one word to the person; none for STOP

            await asyncio.to_thread(pg.start)
            (_, answer) = await twilio_api.wait_for(2, timeout=30)  # this process replays its journal once it is back
            assert "You said: are you there?" in answer.body
            assert (await post(client, "/webhooks/whatsapp", params)).status_code == 200
            await idle(client)
            assert len(twilio_api.requests) == 2  # answered once
            (conv,) = (await inspect(client))["conversations"]
            assert [m["role"] for m in conv["messages"]] == ["user", "assistant"]
            assert conv["messages"][0]["external_id"] == params["MessageSid"]

            assert (await post(client, "/webhooks/whatsapp", stop)).status_code == 200  # STOP, redelivered
            assert (await post(client, "/webhooks/whatsapp", incoming("SM" + "e" * 32, "hello?"))).status_code == 200
            await idle(client)
            assert len(twilio_api.requests) == 2  # opted out: nothing more is sent
    finally:
        await asyncio.to_thread(pg.remove)
