"""Sending WhatsApp messages through Twilio's REST API: `TwilioTransport`, the outbox's transport (one part, its
failure classified; bot/outbox.py retries and records), and `deliver` for what is said outside a turn (retried
here, every part recorded).

The twilio client runs on its async HTTP client (`AsyncTwilioHttpClient`, aiohttp): a send never blocks the
event loop. Its own retries stay off; a WhatsApp send is tried again by bot.retry (the one retry module, which
also parses Retry-After) and nowhere else. This module classifies Twilio's answers:
- 429 and 5xx, timeouts and connection failures: transient, retried with exponential backoff, or after the
  server's Retry-After (seconds or an HTTP-date) when it gives one (capped: a longer pause gives the part up);
- 400 with code 63016: the reply falls outside WhatsApp's 24-hour customer-care window; never retried,
  recorded as failed with an explanation for the operator;
- any other 4xx: permanent, recorded as failed with Twilio's code and message.
Logs carry ids, codes and sizes, never the text or the phone number.
"""

from __future__ import annotations

import asyncio
import base64
import json
import logging
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import aiohttp
from twilio.base.exceptions import TwilioRestException, TwilioServiceException
from twilio.http.async_http_client import AsyncTwilioHttpClient
from twilio.rest import Client

from bot.config import Settings
from bot.keyed import KeyedLocks
from bot.ports import Deliveries
from bot.retry import GaveUp, RetryPolicy, Sleep, call_with_retry, retry_after_from_headers
from kernel import log
from kernel.errors import SendError, StoreError
from kernel.types import Delivery
from surfaces.whatsapp_text import MAX_BODY_CHARS, split_message

logger = log.get("hilo.whatsapp")

WINDOW_CLOSED = 63016
WINDOW_CLOSED_EXPLANATION = (
    "outside WhatsApp's 24-hour customer-care window: free-form replies are only allowed within 24 hours of the "
    "person's last message; nothing was sent (an approved template could be, or wait until they write again)"
)

# Set by the HTTP client on each response, read by the retry loop after a failed create: an await does not
# copy the context, so the value set deep inside twilio's call chain is the one of this very request.
_retry_after: ContextVar[float | None] = ContextVar("hilo_twilio_retry_after", default=None)

# twilio logs every request line at INFO; hilo's own events say what matters.
_http_logger = logging.getLogger("hilo.whatsapp.twilio_http")
_http_logger.setLevel(logging.WARNING)


class _HttpClient(AsyncTwilioHttpClient):  # type: ignore[misc]
    """twilio's aiohttp client, with a default timeout per request and the Retry-After of each answer kept.

    Basic auth goes in as a header: aiohttp >= 3.14 deprecates the BasicAuth object twilio would build.
    """

    async def request(
        self, method: str, url: str, params: Any = None, data: Any = None, headers: Any = None, auth: Any = None,
        timeout: float | None = None, allow_redirects: bool = False,
    ) -> Any:
        if auth is not None:
            token = base64.b64encode(f"{auth[0]}:{auth[1]}".encode()).decode("ascii")
            headers = {**(headers or {}), "Authorization": f"Basic {token}"}
        response = await super().request(
            method, url, params=params, data=data, headers=headers, auth=None,
            timeout=timeout if timeout is not None else self.timeout, allow_redirects=allow_redirects,
        )
        _retry_after.set(retry_after_from_headers(response.headers))
        return response


@dataclass(frozen=True, slots=True)
class SendResult:
    """One part's fate: sent (with Twilio's message SID) or failed (with a code and explanation)."""

    sid: str | None
    error: str | None
    attempts: int
    code: int | None = None

    @property
    def ok(self) -> bool:
        return self.sid is not None


def _describe(exc: TwilioRestException | TwilioServiceException) -> str:
    if exc.code == WINDOW_CLOSED:
        return f"{WINDOW_CLOSED}: {WINDOW_CLOSED_EXPLANATION}"
    text = getattr(exc, "msg", None) or getattr(exc, "detail", None) or getattr(exc, "title", "")
    return f"{exc.code or 'http'} (HTTP {exc.status}): {text}"[:500]


_TWILIO_ERRORS = (TwilioRestException, TwilioServiceException)
#: what a send may fail with and still answer a SendResult: Twilio's answers, and no answer at all
_SEND_ERRORS = (*_TWILIO_ERRORS, aiohttp.ClientError, TimeoutError)


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, _TWILIO_ERRORS):
        return bool(exc.status == 429 or exc.status >= 500)
    return isinstance(exc, aiohttp.ClientError | TimeoutError)


def _pause(_exc: BaseException) -> float | None:
    return _retry_after.get()  # the Retry-After of the answer this very attempt got (None for no answer)


def _what(exc: BaseException) -> tuple[str, int | None, int | None]:
    """A failed send as (error text, Twilio's code, HTTP status)."""
    if isinstance(exc, _TWILIO_ERRORS):
        return _describe(exc), exc.code, exc.status
    return f"{type(exc).__name__}: no answer from Twilio", None, None


def _log_retry(attempt: int, exc: BaseException, wait: float) -> None:
    _, code, status = _what(exc)
    logger.warning("whatsapp.send_retry", status=status, code=code, attempt=attempt, wait_s=round(wait, 3))


