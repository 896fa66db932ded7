"""Fuzzing every route that takes a person's input: the web API, the Telegram webhook and the Twilio webhooks.

The real app (its lifespan, the real SQLite store, the echo model, python-telegram-bot against the fake Bot API,
the twilio client against the fake Twilio API) runs on an event loop of its own thread; each example goes in
through httpx's in-process ASGI transport (no sockets: thousands of examples in seconds). Webhooks are genuine:
Telegram's carry the right secret token, Twilio's are signed with twilio's own RequestValidator, so the input
reaches everything behind the authentication.

After each example: never a 500 (an exception in the app fails the example), every refusal is a JSON error with
a catalogue message (web) or a plain 4xx (webhooks), no internal-error apology was sent, and the store holds
either the whole inbound message or nothing for it.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import sqlite3
import threading
from collections.abc import Coroutine, Iterator
from contextlib import closing
from pathlib import Path
from typing import Any, TypeVar
from urllib.parse import quote, urlencode

import httpx
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from starlette.applications import Starlette
from twilio.request_validator import RequestValidator  # type: ignore[import-untyped]

from bot.app import create_app
from bot.config import Settings
from bot.vision import NOT_SEEN
from kernel import catalog
from kernel.text import without_nul
from surfaces import whatsapp
from surfaces.telegram import WEBHOOK_PATH as TELEGRAM_PATH
from surfaces.telegram import TelegramSurface
from surfaces.whatsapp import STATUS_PATH, WEBHOOK_PATH, WhatsAppSurface
from tests.fakes import telegram_api as fake_telegram
from tests.fakes import twilio_api as fake_twilio
from tests.fakes.telegram_api import TOKEN, FakeBotApi
from tests.waiting import wait_until

bot_api_session = fake_telegram.bot_api_session
bot_api = fake_telegram.bot_api
twilio_api_session = fake_twilio.twilio_api_session
twilio_api = fake_twilio.twilio_api

T = TypeVar("T")
SECRET = "fuzz_webhook-secret"
PUBLIC = "https://bot.example.com"
NUMBER = "whatsapp:+14155238886"
FUZZ = settings(deadline=None, suppress_health_check=list(HealthCheck), database=None)
INTERNAL_ERRORS = {catalog.t("internal_error", lang) for lang in ("en", "es")}
WEB_STATUSES = {200, 400, 401, 404, 413}

# -- strategies ---------------------------------------------------------------------------------------------

ANY_CHAR = st.characters(exclude_categories=())  # lone surrogates too
FORM_CHAR = st.characters(codec="utf-8")  # a form is UTF-8 on the wire: no lone surrogates there
ODD = st.sampled_from(["\x00", "\u200b", "\u200c", "\u200d", "\u2060", "\ufeff", "\ud800", "\udfff", " ", "\n",
                       "\t", "😀", "é", "/", "@", "ñ", "\u202e", "\r"])
COMMANDS = st.sampled_from(["/start", "/help", "/memory", "/forget", "/link", "/link ", "/unlink", "/link 123456",
                            "/link@hilo_test_bot", "/LINK", "/forget yes", "STOP", "START", "baja", "alta"])


def texts(chars: st.SearchStrategy[str], odd: st.SearchStrategy[str]) -> st.SearchStrategy[str]:
    # lists joined, not st.text(): st.text() leaves lone surrogates out of a sampled alphabet
    mixed = st.lists(st.one_of(odd, chars), max_size=30).map("".join)
    short = st.one_of(st.text(chars, max_size=40), mixed, st.tuples(COMMANDS, mixed).map("".join))
    around_the_limit = st.integers(4090, 4100).map(lambda n: ("lorem ipsum " * 400)[:n])  # HILO_MAX_MESSAGE_CHARS
    return st.one_of(short, short, short, short, around_the_limit)


TEXT = texts(ANY_CHAR, ODD)
FORM_TEXT = texts(FORM_CHAR, ODD.filter(lambda c: not 0xD800 <= ord(c) <= 0xDFFF))
BIG = "__big_number__"  # replaced by thousands of digits after json.dumps (which refuses such ints)
NUMBERS = st.one_of(st.integers(), st.integers(-(2**70), 2**70), st.just(BIG), st.floats(), st.booleans(),
                    st.none(), st.text(ANY_CHAR, max_size=5))
JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(ANY_CHAR, max_size=10),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(ANY_CHAR, max_size=6), inner, max_size=3),
    max_leaves=8,
)


def encode(value: Any, ascii_only: bool, digits: int = 4400) -> bytes:
    """JSON bytes as a client might send them: \\u escapes, or raw UTF-8 (lone surrogates as CESU-8 bytes)."""
    text = json.dumps(value, ensure_ascii=ascii_only).replace(json.dumps(BIG), "9" * digits)
    return text.encode("utf-8", "surrogatepass")


def sent_as(text: str, ascii_only: bool) -> str:
    """The text a JSON reader gets from `encode`: \\u escapes join a high and a low surrogate into one character."""
    return json.loads(json.dumps(text)) if ascii_only else text  # type: ignore[no-any-return]


def deep(n: int) -> bytes:
    return b'{"text": "hi", "x": ' + b"[" * n + b"]" * n + b"}"


MESSAGE_BODY = st.fixed_dictionaries(
    {"text": st.one_of(TEXT, TEXT, TEXT, JSON)},
    optional={"conversation_id": NUMBERS, "client_message_id": st.one_of(TEXT, NUMBERS), "extra": JSON},
)
WEB_BODY = st.one_of(
    st.tuples(MESSAGE_BODY, st.booleans(), st.integers(4000, 5000)).map(lambda t: encode(*t)),
    st.tuples(MESSAGE_BODY, st.booleans(), st.integers(4000, 5000)).map(lambda t: encode(*t)),
    st.tuples(JSON, st.booleans()).map(lambda t: encode(*t)),
    st.binary(max_size=100),
    st.integers(20, 40_000).map(deep),
)


# -- the app on its own loop ------------------------------------------------------------------------------

class InProcess:
    """`app` with its lifespan on an event loop in a thread; `call()` runs a coroutine there and waits."""

    def __init__(self, app: Starlette) -> None:
        self.app = app
        self.loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self.loop.run_forever, name="fuzz-app", daemon=True)
        self._lifespan: Any = None
        self.client: httpx.AsyncClient | None = None

    def call(self, coro: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(timeout=60)

    def __enter__(self) -> InProcess:
        self._thread.start()
        self.call(self._start())
        return self

    def __exit__(self, *exc: object) -> None:
        try:
            self.call(self._stop())
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self._thread.join(timeout=30)
            self.loop.close()

    async def _start(self) -> None:
        self._lifespan = self.app.router.lifespan_context(self.app)
        await self._lifespan.__aenter__()
        self.client = httpx.AsyncClient(transport=httpx.ASGITransport(app=self.app), base_url="http://127.0.0.1")

    async def _stop(self) -> None:
        if self.client is not None:
            await self.client.aclose()
        await self._lifespan.__aexit__(None, None, None)

    def request(self, method: str, url: str, **kw: Any) -> httpx.Response:
        assert self.client is not None
        return self.call(self.client.request(method, url, **kw))

    def surface(self, kind: type[T]) -> T:
        for surface in _surfaces(self.app):
            if isinstance(surface, kind):
                return surface
        raise AssertionError(f"no {kind.__name__} running")


def _surfaces(app: Starlette) -> Iterator[Any]:
    for route in app.router.routes:
        owner = getattr(getattr(route, "endpoint", None), "__self__", None)
        if owner is not None:
            yield owner


def stored(db: Path, surface: str, external_id: str) -> list[str]:
    """The person's message(s) stored under (surface, external_id): [] or [its content]."""
    with closing(sqlite3.connect(db)) as conn:
        return [row[0] for row in conn.execute(
            "SELECT content FROM messages WHERE surface = ? AND external_id = ? AND role = 'user'",
            (surface, external_id))]


