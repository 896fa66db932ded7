"""Retries, written once: the backoff, the Retry-After parsing and the retry loop (tenacity) that the model
providers (bot.models.retry), Telegram's sends (surfaces.telegram_outbound) and Twilio's sends
(surfaces.whatsapp_send) share. SDK retries stay off everywhere: this is the only place anything is tried again.

What each caller brings is its own classification: a `transient(error)` predicate (only those errors are
retried) and a `retry_after(error)` reading (the pause the server asked for, in seconds, or None). The rules:
- at most `attempts` attempts;
- the wait is the server's pause when it gave one; a pause longer than `retry_after_cap` gives up at once (a
  model falls back to the next one, a send is recorded as failed) instead of holding a person's turn;
- otherwise exponential backoff with jitter: min(backoff_max, backoff_base * 2^(n-1)) + uniform(0, backoff_base);
- asyncio.CancelledError (and GeneratorExit) always propagate: never retried;
- `sleep` is injectable, so tests record the waits instead of sleeping them.

Retry-After (RFC 9110, section 10.2.3) is delta-seconds or an HTTP-date; `parse_retry_after` reads both (and the
decimal seconds some providers send), answers None for anything else, and caps a huge pause at 2^31 s (as RFC 9111
has caches do with an overflowing delta-seconds): the caller's cap then gives it up.
"""

from __future__ import annotations

import asyncio
import contextlib
import email.utils
import random
import re
import time
from collections.abc import AsyncGenerator, Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from datetime import UTC
from typing import TYPE_CHECKING, TypeVar

from kernel.errors import HiloError

if TYPE_CHECKING:  # tenacity is imported when a loop is built: `hilo context` parses no Retry-After, needs none
    from tenacity import AsyncRetrying, RetryCallState

T = TypeVar("T")
Sleep = Callable[[float], Awaitable[None]]
#: Called before each wait, with the attempt that failed, its error and the seconds about to be waited.
OnRetry = Callable[[int, BaseException, float], None]
Transient = Callable[[BaseException], bool]
PauseOf = Callable[[BaseException], float | None]

#: The longest pause a Retry-After is read as (RFC 9111, section 1.2.2: an overflowing delta-seconds is 2^31).
MAX_PAUSE = float(2**31)
_DELTA_SECONDS = re.compile(r"[0-9]+(\.[0-9]+)?")


def parse_retry_after(value: str | None, *, now: Callable[[], float] = time.time) -> float | None:
    """Seconds a Retry-After value asks to wait: delta-seconds ("120", or decimal "2.5") or an HTTP-date (any of
    RFC 9110's three formats; a date in the past is 0). None when absent or invalid (negative, "soon", "1e3").
    Capped at MAX_PAUSE."""
    if value is None:
        return None
    value = value.strip()
    if _DELTA_SECONDS.fullmatch(value):
        return min(float(value), MAX_PAUSE)
    if not value or not value[0].isalpha():  # an HTTP-date starts with its day name; "-5" or "+3" is no date
        return None
    try:
        when = email.utils.parsedate_to_datetime(value)
    except (TypeError, ValueError, IndexError):
        return None
    if when.tzinfo is None:  # asctime and "-0000" dates: an HTTP-date is always GMT
        when = when.replace(tzinfo=UTC)
    return min(max(0.0, when.timestamp() - now()), MAX_PAUSE)


def retry_after_from_headers(headers: Mapping[str, str] | None, *, now: Callable[[], float] = time.time
                             ) -> float | None:
    """The pause a response's headers ask for: `retry-after-ms` (OpenAI's and Anthropic's milliseconds), else
    `retry-after`. `headers` should look names up case-insensitively (httpx, aiohttp and Starlette headers do)."""
    if not headers:
        return None
    millis = parse_retry_after(headers.get("retry-after-ms"))
    if millis is not None:
        return millis / 1000
    return parse_retry_after(headers.get("retry-after"), now=now)


