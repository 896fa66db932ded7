"""A loopback fake of the one Twilio REST route hilo uses, for the real twilio client to talk to.

GET /2010-04-01/Accounts/{AccountSid}.json: the account resource (Basic auth checked the same way), as hilo's
readiness check fetches it once at start (surfaces/whatsapp_ready.py); `account_status` is what it says
("active", or "suspended" / "closed"), `account_fetches` counts the fetches.

GET /2010-04-01/Accounts/{AccountSid}/Messages/{MessageSid}/Media/{MediaSid}: an inbound message's MediaUrl
(`add_media`), Basic auth checked, answered with a 307 to /storage/{MediaSid}, which serves the bytes with their
Content-Type and Content-Length; `media_fetches` records (media sid, authorized) per request.

POST /2010-04-01/Accounts/{AccountSid}/Messages.json: checks HTTP Basic auth (account SID + auth token; 401
with Twilio's error 20003 otherwise), records the form (To, From, Body, StatusCallback) in arrival order, and
answers 201 with a message resource whose `sid` is a fresh "SM..." id. It listens on 127.0.0.1 only, on a free
port, served by uvicorn in a background thread.

Scripting: each request takes the next behaviour from `enqueue(...)`, else `created()`. Behaviours:
`created()`, `rate_limited(retry_after)` (429, Twilio's error 20429), `server_error(500)`,
`window_closed()` (400 with code 63016: outside WhatsApp's 24-hour window), `error(status, code, message)`.
`hold(gate)` holds every create until the gate opens (loopback.HeldSends).

Use from a test module: `from tests.fakes import twilio_api as fake_twilio`, then module-level
`twilio_api_session = fake_twilio.twilio_api_session; twilio_api = fake_twilio.twilio_api`, then take the
`twilio_api` fixture: `.base_url` (TWILIO_API_BASE_URL), `.account_sid`, `.auth_token`, `.sent` (the
messages answered 201), `.requests` (every attempt), `await .wait_for(n)`.
"""

from __future__ import annotations

import asyncio
import base64
import secrets
import threading
import time
from collections import deque
from collections.abc import Iterator
from dataclasses import dataclass
from email.utils import formatdate
from urllib.parse import parse_qsl

import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.loopback import HeldSends, ThreadedServer

ACCOUNT_SID = "AC" + "0" * 31 + "1"
AUTH_TOKEN = "fake-twilio-auth-token"


@dataclass(frozen=True, slots=True)
class Behaviour:
    status: int = 201
    code: int | None = None
    message: str = ""
    headers: tuple[tuple[str, str], ...] = ()


def created() -> Behaviour:
    return Behaviour()


def rate_limited(retry_after: float | str | None = 1.0) -> Behaviour:
    """429 with a Retry-After in seconds, or as given when it is text (an HTTP-date); None sends none."""
    value = retry_after if isinstance(retry_after, str) or retry_after is None else f"{retry_after:g}"
    headers = (("Retry-After", value),) if value is not None else ()
    return Behaviour(429, 20429, "Too Many Requests", headers)


def server_error(status: int = 500) -> Behaviour:
    return Behaviour(status, 20500, "Internal Server Error")


def window_closed() -> Behaviour:
    return Behaviour(400, 63016, "Failed to send freeform message because you are outside the allowed window. "
                                 "If you are using WhatsApp, please use a Message Template.")


def error(status: int, code: int, message: str) -> Behaviour:
    return Behaviour(status, code, message)


@dataclass(frozen=True, slots=True)
class RecordedSend:
    """One request as the fake saw it: the account in the path, the form, and what it answered."""

    account_sid: str
    form: dict[str, str]
    status: int
    sid: str | None

    @property
    def to(self) -> str:
        return self.form.get("To", "")

    @property
    def from_(self) -> str:
        return self.form.get("From", "")

    @property
    def body(self) -> str:
        return self.form.get("Body", "")

    @property
    def status_callback(self) -> str:
        return self.form.get("StatusCallback", "")