def user_messages(db: Path) -> tuple[int, str | None]:
    with closing(sqlite3.connect(db)) as conn:
        count = conn.execute("SELECT COUNT(*) FROM messages WHERE role = 'user'").fetchone()[0]
        last = conn.execute("SELECT content FROM messages WHERE role = 'user' ORDER BY id DESC LIMIT 1").fetchone()
    return count, last[0] if last else None


def base_env(tmp_path: Path) -> dict[str, str]:
    return {"HILO_DATABASE_URL": f"sqlite:///{tmp_path / 'hilo.db'}", "HILO_SECRET_KEY": "fuzz-secret",
            "HILO_RATE_LIMIT_IP": "1000000", "HILO_RATE_LIMIT_VISITOR": "1000000"}


# -- the web API ----------------------------------------------------------------------------------------------

def sse_events(body: str) -> list[tuple[str, dict[str, Any]]]:
    events = []
    for block in body.split("\n\n"):
        lines = dict(line.split(": ", 1) for line in block.split("\n") if ": " in line and not line.startswith(":"))
        if "event" in lines:
            events.append((lines["event"], json.loads(lines["data"])))
    return events


def test_fuzz_the_web_api(tmp_path: Path) -> None:
    db = tmp_path / "hilo.db"
    with InProcess(create_app(Settings.from_mapping(base_env(tmp_path)))) as app:
        sessions = [app.request("POST", "/api/session").json()["session"] for _ in range(3)]
        bearer = [{"authorization": f"Bearer {token}"} for token in sessions]
        forged = st.text(st.characters(min_codepoint=0x21, max_codepoint=0x7E), max_size=30).map(
            lambda s: {"authorization": f"Bearer {s}"})
        auth: st.SearchStrategy[dict[str, str]] = st.one_of(st.just({}), st.sampled_from(bearer), forged)
        headers = st.tuples(auth, st.sampled_from(["en", "es-ES,es;q=0.9", "", "*", "xx"]),
                            st.sampled_from(["application/json", "text/plain", "application/x-www-form-urlencoded"]))

        @settings(FUZZ, max_examples=1500)
        @given(body=WEB_BODY, head=headers, stream=st.booleans())
        def post_a_message(body: bytes, head: tuple[dict[str, str], str, str], stream: bool) -> None:
            extra, language, content_type = head
            before = user_messages(db)[0]
            r = app.request("POST", "/api/messages/stream" if stream else "/api/messages", content=body,
                            headers={**extra, "accept-language": language, "content-type": content_type})
            assert r.status_code in WEB_STATUSES, (r.status_code, r.text)
            count, last = user_messages(db)
            if r.status_code != 200:
                assert set(r.json()) >= {"error", "message"} and r.json()["message"], r.text
                assert count == before, "a refused message left a row behind"
                return
            if stream:
                events = sse_events(r.text)
                assert events[-1][0] == "done", events
                status = events[-1][1]["status"]
            else:
                status = r.json()["status"]
            sent = without_nul(json.loads(body)["text"])  # NUL is dropped at the edge (Postgres cannot store it)
            if status in ("ok", "failed"):
                assert (count, last) == (before + 1, sent), "the message is not stored whole"
            else:
                assert status in ("command", "duplicate"), status
                assert count <= before, "a command was stored"  # fewer after "/forget yes"

        @settings(FUZZ, max_examples=300)
        @given(segment=st.text(FORM_CHAR.filter(lambda c: c != "/"), min_size=1, max_size=30).filter(
            lambda seg: seg.strip(".") != "") | st.integers(4000, 6000).map(lambda n: "9" * n),  # "/", "..": routing
               session=st.sampled_from(sessions))
        def read_a_conversation(segment: str, session: str) -> None:
            r = app.request("GET", f"/api/conversations/{quote(segment, safe='')}/messages",
                            headers={"authorization": f"Bearer {session}"})
            assert r.status_code in (200, 404), (r.status_code, r.text)
            assert set(r.json()) >= ({"messages"} if r.status_code == 200 else {"error", "message"})

        post_a_message()
        read_a_conversation()