def no_pause(_error: BaseException) -> float | None:
    return None


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How often and how long to retry. The defaults are the models'; each caller sets its own numbers."""

    attempts: int = 3
    backoff_base: float = 0.5
    backoff_max: float = 8.0
    retry_after_cap: float = 30.0
    sleep: Sleep = field(default=asyncio.sleep)

    def backoff(self, attempt: int) -> float:
        """Seconds to wait after failed attempt `attempt` (1, 2 ...) when the server named no pause."""
        return min(self.backoff_max, self.backoff_base * 2.0 ** (attempt - 1)) + random.uniform(0, self.backoff_base)

    def too_long(self, pause: float | None) -> bool:
        """A pause the server asked for that this caller will not wait."""
        return pause is not None and pause > self.retry_after_cap

    def wait(self, attempt: int, pause: float | None) -> float:
        """Seconds to wait after failed attempt `attempt`: the server's `pause` (capped), else the backoff."""
        return min(pause, self.retry_after_cap) if pause is not None else self.backoff(attempt)

    def retrying(self, *, transient: Transient, retry_after: PauseOf = no_pause, on_retry: OnRetry,
                 done: int = 0) -> AsyncRetrying:
        """tenacity's loop with these rules: `async for attempt in policy.retrying(...): with attempt: ...`.
        The last error is raised as it is when the loop gives up. `done`: attempts made before the loop (`call`'s
        first): the loop's attempt n is attempt n + done, for the stop, the backoff and `on_retry`."""
        from tenacity import AsyncRetrying, retry_if_exception

        def error_of(state: RetryCallState) -> BaseException | None:
            return state.outcome.exception() if state.outcome is not None else None

        def pause_of(state: RetryCallState) -> float | None:
            error = error_of(state)
            return retry_after(error) if error is not None else None

        def wait(state: RetryCallState) -> float:
            return self.wait(state.attempt_number + done, pause_of(state))

        def before_sleep(state: RetryCallState) -> None:
            error = error_of(state)
            assert error is not None and state.next_action is not None
            on_retry(state.attempt_number + done, error, state.next_action.sleep)

        return AsyncRetrying(
            retry=retry_if_exception(lambda e: isinstance(e, Exception) and transient(e)),  # never a cancel
            stop=lambda s: s.attempt_number + done >= self.attempts or self.too_long(pause_of(s)),
            wait=wait,
            sleep=self.sleep,
            before_sleep=before_sleep,
            reraise=True,
        )

    async def call(self, attempt: Callable[[], Awaitable[T]], *, transient: Transient,
                   retry_after: PauseOf = no_pause, on_retry: OnRetry) -> T:
        """attempt() retried by these rules, as `retrying`'s loop does it, with the first attempt outside the loop:
        a call that succeeds at once (nearly every call) builds and steps no loop. tenacity's loop was 3% of a web
        turn's instructions with the zero-latency model (bench/turn_instructions.py), and left 47 objects of a
        streamed turn in reference cycles (its state, futures, locks): garbage that only the cyclic collector
        frees, in a pause that lands inside whatever turn runs then (tests/test_reference_cycles.py). The first
        attempt's error, when it is retried, is waited for as the loop waits after its attempt 1, and the loop goes
        on from attempt 2."""
        try:
            return await attempt()
        except Exception as error:  # a cancel (BaseException) propagates, as from the loop
            wait = self._first_failed(error, transient=transient, retry_after=retry_after, on_retry=on_retry)
        await self.sleep(wait)
        async for retry in self.retrying(transient=transient, retry_after=retry_after, on_retry=on_retry, done=1):
            with retry:
                return await attempt()
        raise AssertionError("unreachable: tenacity either returns, reraises or stops")  # pragma: no cover

    async def stream(self, attempt: Callable[[], AsyncGenerator[T, None]], *, transient: Transient,
                     retry_after: PauseOf = no_pause, on_retry: OnRetry) -> AsyncGenerator[T, None]:
        """`call` for an attempt that yields (a model's streamed answer): each attempt's items, until one ends
        without error; an attempt that failed after yielding is retried all the same (its items say what became
        void). Each attempt is closed before the next begins, and when the caller stops early."""
        try:
            async with contextlib.aclosing(attempt()) as items:
                async for item in items:
                    yield item
            return
        except Exception as error:  # a cancel (BaseException) and the caller's GeneratorExit propagate
            wait = self._first_failed(error, transient=transient, retry_after=retry_after, on_retry=on_retry)
        await self.sleep(wait)
        async for retry in self.retrying(transient=transient, retry_after=retry_after, on_retry=on_retry, done=1):
            with retry:
                async with contextlib.aclosing(attempt()) as items:
                    async for item in items:
                        yield item
                return
        raise AssertionError("unreachable: tenacity either returns, reraises or stops")  # pragma: no cover

    def _first_failed(self, error: Exception, *, transient: Transient, retry_after: PauseOf,
                      on_retry: OnRetry) -> float:
        """After the first attempt (made outside the loop) failed with `error`: the seconds to wait before the
        loop's attempt 2 (`on_retry` told), or `error` raised again when these rules do not retry it."""
        if not transient(error):
            raise error
        pause = retry_after(error)
        if self.attempts <= 1 or self.too_long(pause):
            raise error
        wait = self.wait(1, pause)
        on_retry(1, error, wait)
        return wait


class GaveUp(HiloError):
    """`call_with_retry` gave up after `attempts` attempts; `error` is the last one. `pause` is set when the
    reason was a server asking to wait longer than the policy's cap (with attempts left)."""

    def __init__(self, error: BaseException, attempts: int, pause: float | None = None) -> None:
        super().__init__(f"{type(error).__name__} after {attempts} attempt(s)")
        self.error = error
        self.attempts = attempts
        self.pause = pause


async def call_with_retry(
    call: Callable[[], Awaitable[T]], policy: RetryPolicy, *, transient: Transient, on_retry: OnRetry,
    retry_after: PauseOf = no_pause, errors: tuple[type[Exception], ...] = (Exception,),
) -> tuple[T, int]:
    """`call()`'s result and the attempts it took, retried per `policy`. An error of `errors` that is given up
    (not transient, attempts spent, or too long a pause) raises GaveUp; any other error propagates as it is."""
    attempts = 0

    async def counted() -> T:
        nonlocal attempts
        attempts += 1
        return await call()

    try:
        return await policy.call(counted, transient=transient, retry_after=retry_after, on_retry=on_retry), attempts
    except errors as exc:
        pause = retry_after(exc) if transient(exc) and attempts < policy.attempts else None
        raise GaveUp(exc, attempts, pause if policy.too_long(pause) else None) from exc
