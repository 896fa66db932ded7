"""Sending WhatsApp replies through Twilio's REST API, part by part, retried, every part recorded.

The twilio client runs on its async HTTP client (`AsyncTwilioHttpClient`, aiohttp): a send never blocks the
event loop. Its own retries stay off; this module is the only place a WhatsApp send is tried again, and it
classifies Twilio's answers:
- 429 and 5xx, timeouts and connection failures: transient, retried with exponential backoff, or after the
  server's Retry-After when it gives one (capped: a longer pause gives the part up);
- 400 with code 63016: the reply falls outside WhatsApp's 24-hour customer-care window; never retried,
  recorded as failed with an explanation for the operator;
- any other 4xx: permanent, recorded as failed with Twilio's code and message.
Logs carry ids, codes and sizes, never the text or the phone number.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import random
from collections.abc import Awaitable, Callable
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
from kernel import log
from kernel.errors import StoreError
from kernel.types import Delivery
from surfaces.whatsapp_text import split_message

logger = log.get("hilo.whatsapp")

Sleep = Callable[[float], Awaitable[None]]

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


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After header given in seconds (an HTTP date is ignored: backoff applies)."""
    if not value:
        return None
    try:
        seconds = float(value.strip())
    except ValueError:
        return None
    return seconds if seconds >= 0 else None


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
        _retry_after.set(parse_retry_after(response.headers.get("Retry-After")))
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


class TwilioSender:
    """Sends message bodies from TWILIO_WHATSAPP_NUMBER with a status callback, retrying transient failures."""

    def __init__(
        self, settings: Settings, *, attempts: int = 4, backoff_base: float = 0.5, backoff_max: float = 8.0,
        retry_after_cap: float = 30.0, timeout: float = 30.0, sleep: Sleep = asyncio.sleep,
    ) -> None:
        self.settings = settings
        self.attempts = attempts
        self.backoff_base, self.backoff_max, self.retry_after_cap = backoff_base, backoff_max, retry_after_cap
        self.timeout = timeout
        self._sleep = sleep
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

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.close()
            self._http = None
        self._client = None

    def _backoff(self, attempt: int) -> float:
        return min(self.backoff_max, self.backoff_base * 2.0 ** (attempt - 1)) + random.uniform(0, self.backoff_base)

    async def send(self, to: str, body: str) -> SendResult:
        """Send one body (<= 1,600 characters) to `to` ("whatsapp:+..."); never raises for Twilio's answers."""
        if self._client is None:
            raise RuntimeError("the WhatsApp sender has not started")
        error, code = "not sent", None
        for attempt in range(1, self.attempts + 1):
            _retry_after.set(None)
            try:
                message = await self._client.messages.create_async(
                    to=to, from_=self.from_, body=body, status_callback=self.status_callback,
                )
                return SendResult(str(message.sid), None, attempt)
            except (TwilioRestException, TwilioServiceException) as exc:
                error, code = _describe(exc), exc.code
                transient = exc.status == 429 or exc.status >= 500
                status: int | None = exc.status
            except (aiohttp.ClientError, TimeoutError) as exc:
                error, code, transient, status = f"{type(exc).__name__}: no answer from Twilio", None, True, None
            if not transient or attempt == self.attempts:
                logger.warning("whatsapp.send_failed", status=status, code=code, attempts=attempt)
                return SendResult(None, error, attempt, code)
            wait = _retry_after.get()
            if wait is not None and wait > self.retry_after_cap:
                logger.warning("whatsapp.send_failed", status=status, code=code, attempts=attempt, retry_after=wait)
                return SendResult(None, f"{error} (Retry-After {wait:g} s is too long)", attempt, code)
            wait = wait if wait is not None else self._backoff(attempt)
            logger.warning("whatsapp.send_retry", status=status, code=code, attempt=attempt, wait_s=round(wait, 3))
            await self._sleep(wait)
        return SendResult(None, error, self.attempts, code)  # not reached: the loop returns on its last attempt


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