# -- the Telegram webhook -------------------------------------------------------------------------------------

IDS = st.one_of(st.integers(-(2**63), 2**63), st.integers(), st.just(BIG))
ENTITY = st.fixed_dictionaries({
    "type": st.sampled_from(["bot_command", "mention", "bold", "text_mention", "url", "nonsense"]),
    "offset": st.integers(-5, 50), "length": st.integers(-5, 50),
})
MESSAGE = st.fixed_dictionaries(
    {"chat": st.fixed_dictionaries({"id": IDS, "type": st.sampled_from(["private", "group", "supergroup",
                                                                         "channel", "secret"])}),
     "date": st.integers(0, 2**40)},
    optional={
        "text": TEXT, "caption": TEXT, "entities": st.lists(ENTITY, max_size=3),
        "from": st.fixed_dictionaries(
            {"id": IDS, "is_bot": st.booleans(), "first_name": st.text(ANY_CHAR, max_size=10)},
            optional={"username": st.text(ANY_CHAR, max_size=10),
                      "language_code": st.sampled_from(["en", "es", "", "xx-YY", "\ud800"])}),
        "photo": st.just([{"file_id": "AgAD", "file_unique_id": "u1", "width": 90, "height": 90}]),
        "reply_to_message": st.fixed_dictionaries({"message_id": st.integers(), "date": st.integers(0, 2**31),
                                                   "chat": st.just({"id": 1, "type": "private"})}),
        "junk": JSON,
    },
)
PRIVATE = st.builds(
    lambda uid, text, lang, extra: {
        "chat": {"id": uid, "type": "private", "first_name": "Ana"}, "date": 1767225600, "text": text,
        "from": {"id": uid, "is_bot": False, "first_name": "Ana", **lang}, **extra},
    IDS, TEXT, st.fixed_dictionaries({}, optional={"language_code": st.sampled_from(["en", "es", "", "xx-YY"])}),
    st.fixed_dictionaries({}, optional={"entities": st.lists(ENTITY, max_size=2), "junk": JSON}),
)
UPDATE = st.one_of(
    st.tuples(st.just("message"), PRIVATE),  # most reach a turn or a command
    st.tuples(st.sampled_from(["message", "message", "edited_message", "channel_post"]), MESSAGE),
)