class TwilioSender:
    """Sends message bodies from TWILIO_WHATSAPP_NUMBER with a status callback, retrying transient failures."""

    def __init__(
        self, settings: Settings, *, attempts: int = 4, backoff_base: float = 0.5, backoff_max: float = 8.0,
        retry_after_cap: float = 30.0, timeout: float = 30.0, sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.policy = RetryPolicy(attempts, backoff_base, backoff_max, retry_after_cap, sleep)
        self.timeout = timeout
        number = settings.twilio_whatsapp_number
        self.from_ = number if number.startswith("whatsapp:") else f"whatsapp:{number}"
        self.status_callback = f"{settings.public_url}/webhooks/whatsapp/status"
        self._http: _HttpClient | None = None
        self._client: Client | None = None
        #: one reply's parts go out together, never interleaved with the next reply's
        self.recipients: KeyedLocks[str] = KeyedLocks()

    async def start(self) -> None:
        # aiohttp wants its session created inside the running loop: here, not in __init__.
        self._http = _HttpClient(timeout=self.timeout, logger=_http_logger)
        client = Client(self.settings.twilio_account_sid, self.settings.twilio_auth_token, http_client=self._http)
        if self.settings.twilio_api_base_url:
            client.api.base_url = self.settings.twilio_api_base_url.rstrip("/")
            client.edge = client.region = None  # the base URL wins over TWILIO_EDGE / TWILIO_REGION
        self._client = client

    @property
    def client(self) -> Client | None:
        """The REST client while started (None before start and after aclose)."""
        return self._client

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
        self._client = None

    async def send(self, to: str, body: str) -> SendResult:
        """Send one body (<= 1,600 characters) to `to` ("whatsapp:+..."); never raises for Twilio's answers."""
        client = self._client
        if client is None:
            raise RuntimeError("the WhatsApp sender has not started")

        async def create() -> str:
            _retry_after.set(None)
            message = await client.messages.create_async(
                to=to, from_=self.from_, body=body, status_callback=self.status_callback,
            )
            return str(message.sid)

        try:
            sid, attempts = await call_with_retry(create, self.policy, transient=_transient, retry_after=_pause,
                                                  on_retry=_log_retry, errors=_SEND_ERRORS)
        except GaveUp as gave_up:
            error, code, status = _what(gave_up.error)
            if gave_up.pause is not None:
                logger.warning("whatsapp.send_failed", status=status, code=code, attempts=gave_up.attempts,
                               retry_after=gave_up.pause)
                return SendResult(None, f"{error} (Retry-After {gave_up.pause:g} s is too long)", gave_up.attempts,
                                  code)
            logger.warning("whatsapp.send_failed", status=status, code=code, attempts=gave_up.attempts)
            return SendResult(None, error, gave_up.attempts, code)
        return SendResult(sid, None, attempts)


async def deliver(
    sender: TwilioSender, deliveries: Deliveries, *, recipient: str, text: str, user_id: int | None,
    message_id: int | None,
) -> list[SendResult]:
    """Split `text`, send the parts in order and record each one (when the person is known: a delivery row
    belongs to a user). After a part finally fails the rest are not sent (a reply with a hole in it reads
    wrong) and are recorded as failed too."""
    async with sender.recipients.hold(recipient):
        return await _deliver(sender, deliveries, recipient, text, user_id, message_id)


async def _deliver(
    sender: TwilioSender, deliveries: Deliveries, recipient: str, text: str, user_id: int | None,
    message_id: int | None,
) -> list[SendResult]:
    parts = split_message(text)
    results: list[SendResult] = []
    failed_at: int | None = None
    for i, part in enumerate(parts, start=1):
        if failed_at is None:
            result = await sender.send(f"whatsapp:{recipient}", part)
            if not result.ok:
                failed_at = i
        else:
            result = SendResult(None, f"not sent: part {failed_at} failed", 0)
        results.append(result)
        if user_id is None:
            continue
        try:
            await deliveries.record_delivery(Delivery(
                user_id=user_id, message_id=message_id, surface="whatsapp", recipient=recipient,
                status="sent" if result.ok else "failed", part=i, parts=len(parts), provider_ref=result.sid,
                error=result.error, attempts=result.attempts,
            ))
        except StoreError as exc:  # the person still gets the rest of the reply
            logger.error("whatsapp.delivery_not_recorded", user_id=user_id, part=i, sid=result.sid,
                         error=type(exc).__name__)
    logger.info("whatsapp.delivered", user_id=user_id, message_id=message_id, parts=len(parts),
                sent=sum(r.ok for r in results), sids=[r.sid for r in results if r.sid])
    return results


class TwilioTransport:
    """The outbox's transport (bot/ports.py Transport) for WhatsApp: one Messages create per part, never retried
    here; Twilio's answers classified into SendError (63016 keeps its explanation for the operator), with the
    Retry-After of the answer. The outbox retries with bot/retry.py's policy."""

    name = "whatsapp"
    max_part_chars = MAX_BODY_CHARS

    def __init__(self, sender: TwilioSender) -> None:
        self.sender = sender

    async def send(self, recipient: str, text: str, reply_to: str | None) -> str:
        return await self._create(recipient, body=text)

    async def send_template(self, recipient: str, template: str, text: str) -> str:
        """Send the approved template `template` (a Content SID, "HX...") with `text` as its variable {{1}}: the
        one kind of message WhatsApp lets a business start outside the 24-hour window."""
        return await self._create(recipient, content_sid=template, content_variables=json.dumps({"1": text}))

    async def _create(self, recipient: str, **content: str) -> str:
        client = self.sender.client
        if client is None:
            raise SendError("the WhatsApp sender is closed", transient=True)
        _retry_after.set(None)
        try:
            message = await client.messages.create_async(
                to=f"whatsapp:{recipient}", from_=self.sender.from_, status_callback=self.sender.status_callback,
                **content,
            )
        except _SEND_ERRORS as exc:
            error, code, status = _what(exc)
            logger.warning("whatsapp.send_failed", status=status, code=code)
            raise SendError(error, transient=_transient(exc), code=code, retry_after=_pause(exc)) from exc
        return str(message.sid)