class FakeTwilioApi(HeldSends):
    def __init__(self, account_sid: str = ACCOUNT_SID, auth_token: str = AUTH_TOKEN) -> None:
        self.account_sid, self.auth_token = account_sid, auth_token
        self._lock = threading.Lock()
        self._queue: deque[Behaviour] = deque()
        self.requests: list[RecordedSend] = []
        self.account_status = "active"
        self.account_fetches = 0
        self.app = Starlette(routes=[
            Route("/2010-04-01/Accounts/{account_sid}.json", self._account, methods=["GET"]),
            Route("/2010-04-01/Accounts/{account_sid}/Messages.json", self._messages, methods=["POST"]),
            Route("/2010-04-01/Accounts/{account_sid}/Messages/{message_sid}/Media/{media_sid}", self._media,
                  methods=["GET"]),
            Route("/storage/{media_sid}", self._storage, methods=["GET"]),
        ])
        self._media_files: dict[str, tuple[bytes, str]] = {}
        self.media_fetches: list[tuple[str, bool]] = []  # (media sid, Basic auth given) of each media request
        self._loopback = ThreadedServer(self.app, name="fake-twilio-api")

    @property
    def base_url(self) -> str:
        return self._loopback.base_url

    @property
    def port(self) -> int:
        return self._loopback.port

    @property
    def sent(self) -> list[RecordedSend]:
        """The messages Twilio accepted (201), in order."""
        with self._lock:
            return [r for r in self.requests if r.status == 201]

    def enqueue(self, *behaviours: Behaviour) -> None:
        with self._lock:
            self._queue.extend(behaviours)

    def add_media(self, message_sid: str, media_sid: str, data: bytes, content_type: str = "audio/ogg") -> str:
        """A media file of an inbound message; its MediaUrl (what Twilio's webhook form carries)."""
        with self._lock:
            self._media_files[media_sid] = (data, content_type)
        return f"{self.base_url}/2010-04-01/Accounts/{self.account_sid}/Messages/{message_sid}/Media/{media_sid}"

    def reset(self) -> None:
        with self._lock:
            self._queue.clear()
            self.requests = []
            self.account_status, self.account_fetches = "active", 0
            self._media_files.clear()
            self.media_fetches = []
        self.hold(None)

    async def wait_for(self, count: int, timeout: float = 10.0) -> list[RecordedSend]:
        """Wait until `count` messages were accepted; fail the test if they do not come."""
        deadline = time.monotonic() + timeout
        while len(self.sent) < count:
            if time.monotonic() > deadline:
                raise AssertionError(f"the fake Twilio API got {len(self.sent)} messages, expected {count}")
            await asyncio.sleep(0.01)
        return self.sent

    # -- lifecycle ----------------------------------------------------------------------------------------
    def start(self) -> None:
        self._loopback.start()

    def stop(self) -> None:
        self._loopback.stop()

    # -- the route ----------------------------------------------------------------------------------------
    def _authorized(self, request: Request, account_sid: str) -> bool:
        expected = base64.b64encode(f"{self.account_sid}:{self.auth_token}".encode()).decode()
        return account_sid == self.account_sid and request.headers.get("authorization") == f"Basic {expected}"

    async def _account(self, request: Request) -> Response:
        account_sid = request.path_params["account_sid"]
        with self._lock:
            self.account_fetches += 1
        if not self._authorized(request, account_sid):
            return _unauthenticated()
        uri = f"/2010-04-01/Accounts/{account_sid}"
        return JSONResponse({
            "auth_token": self.auth_token, "date_created": "Thu, 30 Jul 2015 20:00:00 +0000",
            "date_updated": "Thu, 30 Jul 2015 20:00:00 +0000", "friendly_name": "hilo test account",
            "owner_account_sid": account_sid, "sid": account_sid, "status": self.account_status,
            "subresource_uris": {"messages": f"{uri}/Messages.json", "calls": f"{uri}/Calls.json",
                                 "incoming_phone_numbers": f"{uri}/IncomingPhoneNumbers.json"},
            "type": "Full", "uri": f"{uri}.json",
        })

    async def _messages(self, request: Request) -> Response:
        account_sid = request.path_params["account_sid"]
        form = dict(parse_qsl((await request.body()).decode(), keep_blank_values=True))
        if not self._authorized(request, account_sid):
            with self._lock:
                self.requests.append(RecordedSend(account_sid, form, 401, None))
            return _unauthenticated()
        if not await self.released(request):
            return JSONResponse({"code": 20500, "message": "client gone", "status": 499}, status_code=499)
        with self._lock:
            b = self._queue.popleft() if self._queue else created()
            sid = "SM" + secrets.token_hex(16) if b.status == 201 else None
            self.requests.append(RecordedSend(account_sid, form, b.status, sid))
        if b.status != 201:
            return JSONResponse({"code": b.code, "message": b.message, "more_info":
                                 f"https://www.twilio.com/docs/errors/{b.code}", "status": b.status},
                                status_code=b.status, headers=dict(b.headers))
        now = formatdate(usegmt=True)
        return JSONResponse({
            "account_sid": account_sid, "api_version": "2010-04-01", "body": form.get("Body", ""),
            "date_created": now, "date_sent": None, "date_updated": now, "direction": "outbound-api",
            "error_code": None, "error_message": None, "from": form.get("From"), "messaging_service_sid": None,
            "num_media": "0", "num_segments": "1", "price": None, "price_unit": None, "sid": sid,
            "status": "queued", "subresource_uris": {}, "to": form.get("To"),
            "uri": f"/2010-04-01/Accounts/{account_sid}/Messages/{sid}.json",
        }, status_code=201)

    async def _media(self, request: Request) -> Response:
        """A MediaUrl, as Twilio answers it: Basic auth checked (when the account requires it: always here), then a
        307 to the file's storage, which serves it with its Content-Type and Content-Length."""
        media_sid = request.path_params["media_sid"]
        authorized = self._authorized(request, request.path_params["account_sid"])
        with self._lock:
            self.media_fetches.append((media_sid, authorized))
            known = media_sid in self._media_files
        if not authorized:
            return _unauthenticated()
        if not known:
            return JSONResponse({"code": 20404, "message": "not found", "status": 404}, status_code=404)
        return Response(status_code=307, headers={"location": f"/storage/{media_sid}"})


    async def _storage(self, request: Request) -> Response:
        with self._lock:
            found = self._media_files.get(request.path_params["media_sid"])
        if found is None:
            return Response(status_code=404)
        return Response(found[0], media_type=found[1])


def _unauthenticated() -> JSONResponse:
    return JSONResponse({"code": 20003, "message": "Authenticate", "more_info":
                         "https://www.twilio.com/docs/errors/20003", "status": 401}, status_code=401)


@pytest.fixture(scope="session")
def twilio_api_session() -> Iterator[FakeTwilioApi]:
    """One fake Twilio API for the whole test session."""
    server = FakeTwilioApi()
    server.start()
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def twilio_api(twilio_api_session: FakeTwilioApi) -> Iterator[FakeTwilioApi]:
    """The session's fake Twilio API, with no script and nothing recorded."""
    twilio_api_session.reset()
    yield twilio_api_session
    twilio_api_session.reset()