def test_fuzz_the_telegram_webhook(tmp_path: Path, bot_api: FakeBotApi) -> None:
    db = tmp_path / "hilo.db"
    env = {**base_env(tmp_path), "TELEGRAM_BOT_TOKEN": TOKEN, "TELEGRAM_API_BASE_URL": bot_api.base_url,
           "HILO_TELEGRAM_MODE": "webhook", "TELEGRAM_WEBHOOK_SECRET": SECRET, "HILO_PUBLIC_URL": PUBLIC}
    update_ids = itertools.count(1)
    message_ids = itertools.count(1)
    with InProcess(create_app(Settings.from_mapping(env))) as app:
        surface = app.surface(TelegramSurface)

        async def post(body: bytes, update_id: int | None) -> int:
            assert app.client is not None
            r = await app.client.post(TELEGRAM_PATH, content=body, headers={
                "x-telegram-bot-api-secret-token": SECRET, "content-type": "application/json"})
            if r.status_code == 200 and update_id is not None:  # stored by now; its answer follows in a task
                await wait_until(lambda: not surface._inflight, "the update's answer")
            return r.status_code

        @settings(FUZZ, max_examples=1000)
        @given(update=UPDATE, ascii_only=st.booleans(), digits=st.integers(10, 5000))
        # a high and a low surrogate side by side, sent as \u escapes, ARE one character on the wire (U+10000)
        @example(update=("message", {"chat": {"id": 5, "type": "private"}, "date": 1767225600,
                                     "text": "\ud800\udc00", "from": {"id": 5, "is_bot": False, "first_name": "A"}}),
                 ascii_only=True, digits=10)
        def post_an_update(update: tuple[str, dict[str, Any]], ascii_only: bool, digits: int) -> None:
            kind, message = update
            update_id, message_id = next(update_ids), next(message_ids)
            message = {**message, "message_id": message_id}
            body = encode({"update_id": update_id, kind: message}, ascii_only, digits)
            sends = len(bot_api.sent)
            status = app.call(post(body, update_id))
            assert status in (200, 400), status
            assert not INTERNAL_ERRORS & {s.text for s in bot_api.sent[sends:]}, "an internal error was answered"
            chat_id = message["chat"]["id"]
            if chat_id == BIG:
                chat_id = int("9" * digits) if digits <= 4300 else None  # past 4,300 digits: not JSON to Python
            if status == 200 and isinstance(chat_id, int):
                rows = stored(db, "telegram", f"{chat_id}:{message_id}")
                if "photo" in message and rows and rows[0].startswith(NOT_SEEN):  # the echo model reads text only:
                    assert rows[0] == NOT_SEEN or rows[0].startswith(NOT_SEEN + "\n"), rows  # note, then caption
                    return
                assert rows in ([], *([without_nul(sent_as(t, ascii_only))] for t in (message.get("text"),
                                      message.get("caption")) if isinstance(t, str))), rows

        @settings(FUZZ, max_examples=200)
        @given(body=st.one_of(st.binary(max_size=100), st.tuples(JSON, st.booleans()).map(lambda t: encode(*t)),
                              st.integers(20, 400_000).map(lambda n: b"[" * n + b"]" * n)))
        def post_garbage(body: bytes) -> None:
            if b'"update_id"' in body:
                return
            assert app.call(post(body, None)) in (400, 413)

        post_an_update()
        post_garbage()


# -- the Twilio webhooks --------------------------------------------------------------------------------------

FORM = st.fixed_dictionaries(
    {"Body": FORM_TEXT,
     "From": st.one_of(st.just("whatsapp:+34600111222"), st.integers(0, 10**15).map(lambda n: f"whatsapp:+{n}"),
                       st.just("whatsapp:+34600111222"), st.text(FORM_CHAR, max_size=20))},
    optional={
        "NumMedia": st.one_of(st.integers(-3, 20).map(str), st.text(FORM_CHAR, max_size=5), st.just("9" * 5000)),
        "MediaUrl0": st.text(FORM_CHAR, max_size=20), "MediaContentType0": st.text(FORM_CHAR, max_size=10),
        "Latitude": st.text(FORM_CHAR, max_size=8), "Longitude": st.text(FORM_CHAR, max_size=8),
        "ProfileName": st.text(FORM_CHAR, max_size=10), "WaId": st.text(FORM_CHAR, max_size=10),
        "To": st.just(NUMBER), "SmsStatus": st.just("received"),
    },
)
STATUS_FORM = st.fixed_dictionaries({}, optional={
    "MessageSid": st.text(FORM_CHAR, max_size=40), "MessageStatus": st.text(FORM_CHAR, max_size=12),
    "SmsStatus": st.sampled_from(["sent", "delivered", "read", "failed", "undelivered"]),
    "ErrorCode": st.text(FORM_CHAR, max_size=8), "ErrorMessage": st.text(FORM_CHAR, max_size=600),
})


def test_fuzz_the_twilio_webhooks(tmp_path: Path, twilio_api: fake_twilio.FakeTwilioApi) -> None:
    db = tmp_path / "hilo.db"
    env = {**base_env(tmp_path), "HILO_PUBLIC_URL": PUBLIC, "TWILIO_ACCOUNT_SID": twilio_api.account_sid,
           "TWILIO_AUTH_TOKEN": twilio_api.auth_token, "TWILIO_WHATSAPP_NUMBER": NUMBER,
           "TWILIO_API_BASE_URL": twilio_api.base_url}
    validator = RequestValidator(twilio_api.auth_token)
    sids = itertools.count(1)
    with InProcess(create_app(Settings.from_mapping(env))) as app:
        surface = app.surface(WhatsAppSurface)

        async def post(route: str, form: dict[str, str]) -> int:
            assert app.client is not None
            r = await app.client.post(route, content=urlencode(form), headers={
                "content-type": "application/x-www-form-urlencoded",
                "x-twilio-signature": validator.compute_signature(PUBLIC + route, form)})
            # the turn and its reply (a late status for an unknown sid retries for seconds: not waited for)
            while turns := {t for t in surface._inflight if not t.get_name().startswith("whatsapp-status:")}:
                finished, _ = await asyncio.wait(turns)
                for task in finished:
                    assert task.cancelled() or task.exception() is None, repr(task.exception())
            return r.status_code

        @settings(FUZZ, max_examples=1000)
        @given(form=FORM, sid_kind=st.sampled_from(["normal", "normal", "normal", "blank", "missing", "odd"]),
               odd=st.text(FORM_CHAR, min_size=1, max_size=20))
        def post_a_message(form: dict[str, str], sid_kind: str, odd: str) -> None:
            sid = {"normal": f"SM{next(sids):032x}", "blank": "  ", "odd": f"{odd}{next(sids)}"}.get(sid_kind)
            if sid is not None:
                form = {**form, "MessageSid": sid}
            sends = len(twilio_api.sent)
            status = app.call(post(WEBHOOK_PATH, form))
            has_ids = bool((sid or "").strip() and form.get("From", "").strip().removeprefix("whatsapp:"))
            assert status == (200 if has_ids else 400), status
            assert not INTERNAL_ERRORS & {s.body for s in twilio_api.sent[sends:]}, "an internal error was answered"
            if has_ids:
                assert sid is not None
                rows = stored(db, "whatsapp", sid.strip())
                # the text stored is what the surface makes of the form (a location's structured text first)
                expected = without_nul(whatsapp.inbound(whatsapp.Form(list(form.items()))).text)
                assert rows in ([], [expected]), rows

        @settings(FUZZ, max_examples=300)
        @given(form=STATUS_FORM)
        def post_a_status(form: dict[str, str]) -> None:
            status = app.call(post(STATUS_PATH, form))
            complete = form.get("MessageSid") and (form.get("MessageStatus") or form.get("SmsStatus"))
            assert status == (200 if complete else 400), status

        post_a_message()
        post_a_status()

